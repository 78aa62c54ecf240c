"""Zones and subnets stay put: a subnet's range is a function of its zone, the zones a stack chose are
recorded on its VPC and read back, and nothing AWS changes later (a zone that starts or stops offering
the GPU type) moves a subnet, its range or the GPU node group; a zone in use that can no longer host
the GPU nodes fails with what to do."""

from __future__ import annotations

from ipaddress import IPv4Network
from itertools import combinations
from typing import Any

import pytest

from config import ConfigError, Settings, load_settings
from planning.where import Where
from planning.zones import (
    TAG_CREATOR,
    TAG_GPU_ZONE,
    TAG_STACK,
    TAG_ZONES,
    StackRecord,
    plan_subnets,
    plan_zones,
)
from tests.fakes.pulumi import (
    AwsState,
    StackRun,
    deployed,
    minimal_config,
    run_stack,
    stack_file_config,
    stack_settings,
    where_of,
)

P = "ray-llm-eks"
SUBNET = "aws:ec2/subnet:Subnet"
NODE_GROUP = "eks:index:ManagedNodeGroup"
ZONES = ("sa-east-1a", "sa-east-1b", "sa-east-1c")


def settings(**sections: dict[str, Any]) -> Settings:
    config = stack_file_config("dev")
    for section, values in sections.items():
        config[f"{P}:{section}"] = {**config.get(f"{P}:{section}", {}), **values}
    return load_settings(config)


class TestSubnetLayout:
    @pytest.mark.parametrize("cidr", ["10.0.0.0/16", "10.20.0.0/16", "172.16.0.0/18", "192.168.0.0/19"])
    def test_subnets_are_disjoint_inside_the_vpc_and_roomy(self, cidr: str):
        vpc = IPv4Network(cidr)
        plans = plan_subnets(vpc, [f"us-east-1{letter}" for letter in "abcdefg"])
        subnets = [IPv4Network(c) for p in plans for c in (p.private_cidr, p.public_cidr)]
        assert all(s.subnet_of(vpc) for s in subnets)
        assert not any(a.overlaps(b) for a, b in combinations(subnets, 2))
        # pods take VPC addresses in the private subnets; NAT gateways and load balancers need a few
        assert all(IPv4Network(p.private_cidr).num_addresses >= 1024 for p in plans)
        assert all(IPv4Network(p.public_cidr).num_addresses >= 16 for p in plans)

    def test_a_zones_ranges_depend_on_its_letter_only(self):
        vpc = IPv4Network("10.0.0.0/16")
        alone = {p.zone: p for p in plan_subnets(vpc, ["sa-east-1b", "sa-east-1c"])}
        with_a = {p.zone: p for p in plan_subnets(vpc, ["sa-east-1a", "sa-east-1b", "sa-east-1c"])}
        assert alone["sa-east-1b"] == with_a["sa-east-1b"] and alone["sa-east-1c"] == with_a["sa-east-1c"]
        assert (with_a["sa-east-1a"].private_cidr, with_a["sa-east-1a"].public_cidr) == (
            "10.0.0.0/19",
            "10.0.224.0/24",
        )
        assert (alone["sa-east-1c"].private_cidr, alone["sa-east-1c"].public_cidr) == (
            "10.0.64.0/19",
            "10.0.226.0/24",
        )

    def test_a_zone_beyond_g_does_not_fit(self):
        with pytest.raises(ValueError, match="room for zones a to g"):
            plan_subnets(IPv4Network("10.0.0.0/16"), ["us-east-1h"])


