"""The KubeRay operator (Helm), on the system nodes, in its own namespace, and its CRDs.

It waits for the system node group only, so the GPU nodes boot while the operator installs. Helm
installs a chart's crds/ once and never upgrades them, so a chart bump would leave the old RayService
CRD (and the API server would prune the new fields). The stack applies the chart's CRDs itself, at
the chart's version, before the release, which skips them. They are kept on delete: deleting a CRD
deletes every object of it, so no update or teardown of the stack ever deletes one (they go with the
cluster).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components.helm import crds as chart_crds
from components.helm import helm_release
from components.network_policy import network_policies as apply_network_policies
from config.serving import KubeRayConfig
from manifests.charts import kuberay_crds, kuberay_namespace, kuberay_operator
from planning.nodes import Placement


class KubeRayOperator(pulumi.ComponentResource):
    release: k8s.helm.v3.Release
    """The Helm release; custom resources of ray.io wait for it (the operator reconciles them)."""
    crds: k8s.yaml.v2.ConfigGroup
    """The chart's CRDs at its version."""

    def __init__(
        self,
        name: str,
        *,
        config: KubeRayConfig,
        provider: k8s.Provider,
        system_nodes: Sequence[pulumi.Resource],
        placement: Placement,
        network_policies: Sequence[dict[str, Any]],
        opts: pulumi.ResourceOptions | None = None,
    ):
        """`system_nodes`: what the operator waits for (the system node group, not the GPU nodes), whose
        `placement` it selects and tolerates;
        `network_policies`: the namespace's (manifests/traffic.py)."""
        super().__init__("ray-llm-eks:kuberay:KubeRayOperator", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=provider, depends_on=list(system_nodes))
        namespace = k8s.core.v1.Namespace(
            f"{name}-ns", metadata=kuberay_namespace(config)["metadata"], opts=child
        )
        apply_network_policies(
            f"{name}-policy",
            network_policies,
            pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[namespace])),
        )
        self.crds = chart_crds(f"{name}-crds", kuberay_crds(config), child)
        self.release = helm_release(
            f"{name}-operator",
            kuberay_operator(config, placement),
            pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[self.crds])),
            namespace=namespace.metadata.name,
        )
        self.register_outputs({"namespace": namespace.metadata.name, "release": self.release.name})
