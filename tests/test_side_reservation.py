"""Reserved capacity per side (issue 50, part C): `prefillNodes.capacityReservation` and
`decodeNodes.capacityReservation` mean what `gpuNodes.capacityReservation` means, for that side's node
group, and the two sides still end in one zone and one cluster placement group, or are refused naming
the keys. Planning is asked as the program asks it (`on_side_reservations` of what world/reads.py
`reserved_by_side` reads); two stack runs tie it to the resources: decode on an On-Demand Capacity
Reservation made in a cluster placement group beside an On-Demand prefill, and, on a team's cluster
(Pulumi.byo.example.yaml), both sides on one Capacity Block."""

from __future__ import annotations

from typing import Any

import pytest

from config import ConfigError
from config.sides import Side
from planning import plan_stack
from planning.cost import cost_report
from planning.reservation import ON_DEMAND, CapacityPlan, capacity_change_warnings, capacity_record
from planning.side_reservation import on_side_reservations, shared_placement_group
from planning.zones import StackRecord, plan_zones
from tests.fakes.capacity import BLOCK_ID, ODCR_ID, block, reservation
from tests.fakes.pulumi import PROJECT, AwsState, StackRun, deployed, run_stack, stack_settings, where_of
from world.reads import reserved_by_side

HETERO = "hetero.example"
ZONE = "sa-east-1a"
OTHER_ID = "cr-0dc70000000000002"
TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
PLACEMENT = "aws:ec2/placementGroup:PlacementGroup"
P5 = {"instanceType": "p5.48xlarge", "minSize": 0, "desiredSize": 1, "maxSize": 1}
BOTH_ON_A_BLOCK = {
    "prefillNodes": {**P5, "capacityReservation": BLOCK_ID},
    "decodeNodes": {**P5, "capacityReservation": BLOCK_ID},
    "model": {"prefillReplicas": 1, "decodeReplicas": 1},
}


def decode_odcr(**changes: Any) -> dict[str, Any]:
    """An On-Demand Capacity Reservation of the example's decode type, made in placement group kv."""
    given: dict[str, Any] = {
        "instance_type": "g6e.8xlarge",
        "zone": ZONE,
        "total": 1,
        "placement_group": "kv",
    }
    return reservation(ODCR_ID, **{**given, **changes})


def prefill_odcr(**changes: Any) -> dict[str, Any]:
    given: dict[str, Any] = {"instance_type": "g6.8xlarge", "zone": ZONE, "total": 1, "placement_group": "kv"}
    return reservation(OTHER_ID, **{**given, **changes})


def on_sides(
    sections: dict[str, dict[str, Any]], *reservations: dict[str, Any], stack: str = HETERO
) -> tuple[Any, dict[Side, CapacityPlan]]:
    """What the program plans of each side's reservation before any resource (__main__.read)."""
    settings = stack_settings(stack, **sections)
    world = AwsState(reservations=reservations).world(settings.region)
    return on_side_reservations(settings, reserved_by_side(settings, world), world.now())


