"""Where the stack's subnets and GPU nodes go, and how the VPC's range is cut into subnets there.

EFA traffic does not cross availability zones, so the GPU node group lives in exactly one zone; on
day one the cluster's subnets go to zones that offer the GPU type, so the node group can be placed.

Nothing AWS changes later may move them. So:
- a subnet's range is a function of its zone's letter, never of its position in a list
  (`plan_subnets`), and
- the zones and the GPU zone a stack chose are recorded as tags on its VPC (`StackRecord`) and read
  back on every later run, so a new zone that starts offering the GPU type changes nothing. Keys set
  in the stack file still win, and a zone in use that stops offering the type fails with what to do.
The record keeps the other choices a later release of this code must not redo either, such as the
model cache bucket's name (planning/model_cache.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from ipaddress import IPv4Network

from config import PROJECT, ConfigError, Settings
from config.sides import all_side_nodes, gpu_instance_types, gpu_zone_setting, split

TAG_STACK = f"{PROJECT}/stack"
"""On the VPC: `<project>/<stack>`, how a later run finds the stack's record."""
TAG_ZONES = f"{PROJECT}/zones"
TAG_GPU_ZONE = f"{PROJECT}/gpu-zone"
TAG_CREATOR = f"{PROJECT}/cluster-creator"
TAG_SECRETS_KEY = f"{PROJECT}/secrets-key"
TAG_VOLUME_KEY = f"{PROJECT}/volume-key"
TAG_GPU_SUBNET = f"{PROJECT}/gpu-subnet"
TAG_INSTALLED = f"{PROJECT}/installed"
TAG_GPU_CAPACITY = f"{PROJECT}/gpu-capacity"
TAG_MODEL_BUCKET = f"{PROJECT}/model-bucket"

ZONE_SLOTS = 7
"""Zones a..g get a private block each; the eighth block holds the public subnets."""


@dataclass(frozen=True)
class StackRecord:
    """What a deployed stack decided once and keeps: read from its VPC's tags, written back unchanged."""

    zones: tuple[str, ...]
    gpu_zone: str | None = None
    creator: str | None = None
    """IAM principal that created the EKS cluster (EKS made it admin with an entry of its own)."""
    secrets_key: str | None = None
    """What encrypts the cluster's Kubernetes secrets: `stack` (the stack's own key) or the key's ARN
    (planning/keys.py; None in records written before it was kept)."""
    volume_key: str | None = None
    """Likewise for the EBS volumes."""
    gpu_subnet: str | None = None
    """On an existing cluster: the subnet of the team's VPC the GPU nodes went to
    (planning/existing_cluster.py)."""
    installed: tuple[str, ...] = ()
    """On an existing cluster: the add-ons (`addons` keys) the stack installed there, so a later preview
    does not take them for the team's (planning/addons.py)."""
    gpu_capacity: str | None = None
    """What the GPU nodes run on: `on-demand`, or the `gpuNodes.capacityReservation` they target
    (planning/reservation.py); None in records written before it was kept (On-Demand then)."""
    model_bucket: str | None = None
    """The name of the model cache bucket the stack creates when it owns one (planning/model_cache.py),
    chosen on its first `up`; None in records written before it was kept (`legacy_bucket`'s then)."""

    @classmethod
    def from_tags(cls, tags: Mapping[str, str]) -> StackRecord | None:
        zones = tuple(tags.get(TAG_ZONES, "").split())
        if not zones:
            return None
        return cls(
            zones=zones,
            gpu_zone=tags.get(TAG_GPU_ZONE) or None,
            creator=tags.get(TAG_CREATOR) or None,
            secrets_key=tags.get(TAG_SECRETS_KEY) or None,
            volume_key=tags.get(TAG_VOLUME_KEY) or None,
            gpu_subnet=tags.get(TAG_GPU_SUBNET) or None,
            installed=tuple(tags.get(TAG_INSTALLED, "").split()),
            gpu_capacity=tags.get(TAG_GPU_CAPACITY) or None,
            model_bucket=tags.get(TAG_MODEL_BUCKET) or None,
        )

    def tags(self, stack_id: str) -> dict[str, str]:
        tags = {TAG_STACK: stack_id, TAG_ZONES: " ".join(self.zones)}
        for key, value in (
            (TAG_GPU_ZONE, self.gpu_zone),
            (TAG_CREATOR, self.creator),
            (TAG_SECRETS_KEY, self.secrets_key),
            (TAG_VOLUME_KEY, self.volume_key),
            (TAG_GPU_SUBNET, self.gpu_subnet),
            (TAG_INSTALLED, " ".join(self.installed)),
            (TAG_GPU_CAPACITY, self.gpu_capacity),
            (TAG_MODEL_BUCKET, self.model_bucket),
        ):
            if value:
                tags[key] = value
        return tags


@dataclass(frozen=True)
class ZonePlan:
    cluster_zones: tuple[str, ...]
    """Zones of the cluster's subnets, sorted; at least two (EKS needs two)."""
    gpu_zone: str
    """The one zone of the GPU node group (one of `cluster_zones`)."""
    warnings: tuple[str, ...] = field(default=())


def _gpu_types(settings: Settings) -> str:
    """The GPU type, or each side's, as a message names them (every zone must offer them all)."""
    types = gpu_instance_types(settings)
    return types if isinstance(types, str) else " and ".join(types)


