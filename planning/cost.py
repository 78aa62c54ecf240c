"""What the stack costs per hour, on demand, by part, serving and parked: the questions to ask the AWS
Price List API, how to read its answers, and the report. No price is written here: every figure comes
from the Price List API (through a us-east-1 provider; planning/cost's caller caches the answers a day).

Parts: the EKS control plane, the system nodes, the GPU nodes at desired and at most (Cluster Autoscaler
may grow the group to maxSize), the NAT gateways, and the endpoint's NLB (its hourly charge; capacity
units and data processing come on top, by traffic, and are not estimated).
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from config import Settings
from config.cluster import GpuNodesConfig
from config.sides import Side, all_side_nodes, gpu_instance_types, split
from planning.reservation import CapacityPlan

PRICE_REGION = "us-east-1"
"""The Price List API answers only in us-east-1, eu-central-1 and ap-south-1."""
CACHE_SECONDS = 24 * 60 * 60
PRICE_CACHE = ".cache/prices.json"
"""The cache, relative to the project directory (where Pulumi.yaml is)."""
PRICE_CACHE_ENV = "RAY_LLM_EKS_PRICE_CACHE"
"""A path that replaces it (the tests point it into a temporary directory)."""


def price_cache_path(project_dir: Path) -> Path:
    """Where the program and `ops` keep and read the Price List API's answers."""
    return Path(os.environ.get(PRICE_CACHE_ENV) or project_dir / PRICE_CACHE)


@dataclass(frozen=True)
class PriceQuery:
    """One Price List API product: the filters select exactly one (`get_product` fails otherwise)."""

    key: str
    service_code: str
    filters: tuple[tuple[str, str], ...]


def instance_query(region: str, instance_type: str) -> PriceQuery:
    """A Linux on-demand instance hour, shared tenancy (pulumi-aws's own get_product example, by region
    code)."""
    return PriceQuery(
        f"ec2:{instance_type}",
        "AmazonEC2",
        (
            ("instanceType", instance_type),
            ("regionCode", region),
            ("operatingSystem", "Linux"),
            ("preInstalledSw", "NA"),
            ("licenseModel", "No License required"),
            ("tenancy", "Shared"),
            ("capacitystatus", "Used"),
            ("marketoption", "OnDemand"),
        ),
    )


def price_queries(settings: Settings) -> list[PriceQuery]:
    region = settings.region
    queries = [
        # Standard support (extended support is operation ExtendedSupport, another product).
        PriceQuery(
            "eks",
            "AmazonEKS",
            (("regionCode", region), ("productFamily", "Compute"), ("operation", "CreateOperation")),
        ),
        instance_query(region, settings.system_nodes.instance_type),
        *(instance_query(region, t) for t in gpu_types(settings)),
        PriceQuery(
            "nat",
            "AmazonEC2",
            (
                ("regionCode", region),
                ("productFamily", "NAT Gateway"),
                ("operation", "NatGateway"),
                ("groupDescription", "Hourly charge for NAT Gateways"),
            ),
        ),
    ]
    if settings.endpoint.enabled:
        queries.append(
            PriceQuery(
                "nlb",
                "AWSELB",
                (
                    ("regionCode", region),
                    ("productFamily", "Load Balancer-Network"),
                    ("operation", "LoadBalancing:Network"),
                    ("groupDescription", "LoadBalancer hourly usage by Network Load Balancer"),
                ),
            )
        )
    return queries


def hourly_price(product: str) -> float:
    """USD per hour from one Price List product (its `terms.OnDemand.*.priceDimensions.*`)."""
    document = json.loads(product)
    prices = [
        float(dimension["pricePerUnit"]["USD"])
        for term in document["terms"]["OnDemand"].values()
        for dimension in term["priceDimensions"].values()
        if dimension.get("unit", "").lower() in ("hrs", "hours", "hour")
        and float(dimension["pricePerUnit"]["USD"]) > 0
    ]
    if not prices:
        raise ValueError(f"no hourly on-demand price in product {document.get('product', {}).get('sku')}")
    return prices[0]


@dataclass(frozen=True)
class CostLine:
    part: str
    count: int
    unit_price: float | None
    """USD per hour and unit; None when the API gave no answer."""

    @property
    def hourly(self) -> float | None:
        return None if self.unit_price is None else self.count * self.unit_price


