"""The whole stack configuration: one model per section, and the loader that turns Pulumi config (at
run time) or a `Pulumi.<stack>.yaml` file (offline) into `Settings`.

`Settings` is the stack file as typed data and nothing more; what follows from it and from the
hardware (pods per node, the fit check, the upgrade path) is decided in `planning`. Both run before
the first resource is registered, so a bad value costs seconds, and every message names the key as
the stack file spells it (`ray-llm-eks:gpuNodes.instanceType`).
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from typing import Any, get_args

from pydantic import BaseModel, Field, SecretStr, ValidationError

from config.addons import AddonsConfig
from config.autoscaling import AutoscalingConfig
from config.base import StrictModel
from config.cluster import CAPACITY_RESERVATION_PATTERN, ClusterConfig, GpuNodesConfig, SystemNodesConfig
from config.endpoint import EndpointConfig
from config.network import NetworkConfig
from config.observability import ObservabilityConfig
from config.regions import AWS_REGIONS
from config.serving import KubeRayConfig, ModelCacheConfig, ModelConfig, ServingConfig
from config.sides import all_side_nodes, split

PROJECT = "ray-llm-eks"
"""The project name in Pulumi.yaml, and so the namespace of every config key of ours."""

REGION_KEY = "aws:region"
OPTIONAL_SECTIONS = ("prefillNodes", "decodeNodes")
"""Sections whose absence means something (both sides on gpuNodes), not all defaults."""
SECRET_KEYS = ("huggingFaceToken", "apiKeys")


class ConfigError(ValueError):
    """A stack configuration that cannot work. The message lists every problem, one per line."""

    def __init__(self, problems: list[str]):
        self.problems = problems
        super().__init__("invalid stack configuration:\n" + "\n".join(f"  - {p}" for p in problems))


def region_problem(region: str) -> str | None:
    """Why `region` is not an AWS region, with the nearest names, or None."""
    regions = AWS_REGIONS
    if region in regions:
        return None
    near = difflib.get_close_matches(region, regions, n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(near)}?" if near else f"; AWS's regions: {', '.join(regions)}"
    return f"{region!r} is not an AWS region{hint}"


class Settings(StrictModel):
    region: str = Field(description="AWS region, from `aws:region`.")
    network: NetworkConfig = Field(default_factory=NetworkConfig)  # type: ignore[arg-type]
    cluster: ClusterConfig = Field(default_factory=ClusterConfig)  # type: ignore[arg-type]
    system_nodes: SystemNodesConfig = Field(default_factory=SystemNodesConfig)  # type: ignore[arg-type]
    gpu_nodes: GpuNodesConfig = Field(default_factory=GpuNodesConfig)  # type: ignore[arg-type]
    prefill_nodes: GpuNodesConfig | None = Field(
        None,
        description="The prefill side's own GPU nodes, with the keys of `gpuNodes`: with it (or "
        "`decodeNodes`) each side gets an EFA GPU node group of its own, of its instance type, sizes and "
        "capacity reservation, in the one zone and cluster placement group of the other side's (a "
        "reservation's, where a side has one), and a KubeRay worker group of its "
        "own that selects its nodes by label; a side without its own section runs on `gpuNodes`. Without "
        'either, both sides share `gpuNodes` (docs/design.md, "Sizing prefill and decode").',
    )
    decode_nodes: GpuNodesConfig | None = Field(
        None,
        description="The decode side's own GPU nodes, with the keys of `gpuNodes`: as `prefillNodes`, for "
        "decode.",
    )
    kuberay: KubeRayConfig = Field(default_factory=KubeRayConfig)  # type: ignore[arg-type]
    serving: ServingConfig = Field(default_factory=ServingConfig)  # type: ignore[arg-type]
    model: ModelConfig = Field(default_factory=ModelConfig)  # type: ignore[arg-type]
    model_cache: ModelCacheConfig = Field(default_factory=ModelCacheConfig)  # type: ignore[arg-type]
    endpoint: EndpointConfig = Field(default_factory=EndpointConfig)  # type: ignore[arg-type]
    observability: ObservabilityConfig = Field(default_factory=ObservabilityConfig)  # type: ignore[arg-type]
    autoscaling: AutoscalingConfig = Field(default_factory=AutoscalingConfig)  # type: ignore[arg-type]
    addons: AddonsConfig = Field(default_factory=AddonsConfig)  # type: ignore[arg-type]
    api_keys: dict[str, SecretStr] = Field(
        {},
        description="API keys you choose instead of generated ones, by client name (each must be one of "
        "`endpoint.clients`), at least 24 characters; a secret: `pulumi config set --stack <stack> "
        "--secret --path 'apiKeys.<client>' <key>`.",
    )
    hugging_face_token: SecretStr | None = Field(
        None,
        description="Hugging Face token for gated models; set it with `pulumi config set --stack <stack> "
        "--secret huggingFaceToken hf_...`. It reaches the pods only through a Kubernetes Secret.",
    )


def _existing_cluster_problems(settings: Settings, project: str) -> list[str]:
    """An existing cluster brings its own VPC; the stack's own cluster has no add-ons of anyone else's."""
    existing = settings.cluster.existing_cluster_name
    problems = []
    if existing:
        network = sorted(settings.network.model_fields_set)
        if network:
            keys = ", ".join(f"{project}:network.{NetworkConfig.model_fields[n].alias or n}" for n in network)
            problems.append(
                f"{keys}: the stack creates no VPC on {project}:cluster.existingClusterName {existing}; the "
                "cluster's VPC is used as it is: remove them"
            )
        return problems
    if settings.gpu_nodes.subnet_id:
        problems.append(
            f"{project}:gpuNodes.subnetId: only with {project}:cluster.existingClusterName; the stack's own "
            "VPC has one private subnet per zone (choose the zone with gpuNodes.availabilityZone)"
        )
    chosen = {n: c for n, c in settings.addons.model_dump(by_alias=True).items() if c == "existing"}
    if chosen:
        problems.append(
            f"{', '.join(f'{project}:addons.{n}' for n in sorted(chosen))}: existing, but the stack creates "
            f"its cluster, which has no add-ons of its own; set auto or install, or name the cluster with "
            f"{project}:cluster.existingClusterName"
        )
    return problems


def _cross_section_problems(settings: Settings, project: str) -> list[str]:
    """Rules between sections, each naming every key it involves."""
    problems = _existing_cluster_problems(settings, project)
    zones = {f"{project}:network.availabilityZones": settings.network.availability_zones or []}
    if settings.gpu_nodes.availability_zone:
        zones[f"{project}:gpuNodes.availabilityZone"] = [settings.gpu_nodes.availability_zone]
    for key, values in zones.items():
        foreign = sorted(z for z in values if z[:-1] != settings.region)
        if foreign:
            problems.append(f"{key}: {foreign} are not in {REGION_KEY} {settings.region}")
    reservation = re.fullmatch(CAPACITY_RESERVATION_PATTERN, settings.gpu_nodes.capacity_reservation or "")
    if reservation and reservation["region"] and reservation["region"] != settings.region:
        problems.append(
            f"{project}:gpuNodes.capacityReservation: the resource group is in {reservation['region']}, not "
            f"{REGION_KEY} {settings.region}; capacity reservations serve their own region only"
        )
    cluster_zones = settings.network.availability_zones
    gpu_zone = settings.gpu_nodes.availability_zone
    if cluster_zones and gpu_zone and gpu_zone not in cluster_zones:
        problems.append(
            f"{project}:gpuNodes.availabilityZone: {gpu_zone} must be one of "
            f"{project}:network.availabilityZones {cluster_zones}"
        )
    endpoint = settings.endpoint
    scaling, model = settings.autoscaling, settings.model
    for side, minimum in (("prefill", model.prefill_replicas), ("decode", model.decode_replicas)):
        maximum = getattr(scaling, side).max_replicas
        if maximum is not None and maximum < minimum:
            problems.append(
                f"{project}:autoscaling.{side}.maxReplicas: {maximum} is below {project}:model."
                f"{side}Replicas {minimum}, the side's minimum"
            )
    problems += _ratio_problems(settings, project)
    if scaling.signal in ("llm", "slo") and not settings.observability.enabled:
        problems.append(
            f"{project}:autoscaling.signal: {scaling.signal} reads the engines' figures from the stack's "
            f"Prometheus, but {project}:observability.enabled is false; enable it, or scale on requests"
        )
    if settings.serving.self_heal and (
        settings.serving.mode != "disaggregated" or not settings.observability.enabled
    ):
        problems.append(
            f"{project}:serving.selfHeal: restarts decode after a stale NIXL agent, which it reads from the "
            f"stack's Prometheus; it needs {project}:serving.mode disaggregated (now "
            f"{settings.serving.mode}) and {project}:observability.enabled true (now "
            f"{str(settings.observability.enabled).lower()})"
        )
    if scaling.parked and settings.gpu_nodes.min_size > 0:
        problems.append(
            f"{project}:autoscaling.parked: Cluster Autoscaler cannot remove GPU nodes below "
            f"{project}:gpuNodes.minSize {settings.gpu_nodes.min_size}; set it to 0 to park"
        )
    problems += _side_node_problems(settings, project)
    problems += _one_purpose_per_secret(settings, project)
    problems += _one_section_per_namespace(settings, project)
    for client, key in sorted(settings.api_keys.items()):
        if client not in endpoint.clients:
            problems.append(
                f"{project}:apiKeys.{client}: not a client of {project}:endpoint.clients "
                f"{sorted(endpoint.clients)}; add it there, or remove its key"
            )
        elif len(key.get_secret_value()) < MIN_API_KEY_LENGTH and not _is_placeholder(key):
            problems.append(
                f"{project}:apiKeys.{client}: the key has {len(key.get_secret_value())} characters; "
                f"use at least {MIN_API_KEY_LENGTH} (or remove it and let the stack generate one)"
            )
    return problems


def _ratio_problems(settings: Settings, project: str) -> list[str]:
    """`autoscaling.ratio` is kept by the LLM-signal policy of two sides: it needs that policy, both
    sides, and a band the sides' minimums (where they rest) lie in."""
    scaling, model = settings.autoscaling, settings.model
    band = scaling.ratio
    if band is None:
        return []
    key = f"{project}:autoscaling.ratio"
    if scaling.signal != "llm":
        return [
            f"{key}: the band is kept by the stack's LLM-signal policy; set {project}:autoscaling.signal: llm"
        ]
    if settings.serving.mode == "aggregated":
        return [f"{key}: {project}:serving.mode aggregated has no prefill and decode sides to keep in a band"]
    prefill, decode = model.prefill_replicas, model.decode_replicas
    if not band.holds(prefill, decode):
        return [
            f"{key}: {{min: {band.min:g}, max: {band.max:g}}} cannot be met: the sides rest at their "
            f"minimums, {project}:model.prefillReplicas {prefill} : model.decodeReplicas {decode} = "
            f"{prefill / decode:g}, outside the band; widen the band or change the minimums"
        ]
    return []


