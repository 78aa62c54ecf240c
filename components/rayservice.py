"""The serving layer: the `inference` namespace, the optional Hugging Face token Secret, and the
KubeRay RayService that runs `build_pd_openai_app` on the GPU workers.

It applies what manifests/rayservice.py built and how planning/upgrades.py decided a Ray cluster
change rolls out, so it can target an existing cluster as well as the one this stack builds.
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_kubernetes as k8s

from manifests.rayservice import HF_TOKEN_KEY, HF_TOKEN_SECRET, ServingManifests
from planning.upgrades import UpgradePlan


class RayService(pulumi.ComponentResource):
    namespace: pulumi.Output[str]
    """Namespace of the RayService and its Service."""
    service_name: pulumi.Output[str]
    """The OpenAI-compatible endpoint's Service (`<name>-serve-svc`, port 8000)."""
    resource: k8s.apiextensions.CustomResource
    """The RayService custom resource."""
    ready_check: k8s.batch.v1.Job
    """Completes once the RayService's serve config is the one RUNNING (jobs/serve_ready.py)."""

    def __init__(
        self,
        name: str,
        *,
        manifests: ServingManifests,
        upgrade: UpgradePlan,
        provider: k8s.Provider,
        depends_on: Sequence[pulumi.Resource],
        opts: pulumi.ResourceOptions | None = None,
    ):
        """`depends_on`: the KubeRay release (it brings the CRD), the GPU node group and the device
        plugins (so the workers can be scheduled at all)."""
        super().__init__("ray-llm-eks:rayservice:RayService", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=provider)
        namespace = k8s.core.v1.Namespace(f"{name}-ns", metadata=manifests.namespace["metadata"], opts=child)

        wait_for = list(depends_on)
        if manifests.hf_token is not None:
            wait_for.append(
                k8s.core.v1.Secret(
                    f"{name}-hf-token",
                    metadata=k8s.meta.v1.ObjectMetaArgs(
                        name=HF_TOKEN_SECRET, namespace=namespace.metadata.name
                    ),
                    type="Opaque",
                    # pulumi-kubernetes makes a Secret's stringData a Pulumi secret itself.
                    string_data={HF_TOKEN_KEY: manifests.hf_token.get_secret_value()},
                    opts=child,
                )
            )

        rendered = manifests.rayservice.to_dict()
        self.resource = k8s.apiextensions.CustomResource(
            f"{name}-rayservice",
            api_version=rendered["apiVersion"],
            kind=rendered["kind"],
            metadata=dict(rendered["metadata"], namespace=namespace.metadata.name),
            spec=rendered["spec"],
            opts=pulumi.ResourceOptions.merge(
                child,
                pulumi.ResourceOptions(
                    depends_on=wait_for,
                    replace_on_changes=upgrade.replace_on_changes or None,
                    delete_before_replace=bool(upgrade.replace_on_changes),
                ),
            ),
        )
        # After the RayService: the Job that waits until the new serve config is the one RUNNING, named
        # by the config's hash, so only a serve config change replaces it.
        check = manifests.ready_check
        config_map = k8s.core.v1.ConfigMap(
            f"{name}-ready-check",
            metadata=check.config_map["metadata"],
            data=check.config_map["data"],
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[namespace])),
        )
        job = check.job.to_dict()
        self.ready_check = k8s.batch.v1.Job(
            f"{name}-ready-check",
            metadata=job["metadata"],
            spec=job["spec"],
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=[self.resource, config_map])
            ),
        )
        self.namespace = namespace.metadata.name
        self.service_name = pulumi.Output.from_input(manifests.service_name)
        self.register_outputs({"namespace": self.namespace, "serviceName": self.service_name})
