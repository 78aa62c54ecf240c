"""`ops plan`: what a `pulumi preview` of a stack would show, offline, in one screen.

The Pulumi program runs offline (ops/mocked_run.py: under Pulumi's mocks, no Pulumi CLI, no AWS, no
cluster) against the offline world the stack file implies (world/offline.py, the world the tests read
too), so what it registers is what a preview of a first `up` would create. The report:
the preview's warnings, the hardware and fit summaries the program logs, the nodes, the resources by
component, and the hourly cost by part. Prices come from the Price List answers your last preview
cached (`.cache/prices.json`, a day at most) when there are any, else from the project's dated
snapshot (planning/price_snapshot.py); the report says which.

What the offline world cannot know, it says it does not know: the zones are its own (a region's zones
a, b and c, each offering every type; the preview asks EC2), the account is 123456789012, a named
reservation is an On-Demand Capacity Reservation unless `--reservation-kind capacity-block` says it is a
Capacity Block (only EC2 knows which), and
children of pulumi-eks' and the charts' components are not counted (they register in the engine).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from config import Settings
from config.sides import Side, all_side_nodes, split
from ops.kube import OpsError
from ops.mocked_run import StackRun, run_offline
from planning.cost import PriceCache, cost_report, price_cache_path, price_queries
from planning.names import stack_files_beside
from planning.price_snapshot import snapshot_prices
from planning.reservation import CapacityPlan, plan_capacity
from planning.side_reservation import on_side_reservations
from world.offline import OfflineWorld
from world.reads import reserved_by_side

COST_HEADER = "hourly on-demand cost"
"""How the program's own cost report begins (planning/cost.py): the plan shows its own, labelled."""
PLACEHOLDER_SECRET = "plan-placeholder-for-a-value-encrypted-in-the-stack-file"


def without_secrets(value: Any) -> tuple[Any, bool]:
    """The stack file's values with every `{secure: ...}` replaced by a placeholder (the plan cannot
    decrypt them, and needs none of them), and whether there was one."""
    if isinstance(value, dict):
        if set(value) == {"secure"}:
            return PLACEHOLDER_SECRET, True
        found = False
        out = {}
        for key, item in value.items():
            out[key], secret = without_secrets(item)
            found |= secret
        return out, found
    if isinstance(value, list):
        items = [without_secrets(item) for item in value]
        return [item for item, _ in items], any(secret for _, secret in items)
    return value, False


RESERVATION_KINDS = {"odcr": "default", "capacity-block": "capacity-block"}
"""`ops plan --reservation-kind` -> EC2's ReservationType of the mocked reservation."""


def run_plan(
    stack: str, config: dict[str, Any], settings: Settings, root: Path, reservation_kind: str = "odcr"
) -> StackRun:
    """The program run offline against the stack file's offline world (world/offline.py); its refusal
    as OpsError (exit 2: the stack cannot plan)."""
    values: dict[str, Any] = {}
    secrets: dict[str, Any] = {}
    for key, value in config.items():
        plain, secret = without_secrets(value)
        (secrets if secret else values)[key] = plain
    world = OfflineWorld.for_stack(
        settings, stack_files_beside(root, stack), reservation_kind=RESERVATION_KINDS[reservation_kind]
    )
    try:
        return run_offline(values, stack=stack, world=world, secrets=secrets or None)
    except Exception as error:  # the program's own refusal, as a preview would print it
        message = str(error).strip().splitlines()
        raise OpsError(
            "the program refuses this stack (as `pulumi preview` would):\n" + "\n".join(message[-12:]),
            exit_code=2,
        ) from None


