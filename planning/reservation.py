"""Reserved GPU capacity (`gpuNodes.capacityReservation`): an EC2 Capacity Block for ML or On-Demand
Capacity Reservations, as EC2 describes them (DescribeCapacityReservations), and what the GPU node group
does with them. `plan_capacity` refuses, before any resource, whatever cannot work, saying what to do.

What it rests on (read in EKS's and EC2's documentation; docs/design.md "Reserved GPU capacity"):
- A managed node group on a Capacity Block has capacity type CAPACITY_BLOCK and a launch template with
  market type `capacity-block`, the block's ID as its reservation target and the instance type (then the
  group names none); EKS rejects it otherwise. Its subnets must be in the block's zone. EKS scales the
  group to 0 forty minutes before the block ends; EC2 stops the instances 30 minutes before.
- A launch that targets a reservation runs in it or fails: with no room left it never falls back to
  On-Demand. So every GPU node the group may have (maxSize) must fit in the reservation.
- Capacity Blocks are placed in EC2 UltraClusters; a cluster placement group on top only adds
  insufficient-capacity errors (AWS ParallelCluster refuses the combination). An On-Demand Capacity
  Reservation made in a cluster placement group serves launches into that group; one made outside any
  serves none of ours, and EC2 cannot move a reservation into a group afterwards.
- A reservation that has not started has no capacity ("before a Capacity Block begins, the available
  capacity appears as zero"): no node launches until it does.
- Billing: an On-Demand Capacity Reservation at the On-Demand rate for every reserved instance, used or
  not; a Capacity Block up front at purchase (no API shows its price afterwards).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from config import PROJECT, ConfigError, Settings
from config.cluster import GpuNodesConfig
from config.sides import all_side_nodes, split

KEY = f"{PROJECT}:gpuNodes.capacityReservation"
BLOCK = "capacity-block"
LINUX = "Linux/UNIX"
NOT_STARTED = frozenset({"scheduled", "payment-pending", "pending", "assessing", "delayed"})
"""States of a reservation that may still become active (EC2's CapacityReservationState)."""
ENDING_SOON = timedelta(hours=24)
"""A reservation ending within this is a preview warning."""
EKS_SCALES_DOWN_BEFORE_END = timedelta(minutes=40)
"""EKS's own scheduled action empties a Capacity Block's node group this long before the block ends."""


@dataclass(frozen=True)
class Reservation:
    """One capacity reservation, as DescribeCapacityReservations gives it."""

    id: str
    kind: str
    """`capacity-block` or `default` (an On-Demand Capacity Reservation)."""
    instance_type: str
    zone: str
    total: int
    available: int
    state: str
    start: datetime | None
    end: datetime | None
    """None: no end date (EndDateType `unlimited`)."""
    platform: str = LINUX
    tenancy: str = "default"
    placement_group: str | None = None
    """The name of the cluster placement group it was made in, if any."""
    match_criteria: str = "targeted"
    """`open`: any instance of its type, zone and platform in the account runs in it without asking;
    `targeted`: only launches that name it (EC2's InstanceMatchCriteria)."""

    @property
    def used(self) -> int:
        """Instances running in it now (the stack's own GPU nodes among them, once they run)."""
        return max(0, self.total - self.available)

    @classmethod
    def from_api(cls, item: Mapping[str, Any]) -> Reservation:
        group_arn = item.get("PlacementGroupArn") or ""
        return cls(
            id=item["CapacityReservationId"],
            kind=item.get("ReservationType") or "default",
            instance_type=item["InstanceType"],
            zone=item["AvailabilityZone"],
            total=int(item.get("TotalInstanceCount") or 0),
            available=int(item.get("AvailableInstanceCount") or 0),
            state=item["State"],
            start=_timestamp(item.get("StartDate")),
            end=_timestamp(item.get("EndDate")) if item.get("EndDateType") != "unlimited" else None,
            platform=item.get("InstancePlatform") or LINUX,
            tenancy=item.get("Tenancy") or "default",
            placement_group=group_arn.rsplit("/", 1)[-1] or None,
            match_criteria=item.get("InstanceMatchCriteria") or "targeted",
        )

    @property
    def block(self) -> bool:
        return self.kind == BLOCK


def _timestamp(value: str | None) -> datetime | None:
    if not value:
        return None
    parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


@dataclass(frozen=True)
class CapacityPlan:
    """The reservation the GPU node group targets, and what preview says about it."""

    reference: str
    """`gpuNodes.capacityReservation` as given: a reservation's ID or a resource group's ARN."""
    reservations: tuple[Reservation, ...]
    placement_group: str | None
    """The cluster placement group the nodes launch into: the reservation's, or none."""
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()
    section: str = "gpuNodes"
    """The stack-file section whose `capacityReservation` named it: `gpuNodes`, or a side's own
    (`prefillNodes`, `decodeNodes`: config/sides.py)."""

    @property
    def block(self) -> bool:
        return self.reservations[0].block

    @property
    def instance_type(self) -> str:
        return self.reservations[0].instance_type

    @property
    def zone(self) -> str:
        return self.reservations[0].zone

    @property
    def total(self) -> int:
        return sum(r.total for r in self.reservations)

    @property
    def ends(self) -> datetime | None:
        """When the first of them ends (None: none ends)."""
        return min((r.end for r in self.reservations if r.end), default=None)

    @property
    def capacity_type(self) -> str:
        """The node group's capacity type (EKS's)."""
        return "CAPACITY_BLOCK" if self.block else "ON_DEMAND"

    @property
    def group(self) -> bool:
        """A resource group of reservations rather than one reservation."""
        return self.reference.startswith("arn:")

    @property
    def what(self) -> str:
        kind = "Capacity Block" if self.block else "On-Demand Capacity Reservation"
        if self.group:
            ids = ", ".join(r.id for r in self.reservations)
            return f"resource group {group_name(self.reference)} ({kind}s {ids})"
        return f"{kind} {self.reference}"

    def record(self) -> str:
        """What the stack keeps of it (planning/zones.py StackRecord.gpu_capacity)."""
        return self.reference


ON_DEMAND = "on-demand"
"""The record of a GPU node group on no reservation."""


def on_reservation(
    settings: Settings, reservations: Sequence[Reservation] | None, now: datetime
) -> tuple[Settings, CapacityPlan | None]:
    """The reservation the GPU nodes run on (None: On-Demand), planned, and the settings with the GPU
    zone pinned to its zone; the settings as they are without one."""
    if reservations is None:
        return settings, None
    capacity = plan_capacity(settings, reservations, now)
    gpu = settings.gpu_nodes.model_copy(update={"availability_zone": capacity.zone})
    return settings.model_copy(update={"gpu_nodes": gpu}), capacity


def key_of(section: str) -> str:
    """The key of a section's reservation: `gpuNodes.capacityReservation` or a side's own."""
    return f"{PROJECT}:{section}.capacityReservation"


def nodes_of(settings: Settings, section: str) -> GpuNodesConfig:
    """The GPU nodes' config of a section (`gpuNodes`, `prefillNodes`, `decodeNodes`)."""
    config = getattr(settings, SECTION_FIELDS[section])
    assert config is not None
    return config


SECTION_FIELDS = {"gpuNodes": "gpu_nodes", "prefillNodes": "prefill_nodes", "decodeNodes": "decode_nodes"}
"""The Settings field of each section of GPU nodes."""


def plan_capacity(
    settings: Settings, reservations: Sequence[Reservation], now: datetime, section: str = "gpuNodes"
) -> CapacityPlan:
    """Whether the GPU node group of `section` can run on `reservations` (what its
    `capacityReservation` names); ConfigError with every reason it cannot."""
    key = key_of(section)
    gpu = nodes_of(settings, section)
    reference = gpu.capacity_reservation
    assert reference
    parked = settings.autoscaling.parked
    if not reservations:
        raise ConfigError([f"{key}: resource group {reference} holds no capacity reservations"])
    problems: list[str] = []
    warnings: list[str] = []
    notes: list[str] = []
    if reference.startswith("arn:"):
        blocks = [r.id for r in reservations if r.block]
        if blocks:
            problems.append(
                f"{key}: resource group {reference} holds Capacity Blocks ({', '.join(blocks)}); EKS runs a "
                "node group on one block, named by its ID: set the block's ID"
            )
        for attribute, what in (("instance_type", "instance types"), ("zone", "zones")):
            found = sorted({getattr(r, attribute) for r in reservations})
            if len(found) > 1:
                problems.append(
                    f"{key}: the reservations of resource group {reference} are in several {what} "
                    f"({', '.join(found)}); the GPU nodes are one type in one zone: group only those"
                )
        if problems:
            raise ConfigError(problems)
    first = reservations[0]
    name = reference if not reference.startswith("arn:") else f"resource group {reference}"
    if first.instance_type != gpu.instance_type:
        problems.append(
            f"{key}: {name} reserves {first.instance_type}, not {PROJECT}:{section}.instanceType "
            f"{gpu.instance_type}: set {section}.instanceType: {first.instance_type}, or name a reservation "
            f"of {gpu.instance_type}"
        )
    for r in reservations:
        if r.platform != LINUX:
            problems.append(f"{key}: {r.id} reserves {r.platform} instances; the GPU nodes run {LINUX}")
        if r.tenancy != "default":
            problems.append(
                f"{key}: {r.id} reserves {r.tenancy} tenancy; the GPU nodes launch with default tenancy"
            )
    if gpu.availability_zone and gpu.availability_zone != first.zone:
        problems.append(
            f"{key}: {name} is in {first.zone}, not {PROJECT}:{section}.availabilityZone "
            f"{gpu.availability_zone}: remove {section}.availabilityZone (the reservation's zone is used)"
        )
    total = sum(r.total for r in reservations)
    for size, value in (("desiredSize", gpu.desired_size), ("maxSize", gpu.max_size)):
        if value > total:
            problems.append(
                f"{key}: {name} reserves {total} x {first.instance_type}, fewer than "
                f"{PROJECT}:{section}.{size} {value}; the GPU nodes launch with "
                "`capacity-reservations-only`, never on On-Demand, so the nodes beyond it would never start: "
                f"set {section}.{size} to at "
                f"most {total}, or reserve more"
            )
    warnings += _sharing_warnings(reservations, name, gpu.desired_size, parked, section)
    for r in reservations:
        problems += _state_problems(r, parked, gpu.desired_size, now, notes, section)
    placement = _placement_group(reservations, problems, warnings, key)
    if problems:
        raise ConfigError(problems)
    plan = CapacityPlan(reference, tuple(reservations), placement, section=section)
    ends = plan.ends
    if ends and now < ends <= now + ENDING_SOON:
        warnings.append(_ending(plan, ends, now))
    notes.insert(0, coverage(plan, settings, now))
    if plan.block:
        notes.append(
            f"{plan.what}: EKS updates a node group on a block only at desired size 0, so before an up that "
            "rolls the GPU nodes (an AMI release, the Kubernetes version, the disk size) park the stack "
            "(autoscaling.parked: true), then unpark"
        )
    return CapacityPlan(reference, tuple(reservations), placement, tuple(notes), tuple(warnings), section)


def _sharing_warnings(
    reservations: Sequence[Reservation], name: str, desired: int, parked: bool, section: str
) -> list[str]:
    """What other instances take of the reservation: an `open` one serves any matching instance of the
    account, and whatever runs in it now leaves the rest free (`AvailableInstanceCount`)."""
    key = key_of(section)
    warnings = []
    for r in reservations:
        if r.match_criteria == "open" and not r.block:
            warnings.append(
                f"{key}: {r.id} is open (InstanceMatchCriteria): any {r.instance_type} the account runs in "
                f"{r.zone} without naming a reservation lands in it and takes a GPU node's place. Make it "
                f"targeted, so only launches that name it use it: `aws ec2 modify-capacity-reservation "
                f"--capacity-reservation-id {r.id} --instance-match-criteria targeted`"
            )
    active = [r for r in reservations if r.state == "active"]
    free, used = sum(r.available for r in active), sum(r.used for r in active)
    if active and used and not parked and desired > free:
        warnings.append(
            f"{key}: {name} has {free} of {sum(r.total for r in active)} reserved instance(s) free now; "
            f"{used} run in it already (this stack's GPU nodes, if they run, and any other instance that "
            f"uses it). Until desiredSize {desired} fit, the launches beyond the free capacity fail (the "
            f"GPU nodes never run On-Demand): free it, or lower {section}.desiredSize"
        )
    return warnings


def _state_problems(
    r: Reservation, parked: bool, desired: int, now: datetime, notes: list[str], section: str
) -> list[str]:
    key = key_of(section)
    kind = "Capacity Block" if r.block else "capacity reservation"
    if r.state == "active":
        return []
    if r.state in NOT_STARTED:
        starts = f" starts {_when(r.start, now)}" if r.start else ""
        if parked and desired:
            # The group would be created asking for nodes that cannot launch yet.
            return [
                f"{key}: {kind} {r.id} is {r.state}{starts and ','}{starts}; parked until then, the GPU node "
                f"group must start empty: set {PROJECT}:{section}.desiredSize: 0 (Cluster Autoscaler adds "
                "the nodes once the stack is unparked)"
            ]
        if parked:
            notes.append(
                f"{r.id} is {r.state}:{starts or ' not active yet'}; the stack is parked until then: set "
                "autoscaling.parked: false and `pulumi up` once it is active"
            )
            return []
        return [
            f"{key}: {kind} {r.id} is {r.state} and has no capacity yet{starts and ','}{starts}; no GPU node "
            f"can launch before that. Set autoscaling.parked: true (and {section}.minSize: 0) to deploy "
            "everything else now, and false once it is active"
        ]
    ended = f" (it ended {_when(r.end, now)})" if r.end and r.state == "expired" else ""
    return [
        f"{key}: {kind} {r.id} is {r.state}{ended}, so no node can run on it: name a reservation that is "
        f"active or scheduled, or remove {section}.capacityReservation to run On-Demand"
    ]


def _placement_group(
    reservations: Sequence[Reservation], problems: list[str], warnings: list[str], key: str
) -> str | None:
    if reservations[0].block:
        return None  # placed in an UltraCluster; a cluster placement group only adds capacity errors
    groups = sorted({r.placement_group or "" for r in reservations})
    if len(groups) > 1:
        problems.append(
            f"{key}: the reservations are in different placement groups "
            f"({', '.join(g or 'none' for g in groups)}); the GPU nodes launch into one"
        )
        return None
    if not groups[0]:
        warnings.append(
            f"{key}: {', '.join(r.id for r in reservations)} was not made in a cluster placement group, so "
            "the GPU nodes launch into none (a group of the stack's own would find no reserved room in it): "
            "EFA works across the zone, with more latency between the nodes. EC2 cannot move a reservation "
            "into a placement group; a new one made in a cluster placement group gets it"
        )
    return groups[0] or None


def coverage(
    plan: CapacityPlan, settings: Settings, now: datetime, sections: Sequence[str] | None = None
) -> str:
    """How many GPU nodes run on the reservation, how many of it stay idle, what it costs, when it ends
    (with each side's own section's, the line names the section). `sections`: the sections whose
    nodes all run on it (both sides on one reservation), counted together."""
    configs = [nodes_of(settings, section) for section in sections or [plan.section]]
    gpu = configs[0].model_copy(
        update={
            "desired_size": sum(c.desired_size for c in configs),
            "max_size": sum(c.max_size for c in configs),
        }
    )
    running = 0 if settings.autoscaling.parked else gpu.desired_size
    others = max(0, sum(r.used for r in plan.reservations if r.state == "active") - running)
    idle = max(0, plan.total - running - others)
    window = (
        f"{_day(plan.reservations[0].start)} to {_day(plan.ends)} ({_left(plan.ends, now)})"
        if plan.ends
        else "no end date"
    )
    billing = (
        "paid up front at purchase, used or not"
        if plan.block
        else f"billed at the On-Demand rate for all {plan.total}, used or not"
    )
    parked = settings.autoscaling.parked
    running_text = "parked: no GPU node runs on it" if parked else f"{running} GPU node(s) run on it"
    taken = f", {others} taken by other instances" if others else ""
    return (
        f"GPU capacity{_of(plan, sections)}: {plan.what}: {plan.total} x {plan.instance_type} in "
        f"{plan.zone}, {window}; "
        f"{running_text}{taken}, {idle} reserved stay idle, none On-Demand (up to {gpu.max_size} at "
        f"maxSize, all on it: the launch template says capacity-reservations-only); {billing}"
    )


def _of(plan: CapacityPlan, sections: Sequence[str] | None = None) -> str:
    if sections:
        return f" ({' and '.join(sections)})"
    return "" if plan.section == "gpuNodes" else f" ({plan.section})"


def _ending(plan: CapacityPlan, ends: datetime, now: datetime) -> str:
    key, section = key_of(plan.section), plan.section
    if plan.block:
        return (
            f"{key}: {plan.what} ends {_when(ends, now)}: EKS scales the GPU nodes to 0 forty minutes "
            "before and EC2 stops them 30 minutes before, so serving stops. Extend the block (`aws ec2 "
            "purchase-capacity-block-extension`) or move to other capacity before then"
        )
    return (
        f"{key}: {plan.what} ends {_when(ends, now)}: running nodes go on On-Demand, but a launch that "
        "targets it fails after that (a replaced or added GPU node would not start): extend it or remove "
        f"{section}.capacityReservation"
    )


def _day(when: datetime | None) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC") if when else "?"


def _left(until: datetime | None, now: datetime) -> str:
    if until is None:
        return "no end"
    seconds = (until - now).total_seconds()
    if seconds <= 0:
        return "ended"
    days, rest = divmod(int(seconds), 86400)
    return f"{days} d {rest // 3600} h left" if days else f"{rest // 3600} h {rest % 3600 // 60} min left"


def _when(when: datetime | None, now: datetime) -> str:
    if when is None:
        return "at an unknown time"
    if when <= now:
        return f"at {_day(when)}"
    return f"at {_day(when)} ({_left(when, now).removesuffix(' left')} from now)"


def group_name(arn: str) -> str:
    """A resource group's name from its ARN, `group/<name>` or `group/<name>/<id>`."""
    return arn.split(":group/", 1)[-1].split("/", 1)[0]


def reservations_from_api(answer: Mapping[str, Any]) -> list[Reservation]:
    """DescribeCapacityReservations' answer (`aws ec2 describe-capacity-reservations --output json`)."""
    return [Reservation.from_api(item) for item in answer.get("CapacityReservations") or []]


def reservation_ids(group_resources: Mapping[str, Any]) -> list[str]:
    """The capacity reservations of a resource group (`aws resource-groups list-group-resources`)."""
    found = []
    for item in group_resources.get("Resources") or group_resources.get("ResourceIdentifiers") or []:
        arn = (item.get("Identifier") or item).get("ResourceArn", "")
        if ":capacity-reservation/" in arn:
            found.append(arn.rsplit("/", 1)[-1])
    return sorted(found)


def capacity_record(settings: Settings) -> str:
    """What the stack keeps of its GPU capacity (planning/zones.py StackRecord.gpu_capacity): `on-demand`,
    the `gpuNodes.capacityReservation` its nodes target, or where each side has nodes of its own and one
    of them is reserved, each side's (`prefill=<reference> decode=on-demand`)."""
    if not split(settings):
        return settings.gpu_nodes.capacity_reservation or ON_DEMAND
    sides = all_side_nodes(settings)
    if not any(nodes.config.capacity_reservation for nodes in sides):
        return ON_DEMAND
    return " ".join(f"{nodes.side}={nodes.config.capacity_reservation or ON_DEMAND}" for nodes in sides)


def capacity_change_warnings(settings: Settings, recorded: str | None) -> tuple[str, ...]:
    """A warning when the GPU nodes move on, off or between reservations: their node group is replaced,
    or EKS rolls its nodes onto the new launch template."""
    now = capacity_record(settings)
    before = recorded or ON_DEMAND
    if before == now:
        return ()
    key = (
        ", ".join(dict.fromkeys(key_of(nodes.section) for nodes in all_side_nodes(settings)))
        if split(settings)
        else KEY
    )
    return (
        f"{key}: the GPU nodes run on {before}, this up moves them to {now}: they are replaced (a new node "
        "group, or EKS rolling the nodes onto the new launch template), so serving stops until new nodes "
        "serve; park first (autoscaling.parked) to do it at a quiet time",
    )
