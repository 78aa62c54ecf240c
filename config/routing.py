"""How Ray Serve picks the replica of each side for a request (`serving.requestRouter`), and the
thresholds of Ray Serve LLM's prefix-affinity router (`serving.prefixRouter`).

Ray 2.58 reads the router from each deployment's `deployment_config.request_router_config`; the
ingress routes to decode with decode's, and decode routes to prefill with prefill's
(serving_patterns/prefill_decode/builder.py). docs/design.md, "Routing", says why each default.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, model_validator

from config.base import StrictModel

RequestRouter = Literal["prefix", "power-of-two", "kv-aware"]

KV_AWARE_REFUSED = (
    "serving.requestRouter: kv-aware cannot serve in this stack. Ray 2.58's KVAwareRouter scores "
    "replicas in ai-dynamo's selection service, which neither the default image (the AWS Ray LLM DLC: "
    "ray[llm] 2.58.0 and vLLM 0.26.0, no ai-dynamo) nor Ray's `llm` extra carries, and it keeps its KV "
    "index only in the ingress request router of direct streaming (RAY_SERVE_LLM_ENABLE_DIRECT_STREAMING), "
    "which this stack's application does not run: without both it routes at random. Use prefix (the "
    "default) or power-of-two"
)


class PrefixRouterConfig(StrictModel):
    """Ray Serve LLM's `PrefixCacheAffinityRouter` (ray.serve.llm.request_router): a request goes to the
    replica that already served the longest prefix of its prompt while the replicas' queues are within
    `imbalancedThreshold` of each other, to the least-loaded otherwise. Its prefix tree keeps prompt
    text per replica; the stack always turns on its eviction (Ray's default keeps every prompt)."""

    imbalanced_threshold: float | None = Field(
        None,
        gt=0,
        description="Queue-length difference between replicas above which prefix affinity gives way to "
        "Serve's power-of-two choice. Unset: Ray's default, no limit (a replica's `maxOngoingRequests` "
        "still caps what it takes).",
    )
    match_rate_threshold: float = Field(
        0.1,
        ge=0,
        le=1,
        description="Share of the prompt that must match a replica's prefix tree to follow it; below "
        "it the request goes to the replica holding the least prompt text.",
    )
    eviction_threshold_chars: int = Field(
        400_000,
        gt=0,
        description="Characters of prompt text the prefix tree keeps per replica before it evicts "
        "that replica's least recently used prefixes (Ray's default).",
    )
    eviction_target_chars: int = Field(
        360_000, gt=0, description="What an eviction brings a replica's prompt text down to (Ray's default)."
    )
    eviction_interval_seconds: int = Field(
        10, ge=1, description="How often the prefix tree checks its size (Ray's default)."
    )

    @model_validator(mode="after")
    def _target_below_threshold(self) -> PrefixRouterConfig:
        if self.eviction_target_chars > self.eviction_threshold_chars:
            raise ValueError(
                f"serving.prefixRouter.evictionTargetChars {self.eviction_target_chars} is above "
                f"evictionThresholdChars {self.eviction_threshold_chars}: an eviction would never stop; "
                "keep the target at or below the threshold"
            )
        return self
