"""Capacity that meets a latency objective (`autoscaling.signal: slo`): `decide_on_latency` and
`SloScalingPolicy` in jobs/llm_autoscaling.py, its queries, and the serve config that names it.

Silent failures these guard against: a side that flaps around its target (removes a replica that the
same load breached the target without), adds a replica per upscale delay while the last one still
starts, holds its peak once idle (no request and no reading is idle: issue 46), scales down on a
missing reading while it serves, reads a latency from the other side's engines or from a mean Ray
rebuilt from bucket midpoints, or takes a target vLLM's buckets cannot judge; and a stack whose serve
config does not carry both targets. The live tier drives it against a stand-in whose latency follows
its load (tests/live/test_serving.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from jobs import llm_autoscaling
from jobs.llm_autoscaling import SloScalingPolicy, breach_load, decide_on_latency, latency_query
from manifests.pd_dashboard import pd_dashboard
from manifests.rayservice import build_serving
from planning import slo
from planning.slo import ITL_BUCKETS, TTFT_BUCKETS, bucket_of
from tests.exported_metrics import EXPORTED
from tests.fakes.prometheus import FakePrometheus, serving
from tests.fakes.pulumi import StackRun, plan_of, run_stack, stack_settings
from tests.promql import grafana_free, metric_names
from tests.serve_policy import as_the_controller_gets_it, context
from tests.validators import promtool_expressions, serve_errors

RAYSERVICE = "kubernetes:ray.io/v1:RayService"
SCOPE = {"namespace": "inference", "jobs": "inference/ray-head-monitor|inference/ray-workers-monitor"}
SLO = {
    "autoscaling": {"signal": "slo", "prefill": {"maxReplicas": 2}, "decode": {"maxReplicas": 3}},
    "gpuNodes": {"minSize": 0, "desiredSize": 2, "maxSize": 5},
}


@pytest.fixture(scope="module")
def slo_stack() -> StackRun:
    return run_stack(overrides=SLO)


def serve_config(run: StackRun) -> dict[str, Any]:
    return yaml.safe_load(run.one(RAYSERVICE).inputs["spec"]["serveConfigV2"])


def autoscaling_config(config: dict[str, Any], side: str) -> dict[str, Any]:
    args = config["applications"][0]["args"]
    found = args[f"{side}_config"] if side != "llm" else args["llm_configs"][0]
    return found["deployment_config"]["autoscaling_config"]


def decide(pressure, requests=8.0, current=2, running=None, breach=None, minimum=1, maximum=4):
    running = current if running is None else running
    return decide_on_latency(pressure, requests, current, running, minimum, maximum, 0.8, breach)


class TestDecision:
    @pytest.mark.parametrize(
        ("pressure", "current", "expected"),
        [
            (1.01, 2, 3),  # breached: one more
            (5.0, 2, 3),  # far above: still one (the next once it runs and shows in the window)
            (1.0, 2, 2),  # at the target: hold
            (0.9, 2, 2),  # met, but within the band: hold (no flapping around the target)
            (0.8, 2, 1),  # met with room (band 0.8): one fewer
            (0.1, 3, 2),  # far below: one at a time, the next after Ray's downscale delay
            (0.1, 1, 1),  # the minimum
        ],
    )
    def test_the_target_and_the_band(self, pressure, current, expected):
        assert decide(pressure, current=current) == expected

    def test_no_second_step_while_the_first_still_starts(self):
        assert decide(2.0, current=3, running=2) == 3
        assert decide(2.0, current=3, running=3) == 4

    def test_it_does_not_give_back_a_replica_the_same_load_needed(self):
        """Breached at 8 requests on one replica (8 a replica); two now meet it with room: at the same
        8 requests the one left would hold 8 again, so it holds; at 6 it gives one back."""
        assert decide(0.5, requests=8, current=2, breach=8.0) == 2
        assert decide(0.5, requests=6, current=2, breach=8.0) == 1
        assert decide(0.5, requests=8, current=3, breach=8.0) == 2  # two would hold 4 each

    def test_the_breach_load_is_the_most_a_replica_held_while_it_lasted(self):
        """Seen live: a breach first read as the load ramped up (1 request) stood for the load that
        breached, and kept prefill at 2 under a light load of 2. The most while it lasts; anew after."""
        state: dict[str, Any] = {}
        for pressure, requests, current, expected in [
            (1.5, 1, 1, 1.0),  # the ramp: first seen with one request
            (2.0, 8, 1, 8.0),  # the load that breaches
            (1.8, 2, 2, 8.0),  # the reading lags a falling load: kept
            (1.7, 0, 2, 8.0),  # a quiet moment, the reading still above: the same breach
            (1.4, 1, 2, 8.0),  # light load, the window still holds the heavy one: kept (seen live)
            (None, 2, 2, 8.0),  # no reading: kept
            (0.5, 2, 2, 8.0),  # met: the breach is over, its load kept for the decision
            (1.2, 6, 2, 3.0),  # a new breach starts anew
        ]:
            state["slo_breach_load"] = breach_load(pressure, requests, current, state)
            if pressure is not None:
                state["slo_in_breach"] = pressure > 1
            assert state["slo_breach_load"] == expected, (pressure, requests, current)

    def test_idle_is_the_minimum_reading_or_not(self):
        """No request: idle, whatever the last window said (vLLM observes latencies only while it
        serves; issue 46: "no reading" while idle kept a side at its peak)."""
        assert decide(None, requests=0, current=3) == 1
        assert decide(3.0, requests=0, current=3) == 1
        assert decide(None, requests=0, current=0, minimum=0) == 0

    @pytest.mark.parametrize("pressure", [None, float("nan"), -1.0])
    def test_requests_and_no_reading_hold(self, pressure):
        assert decide(pressure, requests=8, current=3) == 3

    def test_bounds(self):
        assert decide(2.0, current=4) == 4
        assert decide(None, current=7) == 4  # Serve lowered the maximum under a held count
        assert decide(2.0, current=0, minimum=0) == 1  # a parked side with work: one


class TestQueries:
    def test_each_side_reads_its_own_engines_p95_from_the_buckets(self):
        query = latency_query("ttft", "ray-llm-raycluster-abcde", "qwen", "Prefill:qwen3_5-9b", **SCOPE)
        assert query.startswith("histogram_quantile(0.95, sum by (le) (rate(")
        assert "ray_vllm_time_to_first_token_seconds_bucket{" in query and "[2m]" in query
        assert 'deployment="Prefill:qwen3_5-9b"' in query and 'application="qwen"' in query
        assert query.count('namespace="inference"') == 2 and query.count('ray_io_cluster="') == 2
        # Never the histogram's _sum: Ray rebuilds it from bucket midpoints.
        assert "seconds_sum" not in query and "seconds_count" not in query
        itl = latency_query("itl", None, "qwen", "Decode:qwen3_5-9b")
        assert "ray_vllm_inter_token_latency_seconds_bucket{" in itl

    def test_the_preview_describes_the_window_and_quantile_the_policy_reads(self):
        """planning/slo.py says what jobs/llm_autoscaling.py does (jobs import nothing of ours)."""
        assert slo.POLICY_WINDOW == llm_autoscaling.WINDOW == "2m"
        assert slo.POLICY_QUANTILE == llm_autoscaling.SLO_QUANTILE == 0.95

    def test_where_a_target_lies_in_vllms_buckets(self):
        assert bucket_of(2.0, TTFT_BUCKETS) == (1.0, 2.5)  # judged by interpolation
        assert bucket_of(2.5, TTFT_BUCKETS) is None and bucket_of(0.1, ITL_BUCKETS) is None  # exact
        assert bucket_of(0.12, ITL_BUCKETS) == (0.1, 0.15)
        assert bucket_of(100.0, ITL_BUCKETS) == (80.0, math.inf)


class LatencyPrometheus(FakePrometheus):
    """Answers the policy's queries by histogram: TTFT and ITL readings of its own."""

    def __init__(self) -> None:
        super().__init__()
        self.values: dict[str, str | None] = {"ttft": None, "itl": None}

    def answer(self, query: str) -> str | None:
        return self.values["ttft" if "time_to_first_token" in query else "itl"]


