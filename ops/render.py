"""`ops render`: the serving layer's Kubernetes objects (Namespace, its NetworkPolicies, service
accounts, the model copy Job, the RayService, the serve readiness check) and the endpoint's (Envoy
Gateway's namespace and its policy, the Gateway API objects, the key and timeout policies, the load
balancer Service) and the metrics stack's (its namespace and its policy, the gp3 StorageClass, the
monitors, the alert rules, the dashboards) as multi-document YAML, offline; the Helm charts' values
are in manifests/ as data. Offline the AWS account is unknown, so the model cache's bucket name shows
`<account-id>`, and the StorageClass's KMS key a placeholder unless the stack names its own. The API
keys' Secret shows its clients with a placeholder: the keys exist only in Pulumi's state.

It calls the very functions the Pulumi program calls (`plan_stack`, `build_serving`), so what a
reviewer reads here is what `pulumi up` applies.
"""

from __future__ import annotations

from typing import Any

import yaml

from config import Settings
from manifests.endpoint import build_endpoint
from manifests.observability import build_observability
from manifests.rayservice import HF_TOKEN_KEY, HF_TOKEN_SECRET, build_serving
from manifests.serving_network import serving_policies
from planning import Plan


class _ManifestDumper(yaml.SafeDumper):
    """Multi-line strings as `|` blocks: serveConfigV2 is a YAML document inside a string, and escaped
    `\\n`s would make it unreadable in review."""


def _str_representer(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_ManifestDumper.add_representer(str, _str_representer)

KEY_PLACEHOLDER = "<secret: set by pulumi up; `pulumi stack output apiKeys --show-secrets`>"
VOLUME_KEY_PLACEHOLDER = "<ARN of the stack's EBS KMS key, created by pulumi up>"


def manifests(settings: Settings, plan: Plan) -> list[dict[str, Any]]:
    serving = build_serving(settings, plan)
    jobs = [serving.model_copy] if serving.model_copy else []
    rendered = [
        serving.namespace,
        *serving_policies(settings),
        *serving.service_accounts,
        serving.plugins,
        serving.prepull,
        *[part for job in jobs for part in (job.config_map, job.job.to_dict())],
        serving.rayservice.to_dict(),
        serving.ready_check.config_map,
        serving.ready_check.job.to_dict(),
    ]
    endpoint = build_endpoint(settings)
    if endpoint:
        keys = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": endpoint.api_keys_secret, "namespace": settings.serving.namespace},
            "type": "Opaque",
            "stringData": dict.fromkeys(endpoint.clients, KEY_PLACEHOLDER),
        }
        rendered += [
            endpoint.gateway_namespace,
            endpoint.gateway_network_policy,
            keys,
            *(m.to_dict() for m in endpoint.custom_resources()),
            endpoint.load_balancer.to_dict(),
        ]
    if settings.observability.enabled:
        observability = build_observability(settings)
        rendered += [
            observability.namespace,
            observability.network_policy,
            {
                **observability.storage_class,
                "parameters": {
                    **observability.storage_class["parameters"],
                    "kmsKeyId": settings.cluster.volume_kms_key_arn or VOLUME_KEY_PLACEHOLDER,
                },
            },
            *observability.monitoring_objects(),
            *observability.dashboards,
        ]
    return rendered


def render_manifests(settings: Settings, plan: Plan) -> str:
    text = yaml.dump_all(
        manifests(settings, plan), Dumper=_ManifestDumper, sort_keys=False, explicit_start=True, width=110
    )
    if settings.hugging_face_token:
        # The token is encrypted in the stack file; only the Pulumi program can create the Secret.
        text = (
            f"# The RayService reads Secret {HF_TOKEN_SECRET} (key {HF_TOKEN_KEY}), which `pulumi up` "
            "creates from huggingFaceToken; it is not rendered here.\n" + text
        )
    return text
