"""The KV path watched while the stack serves (issue 51): the SLI's recording rules and the alerts that
hold it to the plan, rendered for every stack file from the plan's own figures and evaluated by promtool
on series shaped as vLLM 0.26 exports them through Ray 2.58 (a counter absent until its first
increment; a histogram's `_sum` rebuilt from bucket midpoints, its bucket counts exact).
"""

from __future__ import annotations

import functools
import os
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from manifests.observability import kv_path
from manifests.observability.efa_counters import SCRIPT, SIDECAR_NAME, TEXTFILE_DIRECTORY
from manifests.observability.kv_path import XFER_TIME_BOUNDS, KvPathFigures, kv_path_group
from manifests.observability.rules import alert_rules
from manifests.pd_dashboard import pd_dashboard
from ops.cli import _with_kv_plan
from ops.status import collect_status
from tests.exported_metrics import EXPORTED, metric_names, unknown_label_values
from tests.fakes.kube import healthy_cluster
from tests.fakes.ops import prometheus_answers, vector
from tests.fakes.pulumi import STACKS, plan_of, stack_settings
from tests.validators import promtool, promtool_in

MINUTES = 30


@functools.cache
def figures(stack: str = "dev") -> KvPathFigures:
    settings = stack_settings(stack)
    return KvPathFigures.of(plan_of(stack), settings.model.tensor_parallel_size)


def recorded(group: dict[str, Any]) -> set[str]:
    return {r["record"] for r in group["rules"] if "record" in r}


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_file_renders_the_kv_path_rules_from_its_plan(stack):
    settings = stack_settings(stack)
    plan = plan_of(stack)
    kv = figures(stack)
    groups = alert_rules(settings, kv=kv)
    by_name = {g["name"]: g for g in groups}
    if settings.serving.mode == "aggregated":
        assert "kv-path" not in by_name  # no KV crosses nodes
        return
    group = by_name["kv-path"]
    names = recorded(group)
    for rule in group["rules"]:
        used = metric_names(rule["expr"])
        assert used <= EXPORTED | names, f"{rule}: {sorted(used - EXPORTED - names)}"
        assert not unknown_label_values(rule["expr"]), rule
    alerts = {r["alert"]: r for r in group["rules"] if "alert" in r}
    assert alerts["KvRecomputing"]["labels"]["mechanism"] == plan.kv_path.mechanism
    below = alerts["KvPathBelowFloor"]
    assert below["expr"].endswith(f"< {plan.kv_floor.gbytes_s:g}")
    assert below["labels"]["mechanism"] == plan.kv_path.mechanism
    assert below["labels"]["floor_gbytes_per_second"] == f"{plan.kv_floor.gbytes_s:g}"


def test_the_bytes_per_token_are_the_plans_crossing_figures():
    """The default model: 32 KiB per token (8 attention layers), 25 MiB of Gated DeltaNet state per
    sequence (planning/capacity.py), one GPU per worker."""
    kv = figures()
    assert kv.bytes_per_token == 8 * 2 * 4 * 256 * 2
    assert kv.state_bytes_per_transfer == 24 * (32 * 128 * 128 + 3 * (2 * 16 * 128 + 32 * 128)) * 2
    assert (kv.mechanism, kv.floor_gbytes_s, kv.expected_gbytes_s) == ("emulated", 0.4, (0.5, 1.0))


def test_a_model_of_unknown_size_gets_no_rate_and_no_floor_alert():
    """Without the KV bytes per token the rate cannot be derived from exact figures: the rules that need
    it are left out rather than guessed; recompute share and failures stay."""
    group = kv_path_group(replace(figures(), bytes_per_token=None))
    assert kv_path.RATE not in recorded(group)
    assert {r.get("alert") for r in group["rules"]} == {None, "KvRecomputing"}


