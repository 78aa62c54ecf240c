"""Capacity that follows LLM signals (`autoscaling.signal: llm`): the policy in jobs/llm_autoscaling.py, the
serve config that names it, and how it reaches the Ray head.

Silent failures these guard against: a policy that flaps (adds a replica, removes it, adds it), leaves its
bounds, scales down on a missing reading, or scales a parked (zero) side up on nothing; a serve config
Ray refuses or whose policy it cannot import where it builds the app (the head); a policy that only
works while its module is importable in the Serve controller (Ray pickles it by value); queries on
metric names nothing exports, or that mix prefill's and decode's engines; and a default stack whose
serve config or head changed although it scales on requests. Its queries and the dashboard's scaling
panel are checked with the others in tests/test_observability.py.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import yaml

from jobs.llm_autoscaling import LlmScalingPolicy, decide, mean_prompt_tokens_query
from manifests.rayservice import build_serving
from tests.fakes.existing import TeamCluster
from tests.fakes.prometheus import FakePrometheus, serving
from tests.fakes.pulumi import ROOT, STACKS, AwsState, StackRun, plan_of, run_stack, stack_settings
from tests.serve_policy import as_the_controller_gets_it, context
from tests.validators import crd_errors, pod_errors, serve_errors

RAYSERVICE = "kubernetes:ray.io/v1:RayService"
SCOPE = {"namespace": "inference", "jobs": "inference/ray-head-monitor|inference/ray-workers-monitor"}
"""Dev's Ray pods as its PodMonitors label them: what the policy's queries select."""
LLM = {
    "autoscaling": {"signal": "llm", "prefill": {"maxReplicas": 2}, "decode": {"maxReplicas": 3}},
    "gpuNodes": {"minSize": 0, "desiredSize": 2, "maxSize": 5},
}


@pytest.fixture(scope="module")
def llm_stack() -> StackRun:
    return run_stack(overrides=LLM)


def serve_config(run: StackRun) -> dict[str, Any]:
    return yaml.safe_load(run.one(RAYSERVICE).inputs["spec"]["serveConfigV2"])


def autoscaling_config(run: StackRun, side: str) -> dict[str, Any]:
    return serve_config(run)["applications"][0]["args"][f"{side}_config"]["deployment_config"][
        "autoscaling_config"
    ]


def head(run: StackRun) -> dict[str, Any]:
    return run.one(RAYSERVICE).inputs["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]


class TestDecision:
    """`decide`: the replicas for a load (the signal summed over the side), a target per replica."""

    @pytest.mark.parametrize(
        ("load", "current", "expected"),
        [
            (2.1, 2, 3),  # above the target on average: enough for each to be at it
            (6.5, 2, 4),  # far above: all at once (Ray's upscale delay paces it)
            (2.0, 2, 2),  # at the target: hold
            (1.7, 2, 2),  # one fewer would each carry 1.7 > band 0.8: hold
            (1.9, 3, 3),  # below the target, but two would each carry 0.95 > band 0.8: hold
            (1.6, 3, 2),  # two would each carry 0.8 = band: one fewer
            (0.1, 3, 1),  # nearly idle: down to the fewest that stay within the band
        ],
    )
    def test_targets_and_the_band(self, load, current, expected):
        assert decide(load, 1.0, current, 1, 4, 0.8) == expected

    def test_a_decision_does_not_undo_itself(self):
        """After going down, the same load keeps the new count; it takes more than the target to go up."""
        down = decide(1.6, 1.0, 3, 1, 4, 0.8)
        assert decide(1.6, 1.0, down, 1, 4, 0.8) == down == 2
        assert decide(2.0, 1.0, down, 1, 4, 0.8) == 2 and decide(2.01, 1.0, down, 1, 4, 0.8) == 3

    def test_bounds(self):
        assert decide(100.0, 1.0, 2, 1, 4, 0.8) == 4
        assert decide(0.0, 1.0, 2, 2, 4, 0.8) == 2
        assert decide(None, 1.0, 7, 1, 4, 0.8) == 4  # Serve lowered the maximum under a held count

    @pytest.mark.parametrize("reading", [None, float("nan"), -1.0])
    def test_no_reading_holds(self, reading):
        assert decide(reading, 1.0, 3, 1, 4, 0.8) == 3

    def test_a_parked_side_stays_at_zero_until_there_is_work(self):
        assert decide(0.0, 8192.0, 0, 0, 4, 0.8) == 0
        assert decide(None, 8192.0, 0, 0, 4, 0.8) == 0
        assert decide(10000.0, 8192.0, 0, 0, 4, 0.8) == 2

    def test_prompt_tokens_scale_like_their_target(self):
        """Prefill's default: 8192 tokens per replica, 4 requests of 2048 (today's request target)."""
        assert decide(9 * 2048.0, 8192.0, 2, 1, 4, 0.8) == 3
        assert decide(4 * 2048.0, 8192.0, 2, 1, 4, 0.8) == 2  # one would carry 8192 > band: hold


class ValuePrometheus(FakePrometheus):
    """Every query answered with `value` (None: no series)."""

    def __init__(self) -> None:
        super().__init__()
        self.value: str | None = "0"

    def answer(self, query: str) -> str | None:
        return self.value


@pytest.fixture
def prometheus(monkeypatch) -> Iterator[ValuePrometheus]:
    fake = ValuePrometheus()
    with serving(fake, monkeypatch):
        yield fake


class TestThePolicyInRay:
    def test_decode_follows_kv_cache_use_through_rays_own_wrapper(self, llm_stack, prometheus, monkeypatch):
        config = {**autoscaling_config(llm_stack, "decode"), "upscale_delay_s": 0, "downscale_delay_s": 0}
        built, policy = as_the_controller_gets_it(config, monkeypatch)
        prometheus.value = "1.9"  # two engines at 95 %
        replicas, state = policy(context(built, "Decode:qwen3_5-9b", 40, 2))
        assert replicas == 3  # 1.9 / 0.7
        (query,) = prometheus.queries
        assert 'ray_io_cluster="ray-llm-raycluster-abcde"' in query
        assert 'deployment="Decode:qwen3_5-9b"' in query and 'application="qwen"' in query
        # The stack's own pods only: a shared Prometheus's other workloads cannot feed it.
        assert query.count('namespace="inference"') == 2
        assert query.count('job=~"inference/ray-head-monitor|inference/ray-workers-monitor"') == 2
        prometheus.value = "0.5"
        replicas, _ = policy(context(built, "Decode:qwen3_5-9b", 5, 3, state))
        assert replicas == 3 and len(prometheus.queries) == 1  # read again only after refresh_seconds
        replicas, _ = policy(context(built, "Decode:qwen3_5-9b", 5, 3))
        assert replicas == 1

    def test_prefill_follows_the_prompt_tokens_it_holds(self, llm_stack, prometheus, monkeypatch):
        config = {**autoscaling_config(llm_stack, "prefill"), "upscale_delay_s": 0}
        built, policy = as_the_controller_gets_it(config, monkeypatch)
        prometheus.value = "3000"  # mean prompt length
        replicas, state = policy(context(built, "Prefill:qwen3_5-9b", 3, 1))
        assert replicas == 2 and state["llm_load"] == 9000  # 3 requests x 3000 > 8192
        assert prometheus.queries == [mean_prompt_tokens_query("ray-llm-raycluster-abcde", **SCOPE)]
        prometheus.value = None  # no request finished lately: the last prompt length still holds
        state["llm_read_at"] = 0
        assert policy(context(built, "Prefill:qwen3_5-9b", 3, 1, state))[0] == 2

    def test_an_idle_side_goes_back_to_its_minimum(self, llm_stack, prometheus, monkeypatch):
        """vLLM sets its gauges only while it has requests, and Ray drops a gauge nobody set for about
        20 s: an idle decode has no KV-cache series. No requests and no reading is idle, not "hold"
        (live: tests/live/test_serving.py)."""
        config = {**autoscaling_config(llm_stack, "decode"), "upscale_delay_s": 0, "downscale_delay_s": 0}
        built, policy = as_the_controller_gets_it(config, monkeypatch)
        prometheus.value = None
        assert policy(context(built, "Decode:qwen3_5-9b", 0, 3))[0] == 1
        # Requests, but their engines not scraped yet (or Prometheus away): keep what runs.
        assert policy(context(built, "Decode:qwen3_5-9b", 4, 3))[0] == 3

    def test_a_kv_reading_that_goes_missing_is_not_replaced_by_the_last_one(
        self, llm_stack, prometheus, monkeypatch
    ):
        """Issue 53 (5): the policy's state holds an earlier reading (1.9, which would ask for 3
        replicas); the next read finds no series: the side holds, or with no requests goes idle."""
        config = {**autoscaling_config(llm_stack, "decode"), "upscale_delay_s": 0, "downscale_delay_s": 0}
        built, policy = as_the_controller_gets_it(config, monkeypatch)
        prometheus.value = "1.9"
        replicas, state = policy(context(built, "Decode:qwen3_5-9b", 40, 2))
        assert replicas == 3 and state["llm_reading"] == 1.9
        prometheus.value = None
        state["llm_read_at"] = 0  # the refresh is due
        replicas, state = policy(context(built, "Decode:qwen3_5-9b", 40, 2, state))
        assert replicas == 2 and state["llm_reading"] is None and len(prometheus.queries) == 2
        assert policy(context(built, "Decode:qwen3_5-9b", 0, 2, {**state, "llm_read_at": 0}))[0] == 1

    def test_one_log_line_per_decision_not_per_tick(self, llm_stack, prometheus, monkeypatch):
        """Ray calls the policy every 0.1 s, through its delay windows too (30 s up, 600 s down by
        default): a line when the decision changes, not 10 a second."""
        lines: list[str] = []

        class Keep(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                if record.getMessage().startswith("llm autoscaling:"):
                    lines.append(record.getMessage())

        handler = Keep(logging.INFO)
        serve_logger = logging.getLogger("ray.serve")
        monkeypatch.setattr(serve_logger, "level", logging.INFO)
        serve_logger.addHandler(handler)
        try:
            built, policy = as_the_controller_gets_it(autoscaling_config(llm_stack, "decode"), monkeypatch)
            prometheus.value = "1.9"
            state: dict[str, Any] = {}
            for _ in range(50):  # five seconds of ticks inside Ray's 30 s upscale delay
                replicas, state = policy(context(built, "Decode:qwen3_5-9b", 40, 2, state))
                assert replicas == 2
            assert len(lines) == 1 and "up 2 -> 3 replicas" in lines[0]
            for _ in range(20):  # Ray applied it: the same decision, nothing new to say
                policy(context(built, "Decode:qwen3_5-9b", 40, 3, state))
            assert len(lines) == 1
        finally:
            serve_logger.removeHandler(handler)

    def test_ray_keeps_its_upscale_delay(self, llm_stack, prometheus, monkeypatch):
        built, policy = as_the_controller_gets_it(autoscaling_config(llm_stack, "decode"), monkeypatch)
        prometheus.value = "1.9"
        assert policy(context(built, "Decode:qwen3_5-9b", 40, 2))[0] == 2  # 30 s must pass first

    def test_without_prometheus_it_holds_and_never_raises(self, llm_stack, monkeypatch):
        monkeypatch.setenv("RAY_PROMETHEUS_HOST", "http://127.0.0.1:9")  # nothing listens
        built, policy = as_the_controller_gets_it(autoscaling_config(llm_stack, "decode"), monkeypatch)
        assert policy(context(built, "Decode:qwen3_5-9b", 40, 2))[0] == 2
        monkeypatch.delenv("RAY_PROMETHEUS_HOST")
        assert policy(context(built, "Decode:qwen3_5-9b", 40, 2))[0] == 2

    def test_a_signal_it_does_not_know_is_refused(self):
        with pytest.raises(ValueError, match="is not prompt_tokens or kv_cache"):
            LlmScalingPolicy(signal="tokens", target=1.0, band=0.8)  # type: ignore[arg-type]


class TestTheStack:
    def test_each_side_names_the_policy_with_its_target_and_rays_models_accept_it(self, llm_stack):
        prefill, decode = autoscaling_config(llm_stack, "prefill"), autoscaling_config(llm_stack, "decode")
        assert prefill == {
            "min_replicas": 1,
            "max_replicas": 2,
            "upscale_delay_s": 30.0,
            "downscale_delay_s": 600.0,
            "policy": {
                "policy_function": "llm_autoscaling:LlmScalingPolicy",
                "policy_kwargs": {"signal": "prompt_tokens", "target": 8192.0, "band": 0.8, **SCOPE},
            },
        }
        assert decode["policy"]["policy_kwargs"] == {
            "signal": "kv_cache",
            "target": 0.7,
            "band": 0.8,
            **SCOPE,
        }
        assert serve_errors(serve_config(llm_stack)) == []  # Ray 2.58's models, the policy imported

    def test_rays_models_refuse_a_policy_that_cannot_be_imported(self, llm_stack):
        config = serve_config(llm_stack)
        side = config["applications"][0]["args"]["decode_config"]["deployment_config"]["autoscaling_config"]
        side["policy"]["policy_function"] = "llm_autoscaling:NoSuchPolicy"
        assert any("decode_config" in e for e in serve_errors(config))

    def test_targets_follow_the_config(self):
        run = run_stack(
            overrides={
                **LLM,
                "autoscaling": {
                    **LLM["autoscaling"],
                    "downscaleBand": 0.6,
                    "prefill": {"maxReplicas": 2, "targetPromptTokens": 4096},
                    "decode": {"maxReplicas": 3, "targetKvCacheUsage": 0.5},
                },
            }
        )
        assert autoscaling_config(run, "prefill")["policy"]["policy_kwargs"]["target"] == 4096.0
        assert autoscaling_config(run, "decode")["policy"]["policy_kwargs"] == {
            "signal": "kv_cache",
            "target": 0.5,
            "band": 0.6,
            **SCOPE,
        }

    def test_the_head_imports_the_policy_from_the_plugins_config_map(self, llm_stack):
        pod = head(llm_stack)
        (container,) = pod["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert env["PYTHONPATH"] == mounts["plugins"] == "/opt/ray-llm-eks"
        assert env["RAY_PROMETHEUS_HOST"] == "http://kps-prometheus.monitoring.svc:9090"
        plugins = llm_stack.one("kubernetes:core/v1:ConfigMap", "ray-llm-plugins")
        assert volumes["plugins"]["configMap"]["name"] == plugins.inputs["metadata"]["name"]
        assert (
            plugins.inputs["data"]["llm_autoscaling.py"] == (ROOT / "jobs" / "llm_autoscaling.py").read_text()
        )
        rendered = {
            k: llm_stack.one(RAYSERVICE).inputs[k] for k in ("apiVersion", "kind", "metadata", "spec")
        }
        assert crd_errors(rendered) == [] and pod_errors(pod) == []

    def test_on_a_teams_prometheus_the_queries_select_the_stacks_own_monitors(self):
        """Issue 47 item 4: on a team's cluster the PodMonitors live in the team Prometheus's namespace,
        so their `job` labels name it; the pods' namespace stays the serving namespace."""
        run = run_stack(stack="byo.example", overrides=LLM, aws=AwsState(team=TeamCluster()))
        monitors = run.of_type("kubernetes:monitoring.coreos.com/v1:PodMonitor")
        jobs = sorted(f"{m.inputs['metadata']['namespace']}/{m.inputs['metadata']['name']}" for m in monitors)
        assert jobs and all(j.startswith("monitoring/") for j in jobs)  # the team Prometheus's namespace
        kwargs = autoscaling_config(run, "decode")["policy"]["policy_kwargs"]
        namespace = run.one(RAYSERVICE).inputs["metadata"]["namespace"]
        assert kwargs["jobs"] == "|".join(jobs) and kwargs["namespace"] == namespace

    @pytest.mark.parametrize("stack", STACKS)
    def test_sides_that_do_not_scale_change_nothing(self, stack):
        """Every stack file runs fixed sides (dev 1+1): with `signal: llm` its serve config, head and
        plugins stay as they are. The serving layer as the program builds it from the stack file's plan
        (tests/test_ops_render.py holds these manifests to what the program applies)."""

        def serving(**sections: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
            built = build_serving(stack_settings(stack, **sections), plan_of(stack, None, **sections))
            spec = built.rayservice.to_dict()["spec"]
            config = yaml.safe_load(spec["serveConfigV2"])
            return config, spec["rayClusterConfig"]["headGroupSpec"]["template"]["spec"], built.plugins

        default, llm = serving(), serving(autoscaling={"signal": "llm"})
        assert llm[0] == default[0]
        assert serve_errors(llm[0]) == []
        assert llm[1] == default[1]
        assert set(llm[2]["data"]) == {"ray_node_cache.py"}
