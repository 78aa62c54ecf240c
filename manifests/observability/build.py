"""All of the metrics stack's objects, built from the settings in one place (`build_observability`), in the
order they must exist; components/observability.py applies them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from config import Settings
from manifests.charts import HelmChart
from manifests.observability.charts import (
    dcgm_exporter_chart,
    kube_prometheus_stack_chart,
    monitoring_namespace,
    node_agents_namespace,
    storage_class,
)
from manifests.observability.dashboards import dashboard_config_maps
from manifests.observability.kv_path import KvPathFigures
from manifests.observability.monitors import kuberay_service_monitor, pod_monitors
from manifests.observability.rules import prometheus_rule
from planning.context import ClusterContext
from planning.nodes import placement
from planning.reservation import CapacityPlan


@dataclass(frozen=True)
class ObservabilityManifests:
    serving_namespace: str
    """Where the monitors and rules go unless an existing Prometheus wants them in its own namespace."""
    namespace: dict[str, Any]
    node_agents_namespace: dict[str, Any]
    """node-exporter and dcgm-exporter, privileged, apart from the rest."""
    storage_class: dict[str, Any]
    kube_prometheus_stack: HelmChart | None
    """None: an existing Prometheus scrapes; the stack ships only monitors, rules and dashboards."""
    dcgm_exporter: HelmChart | None
    """None: the cluster's own dcgm-exporter."""
    pod_monitors: list[dict[str, Any]]
    kuberay_service_monitor: dict[str, Any] | None
    """None: the cluster's own KubeRay operator, which its team monitors."""
    prometheus_rule: dict[str, Any]
    dashboards: list[dict[str, Any]]

    def monitoring_objects(self) -> list[dict[str, Any]]:
        """What needs the prometheus-operator CRDs, for `ops render` and the program alike."""
        service = [self.kuberay_service_monitor] if self.kuberay_service_monitor else []
        return [*self.pod_monitors, *service, self.prometheus_rule]


def build_observability(
    settings: Settings,
    context: ClusterContext,
    capacity: CapacityPlan | None = None,
    kv: KvPathFigures | None = None,
) -> ObservabilityManifests:
    """`capacity`: the reservation the GPU nodes run on, read at preview (a Capacity Block's end is an
    alert); `kv`: the plan's KV path, which the KV-path rules and dashboard row hold the live figures to."""
    addons = context.addons
    return ObservabilityManifests(
        serving_namespace=settings.serving.namespace,
        namespace=monitoring_namespace(),
        node_agents_namespace=node_agents_namespace(),
        storage_class=storage_class(settings),
        kube_prometheus_stack=kube_prometheus_stack_chart(settings)
        if addons.installs("prometheus")
        else None,
        dcgm_exporter=dcgm_exporter_chart(placement(settings)) if addons.installs("dcgmExporter") else None,
        pod_monitors=pod_monitors(settings, context),
        kuberay_service_monitor=kuberay_service_monitor(settings, context)
        if addons.installs("kuberay")
        else None,
        prometheus_rule=prometheus_rule(settings, context, capacity, kv),
        dashboards=dashboard_config_maps(settings, context, kv),
    )
