"""Kubernetes objects and Helm values as typed data, built from the settings and the plan. Pure: the
Pulumi components apply them, `python -m ops render` prints them, the tests validate them against the
upstream schemas."""
