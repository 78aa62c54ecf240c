"""`serving.mode` (issue 41): `aggregated` serves the same model with the same engine settings through
Ray Serve LLM's `build_openai_app`, on the same GPU workers, without a KV connector, and passes Ray
2.58's own models; the default stays the disaggregated config it always was; the fit check, the
dashboard and the preview's upgrade notice follow the mode."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from config import load_settings
from manifests.pd_dashboard import pd_dashboard
from manifests.rayservice import build_rayservice
from tests.fakes.pulumi import (
    StackRun,
    deployed,
    minimal_config,
    plan_of,
    run_stack,
    stack_file_config,
    stack_settings,
)
from tests.preview_notices import SWITCH_AND_CLUSTER, deployment, preview_notices
from tests.validators import aggregated_rule_errors, crd_errors, pd_rule_errors, serve_errors

RAYSERVICE = "kubernetes:ray.io/v1:RayService"
STACK = "aggregated.example"
AGGREGATED = {"serving": {"mode": "aggregated"}}


def rayservice(run: StackRun) -> dict[str, Any]:
    """The RayService a run registered."""
    reg = run.one(RAYSERVICE)
    return {k: reg.inputs[k] for k in ("apiVersion", "kind", "metadata", "spec")}


def built(**sections: dict[str, Any]) -> dict[str, Any]:
    """The dev stack file's RayService with some sections overridden, as build_rayservice makes it for
    the mocked account: what the program registers (test_the_program_registers_what_built_says)."""
    made = build_rayservice(stack_settings("dev", **sections), plan_of("dev", None, **sections)).to_dict()
    return {k: made[k] for k in ("apiVersion", "kind", "metadata", "spec")}


def serve_config(obj: dict[str, Any]) -> dict[str, Any]:
    return yaml.safe_load(obj["spec"]["serveConfigV2"])


@pytest.fixture(scope="module")
def aggregated() -> dict[str, Any]:
    """The dev stack file's RayService, aggregated: the same hardware, the other mode."""
    return built(**AGGREGATED)


@pytest.fixture(scope="module")
def disaggregated(dev_stack: StackRun) -> dict[str, Any]:
    """The dev stack file's RayService as the program registers it (the default mode)."""
    return rayservice(dev_stack)


@pytest.fixture(scope="module")
def switched(dev_stack: StackRun) -> StackRun:
    """The dev stack switched to aggregated with a Ray cluster change, against the dev stack's outputs:
    the update run tests/test_upgrades.py makes too (one run per session)."""
    return run_stack(overrides=SWITCH_AND_CLUSTER, aws=deployed(dev_stack))


def test_the_program_registers_what_built_says(dev_stack, switched):
    """Both modes: the program registers the RayService build_rayservice makes, so the tests below ask
    build_rayservice (and planning, for preview's notices: tests/test_upgrades.py) without a run."""
    assert rayservice(dev_stack) == built()
    assert rayservice(switched) == built(**SWITCH_AND_CLUSTER)
    assert serve_config(rayservice(switched)) == serve_config(built(**AGGREGATED))
    assert switched.exports["servingMode"] == "aggregated"


