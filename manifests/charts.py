"""The Helm charts the stack installs, as data: where each comes from, at which version, into which
namespace, with which values. Versions come from config/versions.py (or the stack's kuberay section).

- NVIDIA's device plugin schedules where `nvidia.com/gpu.present=true` (its default affinity; our GPU
  nodes carry the label) and tolerates `nvidia.com/gpu` by default; we add the node selector.
- AWS's EFA device plugin has an instance-type allow-list and no tolerations by default; we narrow the
  list to our GPU type (so any catalogued type works) and add the toleration.
- The KubeRay operator runs on the system nodes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from config import versions
from config.serving import KubeRayConfig
from manifests.k8s import namespace, pod_security_labels
from planning.nodes import Placement

DEVICE_PLUGIN_NAMESPACE = "kube-system"


@dataclass(frozen=True)
class HelmChart:
    chart: str
    """Chart name, also the release name."""
    version: str
    repo: str
    namespace: str
    values: dict[str, Any]
    skip_crds: bool = False


def _on_gpu_nodes(placement: Placement, chart: str, version: str, repo: str, **values: Any) -> HelmChart:
    """A device plugin's DaemonSet: on the GPU nodes only, tolerating their taint."""
    tolerations = [*values.pop("tolerations", []), placement.gpu_toleration]
    values.update(nodeSelector=placement.gpu_selector, tolerations=tolerations)
    return HelmChart(chart, version, repo, DEVICE_PLUGIN_NAMESPACE, values)


def nvidia_device_plugin(placement: Placement) -> HelmChart:
    return _on_gpu_nodes(
        placement,
        "nvidia-device-plugin",
        versions.NVIDIA_DEVICE_PLUGIN_CHART_VERSION,
        versions.NVIDIA_DEVICE_PLUGIN_CHART_REPO,
        tolerations=[{"key": "CriticalAddonsOnly", "operator": "Exists"}],
    )


def efa_device_plugin(placement: Placement, instance_type: str | Sequence[str]) -> HelmChart:
    """`instance_type`: the GPU type, or each side's where the sides have node groups of their own (the
    chart's allow-list takes them all)."""
    types = [instance_type] if isinstance(instance_type, str) else list(dict.fromkeys(instance_type))
    return _on_gpu_nodes(
        placement,
        "aws-efa-k8s-device-plugin",
        versions.EFA_DEVICE_PLUGIN_CHART_VERSION,
        versions.EFA_DEVICE_PLUGIN_CHART_REPO,
        supportedInstanceLabels={"keys": ["node.kubernetes.io/instance-type"], "values": types},
    )


def kuberay_operator(config: KubeRayConfig, placement: Placement) -> HelmChart:
    """Installed with `skip_crds`: Helm installs a chart's crds/ once and never upgrades them, so the
    stack applies them itself (`kuberay_crds`), at the chart's version."""
    return HelmChart(
        chart="kuberay-operator",
        version=config.chart_version,
        repo=versions.KUBERAY_CHART_REPO,
        namespace=config.namespace,
        values=placement.on_system_nodes(),
        skip_crds=True,
    )


def kuberay_crds(config: KubeRayConfig) -> list[str]:
    """The chart's CRDs, at the chart's version."""
    return [versions.kuberay_crd_url(config.chart_version, plural) for plural in versions.KUBERAY_CRDS]


def kuberay_namespace(config: KubeRayConfig) -> dict[str, Any]:
    """restricted: the chart's operator container runs non-root, drops every capability, no privilege
    escalation, RuntimeDefault seccomp (kuberay-operator 1.7.0 values.yaml `securityContext`), and the
    stack changes none of it."""
    return namespace(config.namespace, pod_security_labels("restricted"))


KUBERAY_METRICS_PORT = 8080
"""The operator's metrics (and only) container port (kuberay-operator 1.7.0 values `service.port`)."""