@pytest.fixture
def prometheus(monkeypatch) -> Iterator[LatencyPrometheus]:
    fake = LatencyPrometheus()
    with serving(fake, monkeypatch):
        yield fake


def no_delays(config: dict[str, Any]) -> dict[str, Any]:
    return {**config, "upscale_delay_s": 0, "downscale_delay_s": 0}


class TestThePolicyInRay:
    """Through Ray's own path: pickled by value, built from the rendered kwargs, wrapped in Ray's delays."""

    def test_prefill_scales_on_its_ttft_and_gives_back_with_room(self, slo_stack, prometheus, monkeypatch):
        config = no_delays(autoscaling_config(serve_config(slo_stack), "prefill"))
        built, policy = as_the_controller_gets_it(config, monkeypatch)
        prometheus.values["ttft"] = "3.1"  # p95 above the 2 s objective
        replicas, state = policy(context(built, "Prefill:qwen3_5-9b", 8, 1))
        assert replicas == 2 and state["slo_breach_load"] == 8
        (query,) = prometheus.queries
        assert "time_to_first_token" in query and 'deployment="Prefill:qwen3_5-9b"' in query
        # At its maximum, a reading still above (the window lags a falling load) lowers nothing.
        state["llm_read_at"] = 0
        replicas, state = policy(context(built, "Prefill:qwen3_5-9b", 1, 2, state))
        assert state["slo_breach_load"] == 8 and replicas == 2
        prometheus.values["ttft"] = "1.2"  # met with room, but the same 8 requests breached on one
        state["llm_read_at"] = 0
        replicas, state = policy(context(built, "Prefill:qwen3_5-9b", 8, 2, state))
        assert replicas == 2
        state["llm_read_at"] = 0
        assert policy(context(built, "Prefill:qwen3_5-9b", 3, 2, state))[0] == 1

    def test_heavy_then_quiet_then_light_gives_the_replica_back(self, slo_stack, prometheus, monkeypatch):
        """The live tier's sequence: a breach under 8 requests; the load stops and a light one starts
        while the window still holds the heavy load's TTFTs; then the light load's own readings."""
        config = no_delays(autoscaling_config(serve_config(slo_stack), "prefill"))
        built, policy = as_the_controller_gets_it(config, monkeypatch)
        state: dict[str, Any] = {}

        def tick(ttft: str, requests: float, current: int) -> int:
            nonlocal state
            prometheus.values["ttft"] = ttft
            state["llm_read_at"] = 0
            replicas, state = policy(context(built, "Prefill:qwen3_5-9b", requests, current, state))
            return replicas

        assert tick("4.8", 1, 1) == 2  # the ramp: first seen with one request (target 2 s)
        assert tick("4.8", 8, 2) == 2  # at its maximum, under the load that breached
        assert tick("4.0", 0, 2) == 1  # quiet: idle is the minimum, Ray's downscale delay holds it
        assert tick("3.0", 1.5, 2) == 2  # light load, the window still above the target: hold
        assert tick("0.6", 1.5, 2) == 1  # the light load's own readings: met with room, one fewer
        assert state["slo_breach_load"] == 4

    def test_decode_scales_on_its_inter_token_latency(self, slo_stack, prometheus, monkeypatch):
        built, policy = as_the_controller_gets_it(
            no_delays(autoscaling_config(serve_config(slo_stack), "decode")), monkeypatch
        )
        prometheus.values.update(ttft="100", itl="0.15")  # decode reads no TTFT
        assert policy(context(built, "Decode:qwen3_5-9b", 40, 2))[0] == 3
        assert all("inter_token_latency" in q for q in prometheus.queries)
        prometheus.values["itl"] = "0.09"  # met, within the band (0.08): hold
        assert policy(context(built, "Decode:qwen3_5-9b", 40, 2))[0] == 2

    def test_an_idle_side_goes_back_to_its_minimum(self, slo_stack, prometheus, monkeypatch):
        built, policy = as_the_controller_gets_it(
            no_delays(autoscaling_config(serve_config(slo_stack), "decode")), monkeypatch
        )
        assert policy(context(built, "Decode:qwen3_5-9b", 0, 3))[0] == 1
        assert policy(context(built, "Decode:qwen3_5-9b", 4, 3))[0] == 3  # serving, not scraped yet

    def test_aggregated_scales_on_whichever_is_breached(self, prometheus, monkeypatch):
        sections = {"autoscaling": SLO["autoscaling"], "gpuNodes": SLO["gpuNodes"]}
        built_serving = build_serving(
            stack_settings("aggregated.example", **sections), plan_of("aggregated.example", **sections)
        )
        config = yaml.safe_load(built_serving.rayservice.to_dict()["spec"]["serveConfigV2"])
        kwargs = autoscaling_config(config, "llm")["policy"]["policy_kwargs"]
        assert kwargs["ttft_target"] == 2.0 and kwargs["itl_target"] == 0.1
        assert serve_errors(config) == []
        built, policy = as_the_controller_gets_it(no_delays(autoscaling_config(config, "llm")), monkeypatch)
        name = "LLMServer:qwen3_5-9b"
        prometheus.values.update(ttft="1.0", itl="0.2")  # TTFT met with room, ITL breached
        assert policy(context(built, name, 20, 2))[0] == 3
        prometheus.values.update(ttft="2.2", itl="0.05")  # ITL met, TTFT breached
        assert policy(context(built, name, 20, 2))[0] == 3
        prometheus.values.update(ttft="1.0", itl="0.05")  # both met with room
        assert policy(context(built, name, 4, 3))[0] == 2
        prometheus.values.update(ttft="1.9", itl="0.05")  # one within its band: hold
        assert policy(context(built, name, 4, 3))[0] == 3

    def test_without_prometheus_it_holds_and_never_raises(self, slo_stack, monkeypatch):
        monkeypatch.setenv("RAY_PROMETHEUS_HOST", "http://127.0.0.1:9")
        built, policy = as_the_controller_gets_it(
            autoscaling_config(serve_config(slo_stack), "decode"), monkeypatch
        )
        assert policy(context(built, "Decode:qwen3_5-9b", 40, 2))[0] == 2

    def test_it_refuses_no_target_and_a_band_outside_0_1(self):
        with pytest.raises(ValueError, match="needs ttft_target, itl_target or both"):
            SloScalingPolicy(band=0.8)
        with pytest.raises(ValueError, match=r"band 1\.2"):
            SloScalingPolicy(band=1.2, itl_target=0.1)


