"""A stand-in for Ray Serve LLM's builders and vLLM's engine, for the live tier: the serve config the stack
renders runs with only `import_path` pointing here (`standin:build_pd_openai_app`,
`standin:build_openai_app`), so every deployment setting (names, autoscaling with the stack's policy,
request limits, router) is the stack's own, on a real Ray 2.58 Serve.

What it keeps of the real thing:
- Deployment names as Ray 2.58 makes them (ray/llm/_internal/serve/core/server/builder.py
  `_get_deployment_name`, serving_patterns/prefill_decode/builder.py): `Prefill:<model>`,
  `Decode:<model>` (decode calls prefill, the ingress calls decode), `LLMServer:<model>` aggregated.
- vLLM 0.26.0's metrics as its `RayPrometheusStatLogger` emits them through `ray.util.metrics`
  (vllm/v1/metrics/loggers.py, ray_wrappers.py, distributed/kv_transfer/kv_connector/v1/nixl/stats.py):
  the names (`vllm:x` sanitized to `vllm_x`, Ray prefixes `ray_`), the types, the tag keys
  `model_name`, `engine` (plus `finished_reason`) and `ReplicaId` (the Serve replica's unique id), and
  the schedule: the engine records scheduler stats (the gauges) only in steps it runs, so only while it
  has requests; a counter is incremented only by a non-zero amount (`RayCounterWrapper.inc`), so a
  series appears at its first increment; the prompt tokens are counted once per request, in the step
  of its first token, beside its time-to-first-token observation (stats.py:389-394); the prompt-token
  histogram takes vLLM's 1-2-5 buckets up to max_model_len.
- The NIXL connector's series (kv_connector/v1/nixl/stats.py:140-238): on decode, per request whose KV
  it pulls, one `vllm:nixl_xfer_time_seconds` (bounds 5 ms ... 1, 5 s), `nixl_post_time_seconds`,
  `nixl_bytes_transferred` (4x bounds) and `nixl_num_descriptors` observation, none for a read that
  failed; and `vllm:prompt_tokens_by_source` (v1/metrics/loggers.py:680-693, 1194-1200): decode
  receives a hybrid model's prompt but its last token over NIXL (`external_kv_transfer`) and computes
  that one (`local_compute`; nixl/base_scheduler.py:334-339), or computes it all when no KV arrives
  (`kv: recompute`); prefill and aggregated replicas compute every prompt token.

What it does not keep: no GPU, no model, no KV cache and no NIXL. A request "holds" prompt plus
generated tokens of a fixed KV capacity while it runs for a time its size sets; the KV/NIXL failure
counters move when a request asks for it (`fail`), which is where vLLM counts them, but nothing is
transferred: a "transfer" takes the request's `kv_seconds` (90 ms by default: about 1 GB/s for a
2048-token prompt of the default model) and moves the bytes the default model's KV would. What needs
a GPU and vLLM is said in docs/design.md, "What the live tier proves".
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from ray import serve
from ray.util import metrics
from starlette.requests import Request
from starlette.responses import JSONResponse

KV_CAPACITY_TOKENS = 12288
"""Tokens one stand-in engine's KV cache holds: 6 requests of 2048 fill it."""
PREFILL_SECONDS_PER_TOKEN = 1.5 / 2048
DECODE_STEP_SECONDS = 0.1
STEP_SECONDS = 0.25
"""How often a busy engine records its scheduler stats (vLLM: every engine step)."""
TTFT_BUCKETS = [
    *(0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0),
    *(20.0, 40.0, 80.0, 160.0, 640.0, 2560.0),
]
"""vllm/v1/metrics/loggers.py `vllm:time_to_first_token_seconds` at 0.26.0."""
NIXL_TIME_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0]
"""nixl/stats.py:140-162 at 0.26.0 (`buckets[1:]` for the transfer time)."""
NIXL_POST_BUCKETS = [0.001, *NIXL_TIME_BUCKETS]
NIXL_BYTES_BUCKETS = [float(2 ** (10 + i)) for i in range(1, 25, 2)]
NIXL_DESCRIPTOR_BUCKETS = [
    float(b) for b in (10, 20, 30, 50, 75, 100, 200, 400, 1000, 2000, 4000, 10000, 20000, 50000)
]
KV_BYTES_PER_TOKEN = 8 * 2 * 4 * 256 * 2
STATE_BYTES = 24 * (32 * 128 * 128 + 3 * (2 * 16 * 128 + 32 * 128)) * 2
"""Qwen3.5-9B (planning/capacity.py): 8 attention layers' KV per token, and 24 Gated DeltaNet layers'
state per sequence, which a transfer carries too."""
BLOCK_TOKENS = 16
FAILURES = {
    "transfer": "vllm_nixl_num_failed_transfers",
    "notification": "vllm_nixl_num_failed_notifications",
    "expired": "vllm_nixl_num_kv_expired_reqs",
}


