"""The whole stack configuration: one model per section, the rules that span sections, and the loader
that turns Pulumi config (at run time) or a `Pulumi.<stack>.yaml` file (offline) into `Settings`.

Everything here runs before the first resource is registered, so a bad value costs seconds, and
every message names the key as the stack file spells it (`ray-llm-eks:gpuNodes.instanceType`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import Field, SecretStr, ValidationError, model_validator

from config import versions
from config.base import StrictModel, quantity_value
from config.capacity import GIB, FitReport, fit_report, pods_per_node
from config.catalog import lookup
from config.cluster import ClusterConfig, GpuNodesConfig, SystemNodesConfig
from config.network import NetworkConfig
from config.serving import KubeRayConfig, ModelConfig, ServingConfig

PROJECT = "ray-llm-eks"
"""The project name in Pulumi.yaml, and so the namespace of every config key of ours."""

REGION_KEY = "aws:region"
SYSTEM_NODE_RESERVED_CPU = 1.0
"""vCPU a system node keeps for the kubelet's reservation and its system pods (coredns 2 x 0.1,
KubeRay 0.1, kube-proxy 0.1, aws-node 0.025, ...)."""
SYSTEM_NODE_RESERVED_GIB = 3
"""Memory a system node keeps for the kubelet's reservation, eviction threshold and system pods."""
SECRET_KEYS = ("huggingFaceToken",)


class ConfigError(ValueError):
    """A stack configuration that cannot work. The message lists every problem, one per line."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid stack configuration:\n" + "\n".join(f"  - {p}" for p in problems))


class Settings(StrictModel):
    region: str = Field(pattern=r"^[a-z]{2}(-[a-z]+)+-\d$", description="AWS region, from `aws:region`.")
    network: NetworkConfig = Field(default_factory=NetworkConfig)  # type: ignore[arg-type]
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)  # type: ignore[arg-type]
    system_nodes: SystemNodesConfig = Field(default_factory=SystemNodesConfig)  # type: ignore[arg-type]
    gpu_nodes: GpuNodesConfig = Field(default_factory=GpuNodesConfig)  # type: ignore[arg-type]
    kuberay: KubeRayConfig = Field(default_factory=KubeRayConfig)  # type: ignore[arg-type]
    serving: ServingConfig = Field(default_factory=ServingConfig)  # type: ignore[arg-type]
    model: ModelConfig = Field(default_factory=ModelConfig)  # type: ignore[arg-type]
    hugging_face_token: SecretStr | None = Field(
        None,
        description="Hugging Face token for gated models; set it with `pulumi config set --secret "
        "huggingFaceToken hf_...`. It reaches the pods only through a Kubernetes Secret.",
    )

    @property
    def image(self) -> str:
        return self.serving.image or versions.regional_image(self.region)

    @property
    def gpu_pods_per_node(self) -> int:
        return pods_per_node(self.gpu_nodes.spec, self.model.tensor_parallel_size)

    @property
    def fit(self) -> FitReport:
        """Whether the model can start on the GPU workers (config/capacity.py), with the numbers."""
        return fit_report(self.model, self.gpu_nodes.spec, self.serving.worker, self.gpu_pods_per_node)

    @property
    def spare_cluster_capacity(self) -> bool:
        """Whether the nodes could host a second Ray cluster during an upgrade: twice the GPU workers
        on the GPU nodes, and a second head on the system nodes."""
        gpu = self.gpu_nodes.desired_size * self.gpu_pods_per_node >= 2 * self.model.workers
        return gpu and self.system_nodes_host_two_heads

    @property
    def system_nodes_host_two_heads(self) -> bool:
        """Two system nodes host a head each; one node only if its CPU and memory, less what the node
        and its system pods (coredns, KubeRay, aws-node, kube-proxy) take, fit both heads' requests."""
        if self.system_nodes.desired_size >= 2:
            return True
        spec = lookup(self.system_nodes.instance_type)
        if spec is None:
            return False
        head = self.serving.head
        cpu_free = spec.vcpu - SYSTEM_NODE_RESERVED_CPU
        memory_free = (spec.memory_gib - SYSTEM_NODE_RESERVED_GIB) * GIB
        return (
            2 * quantity_value(head.cpu_request) <= cpu_free
            and 2 * quantity_value(head.memory_request) <= memory_free
        )

    @property
    def zero_downtime_upgrades(self) -> bool:
        strategy = self.serving.upgrade_strategy
        return strategy == "newCluster" or (strategy == "auto" and self.spare_cluster_capacity)

    @model_validator(mode="after")
    def _zones_in_region(self) -> Settings:
        zones = list(self.network.availability_zones or [])
        if self.gpu_nodes.availability_zone:
            zones.append(self.gpu_nodes.availability_zone)
        foreign = sorted({z for z in zones if z[:-1] != self.region})
        if foreign:
            raise ValueError(f"availability zones {foreign} are not in aws:region {self.region}")
        cluster_zones = self.network.availability_zones
        gpu_zone = self.gpu_nodes.availability_zone
        if cluster_zones and gpu_zone and gpu_zone not in cluster_zones:
            raise ValueError(
                f"gpuNodes.availabilityZone {gpu_zone} must be one of network.availabilityZones "
                f"{cluster_zones}"
            )
        return self

    @model_validator(mode="after")
    def _workers_fit_nodes(self) -> Settings:
        spec = self.gpu_nodes.spec
        tp = self.model.tensor_parallel_size
        if tp > spec.gpus:
            raise ValueError(
                f"model.tensorParallelSize {tp} needs {tp} GPUs in one pod, but "
                f"gpuNodes.instanceType {spec.name} has {spec.gpus}"
            )
        per_node = self.gpu_pods_per_node
        capacity = self.gpu_nodes.desired_size * per_node
        if self.model.workers > capacity:
            raise ValueError(
                f"model.prefillReplicas + model.decodeReplicas = {self.model.workers} GPU workers, but "
                f"gpuNodes.desiredSize {self.gpu_nodes.desired_size} x {per_node} worker(s) per "
                f"{spec.name} hosts only {capacity}; raise gpuNodes.desiredSize (and maxSize)"
            )
        if self.serving.upgrade_strategy == "newCluster" and not self.spare_cluster_capacity:
            raise ValueError(
                f"serving.upgradeStrategy newCluster starts a second Ray cluster (head and "
                f"{self.model.workers} GPU workers) during upgrades: it needs gpuNodes.desiredSize to "
                f"host {2 * self.model.workers} workers (it hosts {capacity}) and room for a second head "
                f"(systemNodes.desiredSize 2, or a larger systemNodes.instanceType); use recreate or "
                "auto, or add nodes"
            )
        return self

    @model_validator(mode="after")
    def _model_fits(self) -> Settings:
        report = self.fit
        if not report.fits:
            raise ValueError(report.summary())
        return self


