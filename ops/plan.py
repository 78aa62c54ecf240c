"""`ops plan`: what a `pulumi preview` of a stack would show, offline, in one screen.

The Pulumi program runs under the mocks the test suite uses (tests/fakes/pulumi.py: no Pulumi CLI, no
AWS, no cluster), so what it registers is what a preview of a first `up` would create. The report:
the preview's warnings, the hardware and fit summaries the program logs, the nodes, the resources by
component, and the hourly cost by part. Prices come from the Price List answers your last preview
cached (`.cache/prices.json`, a day at most) when there are any, else from the project's dated
snapshot (planning/price_snapshot.py); the report says which.

What the mocks cannot know, it says it does not know: the zones are the mocked world's (a region's
zones a, b and c, each offering every type; the preview asks EC2), the account is 123456789012, and
children of pulumi-eks' and the charts' components are not counted (they register in the engine).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from config import Settings
from ops.kube import OpsError
from planning.cost import PRICE_CACHE, PriceCache, cost_report, price_queries
from planning.price_snapshot import snapshot_prices
from planning.reservation import CapacityPlan, plan_capacity, reservations_from_api

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


def mocked_reservations(settings: Settings) -> tuple[dict[str, Any], ...]:
    """The reservation `gpuNodes.capacityReservation` names, as the mocked account holds it: active, of
    the stack file's GPU type, maxSize of them, in the region's zone b (or the stack file's GPU zone), in
    a cluster placement group, no end date. Whether it is a Capacity Block only EC2 can say; offline it
    is an On-Demand Capacity Reservation."""
    from tests.fakes.capacity import reservation

    reference = settings.gpu_nodes.capacity_reservation
    if not reference:
        return ()
    gpu = settings.gpu_nodes
    zone = gpu.availability_zone or f"{settings.region}b"
    found = "cr-00000000000000000" if reference.startswith("arn:") else reference
    return (
        reservation(
            found, instance_type=gpu.instance_type, zone=zone, total=gpu.max_size, placement_group="reserved"
        ),
    )


def mocked_capacity(settings: Settings) -> CapacityPlan | None:
    """The mocked reservation, planned as the program plans it (for the plan's cost)."""
    from tests.fakes.capacity import NOW

    found = mocked_reservations(settings)
    return (
        plan_capacity(settings, reservations_from_api({"CapacityReservations": list(found)}), NOW)
        if found
        else None
    )


def run_offline(stack: str, config: dict[str, Any], settings: Settings | None = None) -> Any:
    """The program under the suite's mocks; its errors as OpsError (exit 2: the stack cannot plan).
    `settings`: the stack file's, for what the mocked account must hold (a reservation it names)."""
    try:
        from tests.fakes.existing import TeamCluster
        from tests.fakes.pulumi import AwsState, run_stack
    except ImportError as error:  # a copy without tests/: say what is missing
        raise OpsError(f"ops plan runs the program under tests/fakes; {error}", exit_code=2) from None
    values: dict[str, Any] = {}
    secrets: dict[str, Any] = {}
    for key, value in config.items():
        plain, secret = without_secrets(value)
        (secrets if secret else values)[key] = plain
    existing = (values.get("ray-llm-eks:cluster") or {}).get("existingClusterName")
    region = str(values.get("aws:region") or "us-east-1")
    # A cluster of that name in the mocked world (tests/fakes/existing.py), its subnets in the region's zones.
    aws = AwsState(team=TeamCluster.named(existing, region)) if existing else AwsState()
    reservations = mocked_reservations(settings) if settings else ()
    reference = settings.gpu_nodes.capacity_reservation if settings else None
    if reservations and reference:
        groups = (
            {reference: (reservations[0]["CapacityReservationId"],)} if reference.startswith("arn:") else {}
        )
        aws = replace(aws, reservations=reservations, resource_groups=groups)
    try:
        return run_stack(values, stack=stack, secrets=secrets or None, aws=aws)
    except Exception as error:  # the program's own refusal, as a preview would print it
        message = str(error).strip().splitlines()
        raise OpsError(
            "the program refuses this stack (as `pulumi preview` would):\n" + "\n".join(message[-12:]),
            exit_code=2,
        ) from None


def resources_by_component(run: Any) -> list[tuple[str, int, Counter[str]]]:
    """Each top-level component (or a resource of the stack's own), with the resources under it."""
    groups: dict[str, Counter[str]] = {}
    for reg in run.registrations:
        if not reg.custom or reg.type.startswith("pulumi:providers:"):
            continue
        chain = run.ancestors(reg)
        top = f"{chain[-1].name} ({chain[-1].type.split(':')[-1]})" if chain else "(the stack itself)"
        groups.setdefault(top, Counter())[short_type(reg.type)] += 1
    return sorted(((name, sum(c.values()), c) for name, c in groups.items()), key=lambda g: -g[1])


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


def plan_report(
    stack: str,
    settings: Settings,
    config: dict[str, Any],
    root: Path,
    clock: Callable[[], float] = time.time,
) -> str:
    run = run_offline(stack, config, settings)
    gpu, system = settings.gpu_nodes, settings.system_nodes
    zones = run.exports.get("clusterZones") or []
    lines = [
        f"Plan of stack {stack} in {settings.region}: the program under the test suite's mocks (no AWS, no "
        "Pulumi CLI). `pulumi preview` asks AWS and may differ in zones and names.",
        "",
    ]
    if settings.cluster.existing_cluster_name:
        lines += [
            f"Cluster {settings.cluster.existing_cluster_name} is mocked too: Kubernetes 1.34, a VPC with "
            "private subnets in zones a to d, the Pod Identity agent, and a load balancer controller, "
            "Prometheus and Cluster Autoscaler of its own (tests/fakes/existing.py). A preview reads "
            "yours: its version, subnets and add-ons decide.",
            "",
        ]
    if gpu.capacity_reservation:
        lines += [
            f"Reservation {gpu.capacity_reservation} is mocked too: an active On-Demand Capacity "
            f"Reservation of {gpu.max_size} x {gpu.instance_type} in a cluster placement group "
            "(tests/fakes/capacity.py). A preview reads yours: its kind, zone, count, state and dates "
            "decide.",
            "",
        ]
    if run.warnings:
        lines += ["Warnings (a preview shows them too):", *(f"  ! {w}" for w in run.warnings), ""]
    summaries = [m for m in run.infos if not m.startswith(COST_HEADER)]  # the cost is one message
    lines += ["Hardware and fit:", *(f"  {m}" for m in summaries), ""]
    gpu_nodes = "0 (parked)" if settings.autoscaling.parked else str(gpu.desired_size)
    lines += [
        "Nodes:",
        f"  system: {system.desired_size} x {system.instance_type} (up to {system.max_size})",
        f"  GPU: {gpu_nodes} x {gpu.instance_type} in {run.exports.get('gpuAvailabilityZone', '?')} "
        f"(min {gpu.min_size}, max {gpu.max_size}); cluster zones (mocked): {', '.join(zones)}",
        "",
    ]
    groups = resources_by_component(run)
    total = sum(count for _, count, _ in groups)
    lines.append(f"Resources a first `up` creates ({total}, not counting pulumi-eks' and Helm's children):")
    for name, count, types in groups:
        shown = ", ".join(f"{n} {t}" for t, n in types.most_common(4))
        extra = len(types) - 4
        more = f", +{extra} more kind{'s' if extra > 1 else ''}" if extra > 0 else ""
        lines.append(f"  {count:>3}  {name}: {shown}{more}")
    prices, source = prices_for(settings, root / PRICE_CACHE, clock)
    report = cost_report(settings, prices, len(zones) or 2, mocked_capacity(settings)).format().splitlines()
    lines += ["", f"Cost ({source}):", *report[1:]]
    return "\n".join(lines) + "\n"
