"""The Helm charts the stack installs, as data: where each comes from, at which version, into which
namespace, with which values. Versions come from config/versions.py (or the stack's kuberay section).

- NVIDIA's device plugin schedules where `nvidia.com/gpu.present=true` (its default affinity; our GPU
  nodes carry the label) and tolerates `nvidia.com/gpu` by default; we add the node selector.
- AWS's EFA device plugin has an instance-type allow-list and no tolerations by default; we narrow the
  list to our GPU type (so any catalogued type works) and add the toleration.
- The KubeRay operator runs on the system nodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from config import versions
from config.serving import KubeRayConfig
from manifests.k8s import namespace, pod_security_labels
from planning.nodes import GPU_NODE_SELECTOR, GPU_TAINT_KEY, SYSTEM_NODE_LABELS

DEVICE_PLUGIN_NAMESPACE = "kube-system"


@dataclass(frozen=True)
class HelmChart:
    chart: str
    """Chart name, also the release name."""
    version: str
    repo: str
    namespace: str
    values: dict[str, Any]


def _gpu_toleration() -> dict[str, str]:
    return {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}


def nvidia_device_plugin() -> HelmChart:
    return HelmChart(
        chart="nvidia-device-plugin",
        version=versions.NVIDIA_DEVICE_PLUGIN_CHART_VERSION,
        repo=versions.NVIDIA_DEVICE_PLUGIN_CHART_REPO,
        namespace=DEVICE_PLUGIN_NAMESPACE,
        values={
            "nodeSelector": dict(GPU_NODE_SELECTOR),
            "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}, _gpu_toleration()],
        },
    )


def efa_device_plugin(instance_type: str) -> HelmChart:
    return HelmChart(
        chart="aws-efa-k8s-device-plugin",
        version=versions.EFA_DEVICE_PLUGIN_CHART_VERSION,
        repo=versions.EFA_DEVICE_PLUGIN_CHART_REPO,
        namespace=DEVICE_PLUGIN_NAMESPACE,
        values={
            "supportedInstanceLabels": {
                "keys": ["node.kubernetes.io/instance-type"],
                "values": [instance_type],
            },
            "nodeSelector": dict(GPU_NODE_SELECTOR),
            "tolerations": [_gpu_toleration()],
        },
    )


def kuberay_operator(config: KubeRayConfig) -> HelmChart:
    return HelmChart(
        chart="kuberay-operator",
        version=config.chart_version,
        repo=versions.KUBERAY_CHART_REPO,
        namespace=config.namespace,
        values={"nodeSelector": dict(SYSTEM_NODE_LABELS)},
    )


def kuberay_namespace(config: KubeRayConfig) -> dict[str, Any]:
    """The operator needs no privileges: baseline is enforced, restricted audited."""
    return namespace(config.namespace, pod_security_labels("baseline"))