def _section_fields() -> dict[str, str]:
    """Stack-file key -> attribute name for every key in the project's namespace."""
    return {(field.alias or name): name for name, field in Settings.model_fields.items() if name != "region"}


def load_settings(raw: Mapping[str, Any], project: str = PROJECT) -> Settings:
    """Validate a whole stack configuration.

    `raw` maps full keys (`ray-llm-eks:model`, `aws:region`) to values: JSON strings as the Pulumi
    runtime hands them over, or YAML values as they stand in a stack file (where secrets are
    `{secure: ...}` objects). Raises ConfigError naming every bad key.
    """
    sections = _section_fields()
    data: dict[str, Any] = {}
    problems: list[str] = []
    for key, value in sorted(raw.items()):
        namespace, _, name = key.partition(":")
        if namespace != project:
            continue
        if name not in sections:
            problems.append(
                f"{key}: unknown key; the keys of this project are "
                + ", ".join(f"{project}:{k}" for k in sorted(sections))
            )
            continue
        if name in SECRET_KEYS:
            data[name] = _secret_value(value)
            continue
        if isinstance(value, str):
            try:
                value = json.loads(value)
            except json.JSONDecodeError:
                problems.append(f"{key}: must be an object of settings, got the string {value!r}")
                continue
        if not isinstance(value, dict):
            problems.append(f"{key}: must be an object of settings, got {value!r}")
            continue
        data[name] = value
    region = raw.get(REGION_KEY)
    if not region:
        problems.append(f"{REGION_KEY}: not set; run `pulumi config set aws:region <region>`")
    else:
        data["region"] = region
    if problems:
        raise ConfigError(problems)
    try:
        return Settings.model_validate(data)
    except ValidationError as error:
        raise ConfigError(_describe(error, project)) from None


def _secret_value(value: Any) -> str:
    # A stack file holds secrets encrypted ({secure: v1:...}); the runtime hands them over decrypted.
    if isinstance(value, Mapping) and "secure" in value:
        return "<encrypted in the stack file>"
    return str(value)


def _describe(error: ValidationError, project: str) -> list[str]:
    problems = []
    for item in error.errors(include_url=False):
        loc = [str(part) for part in item["loc"]]
        if loc and loc[0] == "region":
            key = REGION_KEY
        elif loc:
            key = f"{project}:{loc[0]}" + "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in loc[1:])
        else:
            key = f"{project} (across sections)"
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            allowed = _allowed_keys(item["loc"][:-1])
            problems.append(f"{key}: unknown key; allowed here: {', '.join(allowed)}")
        elif item["type"].endswith("_type") or item["type"] in {
            "literal_error",
            "string_pattern_mismatch",
            "greater_than",
            "greater_than_equal",
            "less_than",
            "less_than_equal",
            "too_short",
            "too_long",
            "string_too_long",
            "string_too_short",
            "ip_v4_network",
        }:
            problems.append(f"{key}: {message} (got {item['input']!r})")
        else:
            problems.append(f"{key}: {message}")
    return problems


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    model: Any = Settings
    for part in loc:
        field = next(
            (f for n, f in model.model_fields.items() if part in (n, f.alias)),
            None,
        )
        if field is None or not isinstance(field.annotation, type):
            return []
        model = field.annotation
    if model is Settings:
        return sorted(_section_fields())
    return sorted(f.alias or n for n, f in model.model_fields.items())
