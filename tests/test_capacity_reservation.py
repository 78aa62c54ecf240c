"""Reserved GPU capacity (issue 31): with `gpuNodes.capacityReservation` the program reads the reservation
(the offline world's answers, world/offline.py, whose clock stands still) and the GPU node
group targets it, in its zone, with what EKS requires of a Capacity Block; every contradiction is refused
before any resource, naming the key and what to do; the preview logs the coverage, the cost and the end;
and a Capacity Block's end is an alert that promtool proves.
"""

from __future__ import annotations

import shutil
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml

from config import ConfigError
from manifests.observability.rules import alert_rules
from planning.cost import cost_report
from planning.reservation import (
    CapacityPlan,
    Reservation,
    on_reservation,
    plan_capacity,
    reservations_from_api,
)
from planning.where import capacity_change
from planning.zones import TAG_GPU_CAPACITY
from tests.fakes import pulumi as fakes
from tests.fakes.capacity import (
    BLOCK_ID,
    GROUP_ARN,
    NOW,
    ODCR_ID,
    block,
    docs_reservation_example,
    reservation,
)
from tests.fakes.pulumi import AwsState, StackRun, deployed, run_stack, stack_settings
from tests.validators import promtool_in

TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
PLACEMENT = "aws:ec2/placementGroup:PlacementGroup"
ARN_PREFIX = "arn:aws:ec2:us-east-1:123456789012"
P5 = {"instanceType": "p5.48xlarge", "minSize": 0, "desiredSize": 2, "maxSize": 2}


def on(
    *reservations: dict[str, Any], groups: dict[str, tuple[str, ...]] | None = None, **aws: Any
) -> AwsState:
    return AwsState(reservations=reservations, resource_groups=groups or {}, **aws)


def odcr_run(*reservations: dict[str, Any], stack: str = "prod", **gpu: Any) -> StackRun:
    """The prod example (us-east-1, 3 x g6.8xlarge) on an On-Demand Capacity Reservation."""
    found = reservations or (reservation(total=3, available=3),)
    return run_stack(
        stack=stack,
        overrides={"gpuNodes": {"capacityReservation": ODCR_ID, **gpu}},
        aws=on(*found),
    )


def block_run(*reservations: dict[str, Any], stack: str = "prod", **overrides: dict[str, Any]) -> StackRun:
    """The prod example on a Capacity Block of two p5.48xlarge, one prefill and one decode worker."""
    sections = {
        "gpuNodes": {"capacityReservation": BLOCK_ID, **P5, **overrides.pop("gpuNodes", {})},
        "model": {"prefillReplicas": 1, "decodeReplicas": 1},
        **overrides,
    }
    return run_stack(stack=stack, overrides=sections, aws=on(*(reservations or (block(),))))


def planned(
    sections: dict[str, dict[str, Any]], *reservations: dict[str, Any], stack: str = "prod"
) -> CapacityPlan:
    """What the program plans of the reservation before any resource (__main__.read's `on_reservation`
    of what world/reads.py `reserved` reads), with no stack run: the preview's coverage lines and
    warnings. TestThePreviewSays ties it to what a run's preview says."""
    from world.reads import reserved

    settings = stack_settings(stack, **sections)
    world = on(*reservations).world(settings.region)
    _, capacity = on_reservation(settings, reserved(settings, world), world.now())
    assert capacity is not None
    return capacity


def odcr_planned(*reservations: dict[str, Any], **gpu: Any) -> CapacityPlan:
    """`odcr_run`'s reservation as planned (`planned`)."""
    found = reservations or (reservation(total=3, available=3),)
    return planned({"gpuNodes": {"capacityReservation": ODCR_ID, **gpu}}, *found)


def block_planned(*reservations: dict[str, Any]) -> CapacityPlan:
    """`block_run`'s Capacity Block as planned (`planned`)."""
    sections = {
        "gpuNodes": {"capacityReservation": BLOCK_ID, **P5},
        "model": {"prefillReplicas": 1, "decodeReplicas": 1},
    }
    return planned(sections, *(reservations or (block(),)))


