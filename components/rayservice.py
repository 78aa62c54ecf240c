"""The serving layer: the `inference` namespace, Ray's token, the optional Hugging Face token Secret,
and the KubeRay RayService that runs `build_pd_openai_app` on the GPU workers.

It applies what manifests/rayservice.py built and how planning/upgrades.py decided a Ray cluster
change rolls out, so it can target an existing cluster as well as the one this stack builds.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s
import pulumi_random as random

from components.network_policy import network_policies as apply_network_policies
from manifests.decode_heal import DecodeHeal
from manifests.jobs import ProgramJob
from manifests.ray_auth import RAY_AUTH_KEY, RAY_AUTH_SECRET
from manifests.rayservice import HF_TOKEN_KEY, HF_TOKEN_SECRET, ServingManifests
from planning.upgrades import UpgradePlan


class RayService(pulumi.ComponentResource):
    namespace: pulumi.Output[str]
    """Namespace of the RayService and its Service."""
    service_name: pulumi.Output[str]
    """The OpenAI-compatible endpoint's Service (`<name>-serve-svc`, port 8000)."""
    resource: k8s.apiextensions.CustomResource | None
    """The RayService custom resource (None while parked)."""
    ready_check: k8s.batch.v1.Job | None
    """Completes once the RayService's serve config is the one RUNNING (jobs/serve_ready.py)."""

    def __init__(
        self,
        name: str,
        *,
        manifests: ServingManifests,
        upgrade: UpgradePlan,
        provider: k8s.Provider,
        depends_on: Sequence[pulumi.Resource],
        copy_after: Sequence[pulumi.Resource] = (),
        network_policies: Sequence[dict[str, Any]] = (),
        parked: bool = False,
        opts: pulumi.ResourceOptions | None = None,
    ):
        """`depends_on`: the KubeRay CRDs and release, the GPU node group and the device plugins (so the
        workers can be scheduled at all), and the model cache's Pod Identity associations;
        `copy_after`: what the model copy Job needs (the system nodes, its Pod Identity); `parked`: no
        RayService (and no GPU workers) and no readiness check, everything else as when serving;
        `network_policies`: the namespace's (manifests/traffic.py), in place before any pod."""
        super().__init__("ray-llm-eks:rayservice:RayService", name, None, opts)
        child = pulumi.ResourceOptions(parent=self, provider=provider)
        namespace = k8s.core.v1.Namespace(f"{name}-ns", metadata=manifests.namespace["metadata"], opts=child)

        in_namespace = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[namespace]))
        policies = apply_network_policies(name, network_policies, in_namespace)
        accounts = [
            k8s.core.v1.ServiceAccount(
                f"{name}-sa-{sa['metadata']['name']}", metadata=sa["metadata"], opts=in_namespace
            )
            for sa in manifests.service_accounts
        ]
        # Not waited on, and waiting on nothing but the namespace: it pulls while the rest comes up.
        k8s.apps.v1.DaemonSet(
            f"{name}-prepull",
            metadata=manifests.prepull["metadata"],
            spec=manifests.prepull["spec"],
            opts=in_namespace,
        )
        plugins = k8s.core.v1.ConfigMap(
            f"{name}-plugins",
            metadata=manifests.plugins["metadata"],
            data=manifests.plugins["data"],
            opts=in_namespace,
        )
        # Ray's token (manifests/ray_auth.py): generated once, kept in state as a secret, in a Secret
        # KubeRay puts into every Ray container and the readiness Job reads.
        ray_token = random.RandomPassword(f"{name}-ray-auth-token", length=43, special=False, opts=child)
        ray_auth = k8s.core.v1.Secret(
            f"{name}-ray-auth",
            metadata=k8s.meta.v1.ObjectMetaArgs(name=RAY_AUTH_SECRET, namespace=namespace.metadata.name),
            type="Opaque",
            string_data={RAY_AUTH_KEY: pulumi.Output.secret(ray_token.result)},
            opts=child,
        )
        wait_for = [*depends_on, *accounts, plugins, *policies, ray_auth]
        hf_secret = None
        if manifests.hf_token is not None:
            hf_secret = k8s.core.v1.Secret(
                f"{name}-hf-token",
                metadata=k8s.meta.v1.ObjectMetaArgs(name=HF_TOKEN_SECRET, namespace=namespace.metadata.name),
                type="Opaque",
                # pulumi-kubernetes makes a Secret's stringData a Pulumi secret itself.
                string_data={HF_TOKEN_KEY: manifests.hf_token.get_secret_value()},
                opts=child,
            )
            wait_for.append(hf_secret)
        if manifests.model_copy is not None:
            # The weights into the S3 cache before any Ray pod tries to load them.
            wait_for.append(
                self._program_job(
                    f"{name}-model-copy",
                    manifests.model_copy,
                    child,
                    [*copy_after, *accounts, *([hf_secret] if hf_secret else [])],
                )
            )

        self.namespace = namespace.metadata.name
        self.service_name = pulumi.Output.from_input(manifests.service_name)
        self.resource = None
        self.ready_check = None
        if parked:
            self.register_outputs({"namespace": self.namespace, "serviceName": self.service_name})
            return
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
        self.ready_check = self._program_job(
            f"{name}-ready-check", manifests.ready_check, child, [self.resource]
        )
        if manifests.decode_heal is not None:
            self._decode_heal(name, manifests.decode_heal, child, [self.resource])
        self.register_outputs({"namespace": self.namespace, "serviceName": self.service_name})

    @staticmethod
    def _decode_heal(
        name: str, heal: DecodeHeal, child: pulumi.ResourceOptions, after: Sequence[pulumi.Resource]
    ) -> None:
        """`serving.selfHeal` (manifests/decode_heal.py): its account and one right, then the CronJob."""
        after_opts = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=list(after)))
        account = k8s.core.v1.ServiceAccount(
            f"{name}-decode-heal", metadata=heal.service_account["metadata"], opts=after_opts
        )
        role = k8s.rbac.v1.Role(
            f"{name}-decode-heal", metadata=heal.role["metadata"], rules=heal.role["rules"], opts=after_opts
        )
        binding = k8s.rbac.v1.RoleBinding(
            f"{name}-decode-heal",
            metadata=heal.role_binding["metadata"],
            role_ref=heal.role_binding["roleRef"],
            subjects=heal.role_binding["subjects"],
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[account, role])),
        )
        program = k8s.core.v1.ConfigMap(
            f"{name}-decode-heal",
            metadata=heal.config_map["metadata"],
            data=heal.config_map["data"],
            opts=after_opts,
        )
        k8s.batch.v1.CronJob(
            f"{name}-decode-heal",
            metadata=heal.cron_job["metadata"],
            spec=heal.cron_job["spec"],
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=[*after, binding, program])
            ),
        )

    @staticmethod
    def _program_job(
        name: str, program: ProgramJob, child: pulumi.ResourceOptions, after: Sequence[pulumi.Resource]
    ) -> k8s.batch.v1.Job:
        """A program of jobs/ (manifests/jobs.py) and its ConfigMap, the Job after `after`."""
        config_map = k8s.core.v1.ConfigMap(
            name,
            metadata=program.config_map["metadata"],
            data=program.config_map["data"],
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=list(after))),
        )
        job = program.job.to_dict()
        return k8s.batch.v1.Job(
            name,
            metadata=job["metadata"],
            spec=job["spec"],
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[*after, config_map])),
        )