def test_the_time_band_holds_each_transfer_between_its_buckets_bounds():
    """seconds_least / seconds_most, evaluated as Python on cumulative counts, equal the sum of each
    transfer's bucket bounds."""
    times = [0.003, 0.004, 0.02, 0.09, 0.6, 3.0, 7.0]
    bounds = (0.0, *XFER_TIME_BOUNDS, XFER_TIME_BOUNDS[-1] * 2)
    least = most = 0.0
    for t in times:
        i = next((i for i, b in enumerate(bounds) if i and t <= b), len(bounds) - 1)
        least += bounds[i - 1]
        most += bounds[i]
    cumulative = {b: sum(t <= b for t in times) for b in XFER_TIME_BOUNDS}
    n, last = len(times), XFER_TIME_BOUNDS[-1]
    formula_least = n * last - sum(
        cumulative[u] * (u - prev)
        for prev, u in zip((0.0, *XFER_TIME_BOUNDS), XFER_TIME_BOUNDS, strict=False)
    )
    uppers = (*XFER_TIME_BOUNDS[1:], last * 2)
    formula_most = n * last * 2 - sum(
        cumulative[u] * (up - u) for u, up in zip(XFER_TIME_BOUNDS, uppers, strict=True)
    )
    assert formula_least == pytest.approx(least)
    assert formula_most == pytest.approx(most)
    assert least <= sum(min(t, 10) for t in times) <= most


@dataclass(frozen=True)
class Decode:
    """One decode worker as vLLM 0.26 exports it through Ray, per minute: `transfers` reads of
    `tokens` prompt tokens each, each taking `seconds` (a hybrid model's decode computes one token per
    request itself), and `recomputed` prompt tokens computed without any KV from prefill."""

    worker: str
    transfers: int = 0
    tokens: int = 2000
    seconds: float = 0.09
    local_per_request: int = 1
    recomputed: int = 0
    start: int = 2
    """The minute the first request arrives: every series absent before."""

    def labels(self, **extra: str) -> str:
        pairs = {
            "ray_io_cluster": "ray-llm-a",
            "model_name": "qwen3.5-9b",
            "engine": "0",
            "WorkerId": self.worker,
        }
        return "{" + ",".join(f'{k}="{v}"' for k, v in {**pairs, **extra}.items()) + "}"

    def counter(self, per_minute: float) -> str:
        """Absent, then its first value, then rising: as Ray exports a vLLM counter."""
        if not per_minute:
            return ""
        return " ".join(
            ["_"] * self.start + [f"{per_minute * (m + 1):g}" for m in range(MINUTES - self.start)]
        )

    def series(self) -> list[dict[str, str]]:
        out = []

        def add(name: str, per_minute: float, **extra: str) -> None:
            if values := self.counter(per_minute):
                out.append({"series": f"{name}{self.labels(**extra)}", "values": values})

        tokens = "ray_vllm_prompt_tokens_by_source_total"
        add(tokens, self.transfers * self.tokens, source="external_kv_transfer")
        add(tokens, self.transfers * self.local_per_request + self.recomputed, source="local_compute")
        xfer = "ray_vllm_nixl_xfer_time_seconds"
        add(f"{xfer}_count", self.transfers)
        bounds = (0.0, *XFER_TIME_BOUNDS)
        upper = next((b for b in XFER_TIME_BOUNDS if self.seconds <= b), None)
        lower = max(b for b in bounds if b < self.seconds)
        midpoint = (lower + upper) / 2 if upper else 2 * XFER_TIME_BOUNDS[-1]
        add(f"{xfer}_sum", self.transfers * midpoint)  # Ray's midpoint sum
        if self.transfers:  # a histogram appears with every bucket, those still at 0 included
            zero = " ".join(["_"] * self.start + ["0"] * (MINUTES - self.start))
            for bound in XFER_TIME_BOUNDS:
                below = upper is None or bound < upper
                values = zero if below else self.counter(self.transfers)
                out.append({"series": f"{xfer}_bucket{self.labels(le=f'{bound:g}')}", "values": values})
            add(f"{xfer}_bucket", self.transfers, le="+Inf")
        requests = self.transfers + (1 if self.recomputed else 0)
        out.append(
            {
                "series": "ray_serve_deployment_request_counter_total"
                + self.labels(
                    application="qwen", deployment="Decode:qwen3_5-9b", replica=self.worker, route="/"
                ),
                "values": self.counter(requests),
            }
        )
        return out