class TestFirstUp:
    """With nothing recorded yet, zones come from EC2's instance-type offerings."""

    def test_gpu_zone_defaults_to_the_first_offering_zone(self):
        zones = plan_zones(settings(), ["sa-east-1b", "sa-east-1a"])
        assert zones.cluster_zones == ("sa-east-1a", "sa-east-1b")
        assert zones.gpu_zone == "sa-east-1a"

    def test_cluster_zones_are_only_those_that_offer_the_gpu_type(self):
        assert plan_zones(settings(), ["sa-east-1a", "sa-east-1c"]).cluster_zones == (
            "sa-east-1a",
            "sa-east-1c",
        )

    def test_at_most_max_availability_zones(self):
        offered = ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d"]
        s = load_settings({**minimal_config("us-east-1"), f"{P}:network": {"maxAvailabilityZones": 2}})
        assert plan_zones(s, offered).cluster_zones == ("us-east-1a", "us-east-1b")

    def test_configured_gpu_zone_that_does_not_offer_the_type_is_an_error(self):
        with pytest.raises(ConfigError) as caught:
            plan_zones(settings(gpuNodes={"availabilityZone": "sa-east-1c"}), ["sa-east-1a", "sa-east-1b"])
        message = str(caught.value)
        assert "ray-llm-eks:gpuNodes.availabilityZone: sa-east-1c does not offer g6.8xlarge" in message
        assert "['sa-east-1a', 'sa-east-1b']" in message

    def test_configured_gpu_zone_is_used(self):
        s = settings(gpuNodes={"availabilityZone": "sa-east-1b"})
        assert plan_zones(s, ["sa-east-1a", "sa-east-1b"]).gpu_zone == "sa-east-1b"

    def test_configured_cluster_zone_without_the_type_is_an_error(self):
        s = settings(network={"availabilityZones": ["sa-east-1a", "sa-east-1c"]})
        with pytest.raises(ConfigError, match=r"network.availabilityZones: \['sa-east-1c'\] do not offer"):
            plan_zones(s, ["sa-east-1a", "sa-east-1b"])

    def test_a_region_with_one_offering_zone_cannot_host_eks(self):
        with pytest.raises(ConfigError, match="offered in 1 zone"):
            plan_zones(settings(), ["sa-east-1a"])


class TestLaterUps:
    """Once deployed, the record on the VPC decides; AWS's offerings only validate it."""

    RECORD = StackRecord(zones=("sa-east-1b", "sa-east-1c"), gpu_zone="sa-east-1c")

    def test_a_new_offering_zone_moves_nothing(self):
        zones = plan_zones(settings(), ZONES, self.RECORD)
        assert (zones.cluster_zones, zones.gpu_zone) == (("sa-east-1b", "sa-east-1c"), "sa-east-1c")

    def test_a_cluster_zone_that_stops_offering_the_type_only_warns(self):
        record = StackRecord(zones=("sa-east-1a", "sa-east-1b"), gpu_zone="sa-east-1b")
        zones = plan_zones(settings(), ["sa-east-1b", "sa-east-1c"], record)
        assert zones.cluster_zones == ("sa-east-1a", "sa-east-1b")
        assert any("['sa-east-1a'] of this stack no longer offer g6.8xlarge" in w for w in zones.warnings)

    def test_a_gpu_zone_that_stops_offering_the_type_fails_with_what_to_do(self):
        with pytest.raises(ConfigError) as caught:
            plan_zones(settings(), ["sa-east-1a", "sa-east-1b"], self.RECORD)
        message = str(caught.value)
        assert "sa-east-1c, where this stack's GPU nodes run, no longer offers g6.8xlarge" in message
        assert "set ray-llm-eks:gpuNodes.availabilityZone to one of ['sa-east-1b']" in message

    def test_the_stack_file_still_wins(self):
        s = settings(gpuNodes={"availabilityZone": "sa-east-1b"})
        assert plan_zones(s, ZONES, self.RECORD).gpu_zone == "sa-east-1b"
        s = settings(network={"availabilityZones": ["sa-east-1a", "sa-east-1b", "sa-east-1c"]})
        zones = plan_zones(s, ZONES, self.RECORD)
        assert zones.cluster_zones == ZONES
        assert any("differ from the zones this stack runs in" in w for w in zones.warnings)

    def test_the_record_round_trips_through_tags(self):
        record = StackRecord(("sa-east-1a", "sa-east-1b"), "sa-east-1a", "arn:aws:iam::123456789012:role/x")
        tags = record.tags("ray-llm-eks/dev")
        assert tags[TAG_STACK] == "ray-llm-eks/dev"
        assert StackRecord.from_tags({**tags, "Name": "vpc"}) == record
        assert StackRecord.from_tags({"Name": "vpc"}) is None