class TestAggregated:
    def test_the_example_stack_file_renders_and_passes_rays_schemas(self):
        run = run_stack(stack=STACK)  # the run every stack file's tests make (tests/test_stack.py)
        config = serve_config(rayservice(run))
        assert crd_errors(rayservice(run)) == []
        assert serve_errors(config) == []  # ServeDeploySchema and LLMConfig
        assert aggregated_rule_errors(config) == []  # LLMServingArgs, one model, no KV connector
        assert config["applications"][0]["import_path"] == "ray.serve.llm:build_openai_app"

    def test_same_model_and_engine_settings_one_deployment_no_kv_connector(self, disaggregated, aggregated):
        (pd_app,) = serve_config(disaggregated)["applications"]
        (app,) = serve_config(aggregated)["applications"]
        assert (app["name"], app["route_prefix"]) == (pd_app["name"], pd_app["route_prefix"])
        assert app["import_path"] == "ray.serve.llm:build_openai_app"
        (llm,) = app["args"]["llm_configs"]
        decode = pd_app["args"]["decode_config"]
        engine = {k: v for k, v in decode["engine_kwargs"].items() if k != "kv_transfer_config"}
        assert llm["engine_kwargs"] == engine
        assert llm["model_loading_config"] == decode["model_loading_config"]
        assert llm["callback_config"] == decode["callback_config"]
        # dev: one prefill and one decode become two replicas
        assert llm["deployment_config"]["num_replicas"] == 2
        assert aggregated_rule_errors(serve_config(aggregated)) == []
        assert serve_errors(serve_config(aggregated)) == []

    def test_the_same_gpu_workers_so_the_ray_cluster_does_not_change(
        self, dev_stack, disaggregated, aggregated
    ):
        assert aggregated["spec"]["rayClusterConfig"] == disaggregated["spec"]["rayClusterConfig"]
        outputs = deployment(**AGGREGATED)  # what it exports (test_upgrades.py holds the program to it)
        assert outputs["rayClusterFingerprint"] == dev_stack.exports["rayClusterFingerprint"]
        assert (outputs["servingMode"], dev_stack.exports["servingMode"]) == (
            "aggregated",
            "disaggregated",
        )

    def test_autoscaling_spans_both_sides_workers_at_decodes_targets(self):
        obj = built(
            **AGGREGATED,
            gpuNodes={"maxSize": 4},
            autoscaling={"prefill": {"maxReplicas": 2}, "decode": {"maxReplicas": 2}},
        )
        (llm,) = serve_config(obj)["applications"][0]["args"]["llm_configs"]
        deployment_config = llm["deployment_config"]
        assert "num_replicas" not in deployment_config
        scaling = deployment_config["autoscaling_config"]
        assert (scaling["min_replicas"], scaling["max_replicas"]) == (2, 4)
        assert (scaling["target_ongoing_requests"], deployment_config["max_ongoing_requests"]) == (32, 64)
        assert serve_errors(serve_config(obj)) == []

    def test_the_default_is_the_disaggregated_config_unchanged(self, disaggregated):
        explicit = built(serving={"mode": "disaggregated"})
        assert explicit["spec"]["serveConfigV2"] == disaggregated["spec"]["serveConfigV2"]
        assert pd_rule_errors(serve_config(disaggregated)) == []
        assert aggregated_rule_errors(serve_config(disaggregated))  # the other builder's rules refuse it


class TestTheRulesCanFail:
    def test_a_kv_connector_an_unknown_arg_or_a_second_model_fail(self, aggregated):
        config = serve_config(aggregated)
        broken = copy.deepcopy(config)
        broken["applications"][0]["args"]["llm_configs"][0]["engine_kwargs"]["kv_transfer_config"] = {
            "kv_connector": "NixlConnector"
        }
        assert any("KV connector" in e for e in aggregated_rule_errors(broken))
        broken = copy.deepcopy(config)
        broken["applications"][0]["args"]["prefill_config"] = {}
        assert any("not LLMServingArgs fields" in e for e in aggregated_rule_errors(broken))
        broken = copy.deepcopy(config)
        broken["applications"][0]["args"]["llm_configs"].append(
            copy.deepcopy(broken["applications"][0]["args"]["llm_configs"][0])
        )
        errors = aggregated_rule_errors(broken)
        assert any("duplicate model ids" in e for e in errors) and any("2 llm_configs" in e for e in errors)

    def test_rays_llm_config_checks_each_aggregated_replica(self, aggregated):
        broken = serve_config(aggregated)
        broken["applications"][0]["args"]["llm_configs"][0]["deployment_config"]["num_replicas"] = -1
        assert any("llm_configs[0]" in e for e in serve_errors(broken))


