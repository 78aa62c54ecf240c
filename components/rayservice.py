"""The serving layer: the `inference` namespace, the optional Hugging Face token Secret, and the
KubeRay RayService that runs `build_pd_openai_app` on the GPU workers.

It needs only a Kubernetes provider, node placement facts and what to wait for, so it can target an
existing cluster as well as the one this stack builds.

Upgrades. A change to `rayClusterConfig` makes KubeRay start a second Ray cluster by default and
switch over once it serves; with exactly as many GPU nodes as workers that cluster never schedules
and the upgrade waits forever. So unless the GPU nodes can host two clusters, the RayService is
created with `upgradeStrategy: None` (KubeRay never starts a second cluster) and Pulumi replaces it
on any `rayClusterConfig` change, deleting the old one first. A change to serveConfigV2 alone stays
an in-place update, which KubeRay applies to the running cluster.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s

from components.rayservice_spec import (
    HF_TOKEN_KEY,
    HF_TOKEN_SECRET,
    NodePlacement,
    build_rayservice,
    serve_service_name,
    serving_namespace_labels,
)
from config.settings import Settings

CLUSTER_CONFIG_PATH = "spec.rayClusterConfig"


@dataclass(frozen=True)
class RayServiceArgs:
    settings: Settings
    placement: NodePlacement
    provider: k8s.Provider
    wait_for: Sequence[pulumi.Resource]
    """What must exist first: the KubeRay release (it brings the CRD), the GPU node group and the
    device plugins (so the workers can be scheduled at all)."""
    hf_token: pulumi.Input[str] | None = None


class RayService(pulumi.ComponentResource):
    namespace: pulumi.Output[str]
    """Namespace of the RayService and its Service."""
    service_name: pulumi.Output[str]
    """The OpenAI-compatible endpoint's Service (`<name>-serve-svc`, port 8000)."""
    resource: k8s.apiextensions.CustomResource
    """The RayService custom resource."""

    def __init__(self, name: str, args: RayServiceArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-llm-eks:rayservice:RayService", name, None, opts)
        settings = args.settings
        child = pulumi.ResourceOptions(parent=self, provider=args.provider)
        if (args.hf_token is None) != (settings.hugging_face_token is None):
            raise ValueError("hf_token must be passed exactly when settings.hugging_face_token is set")

        namespace = k8s.core.v1.Namespace(
            f"{name}-ns",
            metadata=k8s.meta.v1.ObjectMetaArgs(
                name=settings.serving.namespace,
                labels=serving_namespace_labels(),
            ),
            opts=child,
        )

        manifest = build_rayservice(settings, args.placement)
        depends_on: list[pulumi.Resource] = list(args.wait_for)
        if args.hf_token is not None:
            depends_on.append(
                k8s.core.v1.Secret(
                    f"{name}-hf-token",
                    metadata=k8s.meta.v1.ObjectMetaArgs(
                        name=HF_TOKEN_SECRET, namespace=namespace.metadata.name
                    ),
                    type="Opaque",
                    string_data={HF_TOKEN_KEY: pulumi.Output.secret(args.hf_token)},
                    opts=child,
                )
            )

        rendered = manifest.to_dict()
        metadata = dict(rendered["metadata"], namespace=namespace.metadata.name)
        recreate = not settings.zero_downtime_upgrades
        self.resource = k8s.apiextensions.CustomResource(
            f"{name}-rayservice",
            api_version=rendered["apiVersion"],
            kind=rendered["kind"],
            metadata=metadata,
            spec=rendered["spec"],
            opts=pulumi.ResourceOptions.merge(
                child,
                pulumi.ResourceOptions(
                    depends_on=depends_on,
                    replace_on_changes=[CLUSTER_CONFIG_PATH] if recreate else None,
                    delete_before_replace=recreate,
                ),
            ),
        )
        self.namespace = namespace.metadata.name
        self.service_name = pulumi.Output.from_input(serve_service_name(settings.serving.name))
        self.register_outputs({"namespace": self.namespace, "serviceName": self.service_name})
