"""What the stack's own controllers and proxies request on the system nodes, beside the Ray head.

The manifests set exactly these requests (so the budget is what the scheduler sees), and the fit check
(planning/plan.py) and the upgrade plan subtract them from what a system node offers the head: a
system node that cannot hold the head beside them is refused at preview, not found Pending later.
"""

from __future__ import annotations

from dataclasses import dataclass

from config import Settings

MIB = 2**20


@dataclass(frozen=True)
class PodRequests:
    """One container's requests, as the manifests write them."""

    cpu_millis: int
    memory_mib: int

    @property
    def cpu(self) -> str:
        return f"{self.cpu_millis}m"

    @property
    def memory(self) -> str:
        return f"{self.memory_mib}Mi"


LOAD_BALANCER_CONTROLLER = PodRequests(100, 128)
"""aws-load-balancer-controller (the chart sets none by default)."""
ENVOY_GATEWAY_CONTROLLER = PodRequests(100, 256)
"""Envoy Gateway's controller (the chart's own default requests, v1.9.0 values.tmpl.yaml)."""
ENVOY_PROXY = PodRequests(100, 512)
"""Each Envoy proxy (Envoy Gateway's defaults, api/v1alpha1/shared_types.go)."""
ENVOY_SHUTDOWN_MANAGER = PodRequests(10, 32)
"""The shutdown-manager sidecar of each Envoy proxy pod (Envoy Gateway's default)."""


def load_balancer_controller_replicas(settings: Settings) -> int:
    """One controller per system node, at most two (leader election keeps one active)."""
    return 1 if settings.system_nodes.desired_size < 2 else 2


def system_pods(settings: Settings) -> dict[str, tuple[PodRequests, int]]:
    """What the stack adds to the system nodes: name -> (requests per pod, pods)."""
    if not settings.endpoint.enabled:
        return {}
    replicas = settings.endpoint.gateway_replicas
    return {
        "aws-load-balancer-controller": (
            LOAD_BALANCER_CONTROLLER,
            load_balancer_controller_replicas(settings),
        ),
        "envoy-gateway": (ENVOY_GATEWAY_CONTROLLER, 1),
        "envoy": (ENVOY_PROXY, replicas),
        "envoy shutdown-manager": (ENVOY_SHUTDOWN_MANAGER, replicas),
    }


def system_pods_total(settings: Settings) -> tuple[float, float]:
    """(vCPU, bytes) the stack's system pods request in all."""
    pods = system_pods(settings).values()
    cpu = sum(requests.cpu_millis * count for requests, count in pods) / 1000
    memory = sum(requests.memory_mib * count for requests, count in pods) * MIB
    return cpu, memory
