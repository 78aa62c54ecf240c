"""Each side on GPUs of its own (`prefillNodes`, `decodeNodes`): the refusals that name the key, the
plan per side (type, fit, workers) and the KV path between two types, the worker group per side and
the serve config pinned to it, and the two EFA node groups in one zone and one placement group.
Pure functions where they decide it; the stack run is Pulumi.hetero.example.yaml's, which every
per-stack test runs too (tests/fakes/pulumi.py STACKS)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from config import ConfigError
from manifests.rayservice import build_rayservice
from manifests.serve_app import SIDE_RESOURCES
from planning import plan_stack
from planning.catalog import CATALOG
from planning.kv_path import TransferFloor, plan_kv_path, plan_kv_path_between, slower_floor, weaker_end
from planning.nodes import GPU_SIDE_LABEL
from tests.fakes.pulumi import PROJECT, StackRun, run_stack, stack_settings
from tests.validators import pd_rule_errors, serve_errors

HETERO = "hetero.example"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
PLACEMENT_GROUP = "aws:ec2/placementGroup:PlacementGroup"


def refusals(stack: str = "dev", /, **sections: dict[str, Any]) -> list[str]:
    """What loading and planning a stack file with `sections` refuses (empty: nothing): dev's, whose
    gpuNodes a side section joins, or the example's, where both sides have their own."""
    try:
        plan_stack(stack_settings(stack, **sections), stack=stack)
    except ConfigError as error:
        return error.problems
    return []


def one_side(side: str, instance_type: str, **keys: Any) -> dict[str, dict[str, Any]]:
    return {
        f"{side}Nodes": {"instanceType": instance_type, "minSize": 0, "desiredSize": 1, "maxSize": 1, **keys}
    }


class TestRefusedNamingTheKey:
    def test_decode_tensor_parallel_above_its_types_gpus(self):
        found = refusals(
            HETERO,
            **one_side("prefill", "g6e.12xlarge"),
            **one_side("decode", "g6.8xlarge"),
            model={"tensorParallelSize": 4},
        )
        assert any(
            p.startswith(f"{PROJECT}:model.tensorParallelSize: 4 needs 4 GPUs in one decode pod")
            and f"{PROJECT}:decodeNodes.instanceType g6.8xlarge has 1" in p
            for p in found
        ), found
        assert not any("prefill pod" in p for p in found), found  # g6e.12xlarge has 4

    def test_the_sides_in_two_zones(self):
        found = refusals(
            HETERO,
            **one_side("prefill", "g6e.8xlarge", availabilityZone="sa-east-1a"),
            **one_side("decode", "g6.8xlarge", availabilityZone="sa-east-1b"),
        )
        assert any(
            f"{PROJECT}:decodeNodes.availabilityZone sa-east-1b and {PROJECT}:prefillNodes.availabilityZone "
            "sa-east-1a: the sides in two availability zones" in p
            for p in found
        ), found

    def test_a_side_in_another_zone_than_gpu_nodes(self):
        found = refusals(
            gpuNodes={"availabilityZone": "sa-east-1a"},
            **one_side("decode", "g6e.8xlarge", availabilityZone="sa-east-1b"),
        )
        assert any(
            f"{PROJECT}:decodeNodes.availabilityZone sa-east-1b and {PROJECT}:gpuNodes" in p for p in found
        )

    def test_gpu_nodes_given_beside_both_sides(self):
        found = refusals(
            HETERO,
            gpuNodes={"desiredSize": 2},
        )
        assert any(p.startswith(f"{PROJECT}:gpuNodes.desiredSize: with both") for p in found), found

    @pytest.mark.parametrize(
        ("sections", "start"),
        [
            (
                {"serving": {"mode": "aggregated"}},
                f"{PROJECT}:decodeNodes: {PROJECT}:serving.mode aggregated",
            ),
            ({"autoscaling": {"parked": True}}, f"{PROJECT}:autoscaling.parked: Cluster Autoscaler cannot"),
        ],
    )
    def test_what_two_groups_cannot_do(self, sections, start):
        side = one_side("decode", "g6e.8xlarge", minSize=1)
        try:
            stack_settings("dev", **side, **sections)
        except ConfigError as error:
            assert any(p.startswith(start) for p in error.problems), error.problems
        else:
            pytest.fail("accepted")

    def test_idle_gpus_of_a_side_name_its_section(self):
        found = refusals(**one_side("prefill", "g6e.12xlarge"))
        assert any(
            p.startswith(f"{PROJECT}:prefillNodes.instanceType g6e.12xlarge has 4 GPUs") for p in found
        )
        assert not refusals(**one_side("prefill", "g6e.12xlarge", acceptIdleGpus=True))

    def test_a_side_too_small_for_its_replicas(self):
        found = refusals(**one_side("decode", "g6e.8xlarge"), model={"decodeReplicas": 2})
        assert any(
            f"{PROJECT}:decodeNodes.maxSize 1 x 1 worker(s) per g6e.8xlarge hosts only 1" in p for p in found
        )