class TestTheStack:
    def test_both_targets_rendered_and_rays_models_accept_them(self, slo_stack):
        config = serve_config(slo_stack)
        prefill, decode = autoscaling_config(config, "prefill"), autoscaling_config(config, "decode")
        assert prefill["policy"] == {
            "policy_function": "llm_autoscaling:SloScalingPolicy",
            "policy_kwargs": {"ttft_target": 2.0, "band": 0.8, **SCOPE},  # the observability objective
        }
        assert decode["policy"]["policy_kwargs"] == {"itl_target": 0.1, "band": 0.8, **SCOPE}
        assert serve_errors(config) == []
        plugins = slo_stack.one("kubernetes:core/v1:ConfigMap", "ray-llm-plugins").inputs["data"]
        assert "llm_autoscaling.py" in plugins

    def test_targets_follow_the_config(self):
        sections = {
            "autoscaling": {
                **SLO["autoscaling"],
                "prefill": {"maxReplicas": 2, "ttftTargetSeconds": 5},
                "decode": {"maxReplicas": 3, "itlTargetSeconds": 0.05},
            },
            "gpuNodes": SLO["gpuNodes"],
        }
        built = build_serving(stack_settings(**sections), plan_of(**sections))
        config = yaml.safe_load(built.rayservice.to_dict()["spec"]["serveConfigV2"])
        assert autoscaling_config(config, "prefill")["policy"]["policy_kwargs"]["ttft_target"] == 5.0
        assert autoscaling_config(config, "decode")["policy"]["policy_kwargs"]["itl_target"] == 0.05


