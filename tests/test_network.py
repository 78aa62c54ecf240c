"""The network of every stack users run, in depth: each private subnet leaves through a NAT gateway (its
own zone's with `perAz`), public subnets through the internet gateway, no private subnet on the public
route table, NAT gateways only after the internet gateway, and the GPU nodes in their zone's private
subnet, for dev (one NAT, two zones), prod (perAz, three zones) and a perAz variant whose GPU zone is
not the first zone."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

import pytest

from tests.fakes.pulumi import Registration, StackRun, run_stack

SUBNET = "aws:ec2/subnet:Subnet"
ROUTE_TABLE = "aws:ec2/routeTable:RouteTable"
ASSOCIATION = "aws:ec2/routeTableAssociation:RouteTableAssociation"
NAT = "aws:ec2/natGateway:NatGateway"
EIP = "aws:ec2/eip:Eip"
IGW = "aws:ec2/internetGateway:InternetGateway"
NODE_GROUP = "eks:index:ManagedNodeGroup"

THREE_ZONES = {"sa-east-1": {"g6.8xlarge": ["sa-east-1a", "sa-east-1b", "sa-east-1c"]}}


@cache
def stack(variant: str) -> StackRun:
    if variant == "perAz-gpu-in-c":
        return run_stack(
            overrides={"network": {"natGateways": "perAz"}, "gpuNodes": {"availabilityZone": "sa-east-1c"}},
            offerings=THREE_ZONES,
        )
    return run_stack(stack=variant)


VARIANTS = ["dev", "prod", "perAz-gpu-in-c"]


@dataclass
class Network:
    run: StackRun

    def by_id(self, id_: str) -> Registration:
        return next(r for r in self.run.registrations if r.custom and self.run.id_of(r) == id_)

    def subnets(self, kind: str) -> list[Registration]:
        return [s for s in self.run.of_type(SUBNET) if s.name.startswith(f"network-{kind}-")]

    def table_of(self, subnet: Registration) -> Registration:
        (association,) = [
            a for a in self.run.of_type(ASSOCIATION) if a.inputs["subnetId"] == self.run.id_of(subnet)
        ]
        return self.by_id(association.inputs["routeTableId"])

    def default_route(self, table: Registration) -> dict[str, str]:
        (route,) = [r for r in table.inputs["routes"] if r["cidrBlock"] == "0.0.0.0/0"]
        return route


@pytest.mark.parametrize("variant", VARIANTS)
def test_private_subnets_leave_through_a_nat_gateway_in_a_public_subnet(variant: str):
    net = Network(stack(variant))
    per_az = variant != "dev"
    nats = net.run.of_type(NAT)
    assert len(nats) == (len(net.subnets("private")) if per_az else 1)
    for subnet in net.subnets("private"):
        table = net.table_of(subnet)
        assert table.name.startswith("network-private-"), f"{subnet.name} is on {table.name}"
        nat = net.by_id(net.default_route(table)["natGatewayId"])
        nat_subnet = net.by_id(nat.inputs["subnetId"])
        assert nat_subnet in net.subnets("public")
        if per_az:  # losing a zone must not cut the others' egress
            assert nat_subnet.inputs["availabilityZone"] == subnet.inputs["availabilityZone"], subnet.name


@pytest.mark.parametrize("variant", VARIANTS)
def test_public_subnets_leave_through_the_internet_gateway(variant: str):
    net = Network(stack(variant))
    igw = net.run.one(IGW)
    for subnet in net.subnets("public"):
        table = net.table_of(subnet)
        assert net.default_route(table) == {"cidrBlock": "0.0.0.0/0", "gatewayId": net.run.id_of(igw)}
    public_tables = {net.run.id_of(net.table_of(s)) for s in net.subnets("public")}
    assert not public_tables & {net.run.id_of(net.table_of(s)) for s in net.subnets("private")}


@pytest.mark.parametrize("variant", VARIANTS)
def test_nat_gateways_and_their_addresses_wait_for_the_internet_gateway(variant: str):
    run = stack(variant)
    igw = run.one(IGW)
    for reg in [*run.of_type(NAT), *run.of_type(EIP)]:
        assert igw.urn in reg.dependencies, reg.name


@pytest.mark.parametrize("variant", VARIANTS)
def test_gpu_nodes_use_their_own_zones_private_subnet(variant: str):
    run = stack(variant)
    net = Network(run)
    gpu = run.one(NODE_GROUP, "gpu-nodes").inputs
    zone = gpu["placementGroupAvailabilityZone"]
    assert zone == run.exports["gpuAvailabilityZone"]
    (subnet,) = [s for s in net.subnets("private") if s.inputs["availabilityZone"] == zone]
    assert gpu["subnetIds"] == [run.id_of(subnet)]
    if variant == "perAz-gpu-in-c":
        assert zone == "sa-east-1c" and run.exports["clusterZones"][0] == "sa-east-1a"


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_zone_has_one_public_and_one_private_subnet(variant: str):
    net = Network(stack(variant))
    zones = stack(variant).exports["clusterZones"]
    for kind in ("public", "private"):
        assert sorted(s.inputs["availabilityZone"] for s in net.subnets(kind)) == sorted(zones)
