"""Ray's token authentication, as KubeRay 1.7 wires it, with a token the stack owns.

With `rayClusterConfig.authOptions: {mode: token, secretName: S}` KubeRay 1.7 sets `RAY_AUTH_MODE=token`
and `RAY_AUTH_TOKEN` (from key `auth_token` of Secret S) on every Ray container, the autoscaler sidecar
and the wait-gcs-ready init container (ray-operator/controllers/ray/common/pod.go
`SetContainerTokenAuthEnvVars`), and its own dashboard client sends the token too (utils/util.go
`GetRayDashboardClientFunc`). Without `secretName` the operator makes a Secret named after each
RayCluster, a name that changes with every NewCluster upgrade; naming our own keeps one token across
upgrades, for the readiness Job and for people. Token mode needs Ray >= 2.52 (utils/validation.go);
KubeRay refuses `enableK8sTokenAuth` on a RayService, so it is not used.

What the token guards in Ray 2.58: GCS's gRPC, the dashboard's and the dashboard agent's HTTP APIs
(Jobs, Serve's REST API, the UI), and the runtime-env agent. Not guarded, by Ray's own lists
(dashboard/http_server_head.py, http_server_agent.py): the health checks KubeRay's probes call
(`/api/healthz`, `/api/gcs_healthz`, `/api/local_raylet_healthz`, `/-/healthz`), and the metrics
ports Prometheus scrapes (prometheus_client's own server: _private/prometheus_exporter.py,
dashboard/head.py). Serve's HTTP proxy
does not read the token: the OpenAI endpoint is guarded by the gateway's API keys, as before.
"""

from __future__ import annotations

RAY_AUTH_SECRET = "ray-auth-token"
RAY_AUTH_KEY = "auth_token"
"""The key KubeRay reads (utils/constant.go RAY_AUTH_TOKEN_SECRET_KEY)."""