class TestWhatPrometheusAnswers:
    def test_the_p95_of_one_sides_own_engines_from_its_buckets(self, tmp_path):
        """promtool evaluates the policy's queries on series as Ray exports them (every bucket's count as
        vLLM counted it, the sum rebuilt from midpoints) and as the stack's PodMonitors label them: a
        prefill engine whose TTFTs all lie in (2.5, 5] (p95 4.875 by interpolation), a decode engine of
        the same Ray cluster with fast first tokens, and another Ray cluster's slow prefill."""
        where = 'ray_io_cluster="{c}", namespace="inference", job="inference/ray-workers-monitor"'

        def engine(worker: str, cluster: str, deployment: str, slow: bool) -> list[dict[str, str]]:
            labels = f'{where.format(c=cluster)}, WorkerId="{worker}"'
            serve = f'{labels}, application="qwen", deployment="{deployment}", replica="{worker}"'
            buckets = [
                {
                    "series": f'ray_vllm_time_to_first_token_seconds_bucket{{{labels}, le="{le}"}}',
                    "values": "0+10x10" if (le not in ("1", "2.5") or not slow) else "0x10",
                }
                for le in ("1", "2.5", "5", "+Inf")
            ]
            return [
                *buckets,
                {"series": f"ray_serve_deployment_request_counter_total{{{serve}}}", "values": "1+1x10"},
            ]

        series = [
            *engine("p1", "ray-llm-a", "Prefill:qwen3_5-9b", slow=True),
            *engine("d1", "ray-llm-a", "Decode:qwen3_5-9b", slow=False),
            *engine("p2", "ray-llm-b", "Prefill:qwen3_5-9b", slow=True),
        ]
        prefill = latency_query("ttft", "ray-llm-a", "qwen", "Prefill:qwen3_5-9b", **SCOPE)
        decode = latency_query("ttft", "ray-llm-a", "qwen", "Decode:qwen3_5-9b", **SCOPE)
        tests = [
            {"expr": prefill, "eval_time": "5m", "exp_samples": [{"labels": "{}", "value": 4.875}]},
            {"expr": decode, "eval_time": "5m", "exp_samples": [{"labels": "{}", "value": 0.95}]},
        ]
        promtool_expressions(tmp_path, series, tests)

    def test_the_queries_use_only_exported_metrics(self):
        for signal in ("ttft", "itl"):
            names = metric_names(latency_query(signal, "c", "qwen", "Decode:x", **SCOPE))  # type: ignore[arg-type]
            assert names and names <= EXPORTED, sorted(names - EXPORTED)


