"""Prefill and decode on their own engine settings (`model.prefill`, `model.decode`): each key a side sets
replaces the shared one in that side's LLMConfig only, the pairs of tensor-parallel sizes vLLM 0.26's NIXL
connector cannot move the KV cache between are refused naming the keys, and sides of different sizes get
worker groups of their own, each replica pinned to its side's pods. What would go unnoticed otherwise: a
side's key landing in both LLMConfigs, a prefill replica of one GPU taking a GPU of a decode pod (decode then
waits for a pod there is no node for), a pair of sizes NIXL refuses only at the first request.

No stack runs: the RayService is built from the dev stack file's settings as the program builds it
(as tests/test_rayservice.py's `built`, which it holds to the registered one)."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from config import ConfigError
from config.serving import ModelConfig
from manifests.rayservice import build_rayservice
from planning import plan_stack
from planning.tensor_parallel import pair_problem, tensor_parallel_problems
from tests.fakes.pulumi import stack_settings
from tests.validators import crd_errors, pd_rule_errors, pod_errors, serve_errors
from world.offline import ACCOUNT_ID

P = "ray-llm-eks"

HETERO: dict[str, Any] = {
    "gpuNodes": {"instanceType": "g6e.48xlarge"},
    "model": {
        "tensorParallelSize": 2,
        "maxNumSeqs": 64,
        "extraEngineKwargs": {"trust_remote_code": True, "enable_chunked_prefill": True},
        "prefill": {"maxNumBatchedTokens": 16384},
        "decode": {
            "tensorParallelSize": 4,
            "maxNumSeqs": 256,
            "gpuMemoryUtilization": 0.85,
            "extraEngineKwargs": {"enable_chunked_prefill": False},
        },
    },
}
"""Prefill TP2 and decode TP4 on a g6e.48xlarge (8 L40S, 4 EFA interfaces): each side's engine differs."""


def built(**sections: dict[str, Any]) -> dict[str, Any]:
    """The dev stack file's RayService with some sections' keys overridden, as the program builds it
    (tests/test_rayservice.py holds the program to the same function)."""
    settings = stack_settings("dev", **sections)
    made = build_rayservice(settings, plan_stack(settings, stack="dev", account_id=ACCOUNT_ID)).to_dict()
    return {k: made[k] for k in ("apiVersion", "kind", "metadata", "spec")}


def serve_config(obj: dict[str, Any]) -> dict[str, Any]:
    return yaml.safe_load(obj["spec"]["serveConfigV2"])