def gpu_node_lines(settings: Settings, gpu_zone: str, zones: list[str], block: bool = False) -> list[str]:
    """The GPU nodes: one group, or each side's (`prefillNodes`, `decodeNodes`) in the one zone, with
    the reservation a side runs on; `block`: the reservations are mocked as Capacity Blocks (both
    sides on one block then, which takes no placement group)."""
    parked = settings.autoscaling.parked
    where = f"in {gpu_zone}"
    cluster = f"cluster zones (mocked): {', '.join(zones)}"
    if not split(settings):
        gpu = settings.gpu_nodes
        count = "0 (parked)" if parked else str(gpu.desired_size)
        sizes = f"(min {gpu.min_size}, max {gpu.max_size})"
        return [f"  GPU: {count} x {gpu.instance_type} {where} {sizes}; {cluster}"]
    lines = []
    for side in all_side_nodes(settings):
        nodes = side.config
        count = "0 (parked)" if parked else str(nodes.desired_size)
        on = f", on {nodes.capacity_reservation}" if nodes.capacity_reservation else ""
        lines.append(
            f"  GPU, {side.side} ({side.section}): {count} x {nodes.instance_type} {where} (min "
            f"{nodes.min_size}, max {nodes.max_size}){on}"
        )
    reserved = any(s.config.capacity_reservation for s in all_side_nodes(settings))
    placed = (
        "both sides on one Capacity Block, in no placement group"
        if reserved and block
        else "both sides in the reservation's cluster placement group"
        if reserved
        else "both sides in one cluster placement group"
    )
    return [*lines, f"  {placed}; {cluster}"]


def resources_by_component(run: Any) -> list[tuple[str, int, Counter[str]]]:
    """Each top-level component (or a resource of the stack's own), with the resources under it."""
    groups: dict[str, Counter[str]] = {}
    for reg in run.registrations:
        if not reg.custom or reg.type.startswith("pulumi:providers:"):
            continue
        chain = run.ancestors(reg)
        top = f"{chain[-1].name} ({chain[-1].type.split(':')[-1]})" if chain else "(the stack itself)"
        groups.setdefault(top, Counter())[short_type(reg.type)] += 1
    return sorted(((name, sum(c.values()), c) for name, c in groups.items()), key=lambda g: (-g[1], g[0]))


def resource_lines(run: Any) -> list[str]:
    """A line per component: its resources' count and its four most numerous kinds. Ties go by name,
    never by the order resources registered in (the SDK's scheduling decides that)."""
    lines = []
    for name, count, types in resources_by_component(run):
        kinds = sorted(types.items(), key=lambda kind: (-kind[1], kind[0]))
        shown = ", ".join(f"{n} {t}" for t, n in kinds[:4])
        extra = len(kinds) - 4
        more = f", +{extra} more kind{'s' if extra > 1 else ''}" if extra > 0 else ""
        lines.append(f"  {count:>3}  {name}: {shown}{more}")
    return lines


def short_type(token: str) -> str:
    """`aws:ec2/subnet:Subnet` -> `aws Subnet`, `kubernetes:core/v1:Namespace` -> `k8s Namespace`."""
    package, _, rest = token.partition(":")
    package = {"kubernetes": "k8s"}.get(package, package)
    return f"{package} {rest.rsplit(':', 1)[-1]}"


def prices_for(
    settings: Settings, cache_path: Path, clock: Callable[[], float]
) -> tuple[dict[str, float | None], str]:
    keys = [query.key for query in price_queries(settings)]
    cached = PriceCache(cache_path, clock).prices(settings.region, keys)
    if all(price is not None for price in cached.values()):
        return cached, "AWS Price List API, as your last preview cached it (a day at most)"
    return snapshot_prices(settings.region, keys)


