"""Capacity that follows load, parking, and the cost preview.

Silent failures these guard against: a side whose request limits stay at Ray Serve LLM's 1e9 (nothing
ever scales), a worker group whose maximum the GPU nodes cannot host, Pulumi setting the node group's
size back after Cluster Autoscaler changed it, a node scaled away from under a serving worker, a
scale-from-zero that never happens because the autoscaler does not know a node would have EFA, a parked
stack that still pays for GPUs or hangs its callers, and a preview that fails when the price API does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from config import ConfigError, load_settings
from manifests.rayservice import build_rayservice
from planning import plan_stack
from planning.cost import PriceCache, cost_report
from tests.fakes.pulumi import FAKE_PRICES, STACKS, StackRun, run_stack, stack_file_config, stack_settings
from tests.validators import crd_errors, crd_package_errors, serve_errors
from world.offline import ACCOUNT_ID

RAYSERVICE = "kubernetes:ray.io/v1:RayService"
RELEASE = "kubernetes:helm.sh/v3:Release"
NODE_GROUP = "eks:index:ManagedNodeGroup"
ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
ELASTIC = {
    "autoscaling": {"prefill": {"maxReplicas": 2}, "decode": {"maxReplicas": 3}},
    "gpuNodes": {"minSize": 0, "desiredSize": 2, "maxSize": 5},
}


def rayservice(run: StackRun | dict) -> dict:
    """The RayService a run registered, or one `built` (a dict already)."""
    if isinstance(run, dict):
        return run
    return {k: run.one(RAYSERVICE).inputs[k] for k in ("apiVersion", "kind", "metadata", "spec")}


def built(**sections: dict) -> dict:
    """The dev stack file's RayService with some sections' keys overridden, as build_rayservice makes it
    for the mocked account: what the program registers (test_the_program_registers_what_built_says)."""
    settings = stack_settings("dev", **sections)
    made = build_rayservice(settings, plan_stack(settings, stack="dev", account_id=ACCOUNT_ID)).to_dict()
    return {k: made[k] for k in ("apiVersion", "kind", "metadata", "spec")}


def test_the_program_registers_what_built_says(dev_stack):
    assert rayservice(dev_stack) == built()


def serve_sides(run: StackRun | dict) -> dict[str, dict]:
    app = yaml.safe_load(rayservice(run)["spec"]["serveConfigV2"])["applications"][0]
    return {side: app["args"][f"{side}_config"]["deployment_config"] for side in ("prefill", "decode")}


def cluster_spec(run: StackRun | dict) -> dict:
    return rayservice(run)["spec"]["rayClusterConfig"]


def release(run: StackRun, chart: str):
    found = [r for r in run.of_type(RELEASE) if r.inputs["chart"] == chart]
    return found[0] if found else None


class TestServeReplicasPerSide:
    def test_fixed_sides_still_carry_explicit_request_limits(self, dev_stack):
        sides = serve_sides(dev_stack)
        assert sides["prefill"] == {
            "num_replicas": 1,
            "max_ongoing_requests": 16,
            "graceful_shutdown_timeout_s": 300.0,
        }
        assert sides["decode"] == {
            "num_replicas": 1,
            "max_ongoing_requests": 64,
            "graceful_shutdown_timeout_s": 300.0,
        }
        assert "enableInTreeAutoscaling" not in cluster_spec(dev_stack)

    def test_sides_scale_on_their_own_targets(self):
        run = built(**ELASTIC)
        sides = serve_sides(run)
        assert sides["prefill"]["autoscaling_config"] == {
            "min_replicas": 1,
            "max_replicas": 2,
            "target_ongoing_requests": 4.0,
            "upscale_delay_s": 30.0,
            "downscale_delay_s": 600.0,
        }
        assert sides["decode"]["autoscaling_config"]["max_replicas"] == 3
        assert sides["decode"]["autoscaling_config"]["target_ongoing_requests"] == 32.0
        assert "num_replicas" not in sides["prefill"] and sides["decode"]["max_ongoing_requests"] == 64
        spec = yaml.safe_load(run["spec"]["serveConfigV2"])
        assert serve_errors(spec) == []  # Ray 2.58's own ServeDeploySchema and LLMConfig

    def test_targets_follow_the_config(self):
        run = built(
            **{
                **ELASTIC,
                "autoscaling": {
                    "decode": {"maxReplicas": 3, "targetOngoingRequests": 8, "maxOngoingRequests": 20}
                },
            }
        )
        decode = serve_sides(run)["decode"]
        assert (decode["autoscaling_config"]["target_ongoing_requests"], decode["max_ongoing_requests"]) == (
            8.0,
            20,
        )


class TestPodsFollowReplicas:
    def test_kuberay_autoscales_the_worker_group_between_the_sides_minimum_and_maximum(self):
        run = built(**ELASTIC)
        spec = cluster_spec(run)
        assert spec["enableInTreeAutoscaling"] is True
        options = spec["autoscalerOptions"]
        assert (options["version"], options["upscalingMode"], options["idleTimeoutSeconds"]) == (
            "v2",
            "Default",
            60,
        )
        assert options["resources"]["requests"] == {"cpu": "200m", "memory": "256Mi"}
        (group,) = spec["workerGroupSpecs"]
        assert (group["replicas"], group["minReplicas"], group["maxReplicas"]) == (2, 2, 5)
        assert crd_errors(run) == []

    def test_a_serving_worker_is_never_evicted_by_cluster_autoscaler_and_drains_its_requests(self, dev_stack):
        (group,) = cluster_spec(dev_stack)["workerGroupSpecs"]
        template = group["template"]
        assert template["metadata"]["annotations"] == {
            "cluster-autoscaler.kubernetes.io/safe-to-evict": "false"
        }
        # Above the Serve replicas' graceful shutdown (300 s), so Kubernetes does not cut it.
        assert template["spec"]["terminationGracePeriodSeconds"] == 360
        assert template["spec"]["containers"][0]["lifecycle"]["preStop"]["exec"]["command"][-1] == "ray stop"

    @pytest.mark.parametrize(
        ("overrides", "message"),
        [
            (
                {"autoscaling": {"decode": {"maxReplicas": 3}}},
                r"autoscaling.prefill.maxReplicas \+ autoscaling.decode.maxReplicas = 4 GPU workers at most, "
                r"but ray-llm-eks:gpuNodes.maxSize 2",
            ),
            (
                {"model": {"decodeReplicas": 2}, "autoscaling": {"decode": {"maxReplicas": 1}}},
                "decode.maxReplicas: 1 is below",
            ),
            ({"gpuNodes": {"minSize": 3}}, "minSize <= desiredSize <= maxSize"),
        ],
        ids=["max-beyond-nodes", "max-below-min", "sizes-out-of-order"],
    )
    def test_limits_that_cannot_work_are_refused_naming_the_keys(self, overrides, message):
        config = stack_file_config("dev")
        for section, values in overrides.items():
            config[f"ray-llm-eks:{section}"] = {**config.get(f"ray-llm-eks:{section}", {}), **values}
        with pytest.raises(ConfigError, match=message):
            plan_stack(load_settings(config), stack="dev")

    def test_the_upgrade_path_reasons_on_the_most_workers(self):
        """Room for a second cluster means twice the most workers, not twice the fewest."""
        nodes = {"gpuNodes": {"minSize": 0, "desiredSize": 2, "maxSize": 4}}
        assert built(**nodes)["spec"]["upgradeStrategy"] == {"type": "NewCluster"}
        elastic = {**nodes, "autoscaling": {"decode": {"maxReplicas": 2}}}
        assert built(**elastic)["spec"]["upgradeStrategy"] == {"type": "None"}


class TestNodesFollowPods:
    def test_cluster_autoscaler_runs_on_the_system_nodes_with_its_own_role(self, dev_stack):
        chart = release(dev_stack, "cluster-autoscaler")
        assert chart is not None
        assert chart.inputs["repositoryOpts"]["repo"] == "https://kubernetes.github.io/autoscaler"
        assert (chart.inputs["version"], chart.inputs["namespace"]) == ("9.59.0", "kube-system")
        values = chart.inputs["values"]
        assert values["autoDiscovery"] == {"clusterName": "ray-llm-multinode"}
        assert (values["cloudProvider"], values["awsRegion"]) == ("aws", "sa-east-1")
        assert values["nodeSelector"] == {"role": "system"}
        assert values["extraArgs"]["scale-down-unneeded-time"] == "10m"
        association = dev_stack.one(ASSOCIATION, "cluster-autoscaler-role")
        assert (association.inputs["namespace"], association.inputs["serviceAccount"]) == (
            "kube-system",
            "cluster-autoscaler",
        )
        assert association.urn in chart.dependencies
        assert dev_stack.one(NODE_GROUP, "gpu-nodes").urn in chart.dependencies

    def test_it_may_resize_only_this_clusters_groups(self, dev_stack):
        policy = json.loads(
            dev_stack.one("aws:iam/rolePolicy:RolePolicy", "cluster-autoscaler-role").inputs["policy"]
        )
        read, write = policy["Statement"]
        assert all(a.split(":")[1].startswith(("Describe", "Get")) for a in read["Action"])
        assert write["Action"] == [
            "autoscaling:SetDesiredCapacity",
            "autoscaling:TerminateInstanceInAutoScalingGroup",
        ]
        assert write["Condition"] == {
            "StringEquals": {"aws:ResourceTag/k8s.io/cluster-autoscaler/ray-llm-multinode": "owned"}
        }

    def test_pulumi_leaves_the_size_to_it_and_it_can_scale_from_zero_with_efa(self, dev_stack):
        group = dev_stack.one(NODE_GROUP, "gpu-nodes").inputs
        assert group["ignoreScalingChanges"] is True
        assert group["tags"] == {
            "k8s.io/cluster-autoscaler/node-template/resources/vpc.amazonaws.com/efa": "1"
        }

    def test_a_fixed_size_group_has_no_autoscaler(self):
        run = run_stack(stack="prod")
        assert release(run, "cluster-autoscaler") is None
        group = run.one(NODE_GROUP, "gpu-nodes").inputs
        assert "ignoreScalingChanges" not in group and "tags" not in group


class TestParking:
    @pytest.fixture(scope="class")
    def parked(self) -> StackRun:
        return run_stack(overrides={"autoscaling": {"parked": True}})

    def test_no_rayservice_and_no_readiness_check_so_no_gpu_workers(self, parked):
        assert parked.of_type(RAYSERVICE) == []
        assert not [j for j in parked.of_type("kubernetes:batch/v1:Job") if j.name == "ray-llm-ready-check"]

    def test_everything_else_stays(self, dev_stack, parked):
        serving = {(r.type, r.name) for r in dev_stack.registrations}
        kept = {(r.type, r.name) for r in parked.registrations}
        gone = {
            (RAYSERVICE, "ray-llm-rayservice"),
            ("kubernetes:core/v1:ConfigMap", "ray-llm-ready-check"),
            ("kubernetes:batch/v1:Job", "ray-llm-ready-check"),
        }
        assert serving - kept == gone
        assert kept - serving == {
            ("kubernetes:gateway.envoyproxy.io/v1alpha1:HTTPRouteFilter", "endpoint-httproutefilter")
        }
        # Cluster Autoscaler removes the idle GPU nodes; the group itself, its size bounds and tags stay.
        assert parked.one(NODE_GROUP, "gpu-nodes").inputs == dev_stack.one(NODE_GROUP, "gpu-nodes").inputs

    def test_the_endpoint_answers_503_saying_so(self, parked):
        route = parked.one("kubernetes:gateway.networking.k8s.io/v1:HTTPRoute").inputs
        (rule,) = route["spec"]["rules"]
        assert "backendRefs" not in rule
        assert rule["filters"] == [
            {
                "type": "ExtensionRef",
                "extensionRef": {
                    "group": "gateway.envoyproxy.io",
                    "kind": "HTTPRouteFilter",
                    "name": "ray-llm-parked",
                },
            }
        ]
        response = parked.one("kubernetes:gateway.envoyproxy.io/v1alpha1:HTTPRouteFilter").inputs["spec"][
            "directResponse"
        ]
        assert response["statusCode"] == 503 and response["contentType"] == "application/json"
        error = json.loads(response["body"]["inline"])["error"]
        assert "parked" in error["message"] and error["code"] == 503
        objects = [{k: route[k] for k in ("apiVersion", "kind", "metadata", "spec")}]
        assert crd_package_errors(objects) == [[]]

    def test_parking_needs_a_group_that_can_go_to_zero(self):
        with pytest.raises(
            ConfigError, match=r"autoscaling.parked: Cluster Autoscaler cannot remove GPU nodes below"
        ):
            run_stack(stack="prod", overrides={"autoscaling": {"parked": True}})


class TestCost:
    def test_preview_logs_the_hourly_cost_by_part_serving_at_most_and_parked(self, dev_stack):
        (report,) = [m for m in dev_stack.infos if m.startswith("hourly on-demand cost in sa-east-1")]
        gpu, system = FAKE_PRICES["g6.8xlarge"], FAKE_PRICES["m7i.2xlarge"]
        fixed = (
            FAKE_PRICES["AmazonEKS"]
            + system
            + FAKE_PRICES["NAT Gateway"]
            + FAKE_PRICES["Load Balancer-Network"]
        )
        assert f"GPU nodes (g6.8xlarge): 2 x ${gpu:.4f} = ${2 * gpu:.2f}/h" in report
        assert f"serving, GPU nodes at desiredSize: ${fixed + 2 * gpu:.2f}/h" in report
        assert f"parked (no GPU nodes): ${fixed:.2f}/h" in report
        assert "EKS control plane: 1 x $0.1000" in report

    def test_prices_come_from_the_price_list_api_in_us_east_1(self, dev_stack):
        provider = dev_stack.one("pulumi:providers:aws", "cost-pricing")
        assert provider.inputs["region"] == "us-east-1"
        asked = [args for token, args in dev_stack.calls if token == "aws:pricing/getProduct:getProduct"]
        instances = {dict((f["field"], f["value"]) for f in a["filters"]).get("instanceType") for a in asked}
        assert {"g6.8xlarge", "m7i.2xlarge"} <= instances
        assert all({"field": "regionCode", "value": "sa-east-1"} in a["filters"] for a in asked)

    @pytest.fixture(scope="class")
    def previews(self, tmp_path_factory: pytest.TempPathFactory) -> tuple[StackRun, StackRun, Path]:
        """Two previews one after the other with one price cache, in a region that sells no m7i.4xlarge
        (the API gives no price for it), on m7i.4xlarge system nodes: (first, next, the cache)."""
        cache = tmp_path_factory.mktemp("prices") / "prices.json"
        system = {"systemNodes": {"instanceType": "m7i.4xlarge"}}
        with pytest.MonkeyPatch.context() as patch:
            patch.delitem(FAKE_PRICES, "m7i.4xlarge")  # as for a type the region does not sell
            first = run_stack(overrides=system, price_cache=cache)
            again = run_stack(overrides={**system, "model": {"maxModelLen": 3072}}, price_cache=cache)
        return first, again, cache

    def test_answers_are_cached_a_day_so_the_next_preview_asks_nothing(self, previews):
        first, again, cache = previews
        asked = [c for c in first.calls if c[0] == "aws:pricing/getProduct:getProduct"]
        # The next preview asks nothing the first was answered, only what it was not (never cached).
        (unanswered,) = [c for c in again.calls if c[0] == "aws:pricing/getProduct:getProduct"]
        assert len(asked) > 1 and "m7i.4xlarge" in json.dumps(unanswered[1])
        # The provider stays declared, so a fresh cache changes nothing in the preview's diff.
        assert again.one("pulumi:providers:aws", "cost-pricing").inputs["region"] == "us-east-1"
        assert any(m.startswith("hourly on-demand cost") for m in again.infos)
        stored = json.loads(cache.read_text())
        assert stored["sa-east-1/ec2:g6.8xlarge"]["usd_per_hour"] == FAKE_PRICES["g6.8xlarge"]
        assert "sa-east-1/ec2:m7i.4xlarge" not in stored

    def test_a_day_old_price_is_asked_again(self, tmp_path: Path):
        now = [1_000_000.0]
        cache = PriceCache(tmp_path / "prices.json", clock=lambda: now[0])
        cache.put("sa-east-1", {"eks": 0.1})
        assert cache.get("sa-east-1", "eks") == 0.1
        now[0] += 24 * 3600 + 1
        assert cache.get("sa-east-1", "eks") is None

    def test_a_price_the_api_does_not_give_is_unknown_and_warned_not_fatal(self, previews):
        run, _, _ = previews
        assert any("gave no price for ec2:m7i.4xlarge" in w for w in run.warnings)
        (report,) = [m for m in run.infos if m.startswith("hourly on-demand cost")]
        assert "system nodes (m7i.4xlarge): 1 x unknown = unknown" in report
        assert "serving, GPU nodes at desiredSize: unknown" in report

    def test_parked_figures_have_no_gpu_node(self):
        settings = load_settings({**stack_file_config("dev"), "ray-llm-eks:autoscaling": {"parked": True}})
        report = cost_report(
            settings, {"ec2:g6.8xlarge": 2.0, "eks": 0.1, "ec2:m7i.2xlarge": 0.4, "nat": 0.05, "nlb": 0.02}, 1
        )
        assert report.serving[-1].count == 0 and report.at_most[-1].count == 2


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_file_logs_its_cost(stack: str):
    run = run_stack(stack=stack)
    assert any(m.startswith("hourly on-demand cost") for m in run.infos)
    assert not [w for w in run.warnings if "Price List API" in w]
