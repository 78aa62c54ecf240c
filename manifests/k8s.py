"""Core Kubernetes objects as typed data: the Pod fields the RayService's pod templates set, object
metadata, and namespaces with their Pod Security levels.

Only the fields we set are modelled. Attributes are snake_case and render camelCase; unknown fields are
errors here, because the API server would silently prune them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from config.base import Quantity


class K8sModel(BaseModel):
    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=True, frozen=True)


class ObjectFieldSelector(K8sModel):
    field_path: str


class SecretKeySelector(K8sModel):
    name: str
    key: str


class EnvVarSource(K8sModel):
    field_ref: ObjectFieldSelector | None = None
    secret_key_ref: SecretKeySelector | None = None


class EnvVar(K8sModel):
    name: str
    value: str | None = None
    value_from: EnvVarSource | None = None


class ContainerPort(K8sModel):
    name: str
    container_port: int = Field(gt=0, lt=65536)


class ResourceRequirements(K8sModel):
    requests: dict[str, Quantity]
    limits: dict[str, Quantity]


class VolumeMount(K8sModel):
    name: str
    mount_path: str
    read_only: bool | None = None


class Capabilities(K8sModel):
    add: list[str] | None = None
    drop: list[str] | None = None


class SeccompProfile(K8sModel):
    type: Literal["RuntimeDefault"]


class SecurityContext(K8sModel):
    privileged: bool | None = None
    run_as_user: int | None = Field(default=None, ge=0)
    allow_privilege_escalation: bool | None = None
    read_only_root_filesystem: bool | None = None
    capabilities: Capabilities | None = None


class PodSecurityContext(K8sModel):
    run_as_non_root: bool | None = None
    run_as_user: int | None = Field(default=None, ge=1)
    run_as_group: int | None = Field(default=None, ge=1)
    seccomp_profile: SeccompProfile | None = None


NOBODY = 65534
"""The unprivileged user the stack's own helper pods run as (the images' `nobody`)."""


def unprivileged_pod() -> PodSecurityContext:
    """What a pod that only runs a program needs: no root, the runtime's default seccomp profile."""
    return PodSecurityContext(
        run_as_non_root=True,
        run_as_user=NOBODY,
        run_as_group=NOBODY,
        seccomp_profile=SeccompProfile(type="RuntimeDefault"),
    )


def locked_container() -> SecurityContext:
    """No capabilities, no escalation, a read-only root filesystem."""
    return SecurityContext(
        allow_privilege_escalation=False,
        read_only_root_filesystem=True,
        capabilities=Capabilities(drop=["ALL"]),
    )


class ExecAction(K8sModel):
    command: list[str]


class LifecycleHandler(K8sModel):
    exec_: ExecAction = Field(alias="exec")


class Lifecycle(K8sModel):
    pre_stop: LifecycleHandler


class Container(K8sModel):
    name: str
    image: str
    command: list[str] | None = None
    ports: list[ContainerPort] | None = None
    env: list[EnvVar] | None = None
    resources: ResourceRequirements
    volume_mounts: list[VolumeMount] | None = None
    security_context: SecurityContext | None = None
    lifecycle: Lifecycle | None = None
    termination_message_policy: Literal["File", "FallbackToLogsOnError"] | None = None


class EmptyDirVolumeSource(K8sModel):
    medium: Literal["Memory"] | None = None
    size_limit: Quantity | None = None


class HostPathVolumeSource(K8sModel):
    path: str
    type: Literal["DirectoryOrCreate", "Directory"]


class ConfigMapVolumeSource(K8sModel):
    name: str


class SecretVolumeSource(K8sModel):
    secret_name: str
    default_mode: int | None = None


class Volume(K8sModel):
    name: str
    empty_dir: EmptyDirVolumeSource | None = None
    host_path: HostPathVolumeSource | None = None
    config_map: ConfigMapVolumeSource | None = None
    secret: SecretVolumeSource | None = None


class Toleration(K8sModel):
    key: str
    operator: Literal["Exists", "Equal"]
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"]
    value: str | None = None


def tolerations_of(items: Sequence[Mapping[str, Any]]) -> list[Toleration] | None:
    """`Placement`'s tolerations (planning/nodes.py) as a pod spec's; None for none."""
    return [Toleration.model_validate(t) for t in items] or None


class PodSpec(K8sModel):
    containers: list[Container] = Field(min_length=1)
    volumes: list[Volume] | None = None
    node_selector: dict[str, str]
    tolerations: list[Toleration] | None = None
    restart_policy: Literal["Never", "OnFailure"] | None = None
    service_account_name: str | None = None
    automount_service_account_token: bool | None = None
    security_context: PodSecurityContext | None = None
    termination_grace_period_seconds: int | None = Field(default=None, ge=0)


class PodMetadata(K8sModel):
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None


class PodTemplate(K8sModel):
    metadata: PodMetadata | None = None
    spec: PodSpec


class ObjectMeta(K8sModel):
    name: str
    namespace: str
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}


HEAD_FIELDS = ("apiVersion", "kind", "metadata")


class Manifest(K8sModel):
    """A whole Kubernetes object (apiVersion, kind, metadata, spec, declared by each kind or its group's
    base class)."""

    def to_dict(self) -> dict[str, Any]:
        """The object as the API server sees it: camelCase, unset fields absent (never null), apiVersion,
        kind and metadata first, whatever order the classes declare them in."""
        fields = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        head = {key: fields.pop(key) for key in HEAD_FIELDS if key in fields}
        return {**head, **fields}


class NamespacedManifest(Manifest):
    """An object that lives in a namespace (each kind declares apiVersion, kind and spec)."""

    metadata: ObjectMeta


def pod_security_labels(level: str, *, audit: str = "restricted") -> dict[str, str]:
    """Pod Security admission: enforce `level`, and warn/audit against `audit` so drift shows up."""
    return {
        "pod-security.kubernetes.io/enforce": level,
        "pod-security.kubernetes.io/warn": audit,
        "pod-security.kubernetes.io/audit": audit,
    }


def namespace(name: str, labels: dict[str, str]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": labels}}