def _keys(settings: Settings, name: str, value: str | None = None) -> str:
    """`gpuNodes.<name>`, or where the sides have their own groups, each own section's (only those set
    to `value`, where one is given and set)."""
    if not split(settings):
        return f"{PROJECT}:gpuNodes.{name}"
    sides = all_side_nodes(settings)
    given = [s for s in sides if value and s.config.availability_zone == value]
    return " and ".join(dict.fromkeys(f"{PROJECT}:{s.section}.{name}" for s in given or sides))


def plan_zones(
    settings: Settings, offered_zones: Iterable[str], record: StackRecord | None = None
) -> ZonePlan:
    """Zones from the stack file, else from the stack's record, else (day one) the first zones that
    offer the GPU type. Raises ConfigError when the GPU zone cannot host the GPU type."""
    offered = sorted(set(offered_zones))
    instance = _gpu_types(settings)
    problems: list[str] = []
    warnings: list[str] = []
    configured = settings.network.availability_zones
    recorded = record.zones if record else ()
    if configured:
        zones = sorted(configured)
        new = [z for z in zones if z not in recorded and z not in offered]
        if new:
            problems.append(
                f"{PROJECT}:network.availabilityZones: {new} do not offer {instance}; "
                f"zones that do: {offered or 'none'}"
            )
        if recorded and set(recorded) != set(zones):
            warnings.append(
                f"{PROJECT}:network.availabilityZones {zones} differ from the zones this stack runs in "
                f"{list(recorded)}: subnets are added or removed accordingly"
            )
    elif recorded:
        zones = sorted(recorded)
    else:
        # Day one: the zones that offer the type, the GPU nodes' own first where it is set (by the stack
        # file or a reservation's zone), so it is among them.
        wanted = gpu_zone_setting(settings)
        first = [wanted] if wanted in offered else []
        zones = sorted(
            [*first, *(z for z in offered if z != wanted)][: settings.network.max_availability_zones]
        )
        if len(zones) < 2:
            problems.append(
                f"{_keys(settings, 'instanceType')}: {instance} in {settings.region} is offered in "
                f"{len(zones)} zone(s) ({offered or 'none'}); EKS needs subnets in two. Pick another "
                "region or type."
            )
    if problems:
        raise ConfigError(problems)
    gone = [z for z in zones if z in recorded and z not in offered]
    gpu_zone = _gpu_zone(settings, zones, offered, record)
    if [z for z in gone if z != gpu_zone]:
        warnings.append(
            f"zones {[z for z in gone if z != gpu_zone]} of this stack no longer offer {instance}; only "
            "system nodes run there, so nothing changes"
        )
    return ZonePlan(cluster_zones=tuple(zones), gpu_zone=gpu_zone, warnings=tuple(warnings))


def _gpu_zone(settings: Settings, zones: list[str], offered: list[str], record: StackRecord | None) -> str:
    instance = _gpu_types(settings)
    usable = [z for z in zones if z in offered]
    configured = gpu_zone_setting(settings)
    key = _keys(settings, "availabilityZone", configured)
    if configured:
        if configured not in offered:
            problem = f"{key}: {configured} does not offer {instance}; zones that do: {offered or 'none'}"
        elif configured not in zones:
            problem = f"{key}: {configured} is not among the cluster's zones {zones}"
            reserved = [s.section for s in all_side_nodes(settings) if s.config.capacity_reservation]
            if settings.gpu_nodes.capacity_reservation or (split(settings) and reserved):
                section = reserved[0] if split(settings) else "gpuNodes"
                problem = (
                    f"{PROJECT}:{section}.capacityReservation: the reservation is in {configured}, which is "
                    f"not among the cluster's zones {zones}: add it to {PROJECT}:network.availabilityZones "
                    "(a subnet there; nothing else moves)"
                )
        else:
            return configured
        raise ConfigError([problem])
    recorded = record.gpu_zone if record else None
    if recorded and recorded in zones:
        if recorded in offered:
            return recorded
        raise ConfigError(
            [
                f"{key}: {recorded}, where this stack's GPU nodes run, no longer offers {instance} "
                f"(zones that do: {offered or 'none'}). Moving them replaces the GPU node group: set "
                f"{key} to one of {usable or 'none of the cluster zones'}, or pick another "
                f"{_keys(settings, 'instanceType')}"
            ]
        )
    if not usable:
        raise ConfigError([f"{key}: none of the cluster's zones {zones} offers {instance}"])
    return usable[0]


@dataclass(frozen=True)
class SubnetPlan:
    zone: str
    private_cidr: str
    public_cidr: str


def zone_slot(zone: str) -> int:
    """a -> 0, b -> 1, ...: the block of the VPC a zone's subnets always get."""
    slot = ord(zone[-1]) - ord("a")
    if not 0 <= slot < ZONE_SLOTS:
        raise ValueError(f"zone {zone}: the subnet layout has room for zones a to g")
    return slot


def plan_subnets(vpc_cidr: IPv4Network, zones: Iterable[str]) -> list[SubnetPlan]:
    """The VPC in eighths: zone a's private subnet is the first eighth, b's the second, ... g's the
    seventh, whatever other zones exist; public subnets (NAT gateways, internet-facing load balancers)
    are /28-or-larger slices of the eighth eighth, by the same letter."""
    eighths = list(vpc_cidr.subnets(prefixlen_diff=3))
    public = list(eighths[7].subnets(new_prefix=min(vpc_cidr.prefixlen + 8, 28)))
    return [
        SubnetPlan(
            zone=zone, private_cidr=str(eighths[zone_slot(zone)]), public_cidr=str(public[zone_slot(zone)])
        )
        for zone in zones
    ]
