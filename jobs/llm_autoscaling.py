"""A Ray Serve autoscaling policy on the engine's own figures: prefill by the prompt tokens it holds,
decode by the KV cache it fills (`autoscaling.signal: llm`).

Ray 2.58 hands a custom policy an `AutoscalingContext` (ray/serve/config.py): Serve's request counts,
the replica counts and bounds, and whatever the replicas report from a `record_autoscaling_stats`
method. Ray Serve LLM's PD servers have no such method, and `build_pd_openai_app` fixes their classes,
so vLLM's figures come from the stack's Prometheus instead (the Ray head's `RAY_PROMETHEUS_HOST`), for
this Ray cluster's pods only: `ray_io_cluster` (`RAY_CLUSTER_NAME`, which KubeRay sets on every Ray
pod), and the `namespace` and `job` labels the stack's own PodMonitors give their targets
(`policy_kwargs` namespace and jobs), so no other workload scraped by a shared Prometheus can feed it:

- prefill: Serve's requests for the side (queued in Serve, waiting in or run by the engine) times the
  mean prompt length of the requests the engines started lately: vLLM's `prompt_tokens` counter over
  its `time_to_first_token_seconds` count, both counted in the same engine step, once per request,
  at its first token (vllm/v1/metrics/stats.py:389-394 at 0.26.0). Not the `request_prompt_tokens`
  histogram: Ray rebuilds a histogram's `_sum` from bucket midpoints, so a 2048-token prompt read as
  4000 there;
- decode: vLLM's `kv_cache_usage_perc` summed over the side's engines, against `target` per replica.

`decide` is the whole decision and a pure function. With `autoscaling.ratio`, `keep_in_band` (pure too)
is a separate step after it: the side's replicas stay within the prefill:decode band, reading the other
side's healthy replicas (`replicas_query`) with the side's own figure; a side that would leave the band
waits for the other. Ray wraps the policy (`_apply_autoscaling_config`
in ray/serve/autoscaling_policy.py) with the deployment's upscale and downscale delays and bounds; the
band here is what keeps one removal from putting the rest over the target at once.

Without a reading: a side that holds no request is idle (load 0), since vLLM sets its gauges only while
it has requests and Ray drops a gauge nobody set for about 20 s, so an idle decode has no KV-cache
series at all; a side that holds requests keeps its replicas (Prometheus unreachable, or the first
requests not scraped yet). A KV-cache reading is never carried over from an earlier read. The policy
logs a line when its decision changes, not on every control-loop tick (Ray calls it every 0.1 s, also
through its delay windows).

`SloScalingPolicy` (`autoscaling.signal: slo`) scales on the latency users feel instead: prefill on its
engines' time to first token, decode on their inter-token latency, an aggregated deployment on both
(whichever is breached). Each is the p95 over `WINDOW` from vLLM's histogram buckets
(`histogram_quantile`): Ray re-records each bucket's count at the bucket's midpoint, which lies inside
the bucket, so the bucket counts (and the quantile) are as exact as on vLLM's own endpoint, while the
`_sum` (a mean) is not, and is not used. The quantile is linear within the bucket that holds it: a
decision is certain when the true p95 lies outside the target's bucket, interpolated inside it.
`decide_on_latency` is its decision, a pure function per side: one replica more while a target is
breached (and the last step runs), one fewer while every target is met below `band` x target and the
fewer would each hold fewer requests than a replica held during the last breach; no request is idle;
requests and no reading holds.

Loaded by Ray as `llm_autoscaling:LlmScalingPolicy` (serveConfigV2's `autoscaling_config.policy`) from
the ConfigMap on the Ray pods' PYTHONPATH, where the app is built; Ray then pickles it by value for the
Serve controller on the head, which calls it every control loop. Standard library only.
"""

from __future__ import annotations

import json
import logging
import math
import os
import time
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    from ray.serve.config import AutoscalingContext

logger = logging.getLogger("ray.serve")

Signal = Literal["prompt_tokens", "kv_cache"]
PROMETHEUS_ENV = "RAY_PROMETHEUS_HOST"
CLUSTER_ENV = "RAY_CLUSTER_NAME"
READING = "llm_reading"
READ_AT = "llm_read_at"
LOAD = "llm_load"
DECIDED = "llm_decided"
PEER = "llm_peer"
PEER_READ_AT = "llm_peer_read_at"
WINDOW = "2m"


