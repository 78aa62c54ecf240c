"""Reserved GPU capacity per side (`prefillNodes.capacityReservation`, `decodeNodes.capacityReservation`,
or `gpuNodes.capacityReservation` for a side that runs on `gpuNodes`' group): each side's reservation
is planned as the shared group's is (planning/reservation.py `plan_capacity`, under its own key), and
then the two sides must still be one EFA network on one spine:

- one availability zone: EFA does not cross zones, and a reservation pins its side to its zone, so the
  two sides' reservations (or one's, and the other side's `availabilityZone`) must agree;
- one cluster placement group: an On-Demand Capacity Reservation made in a cluster placement group
  serves only launches into that group, so the other side's nodes launch into that group too (On-Demand
  into the same group, or on a reservation made in it). A Capacity Block takes no placement group (EC2
  places it in an UltraCluster), and a reservation made outside any group leaves its nodes in none:
  nothing then puts the other side's nodes beside them, so that is refused unless both sides run on
  the very same reservation (one instance type), which places them together.

`on_side_reservations` refuses, naming the keys, whatever breaks that, before any resource
(docs/design.md "Reserved GPU capacity per side")."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import datetime

from config import PROJECT, ConfigError, Settings
from config.sides import Side, SideNodes, all_side_nodes
from planning.reservation import (
    SECTION_FIELDS,
    CapacityPlan,
    Reservation,
    coverage,
    key_of,
    nodes_of,
    plan_capacity,
)


def on_side_reservations(
    settings: Settings, reserved: Mapping[Side, Sequence[Reservation]], now: datetime
) -> tuple[Settings, dict[Side, CapacityPlan]]:
    """Each reserved side's reservation planned (`reserved`: what its section's `capacityReservation`
    names, as EC2 describes it; a side absent runs On-Demand), and the settings with each reserved
    side's zone pinned to its reservation's. ConfigError with every reason it cannot work."""
    plans: dict[Side, CapacityPlan] = {}
    problems: list[str] = []
    for nodes in all_side_nodes(settings):
        found = reserved.get(nodes.side)
        if found is None:
            continue
        try:
            plans[nodes.side] = plan_capacity(settings, found, now, nodes.section)
        except ConfigError as error:
            problems += [p for p in error.problems if p not in problems]
    if problems:
        raise ConfigError(problems)
    problems = one_spine_problems(settings, plans)
    if problems:
        raise ConfigError(problems)
    pinned = {
        SECTION_FIELDS[plan.section]: nodes_of(settings, plan.section).model_copy(
            update={"availability_zone": plan.zone}
        )
        for plan in plans.values()
    }
    return settings.model_copy(update=pinned), _one_line_for_one_reservation(
        settings, _on_demand_beside(settings, plans), now
    )


def _one_line_for_one_reservation(
    settings: Settings, plans: dict[Side, CapacityPlan], now: datetime
) -> dict[Side, CapacityPlan]:
    """Both sides on one reservation: one coverage line counting both sides' nodes, on prefill's plan
    (each side's own would count the other's nodes as idle), and its notes and warnings once."""
    if len(plans) != 2 or len({p.reference for p in plans.values()}) != 1:
        return plans
    prefill, decode = plans["prefill"], plans["decode"]
    joint = coverage(prefill, settings, now, sections=[prefill.section, decode.section])
    notes = (joint, *(n for n in prefill.notes[1:]))
    return {
        "prefill": replace(prefill, notes=notes),
        "decode": replace(
            decode, notes=(), warnings=tuple(w for w in decode.warnings if w not in prefill.warnings)
        ),
    }


def _on_demand_beside(settings: Settings, plans: dict[Side, CapacityPlan]) -> dict[Side, CapacityPlan]:
    """The plans, the reserved side's warning that the On-Demand side launches into its reservation's
    placement group with no room held for it: EC2 recommends reserving the capacity of every instance
    launched into a cluster placement group in the group ("Placement group rules and limitations")."""
    if len(plans) != 1:
        return plans
    ((side, plan),) = plans.items()
    other = next(s for s in all_side_nodes(settings) if s.side != side)
    warning = (
        f"{key_of(other.section)} is unset: the {other.side} GPU nodes run On-Demand in cluster placement "
        f"group {plan.placement_group}, {plan.what}'s, so the KV path stays on one spine; nothing holds "
        f"room for them there, so a launch may fail with InsufficientInstanceCapacity until EC2 has "
        f"some: reserve {other.section}' nodes in that group too for a launch that cannot fail"
    )
    return {side: replace(plan, warnings=(*plan.warnings, warning))}


def shared_placement_group(plans: Mapping[Side, CapacityPlan]) -> str | None:
    """The cluster placement group both sides launch into where a side runs on a reservation (what
    `one_spine_problems` allowed): the reservation's; None where both run on one reservation made in
    none (a Capacity Block, or an On-Demand Capacity Reservation outside a group)."""
    return next(iter(plans.values())).placement_group


def one_spine_problems(settings: Settings, plans: Mapping[Side, CapacityPlan]) -> list[str]:
    """What keeps the two sides, one of them or both on a reservation (`plans`), from one zone and one
    placement group, each naming the keys involved."""
    if not plans:
        return []
    sides = all_side_nodes(settings)
    problems = _zone_problems(sides, plans)
    if len(plans) == 2 and len({p.reference for p in plans.values()}) == 1:
        return problems + _one_reservation_problems(sides, plans)
    for nodes in sides:
        plan = plans.get(nodes.side)
        if plan is None:
            continue
        other = next(s for s in sides if s.side != nodes.side)
        problem = _placement_problem(nodes, plan, other, plans.get(other.side))
        if problem:
            problems.append(problem)
    if not problems:
        groups = {nodes.section: plans[nodes.side].placement_group for nodes in sides if nodes.side in plans}
        if len(set(groups.values())) > 1:
            (first, one), (second, two) = sorted(groups.items())
            problems.append(
                f"{key_of(first)} is in cluster placement group {one} and {key_of(second)} in {two}: the "
                "two sides' GPU nodes must be in one cluster placement group, so the KV cache moves on one "
                "spine, and each reservation serves launches into its own group only; use reservations made "
                "in one cluster placement group"
            )
    return problems


def _where(nodes: SideNodes, plan: CapacityPlan | None) -> str:
    return f"on {plan.what}" if plan else f"On-Demand ({PROJECT}:{nodes.section})"


def _zone_problems(sides: Sequence[SideNodes], plans: Mapping[Side, CapacityPlan]) -> list[str]:
    """The sides' zones: each reserved side's reservation's, and an On-Demand side's `availabilityZone`
    where it sets one."""
    zones: dict[str, str] = {}
    for nodes in sides:
        plan = plans.get(nodes.side)
        if plan:
            zones[f"{key_of(nodes.section)} ({plan.what})"] = plan.zone
        elif nodes.config.availability_zone:
            zones[f"{PROJECT}:{nodes.section}.availabilityZone"] = nodes.config.availability_zone
    if len(set(zones.values())) < 2:
        return []
    named = " and ".join(f"{key} in {zone}" for key, zone in zones.items())
    return [
        f"{named}: the two sides in two availability zones, but EFA does not cross zones, so the KV cache "
        "could not move between them; reserve both sides in one zone, or leave the On-Demand side's "
        "availabilityZone out (it follows the reservation's)"
    ]


def _one_reservation_problems(sides: Sequence[SideNodes], plans: Mapping[Side, CapacityPlan]) -> list[str]:
    """Both sides on the very same reservation: together they must fit in it."""
    plan = next(iter(plans.values()))
    keys = " and ".join(key_of(nodes.section) for nodes in sides)
    problems = []
    for size, attribute in (("desiredSize", "desired_size"), ("maxSize", "max_size")):
        values = [(nodes.section, getattr(nodes.config, attribute)) for nodes in sides]
        together = sum(value for _, value in values)
        if together > plan.total:
            shown = " + ".join(f"{PROJECT}:{section}.{size} {value}" for section, value in values)
            problems.append(
                f"{keys}: both sides on {plan.what}, which reserves {plan.total} x {plan.instance_type}, "
                f"fewer than {shown} = {together}; the nodes beyond it would never start (never "
                "On-Demand): lower the sizes, or reserve more"
            )
    return problems


def _placement_problem(
    nodes: SideNodes, plan: CapacityPlan, other: SideNodes, other_plan: CapacityPlan | None
) -> str | None:
    """Why `nodes`' reservation cannot share a cluster placement group with the other side's nodes
    (None: it can: an On-Demand Capacity Reservation made in one)."""
    key = key_of(nodes.section)
    beside = f"the {other.side} side's GPU nodes ({_where(other, other_plan)})"
    if plan.block:
        return (
            f"{key}: {plan.what} is a Capacity Block, which takes no placement group (EC2 places it in an "
            f"UltraCluster of its own), so {beside} could not join its nodes in one cluster placement "
            "group and the KV cache would cross spines; name the same block in both sides' sections (one "
            "instance type), or run both sides on gpuNodes with it"
        )
    if plan.placement_group is None:
        return (
            f"{key}: {plan.what} was made in no cluster placement group, so its nodes launch into none and "
            f"{beside} could not be placed beside them; make the reservation in a cluster placement group "
            "(EC2 cannot move one into a group afterwards): the other side's nodes then launch into that "
            "group too"
        )
    return None