class TestEachSideAgainstItsType:
    def test_a_side_that_does_not_fit_its_type_is_named(self):
        found = refusals(HETERO, model={"maxModelLen": 65536})
        (problem,) = [p for p in found if p.startswith(f"{PROJECT}:model:")]
        assert problem.startswith(
            f"{PROJECT}:model: prefill on {PROJECT}:prefillNodes.instanceType g6.8xlarge"
        )
        assert "prefillNodes.instanceType g6.12xlarge" in problem  # the fixes name the side's section
        assert "decode on" not in problem  # g6e.8xlarge holds it

    def test_idle_nodes_of_a_side_are_a_warning_naming_its_section(self):
        settings = stack_settings(HETERO, decodeNodes={"desiredSize": 2, "maxSize": 2})
        warnings = plan_stack(settings, stack=HETERO).warnings
        assert any(
            w.startswith(f"{PROJECT}:decodeNodes: the decode workers use at most 1 GPU(s)")
            and "set decodeNodes.desiredSize 1" in w
            for w in warnings
        ), warnings


class TestPlanPerSide:
    @pytest.fixture(scope="class")
    def plan(self):
        return plan_stack(stack_settings(HETERO), stack=HETERO)

    def test_each_side_its_type_fit_and_workers(self, plan):
        prefill, decode = plan.side("prefill"), plan.side("decode")
        assert (prefill.section, prefill.gpu.name, decode.section, decode.gpu.name) == (
            "prefillNodes",
            "g6.8xlarge",
            "decodeNodes",
            "g6e.8xlarge",
        )
        assert prefill.fit.fits and decode.fit.fits
        # Decode's larger GPU leaves far more for the KV cache: why the example puts decode there.
        assert decode.fit.kv_pool_gib > 10 * prefill.fit.kv_pool_gib
        assert (prefill.workers, decode.workers, plan.gpu_workers) == (1, 1, 2)
        summaries = "\n".join(plan.summaries())
        assert (
            "prefill on prefillNodes: g6.8xlarge" in summaries
            and "decode on decodeNodes: g6e.8xlarge" in summaries
        )

    def test_shared_nodes_plan_one_side_as_before(self):
        plan = plan_stack(stack_settings("dev"), stack="dev")
        assert not plan.split and plan.side("decode").gpu is plan.gpu and plan.side("prefill").fit is plan.fit

    def test_the_fit_check_takes_the_sides_tensor_parallel_size(self):
        from planning.capacity import fit_report, pods_per_node

        settings = stack_settings("dev")
        gpu = CATALOG["g6e.12xlarge"]
        at_1 = fit_report(settings.model, gpu, settings.serving.worker, pods_per_node(gpu, 1))
        at_4 = fit_report(settings.model, gpu, settings.serving.worker, 1, tensor_parallel_size=4)
        assert (at_1.tensor_parallel_size, at_4.tensor_parallel_size) == (1, 4)
        assert at_4.need_gib < at_1.need_gib


class TestKvPathBetweenTwoTypes:
    def test_the_weaker_end_sets_the_mechanism(self):
        model = stack_settings("dev").model
        p5, g6 = CATALOG["p5.48xlarge"], CATALOG["g6.8xlarge"]
        assert weaker_end(p5, g6) is g6 and weaker_end(g6, p5) is g6
        path, _ = plan_kv_path_between(model, p5, g6)
        alone, _ = plan_kv_path(model, g6)
        assert (
            (path.mechanism, path.buffer_device)
            == (alone.mechanism, alone.buffer_device)
            == ("emulated", "cuda")
        )
        assert "p5.48xlarge has GPUDirect RDMA, but its peer g6.8xlarge does not" in path.reason
        assert plan_kv_path_between(model, p5, CATALOG["p5.48xlarge"])[0].mechanism == "gpudirect"

    def test_the_floor_follows_the_slower_end(self):
        fast = TransferFloor("gpudirect", (40.0, 40.0), 28.0, "fast")
        slow = TransferFloor("emulated", (0.5, 1.0), 0.4, "slow")
        unknown = TransferFloor("emulated", None, None, "unknown")
        assert slower_floor([fast, slow]) is slow and slower_floor([slow, fast]) is slow
        assert slower_floor([fast, unknown]) is unknown

    def test_the_example_crosses_at_its_slower_ends_rate(self):
        plan = plan_stack(stack_settings(HETERO), stack=HETERO)
        assert plan.kv_floor in (plan.side("prefill").kv_floor, plan.side("decode").kv_floor)
        assert plan.kv_floor.expected_gbytes_s == min(
            (plan.side(s).kv_floor.expected_gbytes_s or (0, 0) for s in ("prefill", "decode")),
            key=lambda r: r[1],
        )