def decide(load: float | None, target: float, current: int, minimum: int, maximum: int, band: float) -> int:
    """The replicas a side needs for `load` (its signal summed over its replicas), `target` per replica.

    Above the target on average: enough replicas for each to be at the target. Fewer only when each of
    the fewer would stay at or below `band` x target (0 < band < 1). No reading: `current`. Always
    within [minimum, maximum]."""
    if load is None or load < 0 or math.isnan(load):
        wanted = current
    elif load > current * target:
        wanted = math.ceil(load / target)
    else:
        fewer = math.ceil(load / (band * target))
        wanted = fewer if fewer < current else current
    return max(minimum, min(maximum, wanted))


SLO_QUANTILE = 0.95
"""The quantile each latency target holds: the one the TTFT alert judges (observability/rules.py)."""
PRESSURE = "slo_pressure"
BREACH_LOAD = "slo_breach_load"
IN_BREACH = "slo_in_breach"
LATENCY_HISTOGRAMS = {
    "ttft": "ray_vllm_time_to_first_token_seconds",
    "itl": "ray_vllm_inter_token_latency_seconds",
}


def decide_on_latency(
    pressure: float | None,
    requests: float,
    current: int,
    running: int,
    minimum: int,
    maximum: int,
    band: float,
    breach_load: float | None,
) -> int:
    """The replicas one side needs for its latency `pressure`: the worst of its readings over their
    targets (1.0: at the target). `requests`: what the side holds (Serve's count); `running`: replicas
    running now (below `current` while a step is still starting); `breach_load`: the most requests a
    replica held while a target was last breached (`breach_load`; None: not seen).

    - No request: idle, the minimum (vLLM observes latencies only while it serves, so idle has no reading).
    - Requests and no reading: hold `current`.
    - Above 1: one replica more (from zero: one), once the last step runs: a new replica takes minutes
      and its effect shows in the window after that, so latency alone would add one per upscale delay.
    - At or below `band` (0 < band < 1): one fewer, if the fewer would each hold fewer requests than a
      replica held during the last breach (the load that breached once would breach again).
    - Otherwise hold. Always within [minimum, maximum]."""
    if not requests or requests < 0:
        wanted = 0
    elif pressure is None or math.isnan(pressure) or pressure < 0:
        wanted = current
    elif pressure > 1:
        wanted = current if running < current else current + 1
    elif pressure <= band and current > 1:
        fewer_hold = requests / (current - 1)
        wanted = current - 1 if breach_load is None or fewer_hold < breach_load else current
    else:
        wanted = current
    return max(minimum, min(maximum, wanted))


def keep_in_band(
    side: Literal["prefill", "decode"],
    wanted: int,
    current: int,
    peer: float | None,
    low: float,
    high: float,
) -> int:
    """`autoscaling.ratio`, a step after the side's own decision (`wanted`): prefill:decode replicas kept
    within [low, high], `peer` the other side's replicas. A side whose move would leave the band goes
    only as far as the band allows, and never the other way: it waits for the other side. Unknown or no
    peer replicas (the other side still starting): the side's own decision."""
    if peer is None or peer <= 0 or math.isnan(peer) or wanted == current:
        return wanted
    eps = 1e-9  # 0.5 x 4 is 2, not 1.9999
    if side == "prefill":
        fewest, most = math.ceil(low * peer - eps), math.floor(high * peer + eps)
    else:
        fewest, most = math.ceil(peer / high - eps), math.floor(peer / low + eps)
    if wanted > current:
        return max(current, min(wanted, most))
    return min(current, max(wanted, fewest))


def _string(value: str) -> str:
    return json.dumps(value)  # a PromQL double-quoted string is JSON's


def selector(cluster: str | None, namespace: str | None = None, jobs: str | None = None) -> list[str]:
    """The label matchers of this stack's Ray pods as its PodMonitors label their targets: the Ray
    cluster (`ray_io_cluster`, from the pod's `ray.io/cluster`), the pods' namespace, and the
    monitors' own `job` (`<monitor namespace>/<monitor name>`, which prometheus-operator writes)."""
    return [
        *([f"ray_io_cluster={_string(cluster)}"] if cluster else []),
        *([f"namespace={_string(namespace)}"] if namespace else []),
        *([f"job=~{_string(jobs)}"] if jobs else []),
    ]


def mean_prompt_tokens_query(
    cluster: str | None, namespace: str | None = None, jobs: str | None = None
) -> str:
    """The mean prompt length of the requests the engines started lately (both sides see every prompt):
    vLLM counts a request's prompt tokens and its first token in the same step, so the two counters'
    rates pair up exactly; no histogram sum, which Ray rebuilds from bucket midpoints."""
    matchers = selector(cluster, namespace, jobs)
    where = f"{{{', '.join(matchers)}}}" if matchers else ""
    return (
        f"sum(rate(ray_vllm_prompt_tokens_total{where}[{WINDOW}])) / "
        f"sum(rate(ray_vllm_time_to_first_token_seconds_count{where}[{WINDOW}]))"
    )