def worker_groups(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return obj["spec"]["rayClusterConfig"]["workerGroupSpecs"]


@pytest.fixture(scope="module")
def hetero() -> dict[str, Any]:
    return built(**HETERO)


def args_of(obj: dict[str, Any]) -> dict[str, Any]:
    return serve_config(obj)["applications"][0]["args"]


def refusal(**sections: dict[str, Any]) -> str:
    settings = stack_settings("dev", **sections)
    with pytest.raises(ConfigError) as caught:
        plan_stack(settings, stack="dev")
    return str(caught.value)


class TestSideSettings:
    def test_a_sides_key_replaces_the_shared_one_for_that_side_only(self):
        model = ModelConfig.model_validate(HETERO["model"])
        prefill, decode = model.side("prefill"), model.side("decode")
        assert (prefill.tensor_parallel_size, decode.tensor_parallel_size) == (2, 4)
        assert (prefill.max_num_seqs, decode.max_num_seqs) == (64, 256)
        assert (prefill.gpu_memory_utilization, decode.gpu_memory_utilization) == (0.9, 0.85)
        assert (prefill.max_num_batched_tokens, decode.max_num_batched_tokens) == (16384, None)
        # merged key by key over the shared extraEngineKwargs
        assert prefill.extra_engine_kwargs == {"trust_remote_code": True, "enable_chunked_prefill": True}
        assert decode.extra_engine_kwargs == {"trust_remote_code": True, "enable_chunked_prefill": False}
        shared = ModelConfig.model_validate({})
        assert model.split_tensor_parallel and not shared.split_tensor_parallel
        assert shared.side("prefill") is shared

    @pytest.mark.parametrize("key", ["tensor_parallel_size", "max_num_seqs", "max_num_batched_tokens"])
    def test_keys_of_their_own_are_refused_in_extra_engine_kwargs(self, key: str):
        with pytest.raises(ValidationError, match=rf"decode\.extraEngineKwargs[\s\S]*'{key}'"):
            ModelConfig.model_validate({"decode": {"extraEngineKwargs": {key: 2}}})
        with pytest.raises(ValidationError, match=rf"extraEngineKwargs[\s\S]*'{key}'"):
            ModelConfig.model_validate({"extraEngineKwargs": {key: 2}})

    def test_unknown_side_key_is_refused(self):
        with pytest.raises(ValidationError, match=r"prefill\.maxModelLen"):
            ModelConfig.model_validate({"prefill": {"maxModelLen": 8192}})


class TestServeConfig:
    def test_each_sides_llm_config_carries_its_own_engine(self, hetero):
        args = args_of(hetero)
        prefill, decode = args["prefill_config"]["engine_kwargs"], args["decode_config"]["engine_kwargs"]
        assert (prefill["tensor_parallel_size"], decode["tensor_parallel_size"]) == (2, 4)
        assert (prefill["max_num_seqs"], decode["max_num_seqs"]) == (64, 256)
        assert (prefill["gpu_memory_utilization"], decode["gpu_memory_utilization"]) == (0.9, 0.85)
        assert prefill["max_num_batched_tokens"] == 16384 and "max_num_batched_tokens" not in decode
        assert (prefill["enable_chunked_prefill"], decode["enable_chunked_prefill"]) == (True, False)
        assert prefill["trust_remote_code"] is decode["trust_remote_code"] is True

    def test_the_config_passes_rays_llm_config_and_build_pd_openai_apps_rules(self, hetero):
        assert serve_errors(serve_config(hetero)) == [] and pd_rule_errors(serve_config(hetero)) == []
        assert crd_errors(hetero) == []
        assert all(pod_errors(g["template"]["spec"]) == [] for g in worker_groups(hetero))

    def test_rays_placement_model_refuses_what_ray_would(self, hetero):
        config = serve_config(hetero)
        config["applications"][0]["args"]["decode_config"]["placement_group_config"]["strategy"] = "TIGHT"
        assert any("decode_config" in e and "strategy" in e for e in serve_errors(config))

    def test_the_seeds_sides_carry_no_new_keys(self):
        args = args_of(built())
        for side in ("prefill_config", "decode_config"):
            assert "placement_group_config" not in args[side]
            assert not {"max_num_seqs", "max_num_batched_tokens"} & args[side]["engine_kwargs"].keys()


class TestWorkerGroups:
    def test_sides_of_different_sizes_get_groups_of_their_own(self, hetero):
        groups = {g["groupName"]: g for g in worker_groups(hetero)}
        assert sorted(groups) == ["decode-workers", "prefill-workers"]
        for name, gpus, efa, slot in (
            ("prefill-workers", "2", "1", "prefill-worker"),
            ("decode-workers", "4", "2", "decode-worker"),
        ):
            group = groups[name]
            limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
            assert (limits["nvidia.com/gpu"], limits["vpc.amazonaws.com/efa"]) == (gpus, efa)
            assert group["rayStartParams"]["num-gpus"] == gpus
            # the side's slots, one per GPU: what its placement bundles take
            assert group["resources"] == {slot: gpus}
            assert group["replicas"] == group["minReplicas"] == 1

    def test_each_replica_is_pinned_to_its_sides_pods(self, hetero):
        args = args_of(hetero)
        for side in ("prefill", "decode"):
            assert args[f"{side}_config"]["placement_group_config"] == {
                "bundle_per_worker": {"GPU": 1, f"{side}-worker": 1},
            }

    def test_same_size_on_both_sides_keeps_one_group(self):
        obj = built(model={"prefill": {"tensorParallelSize": 1, "maxNumSeqs": 8}})
        assert [g["groupName"] for g in worker_groups(obj)] == ["gpu-workers"]
        assert "placement_group_config" not in args_of(obj)["prefill_config"]
        assert args_of(obj)["prefill_config"]["engine_kwargs"]["max_num_seqs"] == 8

    def test_the_plan_sizes_each_side_by_its_own_engine(self):
        plan = plan_stack(stack_settings("dev", **HETERO), stack="dev")
        assert plan.split_workers and not plan.split  # worker groups of their own, one node group
        assert [(p.side, p.pods_per_node, p.tensor_parallel_size) for p in plan.sides] == [
            ("prefill", 4, 2),
            ("decode", 2, 4),
        ]
        assert plan.side("decode").fit.utilization == 0.85 and plan.side("prefill").fit.utilization == 0.9
        assert not [w for w in plan.warnings if "paid for and idle" in w]  # 1 node each side: both used
        more = plan_stack(
            stack_settings(
                "dev", **{**HETERO, "gpuNodes": {**HETERO["gpuNodes"], "desiredSize": 3, "maxSize": 3}}
            ),
            stack="dev",
        )
        (idle,) = [w for w in more.warnings if "paid for and idle" in w]
        assert "fill 2 g6e.48xlarge node(s), but gpuNodes.desiredSize is 3" in idle
        assert "prefill 1 x tensorParallelSize 2 (4 per node), decode 1 x tensorParallelSize 4" in idle
        summary = "\n".join(plan.summaries())
        assert "prefill on gpuNodes: g6e.48xlarge" in summary
        assert "4 worker(s) per node, each 2 GPU" in summary
        assert "2 worker(s) per node, each 4 GPU" in summary


class TestRefused:
    def test_decode_wider_than_the_node_names_the_sides_key(self):
        message = refusal(model={"decode": {"tensorParallelSize": 4}})
        assert f"{P}:model.decode.tensorParallelSize: 4 needs 4 GPUs in one decode pod" in message
        assert "g6.8xlarge has 1" in message

    def test_sizes_that_do_not_divide_one_another_are_refused(self):
        message = refusal(
            gpuNodes={"instanceType": "p4d.24xlarge", "acceptIdleGpus": True},
            model={"prefill": {"tensorParallelSize": 3}, "decode": {"tensorParallelSize": 4}},
        )
        assert f"{P}:model.prefill.tensorParallelSize and {P}:model.decode.tensorParallelSize" in message
        assert "do not divide one another" in message

    def test_a_hybrid_model_past_its_kv_heads_is_refused(self):
        # Qwen3.5-9B: 4 KV heads, hybrid: at TP 8 a rank's KV block differs from TP 4's
        message = refusal(
            gpuNodes={"instanceType": "p4d.24xlarge"},
            model={"tensorParallelSize": 4, "decode": {"tensorParallelSize": 8}},
        )
        assert f"{P}:model.decode.tensorParallelSize and {P}:model.tensorParallelSize" in message
        assert "hybrid" in message and "block size" in message

    @pytest.mark.parametrize(
        ("prefill", "decode", "kv_heads", "hybrid", "refused"),
        [
            (1, 4, 4, True, False),
            (4, 1, 4, True, False),
            (2, 4, None, False, False),
            (3, 4, None, False, True),  # the handshake's tp_ratio asserts divisibility
            (2, 6, 8, False, False),
            (8, 4, 4, False, True),  # prefill ranks hold replicated heads: refused for P > D
            (4, 8, 4, False, False),  # decode ranks read slices of replicated heads: fine
            (4, 8, 4, True, True),  # hybrid: block sizes differ past the KV heads
            (8, 8, 4, True, False),
        ],
    )
    def test_the_pairs_vllms_nixl_connector_refuses(self, prefill, decode, kv_heads, hybrid, refused):
        assert (pair_problem(prefill, decode, kv_heads, hybrid) is not None) == refused

    def test_an_unknown_models_heads_are_said_not_refused(self):
        model = ModelConfig.model_validate(
            {"source": "org/other", "hybridLayers": True, "decode": {"tensorParallelSize": 2}}
        )
        assert tensor_parallel_problems(model) == []
        plan_warnings = plan_stack(
            stack_settings(
                "dev",
                gpuNodes={"instanceType": "g6e.48xlarge", "acceptIdleGpus": True},
                model={
                    "source": "org/other",
                    "hybridLayers": True,
                    "parametersBillions": 8,
                    "kvCacheBytesPerToken": 32768,
                    "decode": {"tensorParallelSize": 2},
                },
            ),
            stack="dev",
        ).warnings
        assert any("does not know its KV heads" in w for w in plan_warnings)

    def test_a_side_whose_engine_does_not_fit_is_named(self):
        message = refusal(model={"decode": {"gpuMemoryUtilization": 0.3}})
        assert f"{P}:model (decode): model does not fit" in message
        assert "(prefill)" not in message

    def test_the_sides_at_their_most_must_fit_the_nodes(self):
        message = refusal(
            gpuNodes={"instanceType": "g6e.48xlarge", "desiredSize": 1, "maxSize": 1},
            model={"tensorParallelSize": 2, "decodeReplicas": 2, "decode": {"tensorParallelSize": 4}},
        )
        assert f"{P}:gpuNodes.maxSize 1" in message and "fill 2 g6e.48xlarge nodes" in message


def test_aggregated_mode_says_the_side_keys_do_nothing():
    plan = plan_stack(
        stack_settings("dev", serving={"mode": "aggregated"}, model={"decode": {"maxNumSeqs": 8}}),
        stack="dev",
    )
    assert any(f"{P}:model.decode does nothing" in w for w in plan.warnings)
    assert not plan.split_workers


def test_a_sides_own_prefix_cache_decides_its_router_and_the_preview_says_so():
    """The default model is hybrid (vLLM 0.26 keeps no prefix cache unless asked): prefill opts in on its
    own, so prefill routes by prefix and decode keeps Serve's default, and preview names decode only."""
    sections: dict[str, Any] = {
        "gpuNodes": {"desiredSize": 4, "maxSize": 4},
        "model": {
            "prefillReplicas": 2,
            "decodeReplicas": 2,
            "prefill": {"extraEngineKwargs": {"enable_prefix_caching": True}},
        },
    }
    args = args_of(built(**sections))
    assert "request_router_config" in args["prefill_config"]["deployment_config"]
    assert "request_router_config" not in args["decode_config"]["deployment_config"]
    assert args["prefill_config"]["engine_kwargs"]["enable_prefix_caching"] is True
    assert "enable_prefix_caching" not in args["decode_config"]["engine_kwargs"]
    (warning,) = [
        w for w in plan_stack(stack_settings("dev", **sections), stack="dev").warnings if "requestRouter" in w
    ]
    assert ": decode keeps Serve's power-of-two choice" in warning
