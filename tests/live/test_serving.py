"""The serve config of each mode, as the stack renders it, on a live Ray 2.58 head with token auth, read by
a live Prometheus through the stack's scrape labels and rules (tests/live/conftest.py). Only
`import_path` is swapped, for tests/live/standin.py's builders (vLLM's metrics on vLLM's schedule, no
GPU); the test's own settings are Serve's `look_back_period_s` and the policy's `refresh_seconds`,
shortened so a scale-up and a scale-down fit in seconds, and Serve's default router where the stack
renders Ray Serve LLM's prefix router (which imports vLLM).

Checked through Ray's and Prometheus's own APIs: each side of each mode scales up under load and back to
its minimum once idle; with `autoscaling.signal: slo` each side scales up on its own breached latency
target and back down when it is met with room (the stand-in's latency following its load); each KV/NIXL
failure alert fires on the first failure of a fresh worker; the readiness Job's check passes against the
live dashboard (and refuses a wrong token); the policy logs a line per decision. What needs a GPU and
vLLM (real KV-cache figures, NIXL transfers, the prefix cache) is not here: docs/design.md, "What the
live tier proves".
"""

from __future__ import annotations

import copy
import itertools
import json
import random
import re
import threading
import time
import urllib.request
from dataclasses import dataclass
from typing import Any

import pytest

from jobs import decode_heal, serve_ready
from jobs.llm_autoscaling import mean_prompt_tokens_query
from manifests.decode_heal import MONITORS
from manifests.observability import kv_path
from tests.fakes.pulumi import StackRun, run_stack
from tests.live.conftest import (
    CLUSTER,
    HOST,
    LIVE_OVERRIDES,
    LivePrometheus,
    LiveRay,
    live_stack_for,
    serve_applications,
    wait_for,
)
from tests.live.standin import KV_BYTES_PER_TOKEN, STATE_BYTES

STANDIN = {
    "ray.serve.llm:build_pd_openai_app": "standin:build_pd_openai_app",
    "ray.serve.llm:build_openai_app": "standin:build_openai_app",
}
REFRESH_SECONDS = 1.0
LOOK_BACK_SECONDS = 2.0
UP_SECONDS = 60
DOWN_SECONDS = 45
"""Ray's delays here are 1 s up and 3 s down; the rest is replicas starting on a busy machine."""
CLIENTS = 16
"""Concurrent clients of 2048-token prompts: about 8 on each side's replica (16 384 prompt tokens on
prefill, a full KV cache on decode), 8 on each of two aggregated replicas: above every target."""


def live_applications(run: StackRun) -> list[dict[str, Any]]:
    """The rendered applications with the stand-in's import path and the test's short windows."""
    applications = copy.deepcopy(serve_applications(run))
    for app in applications:
        app["import_path"] = STANDIN[app["import_path"]]
        args = app["args"]
        for side in [args.get("prefill_config"), args.get("decode_config"), *args.get("llm_configs", [])]:
            if side is None:
                continue
            # Ray Serve LLM's PrefixCacheAffinityRouter cannot be imported without vLLM installed
            # (ray/serve/llm/__init__.py imports its protocol models): Serve's default router here.
            side["deployment_config"].pop("request_router_config", None)
            scaling = side["deployment_config"]["autoscaling_config"]
            scaling["look_back_period_s"] = LOOK_BACK_SECONDS
            scaling["policy"]["policy_kwargs"]["refresh_seconds"] = REFRESH_SECONDS
    return applications