def refused(sections: dict[str, dict[str, Any]], *reservations: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as raised:
        on_sides(sections, *reservations)
    return str(raised.value)


DECODE_RESERVED = {"decodeNodes": {"capacityReservation": ODCR_ID}}
BOTH_RESERVED = {
    "prefillNodes": {"capacityReservation": OTHER_ID},
    "decodeNodes": {"capacityReservation": ODCR_ID},
}


class TestPlanned:
    def test_a_side_on_a_reservation_in_a_placement_group_pins_the_zone_and_the_group(self):
        settings, plans = on_sides(DECODE_RESERVED, decode_odcr())
        assert list(plans) == ["decode"] and plans["decode"].section == "decodeNodes"
        assert settings.decode_nodes.availability_zone == ZONE
        # The On-Demand prefill side launches into the reservation's group too: one spine.
        assert shared_placement_group(plans) == "kv"
        (warning,) = [w for w in plans["decode"].warnings if "InsufficientInstanceCapacity" in w]
        assert warning.startswith(f"{PROJECT}:prefillNodes.capacityReservation is unset: the prefill GPU")
        (line,) = [n for n in plans["decode"].notes if n.startswith("GPU capacity")]
        assert line.startswith(f"GPU capacity (decodeNodes): On-Demand Capacity Reservation {ODCR_ID}")

    def test_both_sides_on_reservations_in_one_placement_group(self):
        _, plans = on_sides(BOTH_RESERVED, decode_odcr(), prefill_odcr())
        assert set(plans) == {"prefill", "decode"} and shared_placement_group(plans) == "kv"
        assert not [w for p in plans.values() for w in p.warnings if "InsufficientInstanceCapacity" in w]

    def test_both_sides_on_one_capacity_block_take_no_placement_group(self):
        _, plans = on_sides(BOTH_ON_A_BLOCK, block(total=2, zone=ZONE))
        assert shared_placement_group(plans) is None
        assert {p.capacity_type for p in plans.values()} == {"CAPACITY_BLOCK"}

    def test_a_side_on_gpu_nodes_runs_on_its_reservation_as_a_side(self):
        sections = {
            "gpuNodes": {"capacityReservation": ODCR_ID},
            "decodeNodes": {"instanceType": "g6e.8xlarge", "minSize": 0, "desiredSize": 1, "maxSize": 1},
        }
        found = reservation(ODCR_ID, zone="us-east-1b", total=2, placement_group="kv")
        settings, plans = on_sides(sections, found, stack="dev")
        assert list(plans) == ["prefill"] and plans["prefill"].section == "gpuNodes"
        assert settings.gpu_nodes.availability_zone == "us-east-1b"
        (warning,) = [w for w in plans["prefill"].warnings if "InsufficientInstanceCapacity" in w]
        assert warning.startswith(f"{PROJECT}:decodeNodes.capacityReservation is unset")

    def test_an_on_demand_side_follows_the_reservations_zone(self):
        settings, _ = on_sides(DECODE_RESERVED, decode_odcr(zone="sa-east-1b"))
        assert settings.decode_nodes.availability_zone == "sa-east-1b"
        assert settings.prefill_nodes.availability_zone is None


class TestRefusedNamingTheKey:
    def test_a_reservation_of_another_type_than_its_sides(self):
        said = refused(DECODE_RESERVED, decode_odcr(instance_type="g6.8xlarge"))
        assert f"{PROJECT}:decodeNodes.capacityReservation: {ODCR_ID} reserves g6.8xlarge" in said
        assert "set decodeNodes.instanceType: g6.8xlarge" in said

    def test_more_of_a_sides_nodes_than_reserved(self):
        said = refused({"decodeNodes": {"capacityReservation": ODCR_ID, "maxSize": 2}}, decode_odcr())
        assert f"{PROJECT}:decodeNodes.maxSize 2" in said and "set decodeNodes.maxSize to at most 1" in said

    def test_the_sides_reservations_in_two_zones(self):
        said = refused(BOTH_RESERVED, decode_odcr(), prefill_odcr(zone="sa-east-1b"))
        assert f"{PROJECT}:prefillNodes.capacityReservation" in said
        assert f"{PROJECT}:decodeNodes.capacityReservation" in said
        assert "two availability zones, but EFA does not cross zones" in said

    def test_a_reservation_in_another_zone_than_the_other_sides(self):
        sections = {**DECODE_RESERVED, "prefillNodes": {"availabilityZone": "sa-east-1b"}}
        said = refused(sections, decode_odcr())
        assert f"{PROJECT}:prefillNodes.availabilityZone in sa-east-1b" in said
        assert f"{PROJECT}:decodeNodes.capacityReservation (On-Demand Capacity Reservation" in said

    def test_the_sides_reservations_in_two_placement_groups(self):
        said = refused(BOTH_RESERVED, decode_odcr(), prefill_odcr(placement_group="other"))
        assert f"{PROJECT}:decodeNodes.capacityReservation is in cluster placement group kv" in said
        assert f"{PROJECT}:prefillNodes.capacityReservation in other" in said

    def test_a_reservation_made_in_no_placement_group_beside_an_on_demand_side(self):
        said = refused(DECODE_RESERVED, decode_odcr(placement_group=None))
        assert f"{PROJECT}:decodeNodes.capacityReservation: On-Demand Capacity Reservation {ODCR_ID}" in said
        assert "made in no cluster placement group" in said and "prefill side's GPU nodes (On-Demand" in said

    def test_a_capacity_block_beside_another_sides_nodes(self):
        sections = {"decodeNodes": {**P5, "capacityReservation": BLOCK_ID}, "model": BOTH_ON_A_BLOCK["model"]}
        said = refused(sections, block(total=1, zone=ZONE))
        assert (
            f"{PROJECT}:decodeNodes.capacityReservation: Capacity Block {BLOCK_ID} is a Capacity Block"
            in said
        )
        assert "takes no placement group" in said and "name the same block in both sides' sections" in said

    def test_both_sides_on_one_reservation_too_small_for_both(self):
        said = refused(BOTH_ON_A_BLOCK, block(total=1, zone=ZONE))
        assert "prefillNodes.maxSize 1 + " in said and "decodeNodes.maxSize 1 = 2" in said

    def test_a_reservation_outside_the_clusters_zones(self):
        sections = {**DECODE_RESERVED, "network": {"availabilityZones": ["sa-east-1b", "sa-east-1c"]}}
        settings, _ = on_sides(sections, decode_odcr())
        with pytest.raises(ConfigError) as raised:
            plan_zones(settings, ["sa-east-1a", "sa-east-1b", "sa-east-1c"])
        assert f"{PROJECT}:decodeNodes.capacityReservation: the reservation is in {ZONE}" in str(raised.value)

    def test_a_sides_subnet_on_the_stacks_own_vpc(self):
        with pytest.raises(ConfigError, match=r"prefillNodes\.subnetId: only with ray-llm-eks:cluster\."):
            stack_settings(HETERO, prefillNodes={"subnetId": "subnet-01234567"})

    def test_types_offered_together_in_one_zone_name_each_sides_key(self):
        with pytest.raises(ConfigError) as raised:
            plan_zones(stack_settings(HETERO), [ZONE])
        assert (
            str(raised.value)
            .split("\n")[1]
            .startswith(
                f"  - {PROJECT}:prefillNodes.instanceType and {PROJECT}:decodeNodes.instanceType: g6.8xlarge "
                "and g6e.8xlarge in sa-east-1 is offered in 1 zone(s)"
            )
        )

    def test_a_resource_group_of_another_region(self):
        arn = "arn:aws:resource-groups:us-east-1:123456789012:group/gpu"
        with pytest.raises(ConfigError, match=r"decodeNodes\.capacityReservation: the resource group is in"):
            stack_settings(HETERO, decodeNodes={"capacityReservation": arn})


class TestCostAndRecord:
    def test_each_sides_line_as_its_capacity_bills(self):
        settings, plans = on_sides(DECODE_RESERVED, decode_odcr())
        prices: dict[str, float | None] = {"ec2:g6.8xlarge": 2.0, "ec2:g6e.8xlarge": 4.0}
        report = cost_report(settings, prices, 2, side_capacity=plans)
        for lines in (report.serving, report.at_most, report.parked):
            decode = lines[-1]
            assert decode.part.startswith(f"decode GPU nodes on On-Demand Capacity Reservation {ODCR_ID}")
            assert (decode.count, decode.hourly) == (1, 4.0)  # billed parked too
        assert report.parked[-2].count == 0  # prefill, On-Demand, parked

    def test_one_block_for_both_sides_is_paid_up_front(self):
        settings, plans = on_sides(BOTH_ON_A_BLOCK, block(total=2, zone=ZONE))
        report = cost_report(settings, {}, 2, side_capacity=plans)
        assert [line.hourly for line in report.at_most[-2:]] == [0.0, 0.0]
        assert report.notes == (
            f"Capacity Block {BLOCK_ID} was paid at purchase (EC2 shows its price on the invoice only)",
        )

    def test_a_reserved_sides_idle_nodes_are_billed_used_or_not(self):
        sections = {"decodeNodes": {"capacityReservation": ODCR_ID, "desiredSize": 2, "maxSize": 2}}
        settings, _ = on_sides(sections, decode_odcr(total=2))
        warnings = plan_stack(settings, stack=HETERO).warnings
        (idle,) = [w for w in warnings if w.startswith(f"{PROJECT}:decodeNodes: the decode workers use")]
        assert f"paid for and idle (reservation {ODCR_ID} bills them used or not)" in idle

    def test_the_record_names_each_sides_capacity_and_a_move_warns(self):
        reserved = stack_settings(HETERO, **DECODE_RESERVED)
        assert capacity_record(reserved) == f"prefill={ON_DEMAND} decode={ODCR_ID}"
        assert capacity_record(stack_settings(HETERO)) == ON_DEMAND  # as before part C
        (warning,) = capacity_change_warnings(reserved, ON_DEMAND)
        assert warning.startswith(f"{PROJECT}:prefillNodes.capacityReservation, {PROJECT}:decodeNodes")
        assert f"this up moves them to prefill=on-demand decode={ODCR_ID}" in warning
        assert capacity_change_warnings(reserved, capacity_record(reserved)) == ()


def test_ops_plan_names_each_sides_reservation_and_where_both_are_placed():
    from ops.plan import gpu_node_lines

    zones = [ZONE, "sa-east-1b"]
    lines = gpu_node_lines(stack_settings(HETERO, **DECODE_RESERVED), ZONE, zones)
    assert lines[1] == f"  GPU, decode (decodeNodes): 1 x g6e.8xlarge in {ZONE} (min 0, max 1), on {ODCR_ID}"
    assert lines[2].startswith("  both sides in the reservation's cluster placement group;")
    on_a_block = gpu_node_lines(stack_settings(HETERO, **BOTH_ON_A_BLOCK), ZONE, zones, block=True)
    assert on_a_block[2].startswith("  both sides on one Capacity Block, in no placement group;")


@pytest.fixture(scope="module")
def decode_on_odcr() -> StackRun:
    return run_stack(stack=HETERO, overrides=DECODE_RESERVED, aws=AwsState(reservations=(decode_odcr(),)))


TEAM_BLOCK: dict[str, dict[str, Any]] = {
    "gpuNodes": {**P5, "capacityReservation": BLOCK_ID},
    "decodeNodes": {**P5, "capacityReservation": BLOCK_ID},
    "model": {"prefillReplicas": 1, "decodeReplicas": 1},
}
"""Pulumi.byo.example.yaml's keys for prefill on gpuNodes' group and decode on its own, both on one
Capacity Block of p5.48xlarge (`team_block`)."""
BLOCK_THERE = AwsState(reservations=(block(total=2, zone="us-east-1a"),))
"""The account before `team_block`'s first up: the block, in the team's GPU subnet's zone."""


@pytest.fixture(scope="module")
def team_block() -> StackRun:
    """Pulumi.byo.example.yaml (a team's cluster) with prefill on gpuNodes' group and decode on its
    own, both on one Capacity Block of p5.48xlarge."""
    return run_stack(stack="byo.example", overrides=TEAM_BLOCK, aws=BLOCK_THERE)


def templates(run: StackRun) -> dict[str, dict[str, Any]]:
    return {r.name: r.inputs for r in run.of_type(TEMPLATE) if r.name.startswith("gpu-")}


class TestTheNodeGroups:
    def test_the_reserved_side_targets_it_and_both_launch_into_its_placement_group(self, decode_on_odcr):
        found = templates(decode_on_odcr)
        decode, prefill = found["gpu-decode-nodes-template"], found["gpu-prefill-nodes-template"]
        assert decode["capacityReservationSpecification"] == {
            "capacityReservationTarget": {"capacityReservationId": ODCR_ID},
            "capacityReservationPreference": "capacity-reservations-only",
        }
        assert prefill.get("capacityReservationSpecification") is None  # On-Demand
        assert decode["placement"] == prefill["placement"] == {"groupName": "kv"}
        assert not decode_on_odcr.of_type(PLACEMENT)  # the reservation's group, none of the stack's

    def test_in_the_reservations_zone_with_the_record_and_the_coverage(self, decode_on_odcr):
        groups = decode_on_odcr.of_type(NODE_GROUP)
        assert {tuple(g.inputs["subnetIds"]) for g in groups} == {(f"subnet/network-private-{ZONE}",)}
        assert decode_on_odcr.exports["gpuAvailabilityZone"] == ZONE
        (vpc,) = decode_on_odcr.of_type("aws:ec2/vpc:Vpc")
        assert vpc.inputs["tags"][f"{PROJECT}/gpu-capacity"] == f"prefill=on-demand decode={ODCR_ID}"
        assert any(i.startswith("GPU capacity (decodeNodes): ") for i in decode_on_odcr.infos)
        cost = next(i for i in decode_on_odcr.infos if "hourly on-demand cost" in i)
        assert f"decode GPU nodes on On-Demand Capacity Reservation {ODCR_ID}" in cost

    def test_both_sides_on_one_block_as_eks_requires_it_without_a_placement_group(self, team_block):
        groups = {g.name: g.inputs for g in team_block.of_type(NODE_GROUP) if g.name.startswith("gpu-")}
        assert set(groups) == {"gpu-prefill-nodes", "gpu-decode-nodes"}
        assert {g["capacityType"] for g in groups.values()} == {"CAPACITY_BLOCK"}
        for template in templates(team_block).values():
            assert template["instanceMarketOptions"] == {"marketType": "capacity-block"}
            assert template["capacityReservationSpecification"]["capacityReservationTarget"] == {
                "capacityReservationId": BLOCK_ID
            }
            assert not template.get("placement")
        assert not team_block.of_type(PLACEMENT)
        (line,) = [i for i in team_block.infos if i.startswith("GPU capacity")]
        assert line.startswith(f"GPU capacity (gpuNodes and decodeNodes): Capacity Block {BLOCK_ID}")
        assert "2 GPU node(s) run on it, 0 reserved stay idle" in line
        rule = next(iter(team_block.of_type("kubernetes:monitoring.coreos.com/v1:PrometheusRule")))
        alerts = [r.get("alert") for g in rule.inputs["spec"]["groups"] for r in g["rules"]]  # and records
        assert "CapacityBlockEnding" in alerts


class TestOnATeamsCluster:
    """Per-side groups on `cluster.existingClusterName` (issue 50 part C, item 2 of the brief)."""

    def test_both_sides_share_one_efa_security_group_that_keeps_the_record(self, team_block):
        (group,) = team_block.of_type("aws:ec2/securityGroup:SecurityGroup")
        assert group.name == "gpu-efa"  # the name a shared group's has: deployed() reads it back
        assert group.inputs["ingress"][0]["self"] and group.inputs["egress"][0]["self"]
        assert group.inputs["tags"][f"{PROJECT}/gpu-capacity"] == f"prefill={BLOCK_ID} decode={BLOCK_ID}"
        for template in templates(team_block).values():
            for interface in template["networkInterfaces"]:
                assert interface["securityGroups"] == ["sg-0c1a5t3r5ecur1ty", "securityGroup/gpu-efa"]

    def test_the_next_up_reads_the_record_back_from_the_shared_group_and_moves_nothing(self, team_block):
        """A second `up` reads what the first wrote on the group (world/offline.py `existing_record`, as
        the real read finds the group by its stack tag) and plans the same record, quietly; the same up
        with decode moved off the block says its nodes are replaced, which it can say only from the
        record (a first up, with none, says nothing)."""
        after = deployed(team_block, BLOCK_THERE)
        (group,) = team_block.of_type("aws:ec2/securityGroup:SecurityGroup")
        settings = stack_settings("byo.example", **TEAM_BLOCK)
        again = where_of(settings, after.world(settings.region), "byo.example")
        assert again.record == StackRecord.from_tags(group.inputs["tags"])
        assert again.record.gpu_capacity == f"prefill={BLOCK_ID} decode={BLOCK_ID}"
        assert again.warnings == ()
        assert (
            "addons.kuberay: auto: the stack's own KubeRay operator (installed by an earlier up)"
            in again.infos
        )
        moved = stack_settings("byo.example", **{**TEAM_BLOCK, "decodeNodes": P5})
        (warning,) = where_of(moved, after.world(settings.region), "byo.example").warnings
        assert f"this up moves them to prefill={BLOCK_ID} decode=on-demand: they are replaced" in warning
        assert where_of(moved, BLOCK_THERE.world(settings.region), "byo.example").warnings == ()

    def test_one_subnet_and_the_stacks_autoscaler_tag_on_each_group(self, team_block):
        groups = [g for g in team_block.of_type(NODE_GROUP) if g.name.startswith("gpu-")]
        assert {tuple(g.inputs["subnetIds"]) for g in groups} == {("subnet-0aa0000000000000a",)}
        tags = {t.name: t.inputs["tag"]["key"] for t in team_block.of_type("aws:autoscaling/tag:Tag")}
        key = f"{PROJECT}/cluster-autoscaler/byo.example"
        assert tags == {"gpu-prefill-autoscaler-tag": key, "gpu-decode-autoscaler-tag": key}

    def test_a_p5_gets_one_efa_interface_per_network_card(self, team_block):
        """Moved from tests/test_existing_cluster.py (which made a run of its own for it): any p5 node
        group on a team's cluster, here each side's."""
        for name, template in templates(team_block).items():
            interfaces = template["networkInterfaces"]
            assert len(interfaces) == 32, name  # EC2's maximumNetworkCards for p5.48xlarge
            assert [i["interfaceType"] for i in interfaces] == ["efa"] + ["efa-only"] * 31
            assert {i["networkCardIndex"] for i in interfaces} == set(range(32))
            assert {i["deviceIndex"] for i in interfaces[1:]} == {1}

    def test_the_sides_in_two_subnets_are_refused(self):
        subnets = {
            "prefillNodes": {"subnetId": "subnet-01234567"},
            "decodeNodes": {"subnetId": "subnet-89abcdef"},
        }
        with pytest.raises(
            ConfigError, match=r"decodeNodes\.subnetId subnet-89abcdef, .*prefillNodes\.subnetId"
        ):
            stack_settings("byo.example", **subnets)

    def test_a_sides_subnet_names_its_key_when_unusable(self):
        from planning.existing_cluster import plan_existing
        from tests.fakes.existing import TeamCluster

        settings = stack_settings(
            "byo.example", decodeNodes={"instanceType": "g6.8xlarge", "subnetId": "subnet-0ffffffffffffffff"}
        )
        team = TeamCluster.named("platform-prod", "us-east-1")
        with pytest.raises(
            ConfigError, match=r"decodeNodes\.subnetId: subnet-0ffffffffffffffff is not a subnet"
        ):
            plan_existing(settings, team.description(), ["us-east-1a"], None)