def kv_cache_query(
    cluster: str | None,
    application: str | None,
    deployment: str,
    namespace: str | None = None,
    jobs: str | None = None,
) -> str:
    """The side's KV-cache use summed over its engines. vLLM's series carry the replica's `WorkerId` but
    not its deployment: Serve's request counter, from the same process, has both (as the PD dashboard)."""
    labels = selector(cluster, namespace, jobs)
    where = ", ".join(labels)
    return f"sum(ray_vllm_kv_cache_usage_perc{{{where}}} * {side_of(labels, application, deployment)})"


def deployment_labels(labels: list[str], application: str | None, deployment: str) -> list[str]:
    """The stack's selectors, and a Serve deployment's application and name."""
    return [
        *labels,
        *([f"application={_string(application)}"] if application else []),
        f"deployment={_string(deployment)}",
    ]


def side_of(labels: list[str], application: str | None, deployment: str) -> str:
    """A side's vLLM series: vLLM's series carry the replica's `WorkerId` but not its deployment; Serve's
    request counter from the same process has both (as the PD dashboard and `kv_cache_query`)."""
    side = ", ".join(deployment_labels(labels, application, deployment))
    return (
        f"on (WorkerId) group_left (deployment) "
        f"max by (WorkerId, deployment) (ray_serve_deployment_request_counter_total{{{side}}} * 0 + 1)"
    )


def latency_query(
    signal: Literal["ttft", "itl"],
    cluster: str | None,
    application: str | None,
    deployment: str,
    namespace: str | None = None,
    jobs: str | None = None,
    window: str = WINDOW,
) -> str:
    """The side's p95 time to first token (`ttft`) or inter-token latency (`itl`) over `window`, from
    the bucket rates of its engines; empty while none of them observed one in the window."""
    labels = selector(cluster, namespace, jobs)
    where = ", ".join(labels)
    histogram = LATENCY_HISTOGRAMS[signal]
    return (
        f"histogram_quantile({SLO_QUANTILE}, sum by (le) (rate({histogram}_bucket{{{where}}}[{window}]) * "
        f"{side_of(labels, application, deployment)}))"
    )


def replicas_query(
    cluster: str | None,
    application: str | None,
    deployment: str,
    namespace: str | None = None,
    jobs: str | None = None,
) -> str:
    """A deployment's healthy replicas, as the Serve controller reports them: one series per replica, 1
    while healthy, set again every 10 s (ray/serve/_private/deployment_state.py `_set_health_gauge`,
    RAY_SERVE_STATUS_GAUGE_REPORT_INTERVAL_S)."""
    labels = deployment_labels(selector(cluster, namespace, jobs), application, deployment)
    return f"sum(ray_serve_deployment_replica_healthy{{{', '.join(labels)}}})"


def ask_prometheus(url: str, query: str, timeout: float) -> float | None:
    """An instant query's one value; None for no series, NaN, or any error."""
    address = f"{url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
    try:
        with urllib.request.urlopen(address, timeout=timeout) as response:
            body = json.load(response)
        result = body["data"]["result"]
        value = float(result[0]["value"][1]) if result else None
    except Exception as error:  # a policy that raises stops the deployment's autoscaling
        logger.warning("llm autoscaling: Prometheus at %s did not answer: %s", url, error)
        return None
    return None if value is None or math.isnan(value) else value


