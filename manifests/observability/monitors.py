"""The monitors that scrape Ray and the KubeRay operator, the head's metrics ports, and who Prometheus is
(`scraper`: the stack's own, or an existing cluster's).

What was read upstream and decided here (KubeRay 1.7.0, Ray 2.58.0, vLLM 0.26.0):

- Ray: KubeRay adds the `metrics` port (8080) to head and workers itself; the head also declares
  `as-metrics` (44217, autoscaler) and `dash-metrics` (44227, dashboard), as KubeRay's samples do.
  PodMonitors, not ServiceMonitors: a RayService has two head Services, which would count twice. The
  target gets `ray_io_cluster` from the pod's `ray.io/cluster` label, which Ray's dashboards filter on.
- vLLM's metrics reach Prometheus through Ray (`log_engine_metrics`, on by default) as `ray_vllm_*`,
  counters with `_total`. They carry `model_name` and `WorkerId` but no deployment: prefill and decode
  are told apart by joining on `WorkerId` to a Serve metric that has it (planning of the PD dashboard,
  manifests/pd_dashboard.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from config import Settings
from manifests.network_policy import PROMETHEUS_PODS
from manifests.observability.charts import MONITORING_NAMESPACE, PROMETHEUS_PORT, PROMETHEUS_SERVICE
from planning.context import ClusterContext
from planning.system_pods import ray_autoscaling

DASHBOARD_METRICS_PORT: tuple[str, int] = ("dash-metrics", 44227)
"""Ray's dashboard metrics, on the head; KubeRay does not declare the port itself."""
AUTOSCALER_METRICS_PORT: tuple[str, int] = ("as-metrics", 44217)
"""KubeRay's autoscaler sidecar's metrics, in the head pod: only where it runs (a scraped port nobody
listens on would make kube-prometheus-stack's TargetDown fire for ever)."""


def head_metrics_ports(settings: Settings) -> dict[str, int]:
    """The head's metrics ports beside KubeRay's own `metrics` (8080)."""
    chosen = (
        [AUTOSCALER_METRICS_PORT, DASHBOARD_METRICS_PORT]
        if ray_autoscaling(settings)
        else [DASHBOARD_METRICS_PORT]
    )
    return {name: port for name, port in chosen}


PROMETHEUS_OPERATED = "prometheus-operated"
"""The governing Service prometheus-operator makes for every Prometheus in its namespace (port 9090)."""


@dataclass(frozen=True)
class Scraper:
    """The Prometheus that scrapes the stack's pods: the stack's own, or an existing cluster's."""

    namespace: str
    pods: dict[str, str]
    """Its pods' labels (prometheus-operator's: pkg/prometheus/server/operator.go `makeSelectorLabels`)."""
    service: str
    """The Service in front of it (kube-prometheus-stack's, or the `prometheus-operated` one
    prometheus-operator makes in every namespace with a Prometheus), on PROMETHEUS_PORT."""

    @property
    def url(self) -> str:
        """Where the Ray head asks it for the dashboard's metrics tabs."""
        return f"http://{self.service}.{self.namespace}.svc:{PROMETHEUS_PORT}"

    @property
    def ref(self) -> str:
        """`namespace/service`: the stack's `prometheusService` output, where `ops` asks it."""
        return f"{self.namespace}/{self.service}"


def scraper(context: ClusterContext) -> Scraper:
    existing = context.addons.prometheus
    if existing:
        return Scraper(
            existing.namespace,
            {"app.kubernetes.io/name": "prometheus", "operator.prometheus.io/name": existing.name},
            PROMETHEUS_OPERATED,
        )
    return Scraper(MONITORING_NAMESPACE, dict(PROMETHEUS_PODS), PROMETHEUS_SERVICE)


OPERATOR_PODS = {"app": "kube-prometheus-stack-operator"}
"""prometheus-operator's pods (kube-prometheus-stack 88.5.3 templates/prometheus-operator/deployment.yaml:
`app: {{ kube-prometheus-stack.name }}-operator`, the chart's name without nameOverride)."""


def _relabel_cluster() -> list[dict[str, Any]]:
    return [
        {
            "action": "replace",
            "sourceLabels": ["__meta_kubernetes_pod_label_ray_io_cluster"],
            "targetLabel": "ray_io_cluster",
        }
    ]


def monitor_metadata(
    name: str, namespace_: str, context: ClusterContext, rule: bool = False
) -> dict[str, Any]:
    """A monitor's or rule's metadata: in `namespace_`, or where an existing Prometheus looks (its own
    namespace, which planning/addons.py checks its namespace selectors take in), labelled as its
    selectors ask."""
    existing = context.addons.prometheus
    if existing is None:
        return {"name": name, "namespace": namespace_}
    labels = existing.rule_labels if rule else existing.monitor_labels
    return {"name": name, "namespace": existing.namespace, **({"labels": dict(labels)} if labels else {})}


def pod_monitors(settings: Settings, context: ClusterContext) -> list[dict[str, Any]]:
    """KubeRay's PodMonitors (config/prometheus/podMonitor.yaml at v1.7.0) for the serving namespace's Ray
    pods: in that namespace, or in an existing Prometheus's, naming the serving namespace."""
    serving_namespace = settings.serving.namespace

    def monitor(name: str, node_type: str, ports: list[str]) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "selector": {"matchLabels": {"ray.io/node-type": node_type}},
            "podMetricsEndpoints": [{"port": port, "relabelings": _relabel_cluster()} for port in ports],
        }
        if context.addons.prometheus:
            spec["namespaceSelector"] = {"matchNames": [serving_namespace]}
        return {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PodMonitor",
            "metadata": monitor_metadata(name, serving_namespace, context),
            "spec": spec,
        }

    return [
        monitor("ray-head-monitor", "head", ["metrics", *head_metrics_ports(settings)]),
        monitor("ray-workers-monitor", "worker", ["metrics"]),
    ]


def kuberay_service_monitor(settings: Settings, context: ClusterContext) -> dict[str, Any]:
    """The KubeRay operator's own metrics (RayService Ready, upgrades), from its Service's `http` port:
    in the operator's namespace, or in an existing Prometheus's, naming the operator's."""
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"app.kubernetes.io/name": "kuberay-operator"}},
        "endpoints": [{"port": "http", "path": "/metrics", "honorLabels": True}],
    }
    if context.addons.prometheus:
        spec["namespaceSelector"] = {"matchNames": [settings.kuberay.namespace]}
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": monitor_metadata("kuberay-operator", settings.kuberay.namespace, context),
        "spec": spec,
    }