class TestTheDashboardAndThePreview:
    def test_the_scaling_row_shows_each_sides_p95_beside_its_target(self):
        scaling = {"signal": "slo", "prefill": {"maxReplicas": 2}, "decode": {"maxReplicas": 3}}
        panels = pd_dashboard(stack_settings(autoscaling=scaling))["panels"]
        (latency,) = [p for p in panels if p["title"].startswith("Latency against its target")]
        exprs = [t["expr"] for t in latency["targets"]]
        assert "vector(2)" in exprs and "vector(0.1)" in exprs
        ttft, itl = exprs[0], exprs[2]
        assert "time_to_first_token_seconds_bucket" in ttft and 'deployment=~"Prefill:.*"' in ttft
        assert "inter_token_latency_seconds_bucket" in itl and 'deployment=~"Decode:.*"' in itl
        (replicas,) = [p for p in panels if p["title"].startswith("Replicas per side")]
        assert "target 2 s" in replicas["description"] and "target 0.1 s" in replicas["description"]
        assert replicas["gridPos"]["y"] == latency["gridPos"]["y"] and latency["gridPos"]["x"] == 12
        assert len({p["id"] for p in panels}) == len(panels)
        for expr in exprs:
            assert metric_names(grafana_free(expr)) <= EXPORTED
        default = pd_dashboard(stack_settings())["panels"]
        assert not any(p["title"].startswith("Latency against") for p in default)

    def test_the_preview_names_the_targets_and_how_exactly_vllms_buckets_judge_them(self):
        sections = {
            "autoscaling": {**SLO["autoscaling"], "decode": {"maxReplicas": 3, "itlTargetSeconds": 0.12}},
            "gpuNodes": SLO["gpuNodes"],
        }
        (line,) = [s for s in plan_of(**sections).summaries() if "autoscaling.signal slo" in s]
        assert "prefill on p95 time to first token 2 s (inside vLLM's 1-2.5 s bucket" in line
        assert "decode on p95 inter-token latency 0.12 s (inside vLLM's 0.1-0.15 s bucket" in line
        assert "at or below 80% of it" in line
        assert not any("autoscaling.signal" in s for s in plan_of().summaries())