class TestWorkerGroupPerSide:
    @pytest.fixture(scope="class")
    def rayservice(self) -> dict[str, Any]:
        settings = stack_settings(HETERO)
        return build_rayservice(settings, plan_stack(settings, stack=HETERO)).to_dict()

    def test_each_side_its_group_on_its_nodes(self, rayservice):
        groups = {g["groupName"]: g for g in rayservice["spec"]["rayClusterConfig"]["workerGroupSpecs"]}
        assert sorted(groups) == ["decode-workers", "prefill-workers"]
        for side in ("prefill", "decode"):
            group = groups[f"{side}-workers"]
            pod = group["template"]["spec"]
            assert pod["nodeSelector"] == {"role": "gpu-worker", GPU_SIDE_LABEL: side}
            assert group["resources"] == {SIDE_RESOURCES[side]: "1"}
            assert not SIDE_RESOURCES[side].lower().endswith("gpu")  # KubeRay would take it for GPUs
            assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (1, 1, 1)
        prefill_memory = groups["prefill-workers"]["template"]["spec"]["containers"][0]["resources"][
            "limits"
        ]["memory"]
        decode_memory = groups["decode-workers"]["template"]["spec"]["containers"][0]["resources"]["limits"][
            "memory"
        ]
        assert (prefill_memory, decode_memory) == ("113Gi", "231Gi")  # each its own type's share

    def test_each_sides_engine_asks_for_its_groups_resource(self, rayservice):
        config = yaml.safe_load(rayservice["spec"]["serveConfigV2"])
        args = config["applications"][0]["args"]
        for side in ("prefill", "decode"):
            bundle = args[f"{side}_config"]["placement_group_config"]["bundle_per_worker"]
            assert bundle == {"GPU": 1, SIDE_RESOURCES[side]: 1}
        assert not serve_errors(config) and not pd_rule_errors(config)

    def test_shared_nodes_keep_one_group_and_no_placement_config(self):
        settings = stack_settings("dev")
        made = build_rayservice(settings, plan_stack(settings, stack="dev")).to_dict()
        (group,) = made["spec"]["rayClusterConfig"]["workerGroupSpecs"]
        assert group["groupName"] == "gpu-workers" and "resources" not in group
        assert "placement_group_config" not in made["spec"]["serveConfigV2"]


class TestTwoNodeGroups:
    @pytest.fixture(scope="class")
    def run(self) -> StackRun:
        return run_stack(stack=HETERO)

    def test_two_efa_groups_in_one_zone_and_one_placement_group(self, run):
        groups = {g.name: g for g in run.of_type(NODE_GROUP) if g.name.startswith("gpu-")}
        assert sorted(groups) == ["gpu-decode-nodes", "gpu-prefill-nodes"]
        (placement,) = run.of_type(PLACEMENT_GROUP)
        assert placement.inputs["strategy"] == "cluster"
        for side, instance_type in (("prefill", "g6.8xlarge"), ("decode", "g6e.8xlarge")):
            group = groups[f"gpu-{side}-nodes"]
            assert group.inputs["instanceTypes"] == [instance_type]
            assert group.inputs["labels"] == {
                "role": "gpu-worker",
                "nvidia.com/gpu.present": "true",
                GPU_SIDE_LABEL: side,
            }
            assert group.inputs["subnetIds"] == ["subnet/network-private-sa-east-1a"]  # one zone
            template = run.one(LAUNCH_TEMPLATE, f"gpu-{side}-nodes-template")
            # The one placement group: its name is AWS's (auto-named), so known only then.
            assert placement.urn in template.property_dependencies["placement"]
            interfaces = template.inputs["networkInterfaces"]
            assert interfaces and all(i["interfaceType"] == "efa" for i in interfaces)
        assert run.exports["gpuAvailabilityZone"] == "sa-east-1a"

    def test_the_device_plugins_allow_both_types(self, run):
        efa = next(r for r in run.registrations if r.name == "device-plugins-efa")
        allowed = efa.inputs["values"]["supportedInstanceLabels"]["values"]
        assert allowed == ["g6.8xlarge", "g6e.8xlarge"]