def promtool_test(
    tmp_path: Path, kv: KvPathFigures, series: list[dict[str, str]], *more: dict[str, Any], **tests: list
) -> None:
    """promtool evaluates the group on `series` (`tests`: its promql_expr_test, alert_rule_test); `more`:
    further test groups of their own series, on the same rules in the same run."""
    group = kv_path_group(kv)
    for rule in group["rules"]:
        rule.pop("annotations", None)  # promtool compares them to the letter; check rules checks them
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": [group]}))
    result = promtool_in(tmp_path, "check", "rules", "rules.yaml")
    assert "SUCCESS" in result.stdout
    first = {"input_series": series, **tests}
    (tmp_path / "tests.yaml").write_text(
        yaml.safe_dump(
            {
                "rule_files": ["rules.yaml"],
                "evaluation_interval": "1m",
                "tests": [{"interval": "1m", **t} for t in (first, *more)],
            },
            width=1000,
        )
    )
    promtool_in(tmp_path, "test", "rules", "tests.yaml")


HEALTHY = Decode("d-healthy", transfers=10, seconds=0.09)
"""2000 tokens: 64 MiB of KV and 25 MiB of state, 92 MB in 90 ms: about 1 GB/s, the bounce copy's rate."""
SLOW = Decode("d-slow", transfers=10, seconds=0.6)
"""The same in 600 ms: 0.15 GB/s, under the floor (0.4) even read most generously (500 ms)."""
BORDERLINE = Decode("d-borderline", transfers=10, seconds=0.25)
"""In 200-300 ms: between 0.31 and 0.46 GB/s, Ray's midpoint 0.37; it may be above the floor, so no alert
(one that fires must be sure)."""
RECOMPUTING = Decode("d-recompute", recomputed=20000)
"""Gets no KV at all: computes every prompt token."""
ATTENTION = Decode("d-attention", transfers=10, seconds=0.09, local_per_request=0)
"""An attention-only model's decode computes no prompt token: no `local_compute` series at all."""
PREFILL = [
    {
        "series": 'ray_vllm_prompt_tokens_by_source_total{ray_io_cluster="ray-llm-a",model_name="qwen3.5-9b",'
        'engine="0",WorkerId="p1",source="local_compute"}',
        "values": "_ _ " + " ".join(str(20000 * (m + 1)) for m in range(MINUTES - 2)),
    }
]
"""Prefill computes every prompt token: never a decode worker that recomputes."""


def bytes_of(d: Decode, kv: KvPathFigures) -> float:
    assert kv.bytes_per_token is not None
    return d.tokens * kv.bytes_per_token + kv.state_bytes_per_transfer


def test_promtool_the_sli_per_decode_worker(tmp_path: Path):
    """The achieved rate from exact figures, and the band that Ray's midpoint time leaves; the recompute
    share; all at 12 minutes, the 5-minute windows full."""
    kv = figures()
    size = bytes_of(HEALTHY, kv)

    def sample(worker: str, value: float) -> dict[str, Any]:
        return {"labels": f'{{ray_io_cluster="ray-llm-a",WorkerId="{worker}"}}', "value": value}

    def rounded(record: str) -> str:
        return f"round({record}, 0.001)"

    tests = [
        # 92 MB in 75-100 ms (bucket 0.075-0.1, Ray's midpoint 87.5 ms).
        (
            kv_path.RATE,
            [
                sample("d-healthy", round(size / 0.0875 / 1e9, 3)),
                sample("d-attention", round(size / 0.0875 / 1e9, 3)),
                sample("d-slow", round(size / 0.625 / 1e9, 3)),
            ],
        ),
        (
            kv_path.RATE_MOST,
            [
                sample("d-healthy", round(size / 0.075 / 1e9, 3)),
                sample("d-attention", round(size / 0.075 / 1e9, 3)),
                sample("d-slow", round(size / 0.5 / 1e9, 3)),
            ],
        ),
        (
            kv_path.RATE_LEAST,
            [
                sample("d-healthy", round(size / 0.1 / 1e9, 3)),
                sample("d-attention", round(size / 0.1 / 1e9, 3)),
                sample("d-slow", round(size / 0.75 / 1e9, 3)),
            ],
        ),
        (
            kv_path.RECOMPUTE,
            [
                sample("d-healthy", round(1 / 2001, 3)),
                sample("d-slow", round(1 / 2001, 3)),
                sample("d-recompute", 1),
                sample("d-attention", 0),
            ],
        ),
    ]
    series = [s for d in (HEALTHY, SLOW, RECOMPUTING, ATTENTION) for s in d.series()] + PREFILL
    promtool_test(
        tmp_path,
        kv,
        series,
        promql_expr_test=[
            {"expr": rounded(record), "eval_time": "12m", "exp_samples": samples} for record, samples in tests
        ],
    )


