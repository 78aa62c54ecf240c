"""`python -m ops`: render the serving layer offline, and report on or smoke-test a deployed stack.

`render` needs nothing but the stack file; `status` and `verify` talk to the cluster through the small
`ops.kube.KubeApi` protocol, so all of their decisions are tested offline against recorded responses.
"""
