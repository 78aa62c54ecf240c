"""`ops bench`: a load test inside the cluster against the stack's own endpoint (manifests/bench.py),
reported as a table and as a result file (JSON) a team keeps and compares (`ops bench compare`,
ops/bench_compare.py), with what a million output tokens cost. `--sweep` runs one Job per concurrency
and records each point.

The result file says what was measured: the stack, `serving.mode`, the GPU type and count, the KV path
the plan chose (planning/kv_path.py; none in aggregated mode), the workload, and per point the
latencies (TTFT, ITL, TPOT, end to end; p50, p90, p99), throughput, failed requests and the cost.

The cost: the stack's hourly on-demand cost while serving (planning/cost.py's parts, GPU nodes at
desiredSize), from the Price List answers the last preview cached, else the project's dated snapshot
(labelled), divided by the output tokens the benchmark sustained per hour. It is the cost of the
whole stack at that load, not of the GPUs alone.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from config import Settings, versions
from config.sides import side_nodes
from manifests.bench import RESULT_MARKER, BenchOptions, bench_job
from ops.kube import KubeApi, OpsError
from planning import Plan
from planning.cost import CostReport, cost_report, planned_zone_count, price_cache_path

HEARTBEAT_S = 60.0
"""How often a long benchmark says it still runs, when its Job's state does not change."""
FORMAT = "ray-llm-eks-bench/1"
"""The result file's `format`: what `ops bench compare` reads."""

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


@dataclass(frozen=True)
class BenchPoint:
    """One Job of a run: its concurrency and what vLLM's client measured."""

    concurrency: int
    result: BenchResult


def kv_path_of(plan: Plan) -> dict[str, Any] | None:
    """The KV path the plan chose, as the result file records it; None in aggregated mode, whose
    replicas move no KV cache."""
    if plan.mode == "aggregated":
        return None
    path, floor = plan.kv_path, plan.kv_floor
    return {
        "backends": list(path.backends),
        "buffer_device": path.buffer_device,
        "mechanism": path.mechanism,
        "over_efa": path.over_efa,
        "expected_gbytes_s": list(floor.expected_gbytes_s) if floor.expected_gbytes_s else None,
    }


def gpu_document(settings: Settings, plan: Plan) -> dict[str, Any]:
    """What the run was measured on where each side has GPU nodes of its own: both sides together, as
    one GPU type's fields say them, and each side's own (`sides`)."""
    sides = {
        side.side: {
            "section": side.section,
            "instance_type": side.gpu.name,
            "gpu": side.gpu.describe_gpu(),
            "gpus_per_node": side.gpu.gpus,
            "nodes": side_nodes(settings, side.side).config.desired_size,
            "workers": side.workers,
            "gpus_per_worker": side.tensor_parallel_size,
            "gpus": side.workers * side.tensor_parallel_size,
        }
        for side in plan.sides
    }
    return {
        "instance_type": " + ".join(f"{s['instance_type']} ({name})" for name, s in sides.items()),
        "gpu": " + ".join(f"{s['gpu']} ({name})" for name, s in sides.items()),
        "nodes": sum(s["nodes"] for s in sides.values()),
        "workers": sum(s["workers"] for s in sides.values()),
        "gpus": sum(s["gpus"] for s in sides.values()),
        "sides": sides,
    }