class TestCostPerSide:
    PRICES = {"eks": 0.1, "ec2:m7i.2xlarge": 0.4, "ec2:g6.8xlarge": 2.0, "ec2:g6e.8xlarge": 4.5, "nat": 0.05}

    def test_each_sides_nodes_priced_at_their_type(self):
        from planning.cost import cost_report, price_queries

        settings = stack_settings(HETERO)
        assert {"ec2:g6.8xlarge", "ec2:g6e.8xlarge"} <= {q.key for q in price_queries(settings)}
        report = cost_report(settings, {**self.PRICES, "nlb": 0.02}, 2)
        lines = {line.part: line for line in report.serving}
        assert lines["prefill GPU nodes (g6.8xlarge)"].hourly == 2.0
        assert lines["decode GPU nodes (g6e.8xlarge)"].hourly == 4.5
        assert report.total(report.parked) == pytest.approx(0.1 + 0.4 + 0.05 + 0.02)

    def test_ops_status_prices_the_nodes_each_side_runs_at_its_type(self):
        """`ops status` counts the running GPU nodes by their side label: one more decode node costs
        decode's type, one more prefill node prefill's; nodes without the label are said, not priced."""
        from planning.cost import running_cost

        settings = stack_settings(HETERO)

        def now(running: dict[str | None, int]) -> str:
            return running_cost(settings, {**self.PRICES, "nlb": 0.02}, 2, running)

        fixed = 0.1 + 0.4 + 0.05 + 0.02
        assert now({"prefill": 1, "decode": 1}) == (
            f"Cost now: ${fixed + 2.0 + 4.5:,.2f}/h on demand, with 2 GPU node(s) (1 prefill, 1 decode); "
            f"at most ${fixed + 2.0 + 4.5:,.2f}/h"
        )
        assert f"${fixed + 2.0 + 2 * 4.5:,.2f}/h on demand, with 3 GPU node(s) (1 prefill, 2 decode)" in now(
            {"prefill": 1, "decode": 2}
        )
        assert f"${fixed:,.2f}/h on demand, with 0 GPU node(s) (0 prefill, 0 decode)" in now({})
        assert "with 3 GPU node(s) (1 prefill, 1 decode, 1 without a side label, not priced)" in now(
            {"prefill": 1, "decode": 1, None: 1}
        )

    def test_the_plan_names_each_sides_nodes(self):
        from ops.plan import gpu_node_lines

        lines = gpu_node_lines(stack_settings(HETERO), "sa-east-1a", ["sa-east-1a", "sa-east-1b"])
        assert lines[:2] == [
            "  GPU, prefill (prefillNodes): 1 x g6.8xlarge in sa-east-1a (min 0, max 1)",
            "  GPU, decode (decodeNodes): 1 x g6e.8xlarge in sa-east-1a (min 0, max 1)",
        ]

    def test_the_bench_records_each_sides_gpus(self):
        from ops.bench import gpu_document

        settings = stack_settings(HETERO)
        document = gpu_document(settings, plan_stack(settings, stack=HETERO))
        assert document["sides"]["decode"]["instance_type"] == "g6e.8xlarge"
        assert (document["nodes"], document["workers"], document["gpus"]) == (2, 2, 2)


