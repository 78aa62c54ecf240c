"""A CPU tier for the KV cache (`model.kvOffloadGib`): the connector configuration each side renders, held
to vLLM 0.26's own KVTransferConfig (vendored, tests/schemas/vllm/v0.26.0) and Ray 2.58's LLMConfig; the
fit check that counts it in the worker's memory; the models it is refused for; the preview and the
dashboard.

Silent failures these guard against: vLLM's `kv_offloading_size` beside NIXL (vLLM 0.26 then replaces
the NIXL connector with its offload connector: no KV would cross to decode); a MultiConnector whose NIXL
child names its own engine_id (vLLM builds children with the parent's: a duplicate argument at engine
start) or whose parent names one (Ray 2.58 makes NIXL's unique id on a copy only, so every prefill
replica would share it); the tier on decode, where NIXL is asked first and loads every prompt; a tier
the node cannot hold beside the page cache; a hybrid model without a prefix cache, where vLLM's
offload connector cannot work; and a stack without the key whose serve config changed.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest
import yaml

from config import ConfigError
from manifests.pd_dashboard import pd_dashboard
from manifests.rayservice import build_serving
from tests.exported_metrics import EXPORTED
from tests.fakes.pulumi import STACKS, plan_of, stack_settings
from tests.promql import grafana_free, metric_names
from tests.validators import (
    aggregated_rule_errors,
    pd_rule_errors,
    serve_errors,
    vllm_kv_transfer_errors,
)

PREFIX = {"extraEngineKwargs": {"enable_prefix_caching": True}}
MODEL: dict[str, Any] = {"kvOffloadGib": 40, **PREFIX}
GIB = 2**30


def serve_config(stack: str = "dev", **sections: dict[str, Any]) -> dict[str, Any]:
    built = build_serving(stack_settings(stack, **sections), plan_of(stack, None, **sections))
    return yaml.safe_load(built.rayservice.to_dict()["spec"]["serveConfigV2"])


@pytest.fixture(scope="module")
def offloaded() -> dict[str, Any]:
    return serve_config(model=MODEL)


def kv(config: dict[str, Any], side: str) -> dict[str, Any]:
    return config["applications"][0]["args"][f"{side}_config"]["engine_kwargs"]["kv_transfer_config"]


class TestTheConnectors:
    def test_prefill_runs_nixl_then_the_cpu_tier_decode_nixl_alone(self, offloaded):
        prefill = kv(offloaded, "prefill")
        assert prefill["kv_connector"] == "MultiConnector" and "engine_id" not in prefill
        nixl, tier = prefill["kv_connector_extra_config"]["connectors"]
        assert nixl == {
            "kv_connector": "NixlConnector",
            "kv_role": "kv_both",
            "kv_buffer_device": "cuda",
            "kv_connector_extra_config": {"backends": ["LIBFABRIC"]},
        }
        assert tier == {
            "kv_connector": "OffloadingConnector",
            "kv_role": "kv_both",
            "kv_connector_extra_config": {"cpu_bytes_to_use": 40 * GIB},
        }
        without = serve_config(model=PREFIX)
        assert kv(offloaded, "decode") == kv(without, "decode")  # decode: NIXL as before
        engine = offloaded["applications"][0]["args"]["prefill_config"]["engine_kwargs"]
        assert "kv_offloading_size" not in engine  # vLLM would replace NIXL with its offload connector

    def test_vllms_kv_transfer_config_and_rays_models_accept_them(self, offloaded):
        for side in ("prefill", "decode"):
            assert vllm_kv_transfer_errors(kv(offloaded, side)) == [], side
        assert serve_errors(offloaded) == []  # Ray 2.58's ServeDeploySchema and LLMConfig, per side
        assert pd_rule_errors(offloaded) == []

    @pytest.mark.parametrize(
        ("break_it", "says"),
        [
            (lambda c: c["connectors"][0].update(engine_id="prefill"), "multiple values for keyword"),
            (lambda c: c["connectors"][1]["kv_connector_extra_config"].clear(), "cpu_bytes_to_use"),
            (lambda c: c["connectors"][1].pop("kv_role"), "specify kv_role"),
            (lambda c: c["connectors"][1].update(kv_connector="CpuTier"), "'CpuTier'"),
            (lambda c: c["connectors"][0].update(kv_buffer="cuda"), "Unexpected keyword argument"),
        ],
        ids=["child-engine-id", "no-cpu-bytes", "no-role", "unknown-connector", "unknown-field"],
    )
    def test_vllms_rules_refuse_what_it_would_refuse_at_engine_start(self, offloaded, break_it, says):
        broken = copy.deepcopy(kv(offloaded, "prefill"))
        break_it(broken["kv_connector_extra_config"])
        problems = vllm_kv_transfer_errors(broken)
        assert any(says in p for p in problems), problems

    def test_aggregated_takes_vllms_own_tier(self):
        config = serve_config("aggregated.example", model=MODEL)
        (side,) = config["applications"][0]["args"]["llm_configs"]
        engine = side["engine_kwargs"]
        assert engine["kv_offloading_size"] == 40 and engine["kv_offloading_backend"] == "native"
        assert "kv_transfer_config" not in engine
        assert serve_errors(config) == [] and aggregated_rule_errors(config) == []


class TestTheFitAndTheRefusals:
    def test_the_plan_counts_the_tier_in_the_workers_memory(self):
        plan = plan_of(model=MODEL)
        assert plan.fit.offload_gib == 40
        assert "40 GiB of CPU KV tier with 43 GiB to spare" in plan.fit.summary()
        (line,) = [s for s in plan.summaries() if s.startswith("CPU KV tier")]
        assert "40 GiB of pinned host memory on each prefill worker" in line and "none on decode" in line
        assert "hybrid model" in line  # the default's state layers: what is kept where
        assert not any(s.startswith("CPU KV tier") for s in plan_of().summaries())

    @pytest.mark.parametrize(
        ("model", "says"),
        [
            (
                {"kvOffloadGib": 100, **PREFIX},
                "worker memory 113Gi leaves no page cache for the 18 GiB checkpoint next to 12 GiB of "
                "processes and model.kvOffloadGib 100 GiB; raise serving.worker.memory to at least 130Gi, "
                "or lower model.kvOffloadGib",
            ),
            ({"kvOffloadGib": 40}, "ray-llm-eks:model.kvOffloadGib: a CPU tier is looked up by prefix-cache"),
            (
                {"kvOffloadGib": 40, "extraEngineKwargs": {"enable_prefix_caching": False}},
                "model.extraEngineKwargs turns the prefix cache off",
            ),
        ],
        ids=["node-cannot-hold-it", "hybrid-without-prefix-cache", "prefix-cache-off"],
    )
    def test_a_tier_that_cannot_work_is_refused_naming_the_key(self, model, says):
        with pytest.raises(ConfigError) as refused:
            plan_of(model=model)
        assert says in str(refused.value)

    def test_vllms_own_offload_keys_are_refused_beside_nixl(self):
        with pytest.raises(ValueError, match="kv_offloading_size"):
            stack_settings(model={"extraEngineKwargs": {"kv_offloading_size": 40}})


class TestTheDashboard:
    def test_the_prefix_cache_panel_shows_the_tiers_hits_on_prefill(self):
        panels = pd_dashboard(stack_settings(model=MODEL))["panels"]
        (panel,) = [p for p in panels if p["title"] == "Prefix cache hit rate"]
        (tier,) = [t for t in panel["targets"] if t["legendFormat"].startswith("CPU tier")]
        assert (
            metric_names(grafana_free(tier["expr"]))
            == {
                "ray_vllm_external_prefix_cache_hits_total",
                "ray_vllm_external_prefix_cache_queries_total",
                "ray_serve_deployment_request_counter_total",
            }
            and metric_names(grafana_free(tier["expr"])) <= EXPORTED
        )
        assert 'deployment=~"Prefill:.*"' in tier["expr"]
        default = pd_dashboard(stack_settings())["panels"]
        (plain,) = [p for p in default if p["title"] == "Prefix cache hit rate"]
        assert len(plain["targets"]) == 1 and "CPU tier" not in plain["description"]


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_files_serve_config_with_both_keys_passes_ray_and_vllm(stack):
    """Issue 52 item 3: each stack file with `signal: slo` on sides that may grow and a CPU tier renders
    a serve config Ray 2.58's models accept, whose every KV connector config vLLM 0.26 builds."""
    settings = stack_settings(stack)
    model = settings.model
    sections: dict[str, Any] = {
        "autoscaling": {
            "signal": "slo",
            "prefill": {"maxReplicas": model.prefill_replicas + 1},
            "decode": {"maxReplicas": model.decode_replicas + 1},
        },
        "model": MODEL,
    }
    # Room to grow on the GPU nodes each side runs on (its own section where it has one).
    for section, nodes in (
        ("prefillNodes", settings.prefill_nodes),
        ("decodeNodes", settings.decode_nodes),
    ):
        if nodes is not None:
            sections[section] = {"minSize": 0, "maxSize": nodes.max_size + 1}
    if not (settings.prefill_nodes and settings.decode_nodes):
        sections["gpuNodes"] = {"minSize": 0, "maxSize": settings.gpu_nodes.max_size + 2}
    config = serve_config(stack, **sections)
    assert serve_errors(config) == []
    args = config["applications"][0]["args"]
    sides = (
        [args["prefill_config"], args["decode_config"]] if "prefill_config" in args else args["llm_configs"]
    )
    policies = [s["deployment_config"]["autoscaling_config"]["policy"]["policy_kwargs"] for s in sides]
    assert all("ttft_target" in p or "itl_target" in p for p in policies)
    for side in sides:
        kv_config = side["engine_kwargs"].get("kv_transfer_config")
        assert kv_config is None or vllm_kv_transfer_errors(kv_config) == []
    assert any(
        "kv_offloading_size" in s["engine_kwargs"] or "kv_transfer_config" in s["engine_kwargs"]
        for s in sides
    )