def _mocked_reservations(settings: Settings, reservation_kind: str) -> list[str]:
    """What the report says of the reservations it mocks: `gpuNodes`', or each side's own."""
    sections = [s.config for s in all_side_nodes(settings)] if split(settings) else [settings.gpu_nodes]
    lines: list[str] = []
    for gpu in sections:
        if not gpu.capacity_reservation or any(gpu.capacity_reservation in line for line in lines):
            continue
        # Both sides on one reservation: room for both (world/offline.py mocks it so).
        count = sum(c.max_size for c in sections if c.capacity_reservation == gpu.capacity_reservation)
        if reservation_kind == "capacity-block":
            lines += [
                f"Reservation {gpu.capacity_reservation} is mocked too: an active Capacity Block of "
                f"{count} x {gpu.instance_type}, a week from yesterday (world/offline.py; "
                "`--reservation-kind odcr` for an On-Demand Capacity Reservation). A preview reads yours: "
                "its kind, zone, count, state and dates decide.",
                "",
            ]
        else:
            lines += [
                f"Reservation {gpu.capacity_reservation} is mocked too: an active On-Demand Capacity "
                f"Reservation of {count} x {gpu.instance_type} in a cluster placement group "
                "(world/offline.py; `--reservation-kind capacity-block` for a Capacity Block). A preview "
                "reads yours: its kind, zone, count, state and dates decide.",
                "",
            ]
    return lines


def plan_report(
    stack: str,
    settings: Settings,
    config: dict[str, Any],
    root: Path,
    clock: Callable[[], float] = time.time,
    reservation_kind: str = "odcr",
) -> str:
    """The report; `reservation_kind`: what the reservation the stack names is mocked as (`odcr` or
    `capacity-block`: only EC2 knows which it is)."""
    run = run_plan(stack, config, settings, root, reservation_kind)
    system = settings.system_nodes
    zones = run.exports.get("clusterZones") or []
    lines = [
        f"Plan of stack {stack} in {settings.region}: the program against the offline world (no AWS, no "
        "Pulumi CLI). `pulumi preview` asks AWS and may differ in zones and names.",
        "",
    ]
    if settings.cluster.existing_cluster_name:
        lines += [
            f"Cluster {settings.cluster.existing_cluster_name} is mocked too: Kubernetes 1.34, a VPC with "
            "private subnets in zones a to d, the Pod Identity agent, and a load balancer controller, "
            "Prometheus and Cluster Autoscaler of its own (world/offline.py). A preview reads "
            "yours: its version, subnets and add-ons decide.",
            "",
        ]
    lines += _mocked_reservations(settings, reservation_kind)
    if run.warnings:
        lines += ["Warnings (a preview shows them too):", *(f"  ! {w}" for w in run.warnings), ""]
    summaries = [m for m in run.infos if not m.startswith(COST_HEADER)]  # the cost is one message
    lines += ["Hardware and fit:", *(f"  {m}" for m in summaries), ""]
    gpu_zone = run.exports.get("gpuAvailabilityZone", "?")
    lines += [
        "Nodes:",
        f"  system: {system.desired_size} x {system.instance_type} (up to {system.max_size})",
        *gpu_node_lines(settings, gpu_zone, zones, block=reservation_kind == "capacity-block"),
        "",
    ]
    groups = resources_by_component(run)
    total = sum(count for _, count, _ in groups)
    lines.append(f"Resources a first `up` creates ({total}, not counting pulumi-eks' and Helm's children):")
    lines += resource_lines(run)
    prices, source = prices_for(settings, price_cache_path(root), clock)
    world = OfflineWorld.for_stack(settings, {}, reservation_kind=RESERVATION_KINDS[reservation_kind])
    reference = settings.gpu_nodes.capacity_reservation
    capacity: CapacityPlan | None = None
    side_capacity: dict[Side, CapacityPlan] = {}
    if split(settings):
        side_capacity = on_side_reservations(settings, reserved_by_side(settings, world), world.now())[1]
    elif reference:
        capacity = plan_capacity(settings, world.reservations(reference), world.now())
    report = (
        cost_report(settings, prices, len(zones) or 2, capacity, side_capacity=side_capacity)
        .format()
        .splitlines()
    )
    lines += ["", f"Cost ({source}):", *report[1:]]
    return "\n".join(lines) + "\n"