def subnets_and_gpu_zone(run: StackRun) -> tuple[dict[str, tuple[str, str]], str]:
    subnets = {s.name: (s.inputs["availabilityZone"], s.inputs["cidrBlock"]) for s in run.of_type(SUBNET)}
    return subnets, run.one(NODE_GROUP, "gpu-nodes").inputs["placementGroupAvailabilityZone"]


def where(stack: str, aws: AwsState, offerings: dict[str, dict[str, list[str]]] | None = None) -> Where:
    """Where the program plans a stack file to serve in the account `aws` (__main__.read's
    `where_it_serves`: the zones, and the record it writes on its VPC), with no stack run. The
    tests that use it tie it to a run's graph."""
    settings = stack_settings(stack)
    return where_of(settings, aws.world(settings.region, offerings), stack)


class TestUnderMocks:
    """The whole program, day 1 and day 100, with AWS's answers changing in between."""

    DAY_1 = {"sa-east-1": {"g6.8xlarge": ["sa-east-1b", "sa-east-1c"]}}
    DAY_100 = {"sa-east-1": {"g6.8xlarge": ["sa-east-1a", "sa-east-1b", "sa-east-1c"]}}

    @pytest.fixture(scope="class")
    def day_1(self) -> StackRun:
        return run_stack(offerings=self.DAY_1)

    def test_a_change_in_zone_offerings_moves_nothing(self, day_1: StackRun):
        day_100 = run_stack(offerings=self.DAY_100, aws=deployed(day_1))
        assert subnets_and_gpu_zone(day_100) == subnets_and_gpu_zone(day_1)
        assert subnets_and_gpu_zone(day_1)[1] == "sa-east-1b"
        vpc = day_100.one("aws:ec2/vpc:Vpc").inputs["tags"]
        assert vpc == deployed(day_1).vpc_tags  # the record is written back as it was read

    def test_without_the_record_the_same_change_would_move_the_gpu_nodes(self, day_1: StackRun):
        """The control: this is what the record prevents. Where a first up on day 100 would put the GPU
        nodes is planned (`where`), which the day-1 run ties to the node group's zone."""
        assert where("dev", AwsState(), self.DAY_1).gpu_zone == subnets_and_gpu_zone(day_1)[1]
        fresh = where("dev", AwsState(), self.DAY_100)
        assert fresh.gpu_zone != subnets_and_gpu_zone(day_1)[1]

    def test_the_vpc_carries_the_record(self, dev_stack: StackRun):
        tags = dev_stack.one("aws:ec2/vpc:Vpc").inputs["tags"]
        assert tags[TAG_STACK] == "ray-llm-eks/dev"
        assert (tags[TAG_ZONES], tags[TAG_GPU_ZONE]) == ("sa-east-1a sa-east-1b", "sa-east-1a")
        assert tags[TAG_CREATOR] == "arn:aws:iam::123456789012:role/deployer"

    def test_a_gpu_zone_that_stops_offering_fails_before_any_resource(self, day_1: StackRun):
        later = {"sa-east-1": {"g6.8xlarge": ["sa-east-1a", "sa-east-1c"]}}
        with pytest.raises(
            ConfigError, match="sa-east-1b, where this stack's GPU nodes run, no longer offers"
        ):
            run_stack(offerings=later, aws=deployed(day_1))

    def test_another_stack_does_not_read_this_stacks_record(self, day_1: StackRun):
        """prod planned in the account where dev's VPC carries its record plans as on a first up; the
        record it writes is its own (the prod run every module shares writes that record on its VPC)."""
        other = where("prod", deployed(day_1))
        assert other.record == where("prod", AwsState()).record
        tags = other.record.tags(f"{P}/prod")
        assert (tags[TAG_STACK], tags[TAG_ZONES]) == ("ray-llm-eks/prod", "us-east-1a us-east-1b us-east-1c")
        vpc = run_stack(stack="prod").one("aws:ec2/vpc:Vpc").inputs["tags"]
        assert vpc.items() >= tags.items()
