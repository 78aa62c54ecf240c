"""The `autoscaling` section: capacity that follows load, and parking.

Three layers move together. Ray Serve adds and removes prefill and decode replicas by the requests each
replica holds (`targetOngoingRequests`), or with `signal: llm` by the engine's own figures through the
stack's policy (jobs/llm_autoscaling.py): prefill by the prompt tokens it holds, decode by its KV-cache
use; or with `signal: slo` by the latency users feel: prefill by its time to first token, decode by its
inter-token latency, each against a target; KubeRay's in-tree autoscaler adds and removes GPU worker pods
for them; Cluster Autoscaler adds and removes GPU nodes for the pods, within `gpuNodes.minSize` and
`gpuNodes.maxSize`, in the node group's one zone and placement group. `model.prefillReplicas` and
`model.decodeReplicas` are each side's minimum.

Parking stops the GPUs and keeps everything else: the RayService goes (its workers with it), Cluster
Autoscaler removes the GPU nodes it leaves idle, and the endpoint answers 503 with a message until the
stack is unparked, which `pulumi up` waits for as always.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from config.base import StrictModel, seconds_at_most


class SideScaling(StrictModel):
    """One side's Serve autoscaling. Ray Serve LLM's own defaults for both request limits are 1e9, so
    without these nothing would ever scale."""

    max_replicas: int | None = Field(
        None,
        ge=1,
        description="Most replicas of this side (one GPU worker pod each). Default: the side's "
        "`model.<side>Replicas`, so it does not scale.",
    )
    target_ongoing_requests: float = Field(
        gt=0,
        description="Requests in flight per replica Serve aims for: above it Serve adds a replica, below "
        "it (after the downscale delay) removes one.",
    )
    max_ongoing_requests: int = Field(
        ge=1,
        description="Requests one replica takes at once; more wait in Serve's queue, in front of the "
        "engine, where they count towards scaling.",
    )

    @model_validator(mode="after")
    def _target_below_the_limit(self) -> SideScaling:
        if self.target_ongoing_requests >= self.max_ongoing_requests:
            raise ValueError(
                f"targetOngoingRequests {self.target_ongoing_requests:g} is not below maxOngoingRequests "
                f"{self.max_ongoing_requests}: a replica never holds more than the limit, so it never "
                "reaches the target and Serve never adds one; keep the target below the limit"
            )
        return self


class PrefillScaling(SideScaling):
    """Prefill runs each prompt once, compute-bound: a few prompts at a time per GPU."""

    target_prompt_tokens: int = Field(
        8192,
        ge=1,
        description="With `autoscaling.signal: llm`: prompt tokens per prefill replica the policy aims for, "
        "counting every request the side holds (queued in Serve, waiting in or being prefilled by the "
        "engine) at the mean prompt length vLLM reports. Above it a replica is added; the default is "
        "today's 4 requests at 2048 tokens each.",
    )

    ttft_target_seconds: float | None = Field(
        None,
        gt=0,
        lt=2560,
        description="With `autoscaling.signal: slo`: the p95 time to first token prefill's engines aim for "
        "(an aggregated deployment: with `decode.itlTargetSeconds`, whichever is breached). Default: "
        "`observability.ttftObjectiveSeconds`. Judged on vLLM's histogram buckets (0.5, 0.75, 1, 2.5, 5, "
        "7.5, 10 s, ...): a target on a bucket bound is judged exactly, one inside a bucket by "
        "interpolation; below 2560 s, vLLM's last bucket, above which nothing can be read.",
    )

    target_ongoing_requests: float = Field(
        4, gt=0, description=SideScaling.model_fields["target_ongoing_requests"].description
    )
    max_ongoing_requests: int = Field(
        16, ge=1, description=SideScaling.model_fields["max_ongoing_requests"].description
    )


class DecodeScaling(SideScaling):
    """Decode streams many requests at once, bound by KV-cache memory."""

    target_kv_cache_usage: float = Field(
        0.7,
        gt=0,
        lt=1,
        description="With `autoscaling.signal: llm`: the share of its KV cache each decode replica may fill "
        "on average before the policy adds one (vLLM's `kv_cache_usage_perc`). Near 1, requests wait "
        "for free blocks or are preempted before a new replica (minutes away) arrives.",
    )

    itl_target_seconds: float = Field(
        0.1,
        gt=0,
        lt=80,
        description="With `autoscaling.signal: slo`: the p95 time between two generated tokens decode's "
        "engines aim for (vLLM's inter-token latency). Judged on vLLM's histogram buckets (0.05, 0.075, 0.1, "
        "0.15, 0.2, 0.3 s, ...): a target on a bound is judged exactly, one inside a bucket by "
        "interpolation; below 80 s, vLLM's last bucket.",
    )

    target_ongoing_requests: float = Field(
        32, gt=0, description=SideScaling.model_fields["target_ongoing_requests"].description
    )
    max_ongoing_requests: int = Field(
        64, ge=1, description=SideScaling.model_fields["max_ongoing_requests"].description
    )


class RatioBand(StrictModel):
    """Prefill replicas per decode replica, at least and at most."""

    min: float = Field(gt=0, description="Fewest prefill replicas per decode replica (e.g. 0.5: 1:2).")
    max: float = Field(gt=0, description="Most prefill replicas per decode replica (e.g. 2: 2:1).")

    @model_validator(mode="after")
    def _min_below_max(self) -> RatioBand:
        if self.min > self.max:
            raise ValueError(f"min {self.min:g} is above max {self.max:g}")
        return self

    def holds(self, prefill: int, decode: int) -> bool:
        return decode > 0 and self.min <= prefill / decode <= self.max


class AutoscalingConfig(StrictModel):
    """Serve replicas per side, GPU worker pods and GPU nodes that follow load; and parking."""

    parked: bool = Field(
        False,
        description="Park the stack: no RayService, so no GPU workers, and Cluster Autoscaler removes the "
        "idle GPU nodes (needs `gpuNodes.minSize: 0`). The cluster, its state, the model cache and the "
        "endpoint stay; the endpoint answers 503 saying the model is parked. Set it back to false and "
        "`up` to serve again.",
    )
    signal: Literal["requests", "llm", "slo"] = Field(
        "requests",
        description="What a side that may grow (`<side>.maxReplicas` above its minimum) scales on. "
        "`requests`: Ray Serve's own policy, the requests each replica holds (`targetOngoingRequests`). "
        "`llm`: the stack's policy (jobs/llm_autoscaling.py) on the engine's figures, read from the "
        "stack's Prometheus (needs `observability.enabled`): prefill on the prompt tokens it holds "
        "(`prefill.targetPromptTokens`), decode on KV-cache use (`decode.targetKvCacheUsage`). `slo`: "
        "the stack's policy on latency, read from the same Prometheus: prefill on the p95 time to first "
        "token (`prefill.ttftTargetSeconds`), decode on the p95 inter-token latency "
        "(`decode.itlTargetSeconds`), an aggregated deployment on both; one replica at a time. Delays, "
        "bounds and nodes work as with `requests`.",
    )
    downscale_band: float = Field(
        0.8,
        gt=0,
        lt=1,
        description="With `signal: llm`: a side gives up replicas only while the ones left would each stay "
        "below this share of the target, so removing one does not put the rest over it at once (adding "
        "happens above the target). With `signal: slo`: a side gives up a replica only while its p95 "
        "latency stays at or below this share of its target (and the fewer replicas would each hold "
        "fewer requests than one held when the target was last breached).",
    )
    ratio: RatioBand | None = Field(
        None,
        description="With `signal: llm`: keep prefill:decode replicas within this band as the sides scale "
        "(e.g. `{min: 0.5, max: 2}`): a side whose own decision would leave it waits (adds or removes "
        "only as far as the band allows) until the other side has moved. The sides' minimum replicas "
        "must lie in it. Unset: each side scales on its own.",
    )
    prefill: PrefillScaling = Field(default_factory=PrefillScaling)  # type: ignore[arg-type]
    decode: DecodeScaling = Field(default_factory=DecodeScaling)  # type: ignore[arg-type]
    upscale_delay_seconds: Annotated[float, seconds_at_most(3600)] = Field(
        30, ge=0, description="How long demand must stay above target before Serve adds a replica."
    )
    downscale_delay_seconds: Annotated[float, seconds_at_most(86400)] = Field(
        600,
        ge=0,
        description="How long demand must stay below target before Serve removes a replica (a new replica "
        "costs a GPU node and minutes of loading, so not too eagerly).",
    )
    graceful_shutdown_seconds: int = Field(
        300,
        ge=10,
        le=3600,
        description="How long a replica being removed finishes the requests it holds before it stops; the "
        "worker pod's termination grace covers it.",
    )
    gpu_node_idle_minutes: int = Field(
        10,
        ge=1,
        le=1440,
        description="How long a GPU node must be unneeded before Cluster Autoscaler removes it.",
    )


def ttft_target(scaling: AutoscalingConfig, objective: float) -> float:
    """Prefill's TTFT target with `signal: slo`: its own, or the observability objective."""
    return scaling.prefill.ttft_target_seconds or objective
