"""Stand-ins the tests share: the Pulumi engine under mocks, and a Kubernetes API replaying recordings."""