def _side_node_problems(settings: Settings, project: str) -> list[str]:
    """`prefillNodes` and `decodeNodes`: two node groups that must still be one EFA network."""
    if not split(settings):
        return []
    sides = all_side_nodes(settings)
    own = [s for s in sides if s.section != "gpuNodes"]
    problems = []
    if len(own) == 2 and settings.gpu_nodes.model_fields_set:
        given = ", ".join(
            f"{project}:gpuNodes.{GpuNodesConfig.model_fields[n].alias or n}"
            for n in sorted(settings.gpu_nodes.model_fields_set)
        )
        problems.append(
            f"{given}: with both {project}:prefillNodes and {project}:decodeNodes no GPU node runs on "
            "gpuNodes; remove it, or move the side that should use it back there"
        )
    zones = {s.section: s.config.availability_zone for s in sides if s.config.availability_zone}
    if len(set(zones.values())) > 1:
        (first, first_zone), (second, second_zone) = sorted(zones.items())[:2]
        problems.append(
            f"{project}:{first}.availabilityZone {first_zone} and {project}:{second}.availabilityZone "
            f"{second_zone}: the sides in two availability zones, but EFA does not cross zones, so the KV "
            "cache could not move between them; give both the same zone, or leave it out and the stack "
            "picks one that offers both instance types"
        )
    for side in own:
        key = f"{project}:{side.section}"
        zone = side.config.availability_zone
        if zone and zone[:-1] != settings.region:
            problems.append(f"{key}.availabilityZone: {zone} is not in {REGION_KEY} {settings.region}")
        elif zone and settings.network.availability_zones and zone not in settings.network.availability_zones:
            problems.append(
                f"{key}.availabilityZone: {zone} must be one of {project}:network.availabilityZones "
                f"{settings.network.availability_zones}"
            )
        if side.config.subnet_id and not settings.cluster.existing_cluster_name:
            problems.append(
                f"{key}.subnetId: only with {project}:cluster.existingClusterName; the stack's own VPC has "
                f"one private subnet per zone (choose the zone with {side.section}.availabilityZone)"
            )
        reservation = re.fullmatch(CAPACITY_RESERVATION_PATTERN, side.config.capacity_reservation or "")
        if reservation and reservation["region"] and reservation["region"] != settings.region:
            problems.append(
                f"{key}.capacityReservation: the resource group is in {reservation['region']}, not "
                f"{REGION_KEY} {settings.region}; capacity reservations serve their own region only"
            )
        if settings.autoscaling.parked and side.config.min_size > 0:
            problems.append(
                f"{project}:autoscaling.parked: Cluster Autoscaler cannot remove GPU nodes below "
                f"{key}.minSize {side.config.min_size}; set it to 0 to park"
            )
    taints = {s.section: s.config.taint for s in sides}
    if len(set(taints.values())) > 1:
        problems.append(
            f"{', '.join(f'{project}:{k}.taint {v}' for k, v in sorted(taints.items()))}: both sides' GPU "
            "nodes are tainted alike (the device plugins and the workers tolerate one taint); set the same"
        )
    if settings.serving.mode == "aggregated":
        problems.append(
            f"{', '.join(f'{project}:{s.section}' for s in own)}: {project}:serving.mode aggregated runs one "
            "deployment that prefills and decodes, so there is no side to give GPU nodes of its own; "
            "share gpuNodes, or serve disaggregated"
        )
    subnets = {s.section: s.config.subnet_id for s in sides if s.config.subnet_id}
    if len(set(subnets.values())) > 1:
        problems.append(
            f"{', '.join(f'{project}:{k}.subnetId {v}' for k, v in sorted(subnets.items()))}: the sides in "
            "two subnets, but EFA's OS-bypass traffic reaches instances of the same subnet only, so the KV "
            "cache could not move between them; give both the same subnet, or leave it out and the stack "
            "picks one"
        )
    return problems


