"""`ops bench compare`: `ops bench` result files side by side, and a picture of them.

Per concurrency the runs have in common: each metric of each run, its ratio to the first run, and the
better one marked. Runs of different workloads (prompt or output length, requests per point, request
rate, tokenizer) measure different things, so they are refused unless the caller says `--force`; the
model, mode and hardware may differ, since those are what a comparison is for.

The picture puts output tokens per second per GPU against TTFT and against ITL, one line per run
through its sweep's points: up and to the left is better, and where two lines cross is where the
better mode changes. It is a plotly figure written as one self-contained HTML page (plotly is the
library vLLM's own benchmark plots use, vllm/benchmarks/plot.py); plotly is needed only for `--plot`,
so it is imported there.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ops.bench import FORMAT
from ops.kube import OpsError

WORKLOAD_KEYS = ("input_len", "output_len", "requests", "request_rate", "tokenizer")
"""What must be equal for two runs to be compared (the client's version is recorded, not compared)."""
LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#e377c2", "#7f7f7f")


@dataclass(frozen=True)
class Metric:
    label: str
    better: Literal["higher", "lower"]
    value: Callable[[dict[str, Any], dict[str, Any]], float | None]
    """(run document, point) -> the figure, None where the run has none."""
    digits: int = 1


def _latency(metric: str, percentile: str) -> Callable[[dict[str, Any], dict[str, Any]], float | None]:
    def value(_run: dict[str, Any], point: dict[str, Any]) -> float | None:
        found = point.get("latencies_ms", {}).get(metric, {}).get(percentile)
        return None if found is None else float(found)

    return value


def per_gpu(run: dict[str, Any], point: dict[str, Any]) -> float | None:
    gpus = run.get("gpu", {}).get("gpus")
    return float(point["output_throughput"]) / gpus if gpus else None


METRICS: tuple[Metric, ...] = (
    Metric("output tokens/s", "higher", lambda _r, p: float(p["output_throughput"])),
    Metric("output tokens/s per GPU", "higher", per_gpu),
    Metric("requests/s", "higher", lambda _r, p: float(p["request_throughput"]), digits=3),
    *(
        Metric(f"{name} {q} (ms)", "lower", _latency(key, q))
        for key, name in (("ttft", "TTFT"), ("itl", "ITL"), ("e2el", "E2E"))
        for q in ("p50", "p90", "p99")
    ),
    Metric(
        "$ per 1M output tokens",
        "lower",
        lambda _r, p: (
            None if p.get("usd_per_million_output_tokens") is None else p["usd_per_million_output_tokens"]
        ),
        digits=2,
    ),
    Metric("failed requests", "lower", lambda _r, p: float(p["failed"]), digits=0),
)


@dataclass(frozen=True)
class Run:
    path: Path
    document: dict[str, Any]
    letter: str

    @property
    def label(self) -> str:
        return str(self.document.get("label") or self.path.stem)

    def points(self) -> dict[int, dict[str, Any]]:
        return {int(p["concurrency"]): p for p in self.document["points"]}

    def describe(self) -> str:
        doc = self.document
        gpu = doc["gpu"]
        kv = doc.get("kv_path")
        path = (
            f"KV over NIXL {'+'.join(kv['backends'])} ({kv['mechanism']})"
            if kv
            else "no KV transfer (aggregated)"
        )
        ratio = doc.get("ratio")
        pd = f", P:D {ratio['prefill']}:{ratio['decode']}" if ratio else ""
        return (
            f"{self.letter}  {self.label}: {self.path.name}, stack {doc['stack']}, {doc['mode']}{pd}, model "
            f"{doc['model']['id']}, {gpu['nodes']} x {gpu['instance_type']} ({gpu['gpus']} GPUs in "
            f"{gpu['workers']} workers), {path}"
        )


def load_runs(paths: Sequence[Path]) -> list[Run]:
    """Result files of `ops bench`; exit 2 on anything else."""
    if len(paths) < 2:
        raise OpsError("compare two result files or more", exit_code=2)
    if len(paths) > len(LETTERS):
        raise OpsError(f"compare at most {len(LETTERS)} result files", exit_code=2)
    runs = []
    for letter, path in zip(LETTERS, paths, strict=False):
        try:
            document = json.loads(path.read_text())
        except (OSError, ValueError) as error:
            raise OpsError(f"{path}: {error}", exit_code=2) from None
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            raise OpsError(
                f"{path}: not an `ops bench` result file of format {FORMAT} (rerun `ops bench` for one)",
                exit_code=2,
            )
        if not document.get("points"):
            raise OpsError(f"{path}: the run recorded no point", exit_code=2)
        runs.append(Run(path, document, letter))
    return runs


def workload_differences(runs: Sequence[Run]) -> list[str]:
    """Each workload key on which a run differs from the first, with both values."""
    first = runs[0]
    differences = []
    for run in runs[1:]:
        for key in WORKLOAD_KEYS:
            a, b = first.document["workload"].get(key), run.document["workload"].get(key)
            if a != b:
                differences.append(f"{key}: {first.letter} {a}, {run.letter} {b}")
    return differences


def ratio(value: float | None, base: float | None) -> str:
    if value is None or base is None or base == 0 or math.isnan(value) or math.isnan(base):
        return "-"
    return f"{value / base:.2f}"


def best(values: Sequence[float | None], better: Literal["higher", "lower"]) -> set[int]:
    """Indexes of the better value(s); none when fewer than two runs have it or all are equal."""
    known = [(i, v) for i, v in enumerate(values) if v is not None and not math.isnan(v)]
    if len(known) < 2 or len({v for _, v in known}) == 1:
        return set()
    target = (max if better == "higher" else min)(v for _, v in known)
    return {i for i, v in known if v == target}


def compare_report(runs: Sequence[Run], force: bool = False) -> str:
    differences = workload_differences(runs)
    if differences and not force:
        raise OpsError(
            "the runs measured different workloads, so their figures do not compare: "
            + "; ".join(differences)
            + " (rerun with the same --input-len, --output-len, --requests and --request-rate, or pass "
            "--force)",
            exit_code=2,
        )
    workload = runs[0].document["workload"]
    lines = ["Runs:", *(f"  {run.describe()}" for run in runs)]
    lines.append(
        f"Workload: {workload['input_len']} tokens in, {workload['output_len']} out, {workload['requests']} "
        f"requests per point, request rate {workload['request_rate']}"
        + (f" (DIFFERENT WORKLOADS, compared with --force: {'; '.join(differences)})" if differences else "")
    )
    all_points = [run.points() for run in runs]
    common = sorted(set.intersection(*(set(p) for p in all_points)))
    if not common:
        raise OpsError("the runs have no concurrency in common: rerun with the same --sweep", exit_code=2)
    wins = dict.fromkeys(range(len(runs)), 0)
    name_width = max(len(m.label) for m in METRICS) + 2
    for concurrency in common:
        lines.append(f"Concurrency {concurrency}:")
        header = f"  {'':<{name_width}}" + "".join(f"{run.letter:>14}" for run in runs)
        header += "".join(f"{f'{run.letter}/{runs[0].letter}':>8}" for run in runs[1:])
        lines.append(header)
        for metric in METRICS:
            values = [
                metric.value(run.document, points[concurrency])
                for run, points in zip(runs, all_points, strict=True)
            ]
            marked = best(values, metric.better)
            for i in marked:
                wins[i] += 1
            cells = "".join(
                f"{'-' if v is None else f'{v:,.{metric.digits}f}'}{' *' if i in marked else '  ':<2}".rjust(
                    14
                )
                for i, v in enumerate(values)
            )
            ratios = "".join(f"{ratio(v, values[0]):>8}" for v in values[1:])
            lines.append(f"  {metric.label:<{name_width}}{cells}{ratios}")
    only = {
        run.letter: sorted(set(points) - set(common)) for run, points in zip(runs, all_points, strict=True)
    }
    for letter, extra in only.items():
        if extra:
            lines.append(f"Concurrency {', '.join(map(str, extra))} only in {letter}: not compared")
    lines.append(
        "Better (*) per metric and concurrency: "
        + ", ".join(f"{run.letter} {wins[i]}" for i, run in enumerate(runs))
        + f" of {len(METRICS) * len(common)}"
    )
    return "\n".join(lines) + "\n"


def figure(runs: Sequence[Run], percentile: str = "p50") -> dict[str, Any]:
    """The picture as a plotly figure (plain data): output tokens/s per GPU against TTFT (left) and ITL
    (right) at `percentile`, one line per run through its points, each point labelled with its
    concurrency."""
    data: list[dict[str, Any]] = []
    for index, run in enumerate(runs):
        points = [run.points()[c] for c in sorted(run.points())]
        y = [per_gpu(run.document, p) for p in points]
        text = [f"c={p['concurrency']}" for p in points]
        color = COLORS[index % len(COLORS)]
        for axis, metric in (("", "ttft"), ("2", "itl")):
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines+markers+text",
                    "name": f"{run.letter}: {run.label}",
                    "legendgroup": run.letter,
                    "showlegend": axis == "",
                    "x": [_latency(metric, percentile)(run.document, p) for p in points],
                    "y": y,
                    "text": text,
                    "textposition": "top center",
                    "line": {"color": color},
                    "xaxis": f"x{axis}",
                    "yaxis": f"y{axis}",
                    "hovertemplate": f"{run.label}<br>%{{text}}<br>%{{x:.1f}} ms, %{{y:.1f}} tokens/s per GPU"
                    "<extra></extra>",
                }
            )
    workload = runs[0].document["workload"]
    return {
        "data": data,
        "layout": {
            "title": {
                "text": f"Throughput against latency over the sweep: {workload['input_len']} tokens in, "
                f"{workload['output_len']} out (up and to the left is better)"
            },
            "xaxis": {"domain": [0, 0.46], "title": {"text": f"TTFT {percentile} (ms)"}},
            "yaxis": {"anchor": "x", "title": {"text": "output tokens/s per GPU"}, "rangemode": "tozero"},
            "xaxis2": {"domain": [0.54, 1], "title": {"text": f"ITL {percentile} (ms)"}},
            "yaxis2": {"anchor": "x2", "title": {"text": "output tokens/s per GPU"}, "rangemode": "tozero"},
            "legend": {"orientation": "h", "y": -0.2},
            "template": "plotly_white",
        },
    }


def write_plot(runs: Sequence[Run], path: Path, percentile: str = "p50") -> None:
    """The figure as one HTML page with plotly's JavaScript inside (opens offline)."""
    try:
        import plotly.io  # pyright: ignore[reportMissingImports]  (a development dependency)
    except ImportError:
        raise OpsError(
            "--plot needs plotly, which is a development dependency (requirements-dev.txt): "
            "`.venv/bin/pip install plotly`; the comparison above needs nothing",
            exit_code=2,
        ) from None
    plotly.io.write_html(figure(runs, percentile), file=str(path), include_plotlyjs=True, full_html=True)