class TestFitAndDashboards:
    def test_no_host_kv_buffers_in_the_fit_of_an_aggregated_replica(self):
        from planning import plan_stack

        # An attention-only model on g6 gets host KV buffers when disaggregated (planning/kv_path.py).
        model = {"id": "m", "source": "org/m", "parametersBillions": 8, "kvCacheBytesPerToken": 131072}
        pd = plan_stack(load_settings(minimal_config("us-east-1", model=model)), stack="t")
        agg = plan_stack(
            load_settings(minimal_config("us-east-1", model=model, serving={"mode": "aggregated"})), stack="t"
        )
        assert pd.kv_path.buffer_device == "cpu" and pd.fit.host_kv_gib > 0
        assert agg.fit.host_kv_gib == 0
        assert any("serving mode aggregated: 2 replicas" in line for line in agg.summaries())
        assert not any("KV cache path" in line for line in agg.summaries())

    def test_kv_keys_set_for_an_aggregated_stack_are_said_to_do_nothing(self):
        from planning import plan_stack

        kv = {"nixlBackends": ["UCX"], "kvLeaseSeconds": 60}
        model = {"id": "m", "source": "org/m", "parametersBillions": 8, "kvCacheBytesPerToken": 131072, **kv}
        agg = plan_stack(
            load_settings(minimal_config("us-east-1", model=model, serving={"mode": "aggregated"})), stack="t"
        )
        said = [w for w in agg.warnings if "does nothing with ray-llm-eks:serving.mode aggregated" in w]
        assert [w.split()[0] for w in said] == [
            "ray-llm-eks:model.kvLeaseSeconds",
            "ray-llm-eks:model.nixlBackends",
        ]
        pd = plan_stack(load_settings(minimal_config("us-east-1", model=model)), stack="t")
        assert not any("does nothing" in w for w in pd.warnings)
        unset = plan_stack(load_settings(stack_file_config(STACK)), stack="t")
        assert not any("does nothing" in w for w in unset.warnings)

    def test_an_aggregated_plan_says_nothing_of_a_kv_path_that_does_not_run(self):
        """ "does nothing" is all it says: no warning of what the keys would do (TCP, extra copies), no
        refusal of a value that could not work (host buffers for a hybrid model), where the same keys
        disaggregated do warn or refuse."""
        from config import ConfigError
        from planning import plan_stack

        attention_only = {
            "id": "m",
            "source": "org/m",
            "parametersBillions": 8,
            "kvCacheBytesPerToken": 131072,
        }

        def plan(mode: str, gpu: str, model: dict[str, Any]) -> Any:
            config = minimal_config(
                "us-east-1", model=model, serving={"mode": mode}, gpuNodes={"instanceType": gpu}
            )
            return plan_stack(load_settings(config), stack="t")

        ucx = ("g6.8xlarge", {**attention_only, "nixlBackends": ["UCX"]})
        copies = ("p5.48xlarge", {**attention_only, "kvBufferDevice": "cpu"})
        hybrid = ("g6.8xlarge", {"kvBufferDevice": "cpu"})  # Qwen3.5's state layers
        assert any("goes over TCP (UCX)" in w for w in plan("disaggregated", *ucx).warnings)
        assert any("two extra copies" in w for w in plan("disaggregated", *copies).warnings)
        with pytest.raises(ConfigError, match="kvBufferDevice cpu"):
            plan("disaggregated", *hybrid)
        for gpu, model in (ucx, copies, hybrid):
            warnings = plan("aggregated", gpu, model).warnings
            kv_said = [w for w in warnings if "KV" in w or "kvBufferDevice" in w or "nixlBackends" in w]
            assert kv_said and all("does nothing with" in w for w in kv_said), (gpu, kv_said)

    def test_the_dashboard_follows_the_mode_and_says_what_does_not_apply(self):
        dev = load_settings(stack_file_config("dev"))
        pd = pd_dashboard(dev)
        agg = pd_dashboard(load_settings(stack_file_config(STACK)))
        assert agg["uid"] == pd["uid"] and "serving aggregated" in agg["title"]
        panels = {p["title"]: p for p in agg["panels"]}
        ttft = panels["Time to first token (p50, p95)"]["targets"][0]["expr"]
        assert 'deployment=~"LLMServer:.*"' in ttft and "Prefill" not in ttft
        assert "does not apply" in panels["KV cache over NIXL (EFA): does not apply (aggregated)"]["title"]
        assert panels["NIXL throughput"]["description"].startswith(
            "Does not apply to serving.mode aggregated"
        )
        pd_panels = {p["title"]: p for p in pd["panels"]}
        assert (
            'deployment=~"(Prefill|Decode):.*"'
            in pd_panels["Time to first token (p50, p95)"]["targets"][0]["expr"]
        )
        assert "does not apply" not in str(pd).lower()

    def test_the_scaling_and_routing_rows_follow_the_mode_too(self):
        agg = pd_dashboard(load_settings(stack_file_config(STACK)))
        panels = {p["title"]: p for p in agg["panels"]}
        for title in ("Replicas per side: decided, target, healthy", "Prefix cache hit rate"):
            expressions = " ".join(t["expr"] for t in panels[title]["targets"])
            assert 'deployment=~"LLMServer:.*"' in expressions and "Prefill" not in expressions, title

    def test_two_aggregated_replicas_route_by_prefix_only_where_vllm_caches_them(self, aggregated):
        """Each replica prefills its own requests, so a repeated prefix pays where it is cached: the
        default (hybrid) model keeps no prefix cache in vLLM 0.26 unless asked, so Serve's default
        routes and the preview says why; opted in, the prefix router."""
        (app,) = serve_config(aggregated)["applications"]
        (llm,) = app["args"]["llm_configs"]
        assert "request_router_config" not in llm["deployment_config"]
        warnings = plan_of("dev", None, **AGGREGATED).warnings  # what the program logs (test_upgrades.py)
        assert any("the aggregated deployment keeps Serve's power-of-two" in w for w in warnings)
        opted_in = built(**AGGREGATED, model={"extraEngineKwargs": {"enable_prefix_caching": True}})
        (llm,) = serve_config(opted_in)["applications"][0]["args"]["llm_configs"]
        router = llm["deployment_config"]["request_router_config"]
        assert router["request_router_class"] == "prefix_routing:ResilientPrefixRouter"
        assert serve_errors(serve_config(opted_in)) == []