FIXED_NAMESPACES = {
    "kube-system": "the device plugins, the load balancer controller and Cluster Autoscaler",
    "monitoring": "the metrics stack (observability)",
    "node-agents": "node-exporter and dcgm-exporter (observability)",
    "envoy-gateway-system": "Envoy Gateway (endpoint)",
}
"""The namespaces the stack's own charts use, whatever the config says (manifests/; a test keeps the two
in step)."""


def _one_purpose_per_secret(settings: Settings, project: str) -> list[str]:
    """A secret value given twice serves two purposes: revoking one would leave it working as the other
    (and Envoy Gateway refuses an api_key_auth Secret with a value twice)."""
    problems = []
    by_value: dict[str, list[str]] = {}
    for client, key in sorted(settings.api_keys.items()):
        by_value.setdefault(key.get_secret_value(), []).append(f"{project}:apiKeys.{client}")
    if settings.hugging_face_token:
        by_value.setdefault(settings.hugging_face_token.get_secret_value(), []).append(
            f"{project}:huggingFaceToken"
        )
    for value, keys in by_value.items():
        if len(keys) > 1 and value != ENCRYPTED:  # offline, every secret reads as the same placeholder
            problems.append(
                f"{keys[0]}: the same secret is also {', '.join(keys[1:])}; give each its own (removing one "
                "would leave the other still working)"
            )
    return problems


