"""Every port a Ray pod listens on for another pod, pinned, so the serving namespace's network
policies (manifests/traffic.py) can allow exactly these and nothing else.

Ray 2.58 picks the node manager, object manager, runtime env agent and dashboard agent gRPC ports at
random unless `ray start` is given them (python/ray/scripts/scripts.py, python/ray/_private/parameter.py
`update_pre_selected_port`): a random port cannot be allowed by a policy. So both the head and the
workers start with all of them set (`ray_start_params`), and every one that is a single port is also a
declared container port (`container_ports`), which is what the tests hold each allowed path against.

The NIXL side channel: Ray Serve LLM 2.58 leaves `VLLM_NIXL_SIDE_CHANNEL_PORT` alone when it is set
(python/ray/llm/_internal/serve/engines/vllm/kv_transfer/nixl.py `_set_side_channel_port`), and
otherwise picks 20000 + replica rank x GPUs per replica, a range that grows with the replicas. vLLM
0.26 listens on that port plus the data-parallel index (0 here; nixl/base_scheduler.py), one listener
per engine, not per tensor-parallel rank. A worker pod holds exactly one replica (its GPU request is
the replica's tensor-parallel size, planning/capacity.py), so one fixed port per pod is collision-free,
and the worker pods set it. NIXL's own listener thread is off by default (nixl_agent_config
`enable_listen_thread=False` in nixl 1.3.1) and vLLM does not turn it on.

EFA traffic (NIXL's KV transfer through libfabric) bypasses the kernel's network stack, so no network
policy sees or limits it; the policies govern the TCP side: Ray's control plane, the side channel, HTTP.
"""

from __future__ import annotations

from dataclasses import dataclass

GCS = 6379
DASHBOARD = 8265
CLIENT = 10001
SERVE = 8000
METRICS = 8080
"""Ray's Prometheus endpoint on every node (KubeRay's default `metrics-export-port`)."""
DASHBOARD_AGENT_HTTP = 52365
"""KubeRay's liveness probe and the head's readiness probe ask this port (`/api/healthz`, Ray >= 2.53)."""
NODE_MANAGER = 6380
OBJECT_MANAGER = 6381
RUNTIME_ENV_AGENT = 6382
DASHBOARD_AGENT_GRPC = 6383
MIN_WORKER_PORT = 10002
MAX_WORKER_PORT = 19999
"""Ray's default worker port range, set explicitly: every core worker (actors, Serve replicas) binds one."""
NIXL_SIDE_CHANNEL = 20000
"""vLLM's NIXL handshake listener (ZMQ) on each GPU worker; outside the worker range on purpose."""
UCX_TCP_PORTS = (20100, 20199)
"""Where UCX's tcp transport listens, when NIXL's UCX backend moves the KV cache (`UCX_TCP_PORT_RANGE`).
UCX 1.20 binds each tcp interface to a port the kernel picks unless told a range (uct/tcp/tcp_iface.c
`uct_tcp_iface_server_init`: a random port of the range, retried while busy), and a port nobody can
predict cannot be allowed by a policy: the decode worker's reads would hang. A NIXL agent opens one
listener per network interface and UCX worker; a hundred ports leave room for vLLM's agent, the transfer
probe of `ops verify`, and a restart's stragglers."""


@dataclass(frozen=True)
class PortRange:
    first: int
    last: int

    def env(self) -> str:
        """As UCX reads a range (`UCX_TCP_PORT_RANGE=first-last`)."""
        return f"{self.first}-{self.last}"


WORKER_PORTS = PortRange(MIN_WORKER_PORT, MAX_WORKER_PORT)
UCX_TCP = PortRange(*UCX_TCP_PORTS)

_EVERY_NODE = {
    "node-manager-port": NODE_MANAGER,
    "object-manager-port": OBJECT_MANAGER,
    "runtime-env-agent-port": RUNTIME_ENV_AGENT,
    "dashboard-agent-grpc-port": DASHBOARD_AGENT_GRPC,
    "dashboard-agent-listen-port": DASHBOARD_AGENT_HTTP,
    "metrics-export-port": METRICS,
    "min-worker-port": MIN_WORKER_PORT,
    "max-worker-port": MAX_WORKER_PORT,
}

_HEAD_ONLY = {"port": GCS, "dashboard-port": DASHBOARD, "ray-client-server-port": CLIENT}


def ray_start_params(*, head: bool) -> dict[str, str]:
    """The `ray start` flags (KubeRay's rayStartParams) that pin this node's ports."""
    return {k: str(v) for k, v in {**(_HEAD_ONLY if head else {}), **_EVERY_NODE}.items()}


# Names: KubeRay's own where it has one (gcs-server, dashboard, client, serve, metrics; utils/constant.go
# at v1.7.0), at most 15 characters (a Kubernetes port name).
_NODE_PORT_NAMES = {
    "node-manager": NODE_MANAGER,
    "object-manager": OBJECT_MANAGER,
    "runtime-env": RUNTIME_ENV_AGENT,
    "agent-grpc": DASHBOARD_AGENT_GRPC,
    "agent-http": DASHBOARD_AGENT_HTTP,
    "metrics": METRICS,
    # Serve runs an HTTP proxy on every node; KubeRay's serve Service selects the workers too.
    "serve": SERVE,
}


def container_ports(*, head: bool) -> dict[str, int]:
    """The single ports a Ray node listens on for other pods, by port name."""
    if head:
        return {"gcs-server": GCS, "dashboard": DASHBOARD, "client": CLIENT, **_NODE_PORT_NAMES}
    return {**_NODE_PORT_NAMES, "nixl-side": NIXL_SIDE_CHANNEL}
