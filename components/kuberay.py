"""The KubeRay operator (Helm), on the system nodes, in its own namespace.

It waits for the system node group only, so the GPU nodes boot while the operator installs. The
chart ships the RayService CRD in crds/, which Helm installs before the operator.
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_kubernetes as k8s

from components.helm import helm_release
from config.serving import KubeRayConfig
from manifests.charts import kuberay_namespace, kuberay_operator


class KubeRayOperator(pulumi.ComponentResource):
    release: k8s.helm.v3.Release
    """The Helm release; custom resources of ray.io must wait for it (it brings their CRDs)."""

    def __init__(
        self,
        name: str,
        *,
        config: KubeRayConfig,
        provider: k8s.Provider,
        system_nodes: Sequence[pulumi.Resource],
        opts: pulumi.ResourceOptions | None = None,
    ):
        """`system_nodes`: what the operator waits for (the system node group, not the GPU nodes)."""
        super().__init__("ray-llm-eks:kuberay:KubeRayOperator", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=provider, depends_on=list(system_nodes))
        namespace = k8s.core.v1.Namespace(
            f"{name}-ns", metadata=kuberay_namespace(config)["metadata"], opts=child
        )
        self.release = helm_release(
            f"{name}-operator", kuberay_operator(config), child, namespace=namespace.metadata.name
        )
        self.register_outputs({"namespace": namespace.metadata.name, "release": self.release.name})