def test_promtool_the_alerts_fire_where_the_plan_says_and_not_on_a_healthy_path(tmp_path: Path):
    """A decode 0.15 GB/s against the floor of 0.4 fires after 10 minutes of it, not before; a decode that
    computes every prompt fires KvRecomputing; the healthy ones, one that may be just above the floor, an
    attention-only decode that computes nothing, and prefill stay quiet."""
    kv = figures()
    decodes = (HEALTHY, SLOW, BORDERLINE, RECOMPUTING, ATTENTION)
    series = [s for d in decodes for s in d.series()] + PREFILL
    labels = {"severity": "warning", "mechanism": "emulated", "ray_io_cluster": "ray-llm-a"}
    tests = [
        {"eval_time": "8m", "alertname": "KvPathBelowFloor", "exp_alerts": []},
        {
            "eval_time": "16m",
            "alertname": "KvPathBelowFloor",
            "exp_alerts": [
                {"exp_labels": {**labels, "WorkerId": "d-slow", "floor_gbytes_per_second": "0.4"}}
            ],
        },
        {"eval_time": "8m", "alertname": "KvRecomputing", "exp_alerts": []},
        {
            "eval_time": "16m",
            "alertname": "KvRecomputing",
            "exp_alerts": [{"exp_labels": {**labels, "WorkerId": "d-recompute"}}],
        },
    ]
    promtool_test(tmp_path, kv, series, alert_rule_test=tests)


def test_promtool_a_floor_an_other_plan_sets_changes_what_fires(tmp_path: Path):
    """Held to a GPUDirect floor of 6.25 GB/s (p5's link, half of it), the healthy emulated rate is under
    the floor too: the threshold is the plan's, not a constant."""
    kv = replace(figures(), mechanism="gpudirect", floor_gbytes_s=6.25, expected_gbytes_s=(12.5, 12.5))
    labels = {
        "severity": "warning",
        "mechanism": "gpudirect",
        "ray_io_cluster": "ray-llm-a",
        "floor_gbytes_per_second": "6.25",
    }
    promtool_test(
        tmp_path,
        kv,
        HEALTHY.series(),
        alert_rule_test=[
            {
                "eval_time": "16m",
                "alertname": "KvPathBelowFloor",
                "exp_alerts": [{"exp_labels": {**labels, "WorkerId": "d-healthy"}}],
            }
        ],
    )


@pytest.mark.parametrize("stack", STACKS)
def test_the_pd_dashboard_has_a_kv_path_row_from_the_plan(stack):
    settings = stack_settings(stack)
    kv = figures(stack)
    panels = pd_dashboard(settings, kv)["panels"]
    titles = [p["title"] for p in panels]
    if settings.serving.mode == "aggregated":
        assert "KV path: live against the plan" not in titles
        return
    row = titles.index("KV path: live against the plan")
    assert titles[row + 1 :] == [
        "KV rate per decode worker against the floor",
        "KV bytes: what NIXL moved, what EFA received",
        "Recompute share per decode worker",
        "Failed KV transfers per decode worker",
    ]
    names = recorded(kv_path_group(kv))
    for panel in panels[row + 1 :]:
        for target in panel["targets"]:
            assert metric_names(target["expr"]) <= names | EXPORTED, target
    rate = {t["legendFormat"]: t["expr"] for t in panels[row + 1]["targets"]}
    assert rate["floor (plan)"] == f"vector({kv.floor_gbytes_s:g})"
    assert rate["{{WorkerId}}"].startswith(kv_path.RATE)
    assert rate["at most {{WorkerId}}"].startswith(kv_path.RATE_MOST)
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids))