class TestSwitchingModes:
    """What preview says, as planning says it against the last deployment's outputs (the program warns
    the same: tests/test_upgrades.py's update run)."""

    def test_a_switch_alone_is_in_place_and_preview_says_what_happens(self, dev_stack):
        notices = preview_notices(deployed(dev_stack).outputs, **AGGREGATED)
        (notice,) = [w for w in notices if "serving.mode" in w]
        assert "from disaggregated to aggregated on the same Ray cluster, in place" in notice
        assert "starts 2 aggregated replicas" in notice and "up to 300 s" in notice
        assert not [w for w in notices if "changes the Ray cluster" in w]
        back = preview_notices(deployment(**AGGREGATED))
        (notice,) = [w for w in back if "serving.mode" in w]
        assert "from aggregated to disaggregated" in notice and "prefill and decode deployments" in notice

    def test_a_deployment_from_before_the_mode_existed_was_disaggregated(self, dev_stack):
        before = deployed(dev_stack).outputs
        del before["servingMode"]
        assert [w for w in preview_notices(before) if "serving.mode" in w] == []
        assert [w for w in preview_notices(before, **AGGREGATED) if "from disaggregated to aggregated" in w]

    def test_a_switch_with_a_cluster_change_says_so(self, switched):
        run = switched  # the program's own warnings
        (notice,) = [w for w in run.warnings if "serving.mode" in w]
        assert "with the RayService recreated" in notice
        assert [w for w in run.warnings if "Pulumi deletes and recreates the RayService" in w]