class TestOpsAcrossTheSides:
    @staticmethod
    def pod(name: str, node: str, group: str) -> dict[str, Any]:
        return {
            "metadata": {"name": name, "labels": {"ray.io/group": group}},
            "spec": {"nodeName": node},
            "status": {"phase": "Running"},
        }

    def test_verify_probes_a_pair_across_the_two_types(self):
        from ops.kv_transfer import Pair, pick_pair

        pods = [
            self.pod("ray-llm-x-decode-workers-worker-a", "n1", "decode-workers"),
            self.pod("ray-llm-x-decode-workers-worker-b", "n2", "decode-workers"),
            self.pod("ray-llm-x-prefill-workers-worker-c", "n3", "prefill-workers"),
        ]
        assert pick_pair(pods) == Pair(
            "ray-llm-x-decode-workers-worker-a", "n1", "ray-llm-x-prefill-workers-worker-c", "n3"
        )
        shared = [self.pod(f"ray-llm-x-gpu-workers-worker-{c}", f"n{c}", "gpu-workers") for c in "abc"]
        assert pick_pair(shared) == Pair(
            "ray-llm-x-gpu-workers-worker-a", "na", "ray-llm-x-gpu-workers-worker-b", "nb"
        )

    def test_status_names_each_nodes_side(self):
        from ops.status import GpuNodeInfo, StatusReport, parse_gpu_node

        node = {
            "metadata": {
                "name": "ip-1",
                "labels": {
                    "node.kubernetes.io/instance-type": "g6e.8xlarge",
                    "topology.kubernetes.io/zone": "sa-east-1a",
                    GPU_SIDE_LABEL: "decode",
                },
            },
            "status": {"allocatable": {"nvidia.com/gpu": "1", "vpc.amazonaws.com/efa": "1"}},
        }
        parsed = parse_gpu_node(node)
        assert parsed.side == "decode"
        report = StatusReport("inference", "ray-llm", None, (), (parsed,))
        assert "SIDE" in report.format() and " decode " in report.format()
        shared = StatusReport(
            "inference", "ray-llm", None, (), (GpuNodeInfo("ip-2", "g6.8xlarge", "a", 1, 1),)
        )
        assert "SIDE" not in shared.format()

    def test_the_dashboards_gpu_panels_have_a_query_per_side(self):
        from manifests.pd_dashboard import panels

        utilisation = next(
            p for p in panels(stack_settings(HETERO)) if p["title"] == "GPU utilisation per worker"
        )
        legends = [t["legendFormat"] for t in utilisation["targets"]]
        assert [legend.split(":")[0] for legend in legends] == [
            "prefill (g6.8xlarge)",
            "decode (g6e.8xlarge)",
        ]
        assert '{pod=~".+-decode-workers-.+"}' in utilisation["targets"][1]["expr"]
        shared = next(p for p in panels(stack_settings("dev")) if p["title"] == "GPU utilisation per worker")
        assert len(shared["targets"]) == 1

    def test_preflight_counts_both_sides_vcpus(self):
        from ops.preflight import vcpus_needed

        needed = vcpus_needed(stack_settings(HETERO))
        # g6.8xlarge and g6e.8xlarge: 32 vCPUs each, one of each at maxSize, in the G and VT quota.
        assert max(needed.values()) == 64


class TestWithTheOtherKeysOfThisWave:
    """Issues 51 and 52 on a split stack: the CPU KV tier counted where it lives, the SLO targets in
    the preview, and the KV path's figures per rank of the side the crossing was planned for."""

    OFFLOAD = {"kvOffloadGib": 8, "extraEngineKwargs": {"enable_prefix_caching": True}}

    def test_the_cpu_tier_is_counted_on_prefills_workers_only(self):
        plan = plan_stack(stack_settings(HETERO, model=self.OFFLOAD), stack=HETERO)
        assert plan.side("prefill").fit.offload_gib == 8
        assert plan.side("decode").fit.offload_gib == 0  # decode renders no tier (serve_app `_kv_transfer`)

    def test_slo_targets_and_the_tier_are_in_the_preview(self):
        sections = {
            "autoscaling": {"signal": "slo", "prefill": {"maxReplicas": 2}, "decode": {"maxReplicas": 2}},
            "prefillNodes": {"maxSize": 2},
            "decodeNodes": {"maxSize": 2},
            "model": self.OFFLOAD,
        }
        notes = plan_stack(stack_settings(HETERO, **sections), stack=HETERO).notes
        assert any("ttft" in n.lower() or "time to first token" in n.lower() for n in notes), notes
        assert any("CPU" in n for n in notes), notes

    def test_the_kv_figures_count_every_rank_of_the_crossing(self):
        from manifests.observability.kv_path import KvPathFigures

        one = plan_stack(stack_settings(HETERO), stack=HETERO)
        assert one.kv_crossing.ranks == 1
        figures = KvPathFigures.of(one)
        assert figures.bytes_per_token is not None and one.kv_crossing.kv_bytes is not None
        assert figures.bytes_per_token * one.kv_crossing.tokens == pytest.approx(
            one.kv_crossing.kv_bytes - one.kv_crossing.state_bytes
        )
