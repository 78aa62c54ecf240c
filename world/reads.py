"""The one interface behind which every read of AWS and of a team's cluster sits (`World`), and what the
program makes of its answers before planning: the config key a refused read names, the cluster's
creator, the instance types of the stack file.

An implementation answers in planning's dataclasses and raises `UnreadableError` with AWS's own words when
AWS will not answer; the functions here turn that into the ConfigError that names the key behind the
read, so both implementations (world/aws.py, world/offline.py) fail the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from config import PROJECT, ConfigError, Settings
from config.sides import Side, all_side_nodes, gpu_instance_types
from planning import Plan
from planning.addons import Inventory
from planning.catalog import Ec2InstanceType
from planning.existing_cluster import ClusterDescription
from planning.model_cache import default_bucket, kept_bucket, legacy_bucket
from planning.reservation import KEY as RESERVATION_KEY
from planning.reservation import Reservation, key_of
from planning.where import Where, own_cluster, team_cluster
from planning.zones import StackRecord

EXISTING_CLUSTER_KEY = f"{PROJECT}:cluster.existingClusterName"


class UnreadableError(LookupError):
    """AWS refused or could not answer a read; the message is AWS's (or the CLI's) own."""


@dataclass(frozen=True)
class Caller:
    """Who runs the program, as STS GetCallerIdentity says."""

    account_id: str
    arn: str


class World(Protocol):
    """Everything the program reads before it registers a resource, in one region and as one identity
    (the AWS provider's: world/identity.py)."""

    region: str

    def caller(self) -> Caller: ...

    def now(self) -> datetime:
        """The clock reservations are planned against."""
        ...

    def zones_offering(self, instance_type: str) -> list[str]:
        """The region's zones that offer the type (EC2 DescribeInstanceTypeOfferings)."""
        ...

    def instance_type(self, name: str) -> Ec2InstanceType:
        """EC2's description of the type (DescribeInstanceTypes); UnreadableError when EC2 has none."""
        ...

    def stack_record(self, stack_id: str) -> StackRecord | None:
        """What the stack recorded on its own VPC when first deployed (None before that)."""
        ...

    def cluster_names(self) -> list[str]:
        """The region's EKS clusters."""
        ...

    def session_issuer(self, arn: str) -> str:
        """The IAM principal behind a caller ARN (an assumed role's session names its role)."""
        ...

    def existing_cluster(self, name: str) -> ClusterDescription:
        """A team's cluster as EKS and EC2 describe it; UnreadableError when there is none to read."""
        ...

    def existing_record(self, stack_id: str) -> StackRecord | None:
        """What an existing-cluster stack recorded on its own EFA security group (None before its first
        up)."""
        ...

    def access_entries(self, cluster_name: str, principals: Sequence[str], stack_id: str) -> list[str]:
        """Those of `principals` with an access entry on the cluster that the stack did not make."""
        ...

    def reservations(self, reference: str) -> list[Reservation]:
        """The capacity reservation `reference` names (an ID, or a resource group's ARN: its members);
        UnreadableError when EC2 does not describe it."""
        ...

    def inventory(self, cluster: ClusterDescription) -> Inventory | str:
        """What runs in a team's cluster, from its Kubernetes API; why not, as a string, when it cannot
        be read (no AWS CLI, no access entry)."""
        ...

    def stack_files(self, stack: str) -> Mapping[str, Mapping[str, Any]]:
        """The `config:` of the project's other stack files (to warn about names copied from one)."""
        ...


def instance_types(settings: Settings, world: World) -> dict[str, Ec2InstanceType]:
    """EC2's own description of the GPU and system types; a type EC2 does not describe is refused,
    naming the key that chose it."""
    keys = {
        **{
            s.config.instance_type: f"{PROJECT}:{s.section}.instanceType"
            for s in reversed(all_side_nodes(settings))
        },
        settings.system_nodes.instance_type: f"{PROJECT}:systemNodes.instanceType",
    }
    described = {}
    for name, key in keys.items():
        try:
            described[name] = world.instance_type(name)
        except UnreadableError as error:
            raise ConfigError([f"{key}: EC2 in {world.region} does not describe {name!r}: {error}"]) from None
    return described


def cluster_creator(world: World, record: StackRecord | None, cluster_name: str, caller_arn: str) -> str:
    """Who created the cluster: the record's once the cluster exists, else whoever runs Pulumi now."""
    if record and record.creator and cluster_name in world.cluster_names():
        return record.creator
    return world.session_issuer(caller_arn)


def existing_cluster(world: World, name: str) -> ClusterDescription:
    try:
        return world.existing_cluster(name)
    except UnreadableError as error:
        raise ConfigError(
            [
                f"{EXISTING_CLUSTER_KEY}: EKS in {world.region} has no cluster {name!r} this identity may "
                f"read: {error}"
            ]
        ) from None


def reserved(settings: Settings, world: World) -> list[Reservation] | None:
    """The reservations `gpuNodes.capacityReservation` names, None when it names none (On-Demand)."""
    reference = settings.gpu_nodes.capacity_reservation
    return reservations(world, reference) if reference else None


def reserved_by_side(settings: Settings, world: World) -> dict[Side, list[Reservation]]:
    """Where each side has GPU nodes of its own: the reservations each side's section's
    `capacityReservation` names, by side (a side on On-Demand is absent)."""
    return {
        nodes.side: reservations(world, reference, key_of(nodes.section))
        for nodes in all_side_nodes(settings)
        if (reference := nodes.config.capacity_reservation)
    }


def reservations(world: World, reference: str, key: str = RESERVATION_KEY) -> list[Reservation]:
    try:
        return world.reservations(reference)
    except UnreadableError as error:
        raise ConfigError([f"{key}: EC2 in {world.region} does not describe {reference}: {error}"]) from None


def record_of(found: Sequence[str], what: str, stack_id: str, tags_of: Any) -> StackRecord | None:
    """The record on the one resource tagged with the stack (`tags_of(id)` reads its tags), None when
    there is none; more than one is refused, naming them."""
    from planning.zones import TAG_STACK

    if len(found) > 1:
        raise ConfigError(
            [f"{what} {sorted(found)} all carry {TAG_STACK}={stack_id}; remove the tag from all but one"]
        )
    return StackRecord.from_tags(tags_of(found[0])) if found else None


def where_it_serves(
    settings: Settings,
    plan: Plan,
    stack_id: str,
    world: World,
    caller: Caller,
    own_namespaces: Mapping[str, str],
) -> Where:
    """Its own VPC and cluster, or a team's: what the world says, as planning/where.py decides it.
    `own_namespaces`: where the stack's own add-ons run (manifests/addons.py)."""
    types = gpu_instance_types(settings)
    # Both sides' nodes live in one zone: it must offer every side's type.
    offered = (
        world.zones_offering(types)
        if isinstance(types, str)
        else sorted(set.intersection(*(set(world.zones_offering(t)) for t in types)))
    )
    name = settings.cluster.existing_cluster_name
    stack = stack_id.removeprefix(f"{PROJECT}/")

    def model_bucket(record: StackRecord | None) -> str:
        fresh = default_bucket(
            stack, plan.cluster_name, settings.serving.namespace, caller.account_id, settings.region
        )
        legacy = legacy_bucket(plan.cluster_name, caller.account_id, settings.region)
        return kept_bucket(record.model_bucket if record else None, record is not None, fresh, legacy)

    if name:
        cluster = existing_cluster(world, name)
        listed = settings.cluster
        # Every list planning/access.py gives an entry: EKS refuses a second one for a principal.
        principals = (
            *listed.admin_principal_arns,
            *listed.viewer_principal_arns,
            *listed.refresh_principal_arns,
        )
        record = world.existing_record(stack_id)
        return team_cluster(
            settings,
            cluster=cluster,
            record=record,
            offered=offered,
            inventory=world.inventory(cluster),
            own_namespaces=own_namespaces,
            team_entries=world.access_entries(cluster.name, principals, stack_id),
            model_bucket=model_bucket(record),
        )
    record = world.stack_record(stack_id)
    creator = cluster_creator(world, record, plan.cluster_name, caller.arn)
    return own_cluster(
        settings,
        plan,
        stack_id,
        record=record,
        offered=offered,
        creator=creator,
        model_bucket=model_bucket(record),
    )
