"""The NVIDIA and EFA device plugins, so each GPU node advertises `nvidia.com/gpu` and
`vpc.amazonaws.com/efa` to the scheduler (eksctl installs both for its users; we must do it).

Both run on the GPU nodes only and tolerate their taint:
- NVIDIA's chart schedules where `nvidia.com/gpu.present=true` (its default affinity; our GPU nodes
  carry the label) and tolerates `nvidia.com/gpu` by default; we add the node selector.
- AWS's EFA chart has an instance-type allow-list and no tolerations by default; we narrow the list to
  our GPU type (so any catalogued type works) and add the toleration.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from config import versions
from config.cluster import GPU_NODE_LABELS, GPU_TAINT_KEY

NAMESPACE = "kube-system"


def gpu_toleration() -> dict[str, str]:
    return {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}


def nvidia_values() -> dict:
    return {
        "nodeSelector": {"role": GPU_NODE_LABELS["role"]},
        "tolerations": [{"key": "CriticalAddonsOnly", "operator": "Exists"}, gpu_toleration()],
    }


def efa_values(instance_type: str) -> dict:
    return {
        "supportedInstanceLabels": {
            "keys": ["node.kubernetes.io/instance-type"],
            "values": [instance_type],
        },
        "nodeSelector": {"role": GPU_NODE_LABELS["role"]},
        "tolerations": [gpu_toleration()],
    }


@dataclass(frozen=True)
class DevicePluginsArgs:
    provider: k8s.Provider
    instance_type: str
    gpu_nodes: Sequence[pulumi.Resource]
    """The GPU node group: the plugins' DaemonSets can only become ready on its nodes."""


class DevicePlugins(pulumi.ComponentResource):
    releases: list[k8s.helm.v3.Release]
    """The two Helm releases; the RayService waits for them."""

    def __init__(self, name: str, args: DevicePluginsArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-llm-eks:device_plugins:DevicePlugins", name, None, opts)
        # The releases wait for their DaemonSets to be ready, which needs the GPU nodes.
        child = pulumi.ResourceOptions(parent=self, provider=args.provider, depends_on=list(args.gpu_nodes))

        def release(suffix: str, chart: str, version: str, repo: str, values: dict) -> k8s.helm.v3.Release:
            return k8s.helm.v3.Release(
                f"{name}-{suffix}",
                name=chart,
                chart=chart,
                version=version,
                repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=repo),
                namespace=NAMESPACE,
                values=values,
                opts=child,
            )

        nvidia = release(
            "nvidia",
            "nvidia-device-plugin",
            versions.NVIDIA_DEVICE_PLUGIN_CHART_VERSION,
            versions.NVIDIA_DEVICE_PLUGIN_CHART_REPO,
            nvidia_values(),
        )
        efa = release(
            "efa",
            "aws-efa-k8s-device-plugin",
            versions.EFA_DEVICE_PLUGIN_CHART_VERSION,
            versions.EFA_DEVICE_PLUGIN_CHART_REPO,
            efa_values(args.instance_type),
        )
        self.releases = [nvidia, efa]
        self.register_outputs({"releases": [r.name for r in self.releases]})
