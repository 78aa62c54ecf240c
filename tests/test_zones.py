"""The subnet layout: private subnets large enough for pods (VPC CNI gives every pod a VPC address),
public subnets small, nothing overlapping, everything inside the VPC, for any allowed VPC size."""

from __future__ import annotations

from ipaddress import IPv4Network
from itertools import combinations

import pytest

from planning.zones import plan_subnets

ZONES = ("sa-east-1a", "sa-east-1b", "sa-east-1c")


@pytest.mark.parametrize("cidr", ["10.0.0.0/16", "10.20.0.0/16", "172.16.0.0/18", "192.168.0.0/20"])
@pytest.mark.parametrize("zones", [ZONES[:2], ZONES])
def test_subnets_are_disjoint_and_inside_the_vpc(cidr: str, zones: tuple[str, ...]):
    vpc = IPv4Network(cidr)
    plans = plan_subnets(vpc, zones)
    assert [p.zone for p in plans] == list(zones)
    subnets = [IPv4Network(c) for p in plans for c in (p.private_cidr, p.public_cidr)]
    assert all(s.subnet_of(vpc) for s in subnets)
    assert not any(a.overlaps(b) for a, b in combinations(subnets, 2))


def test_dev_layout():
    plans = plan_subnets(IPv4Network("10.0.0.0/16"), ZONES[:2])
    assert [(p.private_cidr, p.public_cidr) for p in plans] == [
        ("10.0.0.0/18", "10.0.192.0/24"),
        ("10.0.64.0/18", "10.0.193.0/24"),
    ]


def test_private_subnets_hold_thousands_of_pods_even_in_the_smallest_vpc():
    plans = plan_subnets(IPv4Network("10.0.0.0/20"), ZONES)
    assert all(IPv4Network(p.private_cidr).num_addresses >= 1024 for p in plans)
    assert all(IPv4Network(p.public_cidr).num_addresses >= 16 for p in plans)


def test_more_than_three_zones_do_not_fit():
    with pytest.raises(ValueError, match="at most three zones"):
        plan_subnets(IPv4Network("10.0.0.0/16"), (*ZONES, "sa-east-1d"))
