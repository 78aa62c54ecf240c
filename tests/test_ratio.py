"""Prefill:decode ratios. `autoscaling.ratio` keeps the sides' replicas within a band as the LLM-signal
policy scales them: a side whose own decision would leave the band goes only as far as it allows, and
never the other way (it waits for the other side); a band the sides cannot meet at rest is refused,
naming the key.

What would go unnoticed otherwise: a band step that moves a side against its own decision (scaling a
side down because the other one shrank), a band the rendered policy cannot take (kwargs Ray hands to
its constructor), a query on a metric Ray does not export, or a stack file without a band whose serve
config changed. No stack runs: serve configs are built from settings as the program builds them.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import promql_parser
import pytest
import yaml

from config import ConfigError
from jobs import llm_autoscaling
from jobs.llm_autoscaling import LlmScalingPolicy, keep_in_band, replicas_query
from manifests.rayservice import serve_config_of
from planning import plan_stack
from tests.exported_metrics import EXPORTED
from tests.fakes.pulumi import stack_settings

P = "ray-llm-eks"
LLM: dict[str, Any] = {
    "autoscaling": {
        "signal": "llm",
        "ratio": {"min": 0.5, "max": 2},
        "prefill": {"maxReplicas": 4},
        "decode": {"maxReplicas": 4},
    },
    "gpuNodes": {"minSize": 0, "desiredSize": 2, "maxSize": 8},
}


class TestTheBand:
    @pytest.mark.parametrize(
        ("side", "wanted", "current", "peer", "expected"),
        [
            ("prefill", 3, 1, 1, 2),  # up: at most 2 x decode's 1
            ("prefill", 2, 2, 1, 2),  # no move, nothing to keep
            ("prefill", 5, 2, 4, 5),  # within the band: its own decision
            ("prefill", 1, 3, 4, 2),  # down: at least 0.5 x decode's 4
            ("prefill", 1, 3, 1, 1),  # down, within the band
            ("prefill", 3, 3, 8, 3),  # already below the band: never moved by it, only waits
            ("prefill", 4, 3, 1, 3),  # up from above the band: waits where it is
            ("decode", 4, 1, 1, 2),  # up: at most decode's 1 / 0.5
            ("decode", 1, 3, 4, 2),  # down: at least prefill's 4 / 2
            ("decode", 2, 1, 1, 2),
            ("decode", 3, 1, None, 3),  # the other side unknown: its own decision
            ("decode", 3, 1, 0, 3),  # the other side still starting
        ],
    )
    def test_a_side_goes_only_as_far_as_the_band_allows(self, side, wanted, current, peer, expected):
        assert keep_in_band(side, wanted, current, peer, 0.5, 2) == expected

    def test_exact_edges_are_inside(self):
        assert keep_in_band("prefill", 3, 1, 2, 0.5, 1.5) == 3
        assert keep_in_band("decode", 1, 4, 2, 0.5, 2) == 1


def ctx(deployment: str, requests: float, current: int, state: dict[str, Any] | None = None) -> Any:
    """What Ray hands the policy (ray/serve/config.py AutoscalingContext): the fields it reads."""
    return SimpleNamespace(
        app_name="qwen",
        deployment_name=deployment,
        total_num_requests=requests,
        target_num_replicas=current,
        capacity_adjusted_min_replicas=1,
        capacity_adjusted_max_replicas=4,
        policy_state=state or {},
        current_time=1000.0,
    )


def sides_policy_kwargs(**sections: dict[str, Any]) -> dict[str, dict[str, Any]]:
    settings = stack_settings("dev", **sections)
    config = serve_config_of(settings, plan_stack(settings, stack="dev")).to_dict()
    args = config["applications"][0]["args"]
    return {
        side: args[f"{side}_config"]["deployment_config"]["autoscaling_config"]["policy"]["policy_kwargs"]
        for side in ("prefill", "decode")
    }


class TestThePolicy:
    def test_the_band_is_a_step_after_the_sides_own_decision(self, monkeypatch):
        kwargs = sides_policy_kwargs(**LLM)["decode"]
        asked: list[str] = []

        def answer(url: str, query: str, timeout: float) -> float:
            asked.append(query)
            return 1.0 if "replica_healthy" in query else 1.9  # 2 engines at 95 % KV; prefill has 1

        monkeypatch.setenv("RAY_PROMETHEUS_HOST", "http://prometheus:9090")
        monkeypatch.setattr(llm_autoscaling, "ask_prometheus", answer)
        policy = LlmScalingPolicy(**kwargs)  # the kwargs as Ray hands them to the class
        replicas, state = policy(ctx("Decode:qwen3_5-9b", 40, 1))
        assert replicas == 2  # its own decision is 3 (1.9 / 0.7); prefill's 1 allows 2 at 0.5
        assert state["llm_peer"] == 1.0
        assert asked[1] == replicas_query(
            None, "qwen", "Prefill:qwen3_5-9b", kwargs["namespace"], kwargs["jobs"]
        )

    def test_the_peers_replicas_are_read_only_with_the_sides_own_figure(self, monkeypatch):
        kwargs = sides_policy_kwargs(**LLM)["prefill"]
        asked: list[str] = []
        monkeypatch.setenv("RAY_PROMETHEUS_HOST", "http://prometheus:9090")
        monkeypatch.setattr(llm_autoscaling, "ask_prometheus", lambda u, q, t: asked.append(q) or 2.0)
        policy = LlmScalingPolicy(**kwargs)
        _, state = policy(ctx("Prefill:qwen3_5-9b", 3, 1))
        policy(ctx("Prefill:qwen3_5-9b", 3, 1, state))  # the next control-loop tick: no new reads
        assert len(asked) == 2

    def test_a_half_given_band_is_refused(self):
        with pytest.raises(ValueError, match="ratio band needs"):
            LlmScalingPolicy("kv_cache", 0.7, 0.8, side="decode", ratio_min=0.5, ratio_max=2)

    def test_its_query_reads_an_exported_metric_of_the_stacks_own_pods(self):
        query = replicas_query("ray-llm-a", "qwen", "Prefill:qwen3_5-9b", "inference", "inference/x")
        names: set[str] = set()

        def visit(node: Any) -> None:
            if isinstance(node, promql_parser.VectorSelector) and node.name:
                names.add(node.name)

        promql_parser.walk(promql_parser.parse(query), visit)
        assert names == {"ray_serve_deployment_replica_healthy"} and names <= EXPORTED
        assert 'deployment="Prefill:qwen3_5-9b"' in query and 'ray_io_cluster="ray-llm-a"' in query


class TestTheConfig:
    def test_each_side_renders_the_band_and_its_peer(self):
        kwargs = sides_policy_kwargs(**LLM)
        assert {k: kwargs["prefill"][k] for k in ("side", "peer", "ratio_min", "ratio_max")} == {
            "side": "prefill",
            "peer": "Decode:qwen3_5-9b",
            "ratio_min": 0.5,
            "ratio_max": 2,
        }
        assert kwargs["decode"]["side"] == "decode" and kwargs["decode"]["peer"] == "Prefill:qwen3_5-9b"

    def test_without_a_band_the_policy_gets_none(self):
        llm = {**LLM, "autoscaling": {k: v for k, v in LLM["autoscaling"].items() if k != "ratio"}}
        assert not {"side", "peer", "ratio_min", "ratio_max"} & sides_policy_kwargs(**llm)["prefill"].keys()

    def test_a_band_the_sides_cannot_meet_at_rest_is_refused(self):
        with pytest.raises(ConfigError) as caught:
            stack_settings("dev", **{**LLM, "model": {"prefillReplicas": 3, "decodeReplicas": 1}})
        message = str(caught.value)
        assert f"{P}:autoscaling.ratio: {{min: 0.5, max: 2}} cannot be met" in message
        assert "model.prefillReplicas 3 : model.decodeReplicas 1 = 3" in message

    @pytest.mark.parametrize(
        ("sections", "says"),
        [
            ({"autoscaling": {"ratio": {"min": 0.5, "max": 2}}}, "autoscaling.signal: llm"),
            ({**LLM, "serving": {"mode": "aggregated"}}, "serving.mode aggregated"),
            ({"autoscaling": {"signal": "llm", "ratio": {"min": 2, "max": 1}}}, "min 2 is above max 1"),
        ],
    )
    def test_a_band_that_cannot_work_is_refused_naming_the_key(self, sections, says):
        with pytest.raises(ConfigError) as caught:
            stack_settings("dev", **sections)
        assert "autoscaling.ratio" in str(caught.value) and says in str(caught.value)


def test_rendered_kwargs_are_plain_yaml():
    """policy_kwargs travel in serveConfigV2's YAML: the band's numbers stay numbers."""
    settings = stack_settings("dev", **LLM)
    text = serve_config_of(settings, plan_stack(settings, stack="dev")).to_yaml()
    policy = yaml.safe_load(text)["applications"][0]["args"]["decode_config"]["deployment_config"]
    assert policy["autoscaling_config"]["policy"]["policy_kwargs"]["ratio_max"] == 2