@dataclass
class Deployed:
    ray: LiveRay
    name: str
    applications: list[dict[str, Any]]
    deployments: list[str]
    minimum: dict[str, int]
    maximum: dict[str, int]

    def post(self, body: dict[str, Any], timeout: float = 30) -> dict[str, Any]:
        request = urllib.request.Request(
            f"http://{HOST}:{self.ray.serve_port}/v1/completions",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return json.load(response)

    def replicas(self) -> dict[str, int]:
        return {d: self.ray.running_replicas(self.name, d) for d in self.deployments}


def deploy(ray: LiveRay, stack: str, applications: list[dict[str, Any]] | None = None) -> Deployed:
    applications = applications or live_applications(live_stack_for(stack))
    ray.deploy(applications)
    (app,) = applications
    args = app["args"]
    model = (args.get("decode_config") or args["llm_configs"][0])["model_loading_config"]["model_id"]
    name = model.replace("/", "--").replace(".", "_")
    sides = (
        {f"Prefill:{name}": args["prefill_config"], f"Decode:{name}": args["decode_config"]}
        if "decode_config" in args
        else {f"LLMServer:{name}": args["llm_configs"][0]}
    )
    scaling = {d: side["deployment_config"]["autoscaling_config"] for d, side in sides.items()}
    deployed = Deployed(
        ray,
        app["name"],
        applications,
        list(sides),
        {d: s["min_replicas"] for d, s in scaling.items()},
        {d: s["max_replicas"] for d, s in scaling.items()},
    )
    ok, message = serve_ready.wait(
        applications, lambda: serve_ready.fetch(ray.dashboard, ray.token), 120, 1, say=lambda _: None
    )
    assert ok, message
    return deployed


@pytest.fixture(scope="module")
def disaggregated(ray_head: LiveRay, prometheus: LivePrometheus) -> Deployed:
    return deploy(ray_head, "dev")


class Load:
    """`CLIENTS` clients, each sending 2048-token prompts for 10 to 30 tokens back to back, started apart
    and with lengths of their own so the engines hold a steady load, not waves, until stopped."""

    def __init__(
        self,
        app: Deployed,
        clients: int = CLIENTS,
        prompt_tokens: int = 2048,
        tokens: tuple[int, int] = (10, 30),
    ) -> None:
        self.app, self.stop, self.errors = app, threading.Event(), []
        self.prompt_tokens, self.tokens = prompt_tokens, tokens
        self.threads = [threading.Thread(target=self.client, args=(i,), daemon=True) for i in range(clients)]

    def client(self, index: int) -> None:
        lengths = random.Random(index)
        if self.stop.wait(index * 0.2):
            return
        sent = 0
        while not self.stop.is_set():
            body = {"prompt": f"client {index} request {sent}", "prompt_tokens": self.prompt_tokens}
            try:
                self.app.post({**body, "max_tokens": lengths.randint(*self.tokens)})
            except OSError as error:
                self.errors.append(error)
            sent += 1

    def __enter__(self) -> Load:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(60)


def scales_up_and_back(app: Deployed) -> None:
    """Under load, every side above its minimum; once idle, every side back at it."""
    assert app.replicas() == app.minimum
    with Load(app):
        wait_for(
            f"{app.deployments} scaled up from {app.minimum} under load",
            lambda: all(n > app.minimum[d] for d, n in app.replicas().items()),
            UP_SECONDS,
            describe=app.replicas,
        )
    # Idle: no request, and (vLLM's schedule) no gauge after Ray's TTL: back to the minimum.
    wait_for(
        f"{app.deployments} back to {app.minimum} once idle",
        lambda: app.replicas() == app.minimum,
        DOWN_SECONDS,
        describe=app.replicas,
    )


def test_the_readiness_jobs_check_passes_against_the_live_dashboard(disaggregated: Deployed):
    """jobs/serve_ready.py as the Job runs it: Serve's REST API with Ray's token, our config RUNNING."""
    ray = disaggregated.ray
    ok, message = serve_ready.wait(
        disaggregated.applications, lambda: serve_ready.fetch(ray.dashboard, ray.token), 10, 1
    )
    assert ok, message
    refused, message = serve_ready.wait(
        disaggregated.applications, lambda: serve_ready.fetch(ray.dashboard, "not-the-token"), 10, 1
    )
    assert not refused and "refused the token (403)" in message  # token auth is on: a wrong token, 403
    refused, message = serve_ready.wait(
        disaggregated.applications, lambda: serve_ready.fetch(ray.dashboard, None), 10, 1
    )
    assert not refused and "refused the token (401)" in message  # none at all, 401


def alert_states(prometheus: LivePrometheus, alert: str) -> set[str]:
    return {
        a["state"]
        for a in prometheus.alerts()
        if a["labels"]["alertname"] == alert and a["labels"].get("ray_io_cluster") == CLUSTER
    }


def test_the_kv_path_sli_and_its_alerts_on_vllms_series_through_ray(
    disaggregated: Deployed, prometheus: LivePrometheus
):
    """Before any load: decode reads each 2048-token prompt's KV (the load's size, so the prefill test
    below reads the same mean) in 600 ms, 0.15 GB/s against the dev plan's floor of 0.4. The recorded
    rate is the bytes (the tokens counter times the plan's bytes per token, plus the state) over Ray's
    midpoint time (625 ms), to rate()'s extrapolation; KvPathBelowFloor goes pending (its most generous
    reading, at 500 ms, is under the floor too). Then decode computes prompts itself: KvRecomputing
    goes pending."""
    assert not alert_states(prometheus, "KvPathBelowFloor")
    for _ in range(4):
        disaggregated.post({"prompt": "slow kv", "prompt_tokens": 2048, "max_tokens": 1, "kv_seconds": 0.6})
    expected = (2047 * KV_BYTES_PER_TOKEN + STATE_BYTES) / 0.625 / 1e9
    where = f'{{ray_io_cluster="{CLUSTER}"}}'

    def rate() -> float | None:
        found = prometheus.query(f"{kv_path.RATE}{where}")
        value = float(found[0]["value"][1]) if len(found) == 1 else None
        # rate() extrapolates each series from its own first sample: a few parts in 10 000 apart.
        return value if value and value == pytest.approx(expected, rel=1e-2) else None

    wait_for(
        f"the recorded KV rate at {expected:.4f} GB/s",
        rate,
        30,
        describe=lambda: prometheus.query(f"{kv_path.RATE}{where}"),
    )
    wait_for(
        "KvPathBelowFloor pending", lambda: "pending" in alert_states(prometheus, "KvPathBelowFloor"), 30
    )
    assert not alert_states(prometheus, "KvRecomputing")
    for _ in range(4):
        disaggregated.post({"prompt": "no kv", "prompt_tokens": 2048, "max_tokens": 1, "kv": "recompute"})
    wait_for("KvRecomputing pending", lambda: "pending" in alert_states(prometheus, "KvRecomputing"), 30)


def test_disaggregated_each_side_scales_up_under_load_and_back_to_its_minimum(disaggregated: Deployed):
    """Prefill on the prompt tokens it holds, decode on its KV-cache use (`autoscaling.signal: llm`)."""
    scales_up_and_back(disaggregated)


def test_prefill_reads_the_mean_prompt_length_not_a_bucket_midpoint(
    disaggregated: Deployed, prometheus: LivePrometheus
):
    """The policy's own query on the load above (2048-token prompts) reads 2048; the histogram's
    `_sum / _count` it read before issue 46 reads 4000, since Ray rebuilds the sum from bucket midpoints
    and vLLM's last 1-2-5 bucket below max_model_len 4096 is 2000 (the +Inf bucket counts as 2 x 2000)."""
    kwargs = disaggregated.applications[0]["args"]["prefill_config"]["deployment_config"][
        "autoscaling_config"
    ]
    scope = {k: kwargs["policy"]["policy_kwargs"][k] for k in ("namespace", "jobs")}
    (reading,) = prometheus.query(mean_prompt_tokens_query(CLUSTER, **scope))
    assert float(reading["value"][1]) == pytest.approx(2048, rel=0.02)
    histogram = "ray_vllm_request_prompt_tokens"
    (midpoints,) = prometheus.query(f"sum(rate({histogram}_sum[2m])) / sum(rate({histogram}_count[2m]))")
    assert float(midpoints["value"][1]) == pytest.approx(4000, rel=0.02)


def test_each_kv_failure_alert_fires_on_the_first_failure_of_a_fresh_worker(
    disaggregated: Deployed, prometheus: LivePrometheus
):
    """Through Ray a counter appears at its first increment: one failure, one alert (for: 0m), or for
    the 10-minute alert, pending."""

    def state(alert: str) -> set[str]:
        return {
            a["state"]
            for a in prometheus.alerts()
            if a["labels"]["alertname"] == alert and a["labels"].get("ray_io_cluster") == CLUSTER
        }

    for fail, alert, expected in (
        ("notification", "NixlTransferFailures", "firing"),
        ("expired", "NixlKvRequestsExpired", "firing"),
        ("error", "KvLoadFailedRequests", "firing"),
        ("transfer", "NixlTransfersKeepFailing", "pending"),
    ):
        assert not state(alert), f"{alert} before any failure"
        disaggregated.post({"prompt": f"fail {fail}", "prompt_tokens": 16, "max_tokens": 1, "fail": fail})
        wait_for(f"{alert} {expected} on one {fail} failure", lambda a=alert, e=expected: e in state(a), 20)


@pytest.fixture(scope="module")
def aggregated(disaggregated: Deployed, ray_head: LiveRay) -> Deployed:
    """`serving.mode: aggregated` (the aggregated example's stack file), switched in place on the same Ray
    cluster as the docs say a switch happens."""
    return deploy(ray_head, "aggregated.example")


def test_aggregated_scales_up_under_load_and_back_to_its_minimum(aggregated: Deployed):
    scales_up_and_back(aggregated)


def test_the_policy_logs_a_line_per_decision(disaggregated: Deployed, aggregated: Deployed):
    """Ray calls the policy every 0.1 s, also through its delay windows (1 s up, 3 s down here): a line
    when its decision changes, so never the same line twice in a row, and a handful for the
    scale-ups and scale-downs above, not ten a second."""
    log = disaggregated.ray.controller_log()
    for deployment in [*disaggregated.deployments, *aggregated.deployments]:
        lines = re.findall(rf"llm autoscaling: {re.escape(deployment)} (\w+ \d+ -> \d+) replicas", log)
        said = f"{deployment}: {len(lines)} lines: {lines[:12]}"
        assert any(d.startswith("up") for d in lines) and any(d.startswith("down") for d in lines), said
        assert all(a != b for a, b in itertools.pairwise(lines)), said
        assert len(lines) <= 10, said


def serve_replicas(ray: LiveRay, application: str, deployment: str) -> list[dict[str, Any]]:
    found = ray.applications()["applications"].get(application) or {}
    return [
        r
        for r in ((found.get("deployments") or {}).get(deployment, {}).get("replicas") or [])
        if r.get("state") == "RUNNING"
    ]


def test_decode_heals_itself_once_after_a_prefill_restart(
    ray_head: LiveRay, prometheus: LivePrometheus, aggregated: Deployed
):
    """jobs/decode_heal.py's run against the live Prometheus and Ray's live Jobs API, on the disaggregated
    stand-in deployed afresh (after the aggregated tests), with a 30-second window: prefill restarts
    (its replica killed as Serve's would die), then every read into decode fails. One run restarts that
    decode replica (Serve replaces it) with a log line and one Event; the next, within the window, does
    nothing and says why."""
    app = deploy(ray_head, "dev")
    window = 30
    decode = next(d for d in app.deployments if d.startswith("Decode:"))
    prefill = next(d for d in app.deployments if d.startswith("Prefill:"))
    (old_prefill,) = serve_replicas(ray_head, app.name, prefill)
    (old_decode,) = serve_replicas(ray_head, app.name, decode)
    namespace = "inference"
    jobs = "|".join(f"{namespace}/{m}" for m in MONITORS)
    queries = decode_heal.queries(namespace, jobs, window)
    # Decode's own start falls out of the window first; then prefill restarts within it.
    wait_for(
        "decode's start out of the window",
        lambda: (
            prometheus.query(queries["prefill_started"]) == []
            and prometheus.query(queries["decode_started"]) == []
        ),
        window + 30,
    )
    kill = (
        "import ray; ray.init(address='auto'); "
        f"ray.kill(ray.get_actor({old_prefill['actor_name']!r}, namespace='serve'), no_restart=True)"
    )
    decode_heal.submit(ray_head.dashboard, ray_head.token, f'python -c "{kill}"')
    wait_for(
        "a new prefill replica",
        lambda: [
            r
            for r in serve_replicas(ray_head, app.name, prefill)
            if r["replica_id"] != old_prefill["replica_id"]
        ],
        90,
    )
    for _ in range(6):
        app.post(
            {"prompt": "stale", "prompt_tokens": 16, "max_tokens": 1, "fail": "transfer", "kv_seconds": 0.01}
        )
    env = {"NAMESPACE": namespace, "JOBS": jobs, "APPLICATION": app.name, "WINDOW_SECONDS": str(window)}
    wait_for(
        "the stale-agent signature in Prometheus",
        lambda: (
            decode_heal.decide(
                decode_heal.observe(prometheus.query, namespace, jobs, window), app.name
            ).restart
        ),
        30,
        describe=lambda: decode_heal.observe(prometheus.query, namespace, jobs, window),
    )
    submitted: list[str] = []
    events: list[str] = []
    said: list[str] = []

    def restart(entrypoint: str) -> str:
        submitted.append(entrypoint)
        return decode_heal.submit(ray_head.dashboard, ray_head.token, entrypoint)

    assert decode_heal.run(env, prometheus.query, restart, events.append, said.append) == 0
    assert len(submitted) == 1 and old_decode["actor_name"] in submitted[0]
    assert len(events) == 1 and f"replica {old_decode['replica_id']}" in said[0], said
    wait_for(
        "Serve replaced the decode replica",
        lambda: [
            r
            for r in serve_replicas(ray_head, app.name, decode)
            if r["replica_id"] != old_decode["replica_id"]
        ],
        90,
        describe=lambda: serve_replicas(ray_head, app.name, decode),
    )
    # The next minute: the restart itself is a decode start within the window.
    wait_for("decode's restart seen", lambda: prometheus.query(queries["decode_started"]), 30)
    assert decode_heal.run(env, prometheus.query, restart, events.append, said.append) == 0
    assert len(submitted) == 1 and len(events) == 1
    assert said[-1].startswith("decode-heal: no restart"), said[-1]


SLO_OVERRIDES: dict[str, dict[str, Any]] = {
    **LIVE_OVERRIDES,
    "autoscaling": {
        **LIVE_OVERRIDES["autoscaling"],
        "signal": "slo",
        "prefill": {"maxReplicas": 2, "ttftTargetSeconds": 1.0},
        "decode": {"maxReplicas": 2, "itlTargetSeconds": 0.15},
    },
}
"""Targets on vLLM's bucket bounds, where the p95 is judged exactly, that the stand-in's latency crosses."""
SLO_WINDOW = "10s"
"""The quantile's range here (2m as rendered): a phase's samples leave it within seconds."""


@pytest.fixture(scope="module")
def slo(aggregated: Deployed, ray_head: LiveRay) -> Deployed:
    """Dev's stack file with `signal: slo`, switched in place after the other modes, the stand-in's
    latency following its load on each side."""
    applications = live_applications(run_stack(overrides=SLO_OVERRIDES))
    for side in (applications[0]["args"]["prefill_config"], applications[0]["args"]["decode_config"]):
        side["latency_follows_load"] = True
        side["deployment_config"]["autoscaling_config"]["policy"]["policy_kwargs"]["window"] = SLO_WINDOW
    return deploy(ray_head, "dev", applications)


def test_slo_each_side_scales_up_on_its_breached_target_and_down_when_met_with_room(slo: Deployed):
    """Prefill on its p95 time to first token (target 1 s), decode on its p95 inter-token latency (0.15 s):

    - 12 clients of 512-token prompts for one token each: the prompts share prefill's engine (p95 TTFT
      about 3-4 s): prefill to 2; decode, which sees no inter-token latency (one token), stays at 1; the
      load held 10 s more, so the breach the policy remembers is this load on 2 replicas (still above the
      target), not the first few requests of the ramp (a run that ended its heavy phase at the up once
      remembered 1 request a replica, and held 2 replicas under light load);
    - 2 clients of 256-token prompts: TTFT about 0.2-0.4 s, below 0.8 x 1 s, and one replica would hold
      fewer requests than each held at the breach: prefill back to 1 while it still serves;
    - 16 clients of 16-token prompts for 20-30 tokens each: decode steps slow down with the requests
      decoding together (p95 about 0.4 s a token): decode to 2;
    - idle: both back to 1."""
    prefill, decode = slo.deployments

    def said() -> str:
        lines = re.findall(r"slo autoscaling: .*", slo.ray.controller_log())
        return f"{slo.replicas()}; the policy said: {lines[-8:]}"

    assert slo.replicas() == slo.minimum
    with Load(slo, clients=12, prompt_tokens=512, tokens=(1, 1)) as load:
        wait_for("prefill scaled up on its TTFT", lambda: slo.replicas()[prefill] == 2, UP_SECONDS,
                 describe=said)  # fmt: skip
        time.sleep(10)
        assert slo.replicas()[decode] == 1
    assert not load.errors
    with Load(slo, clients=2, prompt_tokens=256, tokens=(1, 1)) as load:
        wait_for("prefill back to 1 under light load", lambda: slo.replicas()[prefill] == 1, DOWN_SECONDS,
                 describe=said)  # fmt: skip
    assert not load.errors
    log = slo.ray.controller_log()
    pattern = rf"slo autoscaling: {re.escape(prefill)} down 2 -> 1 .*pressure ([\d.]+); ([\d.]+) requests"
    downs = re.findall(pattern, log)
    assert any(float(p) <= 0.8 and float(r) > 0 for p, r in downs), downs  # met with room, not idle
    with Load(slo, clients=16, prompt_tokens=16, tokens=(20, 30)) as load:
        wait_for("decode scaled up on its inter-token latency", lambda: slo.replicas()[decode] == 2,
                 UP_SECONDS, describe=said)  # fmt: skip
    assert not load.errors
    wait_for("both sides back to 1 once idle", lambda: slo.replicas() == slo.minimum, DOWN_SECONDS,
             describe=said)  # fmt: skip