def test_ops_status_prints_the_live_kv_path_beside_the_plans():
    """Per decode worker: the rate, its band and the recompute share; then the plan's mechanism, rate and
    floor; a worker whose most generous reading is under the floor is said so."""
    cluster = healthy_cluster()
    cluster.prometheus = prometheus_answers()
    q = kv_path.KV_STATUS_QUERIES
    for key, good, bad in (("rate", 1.05, 0.15), ("least", 0.92, 0.12), ("most", 1.23, 0.18)):
        cluster.prometheus[q[key]] = [vector(good, WorkerId="d1"), vector(bad, WorkerId="d2")]
    cluster.prometheus[q["recompute"]] = [vector(0.0005, WorkerId="d1"), vector(0.0005, WorkerId="d2")]
    cluster.prometheus[kv_path.EFA_SHARE] = [vector(1.02)]
    cluster.prometheus[kv_path.RDMA_READ_SHARE] = [vector(0)]
    report = collect_status(cluster, "inference", "ray-llm")
    assert report.metrics is not None
    metrics = _with_kv_plan(report.metrics, stack_settings("dev"), "dev")
    lines = metrics.format() if metrics else []
    assert "  KV path into d1: 1.05 GB/s per GPU (0.92-1.23), 0.1% of prompt tokens recomputed" in lines
    assert (
        "  KV path into d2: 0.15 GB/s per GPU (0.12-0.18), 0.1% of prompt tokens recomputed, "
        "under the plan's floor"
    ) in lines
    assert (
        "  KV path planned: EFA emulated reads through host bounce buffers, 0.5-1 GB/s per GPU to expect, "
        "floor 0.4 GB/s"
    ) in lines
    assert (
        "  KV path seen: EFA, by sends (emulated reads, or host buffers without RDMA read): the EFA devices "
        "received 1x NIXL's bytes"
    ) in lines
    # Without the stack (no --stack), the live figures alone.
    plain = report.metrics.format()
    assert not any("planned" in line or "under the plan" in line for line in plain)


EFA_NODE = '{instance="10.0.1.5:9100",job="node-exporter",device="rdmap16s27",port="1"}'


def efa(counter: str, per_minute: float, start: float = 7e9) -> dict[str, str]:
    """A node's EFA counter: there since the device came up (no `_ _`), rising by `per_minute`."""
    return {
        "series": f"node_efa_{counter}_total{EFA_NODE}",
        "values": " ".join(f"{start + per_minute * m:g}" for m in range(MINUTES)),
    }


def test_promtool_kv_path_not_on_efa(tmp_path: Path):
    """NIXL moves 10 x 92 MB a minute: EFA receiving them (a little more, with headers) is quiet; EFA
    counters standing still fire `seen="tcp"`. Where GPUDirect RDMA was planned, EFA receiving them
    without RDMA reads fires `seen="emulated"`, and with RDMA reads is quiet."""
    kv = figures()
    assert kv.efa_counters
    moved = HEALTHY.transfers * bytes_of(HEALTHY, kv)
    labels = {"severity": "warning", "mechanism": "emulated", "seen": "tcp"}

    def case(counters: list[dict[str, str]], expected: list) -> dict[str, Any]:
        return {
            "input_series": HEALTHY.series() + counters,
            "alert_rule_test": [
                {"eval_time": "8m", "alertname": "KvPathNotOnEfa", "exp_alerts": []},
                {"eval_time": "16m", "alertname": "KvPathNotOnEfa", "exp_alerts": expected},
            ],
        }

    promtool_test(
        tmp_path / "emulated-planned",
        kv,
        [],
        case([efa("rx_bytes", moved * 1.02), efa("rdma_read_bytes", 0)], []),
        case([efa("rx_bytes", 0), efa("rdma_read_bytes", 0)], [{"exp_labels": labels}]),
        # A node whose EFA device is gone has no counters at all: not on EFA either.
        case([], [{"exp_labels": labels}]),
    )
    emulated = {**labels, "mechanism": "gpudirect", "seen": "emulated"}
    promtool_test(
        tmp_path / "gpudirect-planned",
        replace(kv, mechanism="gpudirect"),
        [],
        case([efa("rx_bytes", moved * 1.02), efa("rdma_read_bytes", 0)], [{"exp_labels": emulated}]),
        case([efa("rx_bytes", moved * 0.01), efa("rdma_read_bytes", moved)], []),
    )