@dataclass(frozen=True)
class CostReport:
    region: str
    serving: tuple[CostLine, ...]
    at_most: tuple[CostLine, ...]
    parked: tuple[CostLine, ...]
    notes: tuple[str, ...] = ()

    @staticmethod
    def total(lines: tuple[CostLine, ...]) -> float | None:
        hourly = [line.hourly for line in lines]
        return None if any(h is None for h in hourly) else math.fsum(h for h in hourly if h is not None)

    def format(self) -> str:
        def money(value: float | None) -> str:
            return "unknown" if value is None else f"${value:,.2f}/h"

        lines = [
            f"hourly on-demand cost in {self.region} (AWS Price List API; the NLB's capacity units and "
            "data by traffic on top):"
        ]
        for line in self.serving:
            price = "unknown" if line.unit_price is None else f"${line.unit_price:,.4f}"
            lines.append(f"  {line.part}: {line.count} x {price} = {money(line.hourly)}")
        lines.append(f"  serving, GPU nodes at desiredSize: {money(self.total(self.serving))}")
        lines.append(f"  serving, GPU nodes at maxSize: {money(self.total(self.at_most))}")
        lines.append(f"  parked (no GPU nodes): {money(self.total(self.parked))}")
        lines += [f"  {note}" for note in self.notes]
        return "\n".join(lines)


def running_cost(
    settings: Settings, prices: dict[str, float | None], zones: int, running: Mapping[str | None, int]
) -> str:
    """What the stack costs now, with the GPU nodes that run (for `ops status`): `running` counts them
    by their side label (planning/nodes.py GPU_SIDE_LABEL; None for nodes without one, as on shared GPU
    nodes). Where the sides have node groups of their own, each side's line is priced at its type with
    that side's nodes."""
    report = cost_report(settings, prices, zones)
    nodes = sum(running.values())
    if split(settings):
        sides = all_side_nodes(settings)
        fixed, lines = report.serving[: -len(sides)], report.serving[-len(sides) :]
        priced = zip(lines, sides, strict=True)
        now = (*fixed, *(CostLine(c.part, running.get(s.side, 0), c.unit_price) for c, s in priced))
        counted = ", ".join(f"{running.get(s.side, 0)} {s.side}" for s in sides)
        unlabelled = running.get(None, 0)
        with_nodes = f"with {nodes} GPU node(s) ({counted}" + (
            f", {unlabelled} without a side label, not priced)" if unlabelled else ")"
        )
    else:
        gpu = report.serving[-1]
        now = (*report.serving[:-1], CostLine(gpu.part, nodes, gpu.unit_price))
        with_nodes = f"with {nodes} GPU node(s)"
    total = CostReport.total(now)
    shown = "unknown (no price cached: run `pulumi preview`)" if total is None else f"${total:,.2f}/h"
    most = CostReport.total(report.at_most)
    at_most = "unknown" if most is None else f"${most:,.2f}/h"
    return f"Cost now: {shown} on demand, {with_nodes}; at most {at_most}"


def planned_zone_count(settings: Settings) -> int:
    """The cluster's zones as the stack file says them (listed, else at most `maxAvailabilityZones`),
    for a cost without the zones EC2 offers (ops status, ops bench)."""
    network = settings.network
    return len(network.availability_zones) if network.availability_zones else network.max_availability_zones


def nat_gateway_count(settings: Settings, zones: int) -> int:
    """One NAT gateway, or one per cluster zone (`network.natGateways`)."""
    return 1 if settings.network.nat_gateways == "single" else zones


def cost_report(
    settings: Settings,
    prices: dict[str, float | None],
    zones: int,
    capacity: CapacityPlan | None = None,
    *,
    side_capacity: Mapping[Side, CapacityPlan] | None = None,
) -> CostReport:
    """`zones`: the cluster's availability zones (a NAT gateway each with `natGateways: perAz`);
    `capacity`: the reservation the GPU nodes run on (planning/reservation.py): an On-Demand Capacity
    Reservation costs the On-Demand rate for every reserved instance, used or not, parked too; a Capacity
    Block was paid at purchase, so its nodes add nothing by the hour (and no API tells its price).
    `side_capacity`: where each side has GPU nodes of its own, the reservation of each reserved side."""
    system, gpu = settings.system_nodes, settings.gpu_nodes
    nat_gateways = nat_gateway_count(settings, zones)

    def line(part: str, count: int, key: str) -> CostLine:
        return CostLine(part, count, prices.get(key))

    own = (
        not settings.cluster.existing_cluster_name
    )  # an existing cluster's control plane and NAT are the team's
    fixed = [
        *([line("EKS control plane", 1, "eks")] if own else []),
        line(f"system nodes ({system.instance_type})", system.desired_size, f"ec2:{system.instance_type}"),
        *([line("NAT gateways", nat_gateways, "nat")] if own else []),
        *([line("network load balancer", 1, "nlb")] if settings.endpoint.enabled else []),
    ]
    if split(settings):
        return _per_side_report(settings, fixed, line, side_capacity or {})
    gpu_key = f"ec2:{gpu.instance_type}"
    desired = 0 if settings.autoscaling.parked else gpu.desired_size
    if capacity and capacity.block:
        part = f"GPU nodes ({gpu.instance_type}) on {capacity.what}, paid up front"
        return CostReport(
            region=settings.region,
            serving=(*fixed, CostLine(part, desired, 0.0)),
            at_most=(*fixed, CostLine(part, gpu.max_size, 0.0)),
            parked=(*fixed, CostLine(part, 0, 0.0)),
            notes=(f"{capacity.what} was paid at purchase (EC2 shows its price on the invoice only)",),
        )
    if capacity:
        reserved = line(
            f"{capacity.what}: {gpu.instance_type} reserved, used or not", capacity.total, gpu_key
        )
        return CostReport(
            region=settings.region,
            serving=(*fixed, reserved),
            at_most=(*fixed, reserved),
            parked=(*fixed, reserved),
        )
    return CostReport(
        region=settings.region,
        serving=(*fixed, line(f"GPU nodes ({gpu.instance_type})", desired, gpu_key)),
        at_most=(*fixed, line(f"GPU nodes ({gpu.instance_type})", gpu.max_size, gpu_key)),
        parked=(*fixed, line(f"GPU nodes ({gpu.instance_type})", 0, gpu_key)),
    )


