"""The NVIDIA and EFA device plugins, so each GPU node advertises `nvidia.com/gpu` and
`vpc.amazonaws.com/efa` to the scheduler (eksctl installs both for its users; we must do it). Both run
on the GPU nodes only and tolerate their taint (values in manifests/charts.py)."""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_kubernetes as k8s

from components.helm import helm_release
from manifests.charts import efa_device_plugin, nvidia_device_plugin
from planning.nodes import Placement


class DevicePlugins(pulumi.ComponentResource):
    releases: list[k8s.helm.v3.Release]
    """The Helm releases (both, unless an existing cluster runs its own); the RayService waits for them."""

    def __init__(
        self,
        name: str,
        *,
        provider: k8s.Provider,
        instance_type: str | list[str],
        placement: Placement,
        gpu_nodes: Sequence[pulumi.Resource],
        nvidia: bool,
        efa: bool,
        opts: pulumi.ResourceOptions | None = None,
    ):
        """`gpu_nodes`: the GPU node group; the plugins' DaemonSets can only become ready on its nodes.
        `placement`: the GPU nodes' selector and taint (planning/nodes.py). `nvidia`, `efa`: install
        that plugin (an existing cluster may run its own: planning/addons.py)."""
        super().__init__("ray-llm-eks:device_plugins:DevicePlugins", name, None, opts)
        # The releases wait for their DaemonSets to be ready, which needs the GPU nodes.
        child = pulumi.ResourceOptions(parent=self, provider=provider, depends_on=list(gpu_nodes))
        self.releases = [
            *([helm_release(f"{name}-nvidia", nvidia_device_plugin(placement), child)] if nvidia else []),
            *(
                [helm_release(f"{name}-efa", efa_device_plugin(placement, instance_type), child)]
                if efa
                else []
            ),
        ]
        self.register_outputs({"releases": [r.name for r in self.releases]})
