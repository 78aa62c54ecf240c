"""The Pulumi program's steps (steps.py), which __main__.py composes in the stack's diagram order."""