class LlmScalingPolicy:
    """Ray instantiates it once per deployment with `policy_kwargs` and calls it with each context."""

    def __init__(
        self,
        signal: Signal,
        target: float,
        band: float,
        namespace: str | None = None,
        jobs: str | None = None,
        refresh_seconds: float = 15.0,
        timeout_seconds: float = 1.0,
        side: Literal["prefill", "decode"] | None = None,
        peer: str | None = None,
        ratio_min: float | None = None,
        ratio_max: float | None = None,
    ) -> None:
        """`namespace`: the Ray pods' namespace; `jobs`: a regular expression of the `job` labels the
        stack's PodMonitors give (manifests/serve_app.py renders both). `side`, `peer` (the other side's
        deployment), `ratio_min` and `ratio_max`: `autoscaling.ratio` (`keep_in_band`)."""
        if signal not in ("prompt_tokens", "kv_cache"):
            raise ValueError(f"signal {signal!r} is not prompt_tokens or kv_cache")
        banded = (side, peer, ratio_min, ratio_max)
        if any(v is not None for v in banded) and (None in banded or side not in ("prefill", "decode")):
            raise ValueError("a ratio band needs side (prefill or decode), peer, ratio_min and ratio_max")
        self.side: Literal["prefill", "decode"] | None = side
        self.peer = peer
        self.ratio = (ratio_min, ratio_max) if ratio_min is not None and ratio_max is not None else None
        self.signal = signal
        self.target = target
        self.band = band
        self.namespace = namespace
        self.jobs = jobs
        self.refresh_seconds = refresh_seconds
        self.timeout_seconds = timeout_seconds

    def query(self, ctx: AutoscalingContext, cluster: str | None) -> str:
        if self.signal == "prompt_tokens":
            return mean_prompt_tokens_query(cluster, self.namespace, self.jobs)
        return kv_cache_query(cluster, ctx.app_name, ctx.deployment_name, self.namespace, self.jobs)

    def read(self, ctx: AutoscalingContext) -> float | None:
        """The figure from Prometheus (the side's I/O; the controller's loop waits for it, so briefly)."""
        url = os.environ.get(PROMETHEUS_ENV)
        if not url:
            logger.warning("llm autoscaling: %s is not set on the Ray head; holding replicas", PROMETHEUS_ENV)
            return None
        return ask_prometheus(url, self.query(ctx, os.environ.get(CLUSTER_ENV)), self.timeout_seconds)

    def read_peer(self, ctx: AutoscalingContext) -> float | None:
        """The other side's healthy replicas (`autoscaling.ratio`); None: unknown."""
        url = os.environ.get(PROMETHEUS_ENV)
        if not url or self.peer is None:
            return None
        query = replicas_query(
            os.environ.get(CLUSTER_ENV), ctx.app_name, self.peer, self.namespace, self.jobs
        )
        return ask_prometheus(url, query, self.timeout_seconds)

    def in_band(self, ctx: AutoscalingContext, state: dict[str, Any], wanted: int, current: int) -> int:
        """The step after the side's own decision: `keep_in_band`, with the peer's replicas read at the
        same pace as the side's own figure (state `llm_peer`)."""
        if self.ratio is None or self.side is None:
            return wanted
        if state.get(PEER_READ_AT) != state.get(READ_AT):  # read with this side's own figure
            state[PEER] = self.read_peer(ctx)
            state[PEER_READ_AT] = state.get(READ_AT)
        low, high = self.ratio
        return keep_in_band(self.side, wanted, current, state.get(PEER), low, high)

    def load(self, ctx: AutoscalingContext, reading: float | None) -> float | None:
        """The side's load; None: unknown (hold). A side that holds no request is idle whatever the
        reading: vLLM exports its gauges only while it has requests, so idle reads as no series."""
        requests = ctx.total_num_requests
        if not requests:
            return 0.0 if reading is None or self.signal == "prompt_tokens" else reading
        if self.signal == "kv_cache":
            return reading
        return None if reading is None else requests * reading

    def __call__(self, ctx: AutoscalingContext) -> tuple[int, dict[str, Any]]:
        state = dict(ctx.policy_state)
        now = ctx.current_time if ctx.current_time is not None else time.time()
        if now - state.get(READ_AT, -math.inf) >= self.refresh_seconds:
            reading = self.read(ctx)
            state[READ_AT] = now
            # A prompt length stays meaningful between bursts; a KV-cache reading does not.
            if reading is not None or self.signal == "kv_cache":
                state[READING] = reading
        load = self.load(ctx, state.get(READING))
        current = ctx.target_num_replicas
        replicas = decide(
            load,
            self.target,
            current,
            ctx.capacity_adjusted_min_replicas,
            ctx.capacity_adjusted_max_replicas,
            self.band,
        )
        replicas = self.in_band(ctx, state, replicas, current)
        # Ray calls this every control-loop tick, through its delay windows too: one line per decision.
        if replicas != state.get(DECIDED, current):
            logger.info(
                "llm autoscaling: %s %s %s -> %s replicas (%s %s from reading %s and %s requests, target %s "
                "per replica)",
                ctx.deployment_name,
                "up" if replicas > current else "down" if replicas < current else "holds",
                current,
                replicas,
                self.signal,
                load,
                state.get(READING),
                ctx.total_num_requests,
                self.target,
            )
        state[DECIDED] = replicas
        state[LOAD] = load
        return replicas, state