def _one_section_per_namespace(settings: Settings, project: str) -> list[str]:
    claims = {
        f"{project}:serving.namespace": settings.serving.namespace,
        f"{project}:kuberay.namespace": settings.kuberay.namespace,
    }
    problems = []
    for key, namespace in claims.items():
        if namespace in FIXED_NAMESPACES:
            problems.append(
                f"{key}: {namespace} is where the stack runs {FIXED_NAMESPACES[namespace]}; pick another"
            )
    if settings.serving.namespace == settings.kuberay.namespace:
        problems.append(
            f"{project}:serving.namespace and {project}:kuberay.namespace are both "
            f"{settings.serving.namespace}: each gets its own Pod Security level and network policies (the "
            "GPU workers need more than the operator may have), so they need a namespace each"
        )
    return problems


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
            # Reported with every other problem: the rest is still validated.
            problems.append(
                f"{key}: unknown key; the keys of this project are "
                + ", ".join(f"{project}:{k}" for k in sorted(sections))
            )
            continue
        if name == "apiKeys":
            keys = _secret_mapping(key, value)
            if isinstance(keys, str):
                problems.append(keys)
            else:
                data[name] = keys
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
        region = "us-east-1"  # a stand-in, so the sections are still checked
    elif problem := region_problem(str(region)):
        problems.append(f"{REGION_KEY}: {problem}")
        region = "us-east-1"  # a stand-in, so the sections are still checked
    data["region"] = region
    for name in sections:  # an absent section is all defaults, and its errors name its keys
        if name not in data and name not in SECRET_KEYS and name not in OPTIONAL_SECTIONS:
            data[name] = {}
    try:
        settings = Settings.model_validate(data)
    except ValidationError as error:
        raise ConfigError(problems + _describe(error, project)) from None
    problems += _cross_section_problems(settings, project)
    if problems:
        raise ConfigError(problems)
    return settings


