"""Where the stack's subnets and GPU nodes go, decided from "which zones of this region offer the GPU
instance type" (EC2 instance-type offerings), and how the VPC's range is cut into subnets there.

EFA traffic does not cross availability zones, so the GPU node group lives in exactly one zone; the
cluster's subnets span only zones that offer the GPU type, so the node group can always be placed.

Subnet layout (`plan_subnets`): the VPC is cut into four quarters; each cluster zone gets one whole
quarter as its private subnet (the VPC CNI gives every pod a VPC address there, so it must be
large), and the public subnets, which hold only NAT gateways, are small slices of the last quarter.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from ipaddress import IPv4Network

from config import PROJECT, ConfigError, Settings


@dataclass(frozen=True)
class ZonePlan:
    cluster_zones: tuple[str, ...]
    """Zones of the cluster's subnets, sorted; at least two (EKS needs two)."""
    gpu_zone: str
    """The one zone of the GPU node group (one of `cluster_zones`)."""


def plan_zones(settings: Settings, offered_zones: Iterable[str]) -> ZonePlan:
    offered = sorted(set(offered_zones))
    instance = settings.gpu_nodes.instance_type
    where = f"{instance} in {settings.region}"
    problems: list[str] = []
    configured = settings.network.availability_zones
    if configured:
        missing = [z for z in configured if z not in offered]
        if missing:
            problems.append(
                f"{PROJECT}:network.availabilityZones: {missing} do not offer {instance}; "
                f"zones that do: {offered or 'none'}"
            )
        zones = sorted(configured)
    else:
        zones = offered[: settings.network.max_availability_zones]
        if len(zones) < 2:
            problems.append(
                f"{PROJECT}:gpuNodes.instanceType: {where} is offered in {len(zones)} zone(s) "
                f"({offered or 'none'}); EKS needs subnets in two. Pick another region or type."
            )
    gpu_zone = settings.gpu_nodes.availability_zone
    if gpu_zone and gpu_zone not in offered:
        problems.append(
            f"{PROJECT}:gpuNodes.availabilityZone: {gpu_zone} does not offer {instance}; "
            f"zones that do: {offered or 'none'}"
        )
    elif gpu_zone and gpu_zone not in zones:
        problems.append(
            f"{PROJECT}:gpuNodes.availabilityZone: {gpu_zone} is not among the cluster's zones {zones}"
        )
    if problems:
        raise ConfigError(problems)
    return ZonePlan(cluster_zones=tuple(zones), gpu_zone=gpu_zone or zones[0])


@dataclass(frozen=True)
class SubnetPlan:
    zone: str
    private_cidr: str
    public_cidr: str


def plan_subnets(vpc_cidr: IPv4Network, zones: tuple[str, ...]) -> list[SubnetPlan]:
    """Private: the first quarters of the VPC, one per zone. Public: /28-or-larger slices of the
    last quarter (a NAT gateway needs a handful of addresses, not thousands)."""
    if len(zones) > 3:
        raise ValueError(f"at most three zones fit the subnet layout, got {list(zones)}")
    quarters = list(vpc_cidr.subnets(prefixlen_diff=2))
    public_prefix = min(vpc_cidr.prefixlen + 8, 28)
    public = list(quarters[3].subnets(new_prefix=public_prefix))
    return [
        SubnetPlan(zone=zone, private_cidr=str(quarters[i]), public_cidr=str(public[i]))
        for i, zone in enumerate(zones)
    ]