def test_kv_path_not_on_efa_only_where_the_stacks_node_exporter_reads_efa():
    """An existing Prometheus scrapes its own node-exporter, without the EFA sidecar: no EFA rules, rather
    than an alert on series that never come. A UCX-only plan is not on EFA by design."""
    group = kv_path_group(replace(figures(), efa_counters=False))
    assert kv_path.EFA_RECEIVED not in recorded(group)
    assert "KvPathNotOnEfa" not in {r.get("alert") for r in group["rules"]}
    tcp = kv_path_group(replace(figures(), mechanism="tcp", over_efa=False))
    assert "KvPathNotOnEfa" not in {r.get("alert") for r in tcp["rules"]}


def test_the_mechanism_seen_from_the_efa_counters():
    assert kv_path.seen_mechanism(None, None) is None
    assert kv_path.seen_mechanism(0.02, 0.0) == "not EFA: the EFA devices received 2% of NIXL's bytes (TCP)"
    assert (
        kv_path.seen_mechanism(1.9, 0.5) == "EFA, by RDMA reads: the EFA devices received 1.9x NIXL's bytes"
    )
    assert (kv_path.seen_mechanism(1.0, 0.01) or "").startswith("EFA, by sends")


def test_the_efa_sidecar_writes_the_counters_node_exporter_reads(tmp_path: Path):
    """The sidecar's script, run once on a fake sysfs of two EFA devices and a Mellanox-style counter it
    ignores: one counter family per EFA counter present, labelled by device and port, valid exposition
    format (promtool check metrics); a node without EFA gets an empty file."""
    sysfs, out = tmp_path / "sys", tmp_path / "out"
    out.mkdir()
    for device, value in (("rdmap16s27", 1000), ("rdmap32s27", 2000)):
        counters = sysfs / "class" / "infiniband" / device / "ports" / "1" / "hw_counters"
        counters.mkdir(parents=True)
        for name in ("rx_bytes", "tx_bytes", "rdma_read_bytes", "lifespan"):
            (counters / name).write_text(f"{value}\n")
    env = {**os.environ, "SYSFS": str(sysfs), "OUT": str(out), "ONCE": "1"}
    subprocess.run(["sh", "-c", SCRIPT], env=env, check=True, timeout=10)
    text = (out / "efa.prom").read_text()
    samples = [line for line in text.splitlines() if not line.startswith("#")]
    assert samples == [
        f'node_efa_{name}_total{{device="{device}",port="1"}} {value}'
        for name in ("tx_bytes", "rx_bytes", "rdma_read_bytes")
        for device, value in (("rdmap16s27", 1000), ("rdmap32s27", 2000))
    ]
    check = subprocess.run(
        [promtool(), "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert check.returncode == 0, check.stdout + check.stderr
    empty = tmp_path / "none"
    empty.mkdir()
    env = {**env, "SYSFS": str(tmp_path / "nothing"), "OUT": str(empty)}
    subprocess.run(["sh", "-c", SCRIPT], env=env, check=True, timeout=10)
    assert (empty / "efa.prom").read_text() == ""
    assert not list(empty.glob("*.tmp"))


@pytest.mark.parametrize("stack", STACKS)
def test_node_exporter_runs_the_efa_sidecar_where_kv_crosses_nodes(stack):
    """The chart's sidecar takes node-exporter's image and security context (read-only root); it mounts
    the host's /sys read-only and writes only to the shared emptyDir that the textfile collector reads."""
    from manifests.observability.charts import kube_prometheus_stack_chart

    settings = stack_settings(stack)
    values = kube_prometheus_stack_chart(settings).values["prometheus-node-exporter"]
    if settings.serving.mode != "disaggregated":
        assert "sidecars" not in values
        return
    (sidecar,) = values["sidecars"]
    assert sidecar["name"] == SIDECAR_NAME and "image" not in sidecar and "securityContext" not in sidecar
    assert sidecar["volumeMounts"] == [{"name": "sys", "mountPath": "/host/sys", "readOnly": True}]
    assert values["sidecarVolumeMount"] == [
        {"name": "efa-textfile", "mountPath": TEXTFILE_DIRECTORY, "readOnly": False}
    ]
    assert values["extraArgs"] == [f"--collector.textfile.directory={TEXTFILE_DIRECTORY}"]
