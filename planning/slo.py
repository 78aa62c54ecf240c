"""What the preview says of `autoscaling.signal: slo`: each side's latency target and how exactly vLLM's
histogram buckets judge it. The policy itself is jobs/llm_autoscaling.py (`SloScalingPolicy`), which
imports nothing of ours; tests/test_slo_autoscaling.py holds its window and quantile to these.

Ray re-records each bucket's count at the bucket's midpoint, inside the bucket (ray/_private/telemetry/
open_telemetry_metric_recorder.py `register_histogram_metric`, `record_histogram_aggregated_batch`), so
bucket counts, and a quantile from them, are what vLLM counted; a quantile is linear inside its bucket,
so a target on a bound is judged exactly and one inside a bucket by interpolation.
"""

from __future__ import annotations

import math

from config import Settings
from config.autoscaling import ttft_target

POLICY_WINDOW = "2m"
"""The range of the policy's quantile (jobs/llm_autoscaling.py `WINDOW`)."""
POLICY_QUANTILE = 0.95
"""The quantile it holds to the target (jobs/llm_autoscaling.py `SLO_QUANTILE`)."""

TTFT_BUCKETS = (
    *(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0),
    *(20.0, 40.0, 80.0, 160.0, 640.0, 2560.0),
)
"""vLLM 0.26 `vllm:time_to_first_token_seconds` buckets (vllm/v1/metrics/loggers.py:796-823)."""
ITL_BUCKETS = (
    *(0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0),
    *(20.0, 40.0, 80.0),
)
"""vLLM 0.26 `vllm:inter_token_latency_seconds` buckets (vllm/v1/metrics/loggers.py:829-854)."""


def bucket_of(target: float, buckets: tuple[float, ...]) -> tuple[float, float] | None:
    """The bucket (lower, upper] a target lies strictly inside; None when it is a bound (exact)."""
    lower = 0.0
    for upper in buckets:
        if target == upper:
            return None
        if target < upper:
            return lower, upper
        lower = upper
    return lower, math.inf


def _judged(what: str, target: float, buckets: tuple[float, ...]) -> str:
    bucket = bucket_of(target, buckets)
    if bucket is None:
        return f"{what} {target:g} s (a bound of vLLM's buckets: judged exactly)"
    lower, upper = bucket
    return (
        f"{what} {target:g} s (inside vLLM's {lower:g}-{upper:g} s bucket: judged by interpolation, a p95 "
        f"there off by up to {upper - lower:g} s; a bucket bound is judged exactly)"
    )


def slo_summary(settings: Settings, grows: bool) -> str | None:
    """The preview's line on latency targets (`autoscaling.signal: slo`): each side's target, where it
    lies in vLLM's histogram buckets (what the p95's error depends on), the band."""
    scaling = settings.autoscaling
    if scaling.signal != "slo":
        return None
    if not grows:
        return (
            "autoscaling.signal slo: no side may grow (autoscaling.<side>.maxReplicas above the minimum), "
            "so no policy runs and the targets are not used"
        )
    objective = settings.observability.ttft_objective_seconds
    ttft = _judged("p95 time to first token", ttft_target(scaling, objective), TTFT_BUCKETS)
    itl = _judged("p95 inter-token latency", scaling.decode.itl_target_seconds, ITL_BUCKETS)
    sides = (
        f"the aggregated deployment on {ttft} and on {itl}, whichever is breached"
        if settings.serving.mode == "aggregated"
        else f"prefill on {ttft}; decode on {itl}"
    )
    return (
        f"scaling on latency (autoscaling.signal slo): {sides}; read from Prometheus over "
        f"{POLICY_WINDOW}; one replica more while a target is breached, one fewer while it is met at or "
        f"below {scaling.downscale_band:.0%} of it"
    )
