"""The checks that need an answer from AWS, still before any resource: where the stack's subnets and
GPU nodes go, decided from "which zones of this region offer the GPU instance type" (EC2
instance-type offerings), and whether an extra cluster admin is the deployer itself (STS).

EFA traffic does not cross availability zones, so the GPU node group lives in exactly one zone; the
cluster's subnets span only zones that offer the GPU type, so the node group can always be placed.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from config.settings import ConfigError, Settings


@dataclass(frozen=True)
class Placement:
    cluster_zones: tuple[str, ...]
    """Zones of the cluster's subnets, sorted; at least two (EKS needs two)."""
    gpu_zone: str
    """The one zone of the GPU node group (one of `cluster_zones`)."""


def choose_placement(settings: Settings, offered_zones: Iterable[str]) -> Placement:
    offered = sorted(set(offered_zones))
    instance = settings.gpu_nodes.instance_type
    where = f"{instance} in {settings.region}"
    problems: list[str] = []
    configured = settings.network.availability_zones
    if configured:
        missing = [z for z in configured if z not in offered]
        if missing:
            problems.append(
                f"ray-llm-eks:network.availabilityZones: {missing} do not offer {instance}; "
                f"zones that do: {offered or 'none'}"
            )
        zones = sorted(configured)
    else:
        zones = offered[: settings.network.max_availability_zones]
        if len(zones) < 2:
            problems.append(
                f"ray-llm-eks:gpuNodes.instanceType: {where} is offered in {len(zones)} zone(s) "
                f"({offered or 'none'}); EKS needs subnets in two. Pick another region or type."
            )
    gpu_zone = settings.gpu_nodes.availability_zone
    if gpu_zone and gpu_zone not in offered:
        problems.append(
            f"ray-llm-eks:gpuNodes.availabilityZone: {gpu_zone} does not offer {instance}; "
            f"zones that do: {offered or 'none'}"
        )
    elif gpu_zone and gpu_zone not in zones:
        problems.append(
            f"ray-llm-eks:gpuNodes.availabilityZone: {gpu_zone} is not among the cluster's zones {zones}"
        )
    if problems:
        raise ConfigError(problems)
    return Placement(cluster_zones=tuple(zones), gpu_zone=gpu_zone or zones[0])


def deployer_role_arn(caller_arn: str) -> str:
    """The IAM principal behind STS's caller ARN: an assumed role's session ARN
    (`arn:aws:sts::123:assumed-role/Name/session`) names the role `arn:aws:iam::123:role/Name`."""
    _, partition, service, _, account, resource = caller_arn.split(":", 5)
    if service == "sts" and resource.startswith("assumed-role/"):
        return f"arn:{partition}:iam::{account}:role/{resource.split('/')[1]}"
    return caller_arn


def _role_key(arn: str) -> tuple[str, str] | None:
    """(account, role name) of a role ARN; STS session ARNs drop the role's path, so compare these."""
    if ":role/" not in arn:
        return None
    return arn.split(":")[4], arn.rsplit("/", 1)[-1]


def check_admins(settings: Settings, caller_arn: str) -> None:
    """EKS already makes whoever creates the cluster an admin (pulumi-eks sets
    bootstrapClusterCreatorAdminPermissions); a second access entry for the same principal fails at
    `up` with ResourceInUseException, so it is refused here."""
    deployer = deployer_role_arn(caller_arn)
    duplicates = [
        arn
        for arn in settings.cluster.admin_principal_arns
        if arn == deployer or (_role_key(arn) is not None and _role_key(arn) == _role_key(deployer))
    ]
    if duplicates:
        raise ConfigError(
            [
                f"ray-llm-eks:cluster.adminPrincipalArns: {duplicates} is the identity running Pulumi "
                f"({caller_arn}), which EKS already makes cluster admin; a second access entry for it "
                "fails, so remove it"
            ]
        )
