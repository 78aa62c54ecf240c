"""The KubeRay operator (Helm), on the system nodes, in its own namespace.

It waits for the system node group only, so the GPU nodes boot while the operator installs. The
chart ships the RayService CRD in crds/, which Helm installs before the operator.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.rayservice_spec import pod_security_labels
from config import versions
from config.cluster import SYSTEM_NODE_LABELS
from config.serving import KubeRayConfig


@dataclass(frozen=True)
class KubeRayOperatorArgs:
    config: KubeRayConfig
    provider: k8s.Provider
    system_nodes: Sequence[pulumi.Resource]
    """What the operator waits for: the system node group, not the GPU nodes."""


class KubeRayOperator(pulumi.ComponentResource):
    release: k8s.helm.v3.Release
    """The Helm release; custom resources of ray.io must wait for it (it brings their CRDs)."""

    def __init__(self, name: str, args: KubeRayOperatorArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-llm-eks:kuberay:KubeRayOperator", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        namespace = k8s.core.v1.Namespace(
            f"{name}-ns",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=args.config.namespace,
                # The operator needs no privileges; baseline is enforced, restricted audited.
                labels=pod_security_labels("baseline"),
            ),
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=list(args.system_nodes))
            ),
        )
        self.release = k8s.helm.v3.Release(
            f"{name}-operator",
            name="kuberay-operator",
            chart="kuberay-operator",
            version=args.config.chart_version,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=versions.KUBERAY_CHART_REPO),
            namespace=namespace.metadata.name,
            values={"nodeSelector": dict(SYSTEM_NODE_LABELS)},
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=list(args.system_nodes))
            ),
        )
        self.register_outputs({"namespace": namespace.metadata.name, "release": self.release.name})
