"""What the stack's own controllers and proxies request on the system nodes, beside the Ray head.

The manifests set exactly these requests (so the budget is what the scheduler sees), and the fit check
(planning/plan.py) and the upgrade plan subtract them from what a system node offers the head: a
system node that cannot hold the head beside them is refused at preview, not found Pending later.
"""

from __future__ import annotations

from dataclasses import dataclass

from config import Settings
from config.sides import all_side_nodes

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


PROMETHEUS = PodRequests(200, 1024)
PROMETHEUS_CONFIG_RELOADER = PodRequests(10, 32)
"""Beside Prometheus and Alertmanager each (kube-prometheus-stack sets no requests: these are ours)."""
ALERTMANAGER = PodRequests(50, 128)
PROMETHEUS_OPERATOR = PodRequests(100, 128)
KUBE_STATE_METRICS = PodRequests(50, 128)
GRAFANA = PodRequests(100, 256)
GRAFANA_SIDECARS = PodRequests(50, 128)
"""Grafana's dashboard and datasource sidecars together."""
NODE_EXPORTER = PodRequests(50, 32)
"""On every node, so once per system node."""
EFA_COUNTERS = PodRequests(10, 16)
"""node-exporter's EFA counters sidecar (manifests/observability/efa_counters.py), with prefill/decode
disaggregation: a shell loop that reads a few sysfs files every 15 s."""
EBS_CSI_CONTROLLER = PodRequests(60, 240)
"""An estimate: the EKS add-on's controller (2 replicas, six small containers each) sets requests of its
own, which the add-on's configuration schema does not promise; its node DaemonSet: EBS_CSI_NODE."""
EBS_CSI_NODE = PodRequests(30, 120)


RAY_AUTOSCALER = PodRequests(200, 256)
"""KubeRay's autoscaler sidecar in the head pod when the sides scale (KubeRay's default: 500m, 512Mi)."""
CLUSTER_AUTOSCALER = PodRequests(100, 300)


def ray_autoscaling(settings: Settings) -> bool:
    """Whether a side may grow beyond its minimum, so KubeRay's autoscaler adds GPU worker pods."""
    model, scaling = settings.model, settings.autoscaling
    return any(
        (side.max_replicas or minimum) > minimum
        for side, minimum in (
            (scaling.prefill, model.prefill_replicas),
            (scaling.decode, model.decode_replicas),
        )
    )


def cluster_autoscaling(settings: Settings) -> bool:
    """Whether the GPU node group may change size (Cluster Autoscaler runs, Pulumi leaves the size to it)."""
    return any(s.config.min_size < s.config.max_size for s in all_side_nodes(settings))


def load_balancer_controller_replicas(settings: Settings) -> int:
    """One controller per system node, at most two (leader election keeps one active)."""
    return 1 if settings.system_nodes.desired_size < 2 else 2


def system_pods(settings: Settings) -> dict[str, tuple[PodRequests, int]]:
    """What the stack adds to the system nodes: name -> (requests per pod, pods)."""
    scaling = {
        **({"ray autoscaler": (RAY_AUTOSCALER, 1)} if ray_autoscaling(settings) else {}),
        **({"cluster-autoscaler": (CLUSTER_AUTOSCALER, 1)} if cluster_autoscaling(settings) else {}),
    }
    return {**_endpoint_pods(settings), **_observability_pods(settings), **scaling}


def efa_counters(settings: Settings) -> bool:
    """Whether node-exporter runs the EFA counters sidecar: where prefill and decode move a KV cache."""
    return settings.serving.mode == "disaggregated"


def _observability_pods(settings: Settings) -> dict[str, tuple[PodRequests, int]]:
    if not settings.observability.enabled:
        return {}
    nodes = settings.system_nodes.desired_size
    return {
        "prometheus": (PROMETHEUS, 1),
        "config reloaders": (PROMETHEUS_CONFIG_RELOADER, 2),
        "alertmanager": (ALERTMANAGER, 1),
        "prometheus-operator": (PROMETHEUS_OPERATOR, 1),
        "kube-state-metrics": (KUBE_STATE_METRICS, 1),
        "grafana": (GRAFANA, 1),
        "grafana sidecars": (GRAFANA_SIDECARS, 1),
        "node-exporter": (NODE_EXPORTER, nodes),
        **({"node-exporter EFA counters": (EFA_COUNTERS, nodes)} if efa_counters(settings) else {}),
        "ebs-csi-controller": (EBS_CSI_CONTROLLER, 2),
        "ebs-csi-node": (EBS_CSI_NODE, nodes),
    }


def _endpoint_pods(settings: Settings) -> dict[str, tuple[PodRequests, int]]:
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
