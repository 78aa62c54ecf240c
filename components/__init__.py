"""Pulumi ComponentResources, one per concern, added in the stack's order by program/steps.py."""