def refused(run, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(ConfigError) as raised:
        run(*args, **kwargs)
    assert fakes.LAST_RUN is not None and fakes.LAST_RUN.registrations == [], "refused before any resource"
    return str(raised.value)


def gpu_template(run: StackRun) -> dict[str, Any]:
    return next(r for r in run.of_type(TEMPLATE) if r.name.startswith("gpu")).inputs


def gpu_group(run: StackRun) -> dict[str, Any]:
    return next(r for r in run.of_type(NODE_GROUP) if r.name.startswith("gpu")).inputs


ODCR_SECTIONS = {"gpuNodes": {"capacityReservation": ODCR_ID}, "network": {"maxAvailabilityZones": 2}}
ODCR_ENDING = reservation(zone="us-east-1d", total=3, available=3, end=NOW + timedelta(hours=5))
"""The `odcr` run's reservation: in the region's fourth zone, ending in 5 hours."""
GROUP_MEMBERS = (
    reservation(zone="us-east-1a", total=2, placement_group="gpu-cluster"),
    reservation("cr-0dc70000000000002", zone="us-east-1a", total=1, placement_group="gpu-cluster"),
)
"""The `reserved_group` run's resource group: two ODCRs made in the cluster placement group
`gpu-cluster`, in the zone prod's first up put its GPU nodes in."""
LATER = block(state="scheduled", start=NOW + timedelta(days=2), end=NOW + timedelta(days=9), available=0)
"""A Capacity Block that starts in two days."""


@pytest.fixture(scope="module")
def odcr() -> StackRun:
    """The prod example's first up on an On-Demand Capacity Reservation, at most two zones. One run
    holds three independent things its tests ask: how the GPU nodes target a reservation by ID (the
    launch template, EFA, the placement-group warning); that a first up puts a subnet in the
    reservation's zone when it is not among the zones it would pick (us-east-1d); and that a
    reservation ending soon is a preview warning (TestThePreviewSays ties it). The zone and the end
    change neither the target nor the template."""
    return run_stack(stack="prod", overrides=ODCR_SECTIONS, aws=on(ODCR_ENDING))


@pytest.fixture(scope="module")
def capacity_block() -> StackRun:
    return block_run()


@pytest.fixture(scope="module")
def prod_deployed() -> AwsState:
    """The account as the prod example's up on On-Demand GPU nodes left it (the prod run every module
    shares): zones a, b and c, the GPU nodes in us-east-1a."""
    return deployed(run_stack(stack="prod"))


@pytest.fixture(scope="module")
def reserved_group(prod_deployed: AwsState) -> StackRun:
    """The deployed prod example moved onto a resource group of reservations made in a cluster
    placement group. One run holds three independent things its tests ask: the group is targeted by
    its ARN; reservations made in a placement group are launched into that group; and moving a
    deployed stack onto reservations warns that its GPU nodes are replaced (the record on the VPC says
    on-demand). The targeting and the placement are the launch template's, the move is the record's."""
    return run_stack(
        stack="prod",
        overrides={"gpuNodes": {"capacityReservation": GROUP_ARN}},
        aws=replace(
            prod_deployed,
            reservations=GROUP_MEMBERS,
            resource_groups={GROUP_ARN: tuple(r["CapacityReservationId"] for r in GROUP_MEMBERS)},
        ),
    )


@pytest.fixture(scope="module")
def parked_on_a_team_cluster() -> StackRun:
    """The byo example (a team's cluster) on a Capacity Block that has not started, parked until then.
    One run holds two independent things its tests ask: a block on a team's cluster (its zone's subnet,
    the EFA group's record), and a parked stack deployed before its block starts. Neither the block's
    state nor parking changes the subnet or the record."""
    return block_run(LATER, stack="byo.example", autoscaling={"parked": True}, gpuNodes={"desiredSize": 0})


class TestTheGpuNodesTargetIt:
    def test_an_odcr_is_targeted_by_id_on_demand_in_its_zone(self, odcr):
        template, group = gpu_template(odcr), gpu_group(odcr)
        assert template["capacityReservationSpecification"] == {
            "capacityReservationPreference": "capacity-reservations-only",
            "capacityReservationTarget": {"capacityReservationId": ODCR_ID},
        }
        assert "instanceMarketOptions" not in template
        assert group["capacityType"] == "ON_DEMAND" and group["instanceTypes"] == ["g6.8xlarge"]
        assert group["subnetIds"] == ["subnet/network-private-us-east-1d"]  # the reservation's zone
        assert odcr.exports["gpuAvailabilityZone"] == "us-east-1d"
        assert not odcr.of_type("eks:index:ManagedNodeGroup") or all(
            not r.name.startswith("gpu") for r in odcr.of_type("eks:index:ManagedNodeGroup")
        )

    def test_its_nodes_get_efa_on_every_card_in_the_cluster_security_group_and_the_hardening(self, odcr):
        template = gpu_template(odcr)
        (card,) = template["networkInterfaces"]  # g6.8xlarge: one network card
        assert card["interfaceType"] == "efa" and card["securityGroups"] == ["sg-cluster"]
        assert template["metadataOptions"]["httpPutResponseHopLimit"] == 1
        assert template["blockDeviceMappings"][0]["ebs"]["encrypted"] == "true"
        assert gpu_group(odcr)["taints"][0]["key"] == "nvidia.com/gpu"

    def test_an_odcr_outside_a_placement_group_gets_none_and_says_so(self, odcr):
        assert "placement" not in gpu_template(odcr) and not odcr.of_type(PLACEMENT)
        assert any("not made in a cluster placement group" in w for w in odcr.warnings)

    def test_reservations_in_a_placement_group_launch_into_that_group(self, reserved_group):
        run = reserved_group
        assert gpu_template(run)["placement"] == {"groupName": "gpu-cluster"}
        assert not run.of_type(PLACEMENT)
        assert not any("placement group" in w for w in run.warnings)

    def test_a_capacity_block_as_eks_requires_it_without_a_placement_group(self, capacity_block):
        template, group = gpu_template(capacity_block), gpu_group(capacity_block)
        assert template["instanceMarketOptions"] == {"marketType": "capacity-block"}
        assert template["instanceType"] == "p5.48xlarge"
        assert template["capacityReservationSpecification"] == {
            "capacityReservationTarget": {"capacityReservationId": BLOCK_ID}
        }  # a block's market type confines it; EKS documents its template with the target alone
        assert len(template["networkInterfaces"]) == 32  # p5.48xlarge's network cards, an EFA each
        assert group["capacityType"] == "CAPACITY_BLOCK" and "instanceTypes" not in group
        assert "placement" not in template and not capacity_block.of_type(PLACEMENT)

    def test_a_resource_group_is_targeted_by_its_arn_and_never_spills_onto_on_demand(self, reserved_group):
        """EC2: instances that target a group run On-Demand when it has no matching capacity, unless the
        preference is `capacity-reservations-only`."""
        run = reserved_group
        assert gpu_template(run)["capacityReservationSpecification"] == {
            "capacityReservationPreference": "capacity-reservations-only",
            "capacityReservationTarget": {"capacityReservationResourceGroupArn": GROUP_ARN},
        }
        (line,) = [i for i in run.infos if i.startswith("GPU capacity")]
        assert "3 x g6.8xlarge" in line and "none On-Demand" in line and "capacity-reservations-only" in line

    def test_on_an_existing_cluster_the_block_and_its_zone(self, parked_on_a_team_cluster):
        run = parked_on_a_team_cluster
        group = gpu_group(run)
        assert group["capacityType"] == "CAPACITY_BLOCK"
        assert group["subnetIds"] == ["subnet-0bb0000000000000b"]  # the team's private subnet in zone b
        efa = next(r for r in run.of_type("aws:ec2/securityGroup:SecurityGroup") if r.name.endswith("-efa"))
        assert efa.inputs["tags"]["ray-llm-eks/gpu-capacity"] == BLOCK_ID
        assert not run.of_type(PLACEMENT)

    def test_without_a_reservation_nothing_changes(self):
        dev = run_stack()
        assert dev.one("eks:index:ManagedNodeGroup", "gpu-nodes").inputs["enableEfaSupport"] is True
        assert not any(r.name.startswith("gpu") for r in dev.of_type(NODE_GROUP))


class TestZones:
    def test_the_first_up_puts_a_subnet_in_the_reservations_zone(self, odcr):
        """Two zones at most, and the reservation in the region's fourth: the cluster takes it."""
        assert odcr.exports["clusterZones"] == ["us-east-1a", "us-east-1d"]
        assert odcr.exports["gpuAvailabilityZone"] == "us-east-1d"

    def test_a_deployed_stack_without_a_subnet_there_is_refused_with_the_key_to_set(self, prod_deployed):
        """Deployed in zones a, b and c; the reservation in d."""
        message = refused(
            run_stack,
            stack="prod",
            overrides={"gpuNodes": {"capacityReservation": ODCR_ID}},
            aws=replace(prod_deployed, reservations=(reservation(zone="us-east-1d", total=3),)),
        )
        assert "the reservation is in us-east-1d" in message and "network.availabilityZones" in message

    def test_moving_onto_a_reservation_warns_that_the_gpu_nodes_are_replaced(
        self, prod_deployed, reserved_group
    ):
        assert prod_deployed.vpc_tags and prod_deployed.vpc_tags[TAG_GPU_CAPACITY] == "on-demand"
        assert any(f"moves them to {GROUP_ARN}" in w and "replaced" in w for w in reserved_group.warnings)
        # The up records the reservation on the VPC, so the next preview (the record the program reads
        # back, and where.py's check of it, as `reserved_group`'s preview made it) warns no more.
        after = deployed(reserved_group)
        assert after.vpc_tags and after.vpc_tags[TAG_GPU_CAPACITY] == GROUP_ARN
        settings = stack_settings("prod", gpuNodes={"capacityReservation": GROUP_ARN})
        record = after.world(settings.region).stack_record("ray-llm-eks/prod")
        assert capacity_change(settings, record) == ()


class TestRefusedAtPreview:
    def test_an_id_ec2_does_not_know(self):
        message = refused(odcr_run, reservation("cr-0dc70000000000009"))
        assert (
            "gpuNodes.capacityReservation" in message and "InvalidCapacityReservationId.NotFound" in message
        )

    def test_another_instance_type(self):
        message = refused(odcr_run, reservation(instance_type="g6e.8xlarge", total=3))
        assert "reserves g6e.8xlarge, not ray-llm-eks:gpuNodes.instanceType g6.8xlarge" in message
        assert "set gpuNodes.instanceType: g6e.8xlarge" in message

    def test_another_zone_than_the_stack_file_pins(self):
        message = refused(odcr_run, reservation(total=3), availabilityZone="us-east-1a")
        assert "is in us-east-1b, not ray-llm-eks:gpuNodes.availabilityZone us-east-1a" in message

    @pytest.mark.parametrize(("size", "value"), [("desiredSize", 3), ("maxSize", 4)])
    def test_more_nodes_than_reserved(self, size, value):
        sizes = {"minSize": 0, "desiredSize": 2, "maxSize": 3, size: value}
        message = refused(odcr_run, reservation(total=2), **sizes)
        assert f"reserves 2 x g6.8xlarge, fewer than ray-llm-eks:gpuNodes.{size} {value}" in message
        assert "never on On-Demand" in message and f"gpuNodes.{size} to at most 2" in message

    @pytest.mark.parametrize("state", ["expired", "cancelled", "payment-failed"])
    def test_a_block_that_has_ended_or_failed(self, state):
        message = refused(block_run, block(state=state, end=NOW - timedelta(hours=3)))
        assert f"Capacity Block {BLOCK_ID} is {state}" in message and "no node can run on it" in message

    def test_a_block_that_has_not_started_unless_parked(self, parked_on_a_team_cluster):
        later = LATER
        message = refused(block_run, later)
        assert "is scheduled and has no capacity yet, starts at 2026-12-04 12:00 UTC" in message
        assert "autoscaling.parked: true" in message
        asks_for_nodes = refused(block_run, later, autoscaling={"parked": True})
        assert "the GPU node group must start empty" in asks_for_nodes and "desiredSize: 0" in asks_for_nodes
        parked = parked_on_a_team_cluster  # the byo example: a team's cluster changes none of this
        assert any("parked until then" in i for i in parked.infos)
        assert gpu_group(parked)["capacityType"] == "CAPACITY_BLOCK"

    def test_a_group_with_a_block_or_of_several_types(self):
        blocks = refused(
            run_stack,
            stack="prod",
            overrides={"gpuNodes": {"capacityReservation": GROUP_ARN, **P5}},
            aws=on(block(), groups={GROUP_ARN: (BLOCK_ID,)}),
        )
        assert "holds Capacity Blocks" in blocks and "set the block's ID" in blocks
        mixed = refused(
            run_stack,
            stack="prod",
            overrides={"gpuNodes": {"capacityReservation": GROUP_ARN}},
            aws=on(
                reservation(total=2),
                reservation("cr-0dc70000000000002", instance_type="g6e.8xlarge"),
                groups={GROUP_ARN: (ODCR_ID, "cr-0dc70000000000002")},
            ),
        )
        assert "several instance types (g6.8xlarge, g6e.8xlarge)" in mixed

    def test_an_empty_group(self):
        message = refused(
            run_stack,
            stack="prod",
            overrides={"gpuNodes": {"capacityReservation": GROUP_ARN}},
            aws=on(groups={GROUP_ARN: ()}),
        )
        assert "holds no capacity reservations" in message

    def test_not_linux_or_not_default_tenancy(self):
        message = refused(odcr_run, reservation(total=3, InstancePlatform="Windows", Tenancy="dedicated"))
        assert "reserves Windows instances" in message and "reserves dedicated tenancy" in message

    def test_a_reference_that_is_neither_an_id_nor_a_group_or_another_regions_group(self):
        with pytest.raises(ConfigError, match="is neither a capacity reservation ID"):
            stack_settings("prod", gpuNodes={"capacityReservation": "cr-123"})
        with pytest.raises(ConfigError, match="the resource group is in eu-west-1, not aws:region us-east-1"):
            stack_settings(
                "prod",
                gpuNodes={"capacityReservation": "arn:aws:resource-groups:eu-west-1:123456789012:group/gpus"},
            )


class TestWhatOthersTakeOfIt:
    """AvailableInstanceCount and InstanceMatchCriteria (EC2's DescribeCapacityReservations)."""

    def test_a_partly_used_odcr_is_counted_and_warned_when_the_nodes_do_not_fit_what_is_free(self):
        run = odcr_planned(reservation(total=3, available=1), minSize=2, desiredSize=2, maxSize=3)
        (line,) = [i for i in run.notes if i.startswith("GPU capacity")]
        assert "2 GPU node(s) run on it, 1 reserved stay idle" in line
        (warning,) = [w for w in run.warnings if "free now" in w]
        assert "has 1 of 3 reserved instance(s) free now; 2 run in it already" in warning
        assert "launches beyond the free capacity fail" in warning

    def test_instances_of_others_are_named_in_the_coverage(self):
        run = odcr_planned(reservation(total=6, available=1), minSize=3, desiredSize=3, maxSize=3)
        (line,) = [i for i in run.notes if i.startswith("GPU capacity")]
        assert "3 GPU node(s) run on it, 2 taken by other instances, 1 reserved stay idle" in line
        quiet = odcr_planned(reservation(total=6, available=3), minSize=3, desiredSize=3, maxSize=3)
        assert not any("free now" in w for w in quiet.warnings)  # 3 free cover desiredSize 3

    def test_an_open_reservation_warns_that_any_matching_instance_takes_it(self):
        run = odcr_planned(reservation(total=3, InstanceMatchCriteria="open"))
        (warning,) = [w for w in run.warnings if "is open (InstanceMatchCriteria)" in w]
        assert "--instance-match-criteria targeted" in warning
        assert not any("is open" in w for w in odcr_planned(reservation(total=3)).warnings)


class TestReferences:
    @pytest.mark.parametrize(
        "arn",
        [
            "arn:aws:resource-groups:us-east-1:123456789012:group/" + "g" * 300,
            "arn:aws:resource-groups:us-east-1:123456789012:group/gpu-pool/0123456789abcdefghijklmnop",
            "arn:aws-us-gov:resource-groups:us-gov-west-1:123456789012:group/gpu_pool.v2",
        ],
    )
    def test_every_resource_group_arn_form_is_accepted(self, arn):
        from config.cluster import GpuNodesConfig

        config = GpuNodesConfig.model_validate(
            {
                "instanceType": "g6.8xlarge",
                "minSize": 0,
                "desiredSize": 0,
                "maxSize": 2,
                "capacityReservation": arn,
            }
        )
        assert config.capacity_reservation == arn

    @pytest.mark.parametrize(
        "arn",
        [
            "arn:aws:resource-groups:us-east-1:123456789012:group/" + "g" * 301,
            "arn:aws:resource-groups:us-east-1:123456789012:group/gpu pool",
            "arn:aws:resource-groups:us-east-1:123456789012:group/gpu/SHORT",
        ],
    )
    def test_what_resource_groups_cannot_name_is_refused(self, arn):
        from pydantic import ValidationError

        from config.cluster import GpuNodesConfig

        with pytest.raises(ValidationError, match="neither a capacity reservation ID"):
            GpuNodesConfig.model_validate(
                {
                    "instanceType": "g6.8xlarge",
                    "minSize": 0,
                    "desiredSize": 0,
                    "maxSize": 2,
                    "capacityReservation": arn,
                }
            )

    def test_a_groups_name_is_its_name_in_either_form(self):
        from planning.reservation import group_name

        assert (
            group_name("arn:aws:resource-groups:us-east-1:1:group/gpu-pool/0123456789abcdefghijklmnop")
            == "gpu-pool"
        )
        assert group_name("arn:aws:resource-groups:us-east-1:1:group/gpu-pool") == "gpu-pool"


class TestThePreviewSays:
    def test_coverage_cost_and_end_of_a_block(self, capacity_block, odcr):
        (line,) = [i for i in capacity_block.infos if i.startswith("GPU capacity")]
        assert f"Capacity Block {BLOCK_ID}: 2 x p5.48xlarge in us-east-1b" in line
        assert "2026-12-01 12:00 UTC to 2026-12-08 12:00 UTC (6 d 0 h left)" in line
        assert "2 GPU node(s) run on it, 0 reserved stay idle, none On-Demand" in line
        assert "paid up front at purchase" in line
        (cost,) = [i for i in capacity_block.infos if i.startswith("hourly on-demand cost")]
        assert "on Capacity Block cr-0b10c0000000000a1, paid up front: 2 x $0.0000 = $0.00/h" in cost
        assert "price on the invoice only" in cost
        assert any("park the stack" in i for i in capacity_block.infos)  # EKS updates a block's group at 0
        # What the tests of `planned` ask is what the preview says (a reservation ending soon, the
        # `odcr` run's, also warns).
        ending = planned(ODCR_SECTIONS, ODCR_ENDING)
        assert any("ends at 2026-12-02 17:00 UTC (5 h 0 min from now)" in w for w in ending.warnings)
        for capacity, run in ((block_planned(), capacity_block), (ending, odcr)):
            assert capacity.notes and set(capacity.notes) <= set(run.infos)
            assert set(capacity.warnings) <= set(run.warnings)

    def test_an_odcr_costs_every_reserved_instance_even_parked(self):
        run = odcr_planned(reservation(total=3), minSize=0, desiredSize=1, maxSize=3)
        (line,) = [i for i in run.notes if i.startswith("GPU capacity")]
        assert "1 GPU node(s) run on it, 2 reserved stay idle" in line and "used or not" in line
        settings = stack_settings(
            "prod", gpuNodes={"capacityReservation": ODCR_ID, "minSize": 0, "desiredSize": 1}
        )
        found = reservations_from_api({"CapacityReservations": [reservation(total=3)]})
        report = cost_report(settings, {"ec2:g6.8xlarge": 2.0}, 3, plan_capacity(settings, found, NOW))
        reserved = (report.serving[-1], report.at_most[-1], report.parked[-1])
        assert [(line.count, line.hourly) for line in reserved] == [(3, 6.0)] * 3

    def test_parked_the_reservation_is_idle(self):
        parked = planned(
            {"gpuNodes": {"capacityReservation": ODCR_ID, "minSize": 0}, "autoscaling": {"parked": True}},
            reservation(total=3),
        )
        (line,) = [i for i in parked.notes if i.startswith("GPU capacity")]
        assert "parked: no GPU node runs on it, 3 reserved stay idle" in line

    @pytest.mark.parametrize(("left", "warned"), [(timedelta(hours=5), True), (timedelta(days=2), False)])
    def test_a_block_ending_soon_is_a_warning(self, left, warned):
        run = block_planned(block(end=NOW + left))
        said = [w for w in run.warnings if "EKS scales the GPU nodes to 0 forty minutes before" in w]
        assert bool(said) is warned
        if warned:
            assert "ends at 2026-12-02 17:00 UTC (5 h 0 min from now)" in said[0]
            assert "purchase-capacity-block-extension" in said[0]


class TestTheBlockEndsAlert:
    def rules(self, capacity_block: StackRun) -> list[dict[str, Any]]:
        rule = next(r for r in capacity_block.of_type("kubernetes:monitoring.coreos.com/v1:PrometheusRule"))
        return rule.inputs["spec"]["groups"]

    def test_only_a_block_has_it(self, capacity_block, odcr):
        alerts = [r.get("alert") for g in self.rules(capacity_block) for r in g["rules"]]
        assert "CapacityBlockEnding" in alerts
        assert "CapacityBlockEnding" not in [r.get("alert") for g in self.rules(odcr) for r in g["rules"]]

    def test_promtool_fires_it_in_the_last_two_hours_while_gpu_nodes_run(self, tmp_path: Path):
        """The block ends 3 hours into promtool's clock: quiet at 30 min, firing at 1 h 30 min with the
        time left, quiet again after the end, and quiet without GPU nodes (parked)."""
        settings = stack_settings("prod", gpuNodes={"capacityReservation": BLOCK_ID, **P5})
        from datetime import UTC, datetime

        start = datetime.fromtimestamp(0, UTC)
        found = Reservation.from_api(block(start=start, end=start + timedelta(hours=3)))
        plan = plan_capacity(replace_settings(settings), [found], start + timedelta(minutes=1))
        groups = alert_rules(settings, plan)
        (rule,) = [r for g in groups for r in g["rules"] if r["alert"] == "CapacityBlockEnding"]
        (tmp_path / "rules.yaml").write_text(
            yaml.safe_dump({"groups": [{"name": "capacity", "rules": [rule]}]})
        )
        promtool_in(tmp_path, "check", "rules", "rules.yaml")
        labels = {"severity": "warning", "reservation": BLOCK_ID}
        tests = {
            "rule_files": ["rules.yaml"],
            "evaluation_interval": "1m",
            "tests": [
                {
                    "interval": "1m",
                    "input_series": [{"series": 'DCGM_FI_DEV_GPU_UTIL{gpu="0"}', "values": "50x300"}],
                    "alert_rule_test": [
                        {"eval_time": "30m", "alertname": "CapacityBlockEnding", "exp_alerts": []},
                        {
                            "eval_time": "90m",
                            "alertname": "CapacityBlockEnding",
                            "exp_alerts": [
                                {
                                    "exp_labels": labels,
                                    "exp_annotations": {
                                        "summary": f"Capacity Block {BLOCK_ID} ends in 1h 30m 0s",
                                        "description": rule["annotations"]["description"],
                                    },
                                }
                            ],
                        },
                        {"eval_time": "190m", "alertname": "CapacityBlockEnding", "exp_alerts": []},
                    ],
                },
                {
                    "interval": "1m",
                    "input_series": [{"series": "up", "values": "1x300"}],
                    "alert_rule_test": [
                        {"eval_time": "90m", "alertname": "CapacityBlockEnding", "exp_alerts": []}
                    ],
                },
            ],
        }
        (tmp_path / "tests.yaml").write_text(yaml.safe_dump(tests))
        promtool_in(tmp_path, "test", "rules", "tests.yaml")


def replace_settings(settings: Any) -> Any:
    """Settings whose GPU zone is the reservation's, as the program pins it."""
    return settings.model_copy(
        update={"gpu_nodes": settings.gpu_nodes.model_copy(update={"availability_zone": "us-east-1b"})}
    )


def test_ops_plan_mocks_the_reservation_and_says_so(tmp_path: Path, capsys):
    from ops.cli import main
    from tests.fakes.pulumi import ROOT

    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    stack = yaml.safe_load((ROOT / "Pulumi.prod.yaml").read_text())
    stack["config"]["ray-llm-eks:gpuNodes"]["capacityReservation"] = ODCR_ID
    (tmp_path / "Pulumi.reserved.yaml").write_text(yaml.safe_dump(stack))
    assert main(["plan", "--stack", "reserved", "--root", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert f"Reservation {ODCR_ID} is mocked too" in out
    assert "reserved, used or not: 3 x" in out


def test_preflight_does_not_fail_on_the_gpu_quota_a_reservation_makes_moot():
    from ops.preflight import format_findings, preflight
    from tests.fakes.ops import IDENTITY, ZONES, answers, quota

    run = answers(
        {
            "pulumi version": (0, "v3.200.0\n", ""),
            "aws --version": (0, "aws-cli/2.31.0 Python/3.13\n", ""),
            "aws sts": (0, IDENTITY, ""),
            "aws ec2 describe-availability-zones": (0, ZONES, ""),
            "aws service-quotas get-service-quota --service-code ec2 --quota-code L-417A185B": quota(0),
            "aws service-quotas get-service-quota --service-code ec2 --quota-code L-1216C47A": quota(640),
        }
    )
    on_demand = stack_settings("prod", gpuNodes=P5)
    reserved = stack_settings("prod", gpuNodes={**P5, "capacityReservation": BLOCK_ID})
    assert format_findings(preflight(on_demand, run))[1] == 2
    report, code = format_findings(preflight(reserved, run))
    assert code == 0, report
    assert "warn  Running On-Demand P instances: 0 vCPUs" in report and "holds its instances" in report


class TestNodesTheWorkersCannotFill:
    """Every GPU the nodes at desiredSize hold is paid for (a reservation's used or not): the plan and the
    preview warn when the workers at their most use fewer, and say what to set."""

    @staticmethod
    def idle_warnings(**sections: dict[str, Any]) -> list[str]:
        from planning import plan_stack

        return [
            w for w in plan_stack(stack_settings("prod", **sections), stack="prod").warnings if "idle" in w
        ]

    def test_two_p5_nodes_for_two_workers_of_one_gpu_warn_with_the_numbers_and_the_fixes(self):
        (warning,) = self.idle_warnings(
            gpuNodes={**P5, "capacityReservation": ODCR_ID}, model={"prefillReplicas": 1, "decodeReplicas": 1}
        )
        assert "use at most 2 GPU(s) (2 worker(s) x model.tensorParallelSize 1)" in warning
        assert "gpuNodes.desiredSize 2 x p5.48xlarge hold 16: 14 GPU(s) paid for and idle" in warning
        assert f"reservation {ODCR_ID} bills them used or not" in warning
        assert "gpuNodes.desiredSize 1" in warning and "model.tensorParallelSize 8" in warning
        assert "more replicas" in warning

    def test_workers_that_fill_the_nodes_say_nothing(self):
        full = {"prefillReplicas": 1, "decodeReplicas": 1, "tensorParallelSize": 8}
        assert self.idle_warnings(gpuNodes=P5, model=full) == []
        assert self.idle_warnings() == []  # prod: 3 workers on 3 x g6.8xlarge

    def test_autoscaling_counts_at_its_maximum_replicas(self):
        grows = {"decode": {"maxReplicas": 15}}
        assert (
            self.idle_warnings(
                gpuNodes=P5, model={"prefillReplicas": 1, "decodeReplicas": 1}, autoscaling=grows
            )
            == []
        )

    def test_no_node_no_warning_parked_or_at_desired_size_0(self):
        one_gpu = {"prefillReplicas": 1, "decodeReplicas": 1}
        assert self.idle_warnings(gpuNodes={**P5, "desiredSize": 0}, model=one_gpu) == []
        assert self.idle_warnings(gpuNodes=P5, model=one_gpu, autoscaling={"parked": True}) == []

    def test_the_docs_example_uses_every_gpu(self):
        from config import load_settings
        from planning import plan_stack
        from tests.fakes.pulumi import minimal_config

        example = docs_reservation_example()
        plan = plan_stack(load_settings({**minimal_config("us-east-1"), **example}), stack="reserved")
        assert [w for w in plan.warnings if "idle" in w] == []
        without = {**example, "ray-llm-eks:model": {}}
        plan = plan_stack(load_settings({**minimal_config("us-east-1"), **without}), stack="reserved")
        assert [w for w in plan.warnings if "idle" in w]  # what the example's tensor parallel size fixes


def test_ops_plan_of_a_capacity_block_in_a_directory_of_your_own(tmp_path: Path, capsys):
    """One `ops plan` run: the reservation mocked as a Capacity Block (`--reservation-kind`), the idle GPUs
    warned as the program's pulumi.log.warn (what a preview shows), and the name clash checked against
    the stack files of `--root`, not the repository's."""
    from ops.cli import main
    from tests.fakes.pulumi import ROOT

    shutil.copy(ROOT / "Pulumi.yaml", tmp_path / "Pulumi.yaml")
    stack = yaml.safe_load((ROOT / "Pulumi.prod.yaml").read_text())
    stack["config"]["ray-llm-eks:cluster"]["name"] = "team-gpus"
    stack["config"]["ray-llm-eks:gpuNodes"] = {**P5, "capacityReservation": BLOCK_ID}
    stack["config"]["ray-llm-eks:model"] = {"prefillReplicas": 1, "decodeReplicas": 1}
    (tmp_path / "Pulumi.idle.yaml").write_text(yaml.safe_dump(stack))
    other = fakes.minimal_config("us-east-1", cluster={"name": "team-gpus"})
    (tmp_path / "Pulumi.other.yaml").write_text(yaml.safe_dump({"config": other}))
    argv = ["plan", "--stack", "idle", "--root", str(tmp_path), "--reservation-kind", "capacity-block"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"Reservation {BLOCK_ID} is mocked too: an active Capacity Block of 2 x p5.48xlarge" in out
    assert f"GPU capacity: Capacity Block {BLOCK_ID}: 2 x p5.48xlarge in us-east-1b" in out
    assert f"on Capacity Block {BLOCK_ID}, paid up front" in out
    warnings = out.split("Warnings (a preview shows them too):", 1)[1].split("\n\n", 1)[0]
    assert "14 GPU(s) paid for and idle" in warnings
    assert "cluster.name team-gpus is also Pulumi.other.yaml's cluster in us-east-1" in warnings