def _per_side_report(
    settings: Settings,
    fixed: list[CostLine],
    line: Callable[[str, int, str], CostLine],
    capacity: Mapping[Side, CapacityPlan],
) -> CostReport:
    """Each side's GPU nodes on a line of their own (`prefillNodes`, `decodeNodes`), prefill's first; a
    side on a reservation (`capacity`, by side) as the shared group's is: an On-Demand Capacity
    Reservation bills every reserved instance, serving, at most and parked; a Capacity Block nothing by
    the hour. Both sides on one reservation bill it once, on prefill's line."""
    parked = settings.autoscaling.parked
    blocks = list(dict.fromkeys(c.what for c in capacity.values() if c.block))

    def sides(count: Callable[[GpuNodesConfig], int]) -> tuple[CostLine, ...]:
        lines, billed = [], set()
        for s in all_side_nodes(settings):
            kind, key = s.config.instance_type, f"ec2:{s.config.instance_type}"
            reserved = capacity.get(s.side)
            if reserved and reserved.block:
                part = f"{s.side} GPU nodes ({kind}) on {reserved.what}, paid up front"
                lines.append(CostLine(part, count(s.config), 0.0))
            elif reserved:
                part = f"{s.side} GPU nodes on {reserved.what}: {kind} reserved, used or not"
                lines.append(line(part, 0 if reserved.reference in billed else reserved.total, key))
                billed.add(reserved.reference)
            else:
                lines.append(line(f"{s.side} GPU nodes ({kind})", count(s.config), key))
        return tuple(lines)

    serving = sides(lambda c: 0 if parked else c.desired_size)
    return CostReport(
        region=settings.region,
        serving=(*fixed, *serving),
        at_most=(*fixed, *sides(lambda c: c.max_size)),
        parked=(*fixed, *sides(lambda c: 0)),
        notes=tuple(f"{b} was paid at purchase (EC2 shows its price on the invoice only)" for b in blocks),
    )


def gpu_types(settings: Settings) -> list[str]:
    """The GPU instance types whose price the report needs: one, or each side's."""
    types = gpu_instance_types(settings)
    return [types] if isinstance(types, str) else types


class PriceCache:
    """Prices as the API last gave them, a day at most, in a JSON file beside the project (previews
    stay fast, and work when the API is slow); `ops status` reads the same file."""

    def __init__(
        self, path: Path, clock: Callable[[], float] = time.time, max_age: float | None = CACHE_SECONDS
    ):
        """`max_age`: seconds a price stays good (None: any age, for a report of what was seen)."""
        self.path = path
        self.clock = clock
        self.max_age = max_age

    def _load(self) -> dict[str, dict[str, float]]:
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def get(self, region: str, key: str) -> float | None:
        entry = self._load().get(f"{region}/{key}")
        if not isinstance(entry, dict):
            return None
        if self.max_age is not None and self.clock() - float(entry.get("at", 0)) > self.max_age:
            return None
        return float(entry["usd_per_hour"])

    def put(self, region: str, prices: dict[str, float | None]) -> None:
        data = self._load()
        now = self.clock()
        for key, price in prices.items():
            if price is not None:
                data[f"{region}/{key}"] = {"usd_per_hour": price, "at": now}
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
        except OSError:
            pass  # a read-only checkout: the next preview asks the API again

    def prices(self, region: str, keys: list[str]) -> dict[str, float | None]:
        return {key: self.get(region, key) for key in keys}