def breach_load(pressure: float | None, requests: float, current: int, state: dict[str, Any]) -> float | None:
    """The requests per replica that breached a target: the most a replica held while the breach went
    on, so neither a breach seen as the load ramps up (few requests yet) nor a reading that lags a
    falling load (still above the target, few or no requests now) stands for it. The breach lasts until
    a reading at or below the target; a new one starts anew."""
    if pressure is None or pressure <= 1 or not requests:
        return state.get(BREACH_LOAD)
    load = requests / max(current, 1)
    earlier = state.get(BREACH_LOAD)
    return max(load, earlier) if state.get(IN_BREACH) and earlier is not None else load


class SloScalingPolicy:
    """`autoscaling.signal: slo`: a side on its latency targets. Ray instantiates it once per deployment
    with `policy_kwargs`: `ttft_target` (prefill, aggregated) and `itl_target` (decode, aggregated) in
    seconds, at least one; `band`; the pods' `namespace` and the monitors' `jobs` as `LlmScalingPolicy`."""

    def __init__(
        self,
        band: float,
        ttft_target: float | None = None,
        itl_target: float | None = None,
        namespace: str | None = None,
        jobs: str | None = None,
        refresh_seconds: float = 15.0,
        timeout_seconds: float = 1.0,
        window: str = WINDOW,
    ) -> None:
        """`window`: the quantile's range (the live tier shortens it to fit in seconds)."""
        self.targets: dict[Literal["ttft", "itl"], float] = {
            **({"ttft": ttft_target} if ttft_target else {}),
            **({"itl": itl_target} if itl_target else {}),
        }
        if not self.targets:
            raise ValueError("an SLO policy needs ttft_target, itl_target or both")
        if not 0 < band < 1:
            raise ValueError(f"band {band} is not between 0 and 1")
        self.band = band
        self.namespace = namespace
        self.jobs = jobs
        self.refresh_seconds = refresh_seconds
        self.timeout_seconds = timeout_seconds
        self.window = window

    def queries(self, ctx: AutoscalingContext, cluster: str | None) -> dict[str, str]:
        return {
            signal: latency_query(
                signal, cluster, ctx.app_name, ctx.deployment_name, self.namespace, self.jobs, self.window
            )
            for signal in self.targets
        }

    def read(self, ctx: AutoscalingContext) -> dict[str, float | None]:
        """Each target's p95 from Prometheus (the controller's loop waits for it, so briefly)."""
        url = os.environ.get(PROMETHEUS_ENV)
        if not url:
            logger.warning("slo autoscaling: %s is not set on the Ray head; holding replicas", PROMETHEUS_ENV)
            return dict.fromkeys(self.targets)
        cluster = os.environ.get(CLUSTER_ENV)
        return {
            signal: ask_prometheus(url, query, self.timeout_seconds)
            for signal, query in self.queries(ctx, cluster).items()
        }

    def pressure(self, readings: dict[str, float | None]) -> float | None:
        """The worst reading over its target; None when no target has a reading. A target without a
        reading while another has one counts as met: the one read decides (aggregated: prompts finish
        their first token long before a stream's tokens settle)."""
        ratios = [r / self.targets[s] for s, r in readings.items() if r is not None and s in self.targets]
        return max(ratios) if ratios else None

    def __call__(self, ctx: AutoscalingContext) -> tuple[int, dict[str, Any]]:
        state = dict(ctx.policy_state)
        now = ctx.current_time if ctx.current_time is not None else time.time()
        if now - state.get(READ_AT, -math.inf) >= self.refresh_seconds:
            state[READING] = self.read(ctx)  # never carried over: a latency is of its window only
            state[READ_AT] = now
        pressure = self.pressure(state.get(READING) or {})
        current, requests = ctx.target_num_replicas, ctx.total_num_requests
        state[BREACH_LOAD] = breach_load(pressure, requests, current, state)
        if pressure is not None:  # a breach ends with a reading at or below the target, not a quiet tick
            state[IN_BREACH] = pressure > 1
        replicas = decide_on_latency(
            pressure,
            requests,
            current,
            ctx.current_num_replicas,
            ctx.capacity_adjusted_min_replicas,
            ctx.capacity_adjusted_max_replicas,
            self.band,
            state.get(BREACH_LOAD),
        )
        if replicas != state.get(DECIDED, current):
            logger.info(
                "slo autoscaling: %s %s %s -> %s replicas (p95 %s against targets %s: pressure %s; %s "
                "requests, %s a replica in the last breach)",
                ctx.deployment_name,
                "up" if replicas > current else "down" if replicas < current else "holds",
                current,
                replicas,
                state.get(READING),
                self.targets,
                pressure,
                requests,
                state.get(BREACH_LOAD),
            )
        state[DECIDED] = replicas
        state[PRESSURE] = pressure
        return replicas, state
