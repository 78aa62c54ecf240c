"""Where the stack's own of each add-on runs: its chart's namespace, by `addons` key (on a team's cluster,
planning/addons.py tells the stack's own install from the team's by it)."""

from __future__ import annotations

from config import Settings
from config.sides import gpu_instance_types
from manifests import cluster_autoscaler
from manifests.charts import efa_device_plugin, kuberay_operator, nvidia_device_plugin
from manifests.endpoint.chart import envoy_gateway_chart
from manifests.load_balancer import load_balancer_controller
from manifests.observability.charts import dcgm_exporter_chart, kube_prometheus_stack_chart
from planning.nodes import placement


def own_namespaces(settings: Settings, cluster_name: str) -> dict[str, str]:
    where = placement(settings)
    charts = {
        "nvidiaDevicePlugin": nvidia_device_plugin(where),
        "efaDevicePlugin": efa_device_plugin(where, gpu_instance_types(settings)),
        "kuberay": kuberay_operator(settings.kuberay, where),
        "loadBalancerController": load_balancer_controller(settings, cluster_name=cluster_name),
        "envoyGateway": envoy_gateway_chart(where),
        "prometheus": kube_prometheus_stack_chart(settings),
        "dcgmExporter": dcgm_exporter_chart(where),
    }
    return {key: chart.namespace for key, chart in charts.items()} | {
        "clusterAutoscaler": cluster_autoscaler.NAMESPACE
    }