ENCRYPTED = "<encrypted in the stack file>"
MIN_API_KEY_LENGTH = 24


def _secret_value(value: Any) -> str:
    # A stack file holds secrets encrypted ({secure: v1:...}); the runtime hands them over decrypted.
    if isinstance(value, Mapping) and "secure" in value:
        return ENCRYPTED
    return str(value)


def _is_placeholder(value: SecretStr) -> bool:
    return value.get_secret_value() == ENCRYPTED


def _secret_mapping(key: str, value: Any) -> dict[str, str] | str:
    """A secret object such as `apiKeys` (`pulumi config set --secret --path 'apiKeys.app' ...`): the
    runtime hands it over as a JSON string, a stack file as a mapping of encrypted values. Returns the
    mapping, or the problem."""
    if isinstance(value, Mapping) and set(value) == {"secure"}:
        return {}  # one encrypted JSON object (`config set --secret apiKeys '{...}'`): unreadable offline
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            value = None
    if not isinstance(value, Mapping):
        return (
            f"{key}: must map client names to keys, e.g. `pulumi config set --secret --path '{key}.app' ...`"
        )
    return {str(k): _secret_value(v) for k, v in value.items()}


_NO_INPUT_SHOWN = {"value_error", "assertion_error", "missing"}
"""Error types whose message says it all (our validators) or whose input is the enclosing object."""


def _field_aliases(model: type[BaseModel], found: dict[str, str] | None = None) -> dict[str, str]:
    """Every config model's attribute name -> its stack-file key (`public_access_cidrs` ->
    `publicAccessCidrs`): pydantic locates an error in a default value by the attribute's name."""
    found = {} if found is None else found
    for name, field in model.model_fields.items():
        found[name] = field.alias or name
        for kind in (field.annotation, *get_args(field.annotation)):
            if isinstance(kind, type) and issubclass(kind, BaseModel) and kind is not model:
                _field_aliases(kind, found)
    return found


def _describe(error: ValidationError, project: str) -> list[str]:
    problems = []
    aliases = _field_aliases(Settings)
    for item in error.errors(include_url=False):
        loc = [aliases.get(part, part) if isinstance(part, str) else str(part) for part in item["loc"]]
        if loc and loc[0] == "region":
            key = REGION_KEY
        elif loc:
            key = f"{project}:{loc[0]}" + "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in loc[1:])
        else:
            key = project
        message = item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            allowed = _allowed_keys(item["loc"][:-1])
            problems.append(f"{key}: unknown key; allowed here: {', '.join(allowed)}")
        elif item["type"] in _NO_INPUT_SHOWN:
            problems.append(f"{key}: {message}")
        elif item["type"] == "string_type" and isinstance(item["input"], int | float):
            problems.append(
                f"{key}: YAML read this as the number {item['input']!r}; quote it in the stack file "
                '(e.g. "1.30", which as a number would be 1.3)'
            )
        else:
            problems.append(f"{key}: {message} (got {item['input']!r})")
    return problems


def _allowed_keys(loc: tuple[Any, ...]) -> list[str]:
    model: Any = Settings
    for part in loc:
        field = next(
            (f for n, f in model.model_fields.items() if part in (n, f.alias)),
            None,
        )
        kinds = (
            [k for k in (field.annotation, *get_args(field.annotation)) if isinstance(k, type)]
            if field
            else []
        )
        models = [k for k in kinds if issubclass(k, BaseModel)]
        if not models:
            return []
        model = models[0]
    if model is Settings:
        return sorted(_section_fields())
    return sorted(f.alias or n for n, f in model.model_fields.items())