def build_1_2_5_buckets(max_value: int) -> list[float]:
    """vllm/v1/metrics/loggers.py `build_1_2_5_buckets`."""
    buckets: list[float] = []
    exponent = 0
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > max_value:
                return buckets
            buckets.append(value)
        exponent += 1


def _deployment_name(model_id: str) -> str:
    return model_id.replace("/", "--").replace(".", "_")


@dataclass
class Completion:
    """What the router sees of a request: PrefixCacheAffinityRouter reads `prompt`."""

    prompt: str
    prompt_tokens: int
    max_tokens: int
    fail: str | None = None
    kv_seconds: float = 0.09
    """How long decode's read of prefill's KV takes."""
    kv: str = "nixl"
    """`recompute`: no KV arrives, decode computes the prompt itself."""


class Engine:
    """vLLM 0.26's metrics, on its schedule, for one engine (engine index 0)."""

    def __init__(self, model_id: str, max_model_len: int) -> None:
        tags = ("model_name", "engine", "ReplicaId")
        self.tags = {
            "model_name": model_id,
            "engine": "0",
            "ReplicaId": serve.get_replica_context().replica_id.unique_id,
        }
        self.running = metrics.Gauge("vllm_num_requests_running", "", tag_keys=tags)
        self.waiting = metrics.Gauge("vllm_num_requests_waiting", "", tag_keys=tags)
        self.kv = metrics.Gauge("vllm_kv_cache_usage_perc", "", tag_keys=tags)
        self.prompt_tokens = metrics.Counter("vllm_prompt_tokens", "", tag_keys=tags)
        self.by_source = metrics.Counter("vllm_prompt_tokens_by_source", "", tag_keys=(*tags, "source"))
        self.xfer_time = metrics.Histogram(
            "vllm_nixl_xfer_time_seconds", "", boundaries=NIXL_TIME_BUCKETS, tag_keys=tags
        )
        self.post_time = metrics.Histogram(
            "vllm_nixl_post_time_seconds", "", boundaries=NIXL_POST_BUCKETS, tag_keys=tags
        )
        self.xfer_bytes = metrics.Histogram(
            "vllm_nixl_bytes_transferred", "", boundaries=NIXL_BYTES_BUCKETS, tag_keys=tags
        )
        self.descriptors = metrics.Histogram(
            "vllm_nixl_num_descriptors", "", boundaries=NIXL_DESCRIPTOR_BUCKETS, tag_keys=tags
        )
        self.generation_tokens = metrics.Counter("vllm_generation_tokens", "", tag_keys=tags)
        self.success = metrics.Counter("vllm_request_success", "", tag_keys=(*tags, "finished_reason"))
        self.failures = {kind: metrics.Counter(name, "", tag_keys=tags) for kind, name in FAILURES.items()}
        self.prompt_histogram = metrics.Histogram(
            "vllm_request_prompt_tokens", "", boundaries=build_1_2_5_buckets(max_model_len), tag_keys=tags
        )
        self.ttft = metrics.Histogram(
            "vllm_time_to_first_token_seconds", "", boundaries=TTFT_BUCKETS, tag_keys=tags
        )
        self.held: dict[int, int] = {}
        self.stepping: asyncio.Task[None] | None = None

    def _record(self) -> None:
        """vLLM's `PrometheusStatLogger.record` with scheduler stats: the gauges."""
        self.running.set(len(self.held), tags=self.tags)
        self.waiting.set(0, tags=self.tags)
        self.kv.set(min(1.0, sum(self.held.values()) / KV_CAPACITY_TOKENS), tags=self.tags)

    async def _steps(self) -> None:
        while self.held:
            self._record()
            await asyncio.sleep(STEP_SECONDS)
        self._record()  # the step in which the last request finished
        self.stepping = None

    def _inc(self, counter: metrics.Counter, value: float, **extra: str) -> None:
        if value:  # RayCounterWrapper.inc skips 0: a series appears at its first increment
            counter.inc(value, tags={**self.tags, **extra})

    async def _receive(self, request: Completion) -> None:
        """Decode reading prefill's KV over NIXL: every prompt token but the last (a hybrid model), as
        one transfer; a read that fails is counted as a failure and observed nowhere else."""
        if request.kv == "recompute":
            self._inc(self.by_source, request.prompt_tokens, source="local_compute")
            await asyncio.sleep(request.prompt_tokens * PREFILL_SECONDS_PER_TOKEN)
            return
        received = request.prompt_tokens - 1
        self._inc(self.by_source, received, source="external_kv_transfer")
        self._inc(self.by_source, 1, source="local_compute")
        await asyncio.sleep(request.kv_seconds)
        if request.fail == "transfer":
            return
        self.xfer_time.observe(request.kv_seconds, tags=self.tags)
        self.post_time.observe(0.0005, tags=self.tags)
        self.xfer_bytes.observe(received * KV_BYTES_PER_TOKEN + STATE_BYTES, tags=self.tags)
        self.descriptors.observe(-(-received // BLOCK_TOKENS), tags=self.tags)

    async def run(self, request: Completion, prefill: bool, decode: bool) -> dict[str, Any]:
        """`prefill`: computes the prompt (prefill, aggregated); `decode`: generates (decode, aggregated);
        decode alone receives the prompt's KV from prefill."""
        key = id(request)
        start = time.monotonic()
        self.held[key] = request.prompt_tokens
        if self.stepping is None:
            self.stepping = asyncio.get_running_loop().create_task(self._steps())
        try:
            await asyncio.sleep(request.prompt_tokens * PREFILL_SECONDS_PER_TOKEN if prefill else 0)
            if prefill:
                self._inc(self.by_source, request.prompt_tokens, source="local_compute")
            else:
                await self._receive(request)
            self._inc(self.prompt_tokens, request.prompt_tokens)
            self.ttft.observe(time.monotonic() - start, tags=self.tags)
            if request.fail in FAILURES:
                self._inc(self.failures[request.fail], 1)
            if request.fail == "error":  # kv_load_failure_policy fail: the request ends with an error
                self._inc(self.success, 1, finished_reason="error")
                return {"error": "KV load failed"}
            tokens = request.max_tokens if decode else 1
            for _ in range(tokens):
                await asyncio.sleep(DECODE_STEP_SECONDS)
                self.held[key] += 1
            self._inc(self.generation_tokens, tokens)
            self._inc(self.success, 1, finished_reason="length")
            self.prompt_histogram.observe(request.prompt_tokens, tags=self.tags)
            return {"tokens": tokens}
        finally:
            del self.held[key]


class StandInServer:
    """An LLMServer: the engine, and for decode the prefill handle it calls first."""

    def __init__(self, llm_config: dict[str, Any], prefill_server: Any = None) -> None:
        self.engine = Engine(
            llm_config["model_loading_config"]["model_id"], llm_config["engine_kwargs"]["max_model_len"]
        )
        self.prefill = prefill_server

    async def generate(self, request: Completion) -> dict[str, Any]:
        prefill_fails = request.fail in ("notification", "expired")
        if self.prefill is not None:
            await self.prefill.generate.remote(request if prefill_fails else _without_failure(request))
            if prefill_fails:
                return {"tokens": 0}
        return await self.engine.run(request, prefill=self.prefill is None, decode=True)


def _without_failure(request: Completion) -> Completion:
    return Completion(request.prompt, request.prompt_tokens, request.max_tokens)


class StandInPrefill(StandInServer):
    async def generate(self, request: Completion) -> dict[str, Any]:
        return await self.engine.run(request, prefill=True, decode=False)


class Ingress:
    """The OpenAI ingress, reduced to one route: POST /v1/completions with `prompt_tokens`,
    `max_tokens`, to move a failure counter `fail`, and for the KV path `kv_seconds` and `kv`."""

    def __init__(self, server: Any) -> None:
        self.server = server

    async def __call__(self, http: Request) -> JSONResponse:
        body = await http.json()
        request = Completion(
            prompt=body.get("prompt", "x"),
            prompt_tokens=int(body["prompt_tokens"]),
            max_tokens=int(body["max_tokens"]),
            fail=body.get("fail"),
            kv_seconds=float(body.get("kv_seconds", 0.09)),
            kv=body.get("kv", "nixl"),
        )
        return JSONResponse(await self.server.generate.remote(request))


def _deploy(cls: type, name: str, side: dict[str, Any]) -> Any:
    """The side's deployment_config as the stack renders it; no GPU: no CPU reserved either, so the
    replicas fit a two-core machine."""
    return serve.deployment(cls, name=name, ray_actor_options={"num_cpus": 0}, **side["deployment_config"])


def _ingress(server: Any) -> Any:
    """One replica taking every request, as Ray Serve LLM's ingress (max_ongoing_requests 1e9:
    ray/llm/_internal/serve/core/ingress/ingress.py `DEFAULT_INGRESS_OPTIONS`, constants.py)."""
    ingress: Any = serve.deployment(
        Ingress,
        name="OpenAiIngress",
        num_replicas=1,
        max_ongoing_requests=int(1e9),
        ray_actor_options={"num_cpus": 0},
    )
    return ingress.bind(server)


def build_pd_openai_app(args: dict[str, Any]) -> Any:
    prefill, decode = args["prefill_config"], args["decode_config"]
    name = _deployment_name(decode["model_loading_config"]["model_id"])
    prefill_app = _deploy(StandInPrefill, f"Prefill:{name}", prefill).bind(prefill)
    decode_app = _deploy(StandInServer, f"Decode:{name}", decode).bind(decode, prefill_app)
    return _ingress(decode_app)


def build_openai_app(args: dict[str, Any]) -> Any:
    (config,) = args["llm_configs"]
    name = _deployment_name(config["model_loading_config"]["model_id"])
    return _ingress(_deploy(StandInServer, f"LLMServer:{name}", config).bind(config))