def run_document(
    stack: str,
    settings: Settings,
    plan: Plan,
    options: BenchOptions,
    points: Sequence[BenchPoint],
    hourly: float | None,
    source: str,
    label: str | None = None,
    ratio: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """The result file: what was measured, on what, and each point of the run. `ratio`: the prefill and
    decode replicas a `--ratios` run set (ops/bench_ratio.py), which the workers and GPUs follow."""
    gpu, tp = plan.gpu, plan.fit.tensor_parallel_size
    workers, gpus = plan.gpu_workers, plan.worker_gpus
    if ratio is not None:
        sizes = [plan.side(side).tensor_parallel_size for side in ("prefill", "decode")]
        workers, gpus = sum(ratio), sum(n * size for n, size in zip(ratio, sizes, strict=True))
    return {
        "format": FORMAT,
        "label": label or f"{stack} ({plan.mode})" + (f" P:D {ratio[0]}:{ratio[1]}" if ratio else ""),
        "stack": stack,
        "mode": plan.mode,
        "model": {"id": settings.model.id, "source": settings.model.source},
        "gpu": {**gpu_document(settings, plan), "workers": workers, "gpus": gpus}
        if plan.split
        else {
            "instance_type": gpu.name,
            "gpu": gpu.describe_gpu(),
            "gpus_per_node": gpu.gpus,
            "nodes": settings.gpu_nodes.desired_size,
            "workers": workers,
            "gpus_per_worker": tp,
            "gpus": gpus,
        },
        **({"ratio": {"prefill": ratio[0], "decode": ratio[1]}} if ratio else {}),
        "kv_path": kv_path_of(plan),
        "workload": {
            "input_len": options.input_len,
            "output_len": options.output_len,
            "requests": options.requests,
            "request_rate": options.request_rate if options.request_rate is not None else "inf",
            "tokenizer": options.tokenizer or settings.model.source,
            "client": f"vllm bench serve (vLLM {versions.VLLM_VERSION})",
        },
        "price": {"usd_per_hour": hourly, "source": source},
        "points": [
            {
                "concurrency": point.concurrency,
                **asdict(point.result),
                "usd_per_million_output_tokens": dollars_per_million_output_tokens(
                    hourly, point.result.output_throughput
                )
                if hourly
                else None,
            }
            for point in points
        ],
    }


def _latency_of(result: BenchResult) -> Callable[[str, str], float]:
    def latency(metric: str, percentile: str) -> float:
        return result.latencies_ms.get(metric, {}).get(percentile, math.nan)

    return latency


def format_sweep(points: Sequence[BenchPoint], hourly: float | None) -> str:
    """One line per concurrency: what a sweep shows at a glance."""
    lines = [
        f"  {'concurrency':>11}{'req/s':>8}{'out tok/s':>11}{'TTFT p50':>10}{'p99':>8}{'ITL p50':>9}"
        f"{'p99':>8}{'E2E p50':>10}{'$/1M out':>10}{'failed':>8}"
    ]
    for point in points:
        r = point.result
        lat = _latency_of(r)
        per_million = dollars_per_million_output_tokens(hourly, r.output_throughput) if hourly else None
        lines.append(
            f"  {point.concurrency:>11}{r.request_throughput:>8.2f}{r.output_throughput:>11.1f}"
            f"{lat('ttft', 'p50'):>10.0f}{lat('ttft', 'p99'):>8.0f}"
            f"{lat('itl', 'p50'):>9.1f}{lat('itl', 'p99'):>8.1f}{lat('e2el', 'p50'):>10.0f}"
            f"{'unknown' if per_million is None else f'${per_million:,.2f}':>10}{r.failed:>8}"
        )
    return "\n".join(lines) + "\n"


def run_sweep(
    api: KubeApi,
    settings: Settings,
    image: str,
    options: BenchOptions,
    concurrencies: Sequence[int],
    progress: Callable[[str], None],
    on_point: Callable[[list[BenchPoint]], None] = lambda _: None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> list[BenchPoint]:
    """One Job per concurrency, one after another (each alone on the endpoint); `on_point` gets the
    points so far after each, so a later failure keeps what was measured."""
    points: list[BenchPoint] = []
    total = len(concurrencies)
    for number, concurrency in enumerate(concurrencies, 1):
        name = f"{options.name}-c{concurrency}" if total > 1 else options.name
        point_options = replace(options, concurrency=concurrency, name=name)
        progress(f"point {number} of {total}: concurrency {concurrency}, {options.requests} requests")
        result = parse_result(run_bench(api, settings, image, point_options, progress, sleep, clock))
        ttft = result.latencies_ms.get("ttft", {}).get("p50", math.nan)
        progress(
            f"point {number} of {total} done: {result.output_throughput:.1f} output tokens/s, TTFT p50 "
            f"{ttft:.0f} ms, {result.failed} failed"
        )
        points.append(BenchPoint(concurrency, result))
        on_point(list(points))
    return points


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
    last, said = "", start
    while clock() - start < timeout_s:
        state, message = api.job_state(namespace, options.name)
        if message != last or clock() - said >= HEARTBEAT_S:
            progress(f"job {options.name}: {message} ({clock() - start:.0f} s)")
            last, said = message, clock()
        if state in ("succeeded", "failed"):
            log = api.job_logs(namespace, options.name)
            if state == "failed":
                tail = "\n".join(log.strip().splitlines()[-12:])
                raise OpsError(f"the benchmark Job failed ({message}); its last lines:\n{tail}")
            return log
        sleep(5.0)
    raise OpsError(f"the benchmark Job did not finish in {timeout_s:.0f} s (kubectl logs job/{options.name})")
