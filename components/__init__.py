"""Pulumi ComponentResources, one per concern, wired together in __main__.py."""
