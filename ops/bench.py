"""`ops bench`: a load test inside the cluster against the stack's own endpoint (manifests/bench.py),
reported as a table and as JSON a team keeps and compares, with what a million output tokens cost.

The cost: the stack's hourly on-demand cost while serving (planning/cost.py's parts, GPU nodes at
desiredSize), from the Price List answers the last preview cached, else the project's dated snapshot
(labelled), divided by the output tokens the benchmark sustained per hour. It is the cost of the
whole stack at that load, not of the GPUs alone.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from config import Settings
from manifests.bench import RESULT_MARKER, BenchOptions, bench_job
from ops.kube import KubeApi, OpsError
from planning.cost import CostReport, cost_report, planned_zone_count, price_cache_path

METRICS = ("ttft", "itl", "tpot", "e2el")
PERCENTILES = ("p50", "p90", "p99")
LABELS = {"ttft": "TTFT", "itl": "inter-token latency", "tpot": "time per output token", "e2el": "end-to-end"}


@dataclass(frozen=True)
class BenchResult:
    completed: int
    failed: int
    duration_s: float
    request_throughput: float
    output_throughput: float
    """Output tokens per second, all requests together."""
    latencies_ms: dict[str, dict[str, float]]
    """metric -> {p50, p90, p99, mean}."""


def parse_result(log: str) -> BenchResult:
    """vLLM 0.26's `bench serve --save-result` JSON (vllm/benchmarks/serve.py), after the marker line."""
    if RESULT_MARKER not in log:
        tail = "\n".join(log.strip().splitlines()[-8:])
        raise OpsError(f"the benchmark printed no result; its last lines:\n{tail}")
    data = json.loads(log.split(RESULT_MARKER, 1)[1].strip().splitlines()[0])
    latencies = {
        metric: {
            **{p: float(data[f"{p}_{metric}_ms"]) for p in PERCENTILES if f"{p}_{metric}_ms" in data},
            "mean": float(data.get(f"mean_{metric}_ms", math.nan)),
        }
        for metric in METRICS
        if f"mean_{metric}_ms" in data
    }
    return BenchResult(
        completed=int(data["completed"]),
        failed=int(data.get("failed", 0)),
        duration_s=float(data["duration"]),
        request_throughput=float(data["request_throughput"]),
        output_throughput=float(data["output_throughput"]),
        latencies_ms=latencies,
    )


def dollars_per_million_output_tokens(hourly_usd: float, output_tokens_per_s: float) -> float | None:
    if output_tokens_per_s <= 0:
        return None
    return hourly_usd / (output_tokens_per_s * 3600) * 1e6


def stack_hourly(
    settings: Settings, root: Path, clock: Callable[[], float] = time.time
) -> tuple[float | None, str]:
    """The serving hourly cost and where its prices came from (what `ops plan` shows)."""
    from ops.plan import prices_for

    prices, source = prices_for(settings, price_cache_path(root), clock)
    return CostReport.total(cost_report(settings, prices, planned_zone_count(settings)).serving), source


def format_report(result: BenchResult, options: BenchOptions, hourly: float | None, source: str) -> str:
    lines = [
        f"vllm bench serve: {options.requests} requests, {options.input_len} tokens in, {options.output_len} "
        f"out, concurrency {options.concurrency}",
        f"  completed {result.completed}, failed {result.failed}, in {result.duration_s:.1f} s",
        f"  {result.request_throughput:.2f} requests/s, {result.output_throughput:.1f} output tokens/s",
        f"  {'latency (ms)':<24}{'p50':>10}{'p90':>10}{'p99':>10}",
    ]
    for metric, values in result.latencies_ms.items():
        cells = "".join(f"{values.get(p, math.nan):>10.1f}" for p in PERCENTILES)
        lines.append(f"  {LABELS[metric]:<24}{cells}")
    per_million = dollars_per_million_output_tokens(hourly, result.output_throughput) if hourly else None
    if per_million is None:
        lines.append("  cost per million output tokens: unknown (no price for a part of the stack)")
    else:
        lines.append(
            f"  ${per_million:,.2f} per million output tokens at ${hourly:,.2f}/h for the stack ({source})"
        )
    return "\n".join(lines) + "\n"


def report_json(
    result: BenchResult, options: BenchOptions, stack: str, hourly: float | None, source: str
) -> dict[str, Any]:
    return {
        "stack": stack,
        "options": asdict(options),
        "result": asdict(result),
        "hourly_usd": hourly,
        "price_source": source,
        "usd_per_million_output_tokens": dollars_per_million_output_tokens(hourly, result.output_throughput)
        if hourly
        else None,
    }


def run_bench(
    api: KubeApi,
    settings: Settings,
    image: str,
    options: BenchOptions,
    progress: Callable[[str], None],
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    timeout_s: float = 3600,
) -> str:
    """Create the Job, wait for it, and return its log. The Job stays an hour for `kubectl logs`."""
    namespace = settings.serving.namespace
    manifest = bench_job(settings, image, options)
    api.create_job(namespace, manifest)
    progress(
        f"job {namespace}/{options.name} created: {options.requests} requests at concurrency "
        f"{options.concurrency}"
    )
    start = clock()
    last = ""
    while clock() - start < timeout_s:
        state, message = api.job_state(namespace, options.name)
        if message != last:
            progress(f"job {options.name}: {message}")
            last = message
        if state in ("succeeded", "failed"):
            log = api.job_logs(namespace, options.name)
            if state == "failed":
                tail = "\n".join(log.strip().splitlines()[-12:])
                raise OpsError(f"the benchmark Job failed ({message}); its last lines:\n{tail}")
            return log
        sleep(5.0)
    raise OpsError(f"the benchmark Job did not finish in {timeout_s:.0f} s (kubectl logs job/{options.name})")
