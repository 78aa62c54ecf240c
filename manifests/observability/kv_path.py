"""The KV path watched while the stack serves: recording rules that turn what vLLM 0.26 already exports
through Ray into a KV-path SLI per decode worker, and the alerts that hold it to the plan's own figures
(planning/kv_path.py: the mechanism, the rate to expect, the floor `ops verify` proved once).

What is exported, read at vLLM 0.26.0 (docs/design.md "The KV path, watched" has every line):

- `vllm:prompt_tokens_by_source{source}`, a counter per engine: `local_compute`, `local_cache_hit`,
  `external_kv_transfer` (v1/metrics/loggers.py:680-693, 1194-1200; v1/metrics/stats.py:300-345). On
  decode, `external_kv_transfer` is the prompt tokens it pulls from prefill over NIXL (the count the
  connector's `get_num_new_matched_tokens` returned, nixl/pull_scheduler.py:60-66), `local_compute` what
  it computes itself: one token per request for a hybrid model (base_scheduler.py:334-339), the whole
  prompt for a request that came without prefill's KV. Counters are exact through Ray.
- `vllm:nixl_xfer_time_seconds`, a histogram of each completed read (one per request and remote rank)
  with bounds 0.005 ... 1, 5 s (nixl/stats.py:140-165); `vllm:nixl_bytes_transferred` with bounds four
  times apart (:177-186). Ray rebuilds a histogram's `_sum` from bucket midpoints (the `+Inf` bucket at
  twice the last bound); its bucket counts are exact.

So the rate is derived from exact figures: the bytes from the tokens counter times the plan's KV bytes
per token (the same figure the preview's crossing time uses), the time from the bucket counts as a band
(each transfer between its bucket's bounds) beside Ray's midpoint sum. The byte-size histogram is not
used: its midpoints are off by 0.625x to 2.5x.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from manifests.observability.efa_counters import metric
from planning.kv_path import MECHANISM_NAMES, Mechanism
from planning.plan import Plan

BY = "ray_io_cluster, WorkerId"
"""vLLM's series name the engine (`WorkerId`, one per Serve replica) and the Ray cluster."""
WINDOW = "5m"
FOR = "10m"
"""How long a KV-path alert's condition holds before it fires: two windows, not a blip."""

XFER_TIME_BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0)
"""vLLM 0.26's bounds of `vllm:nixl_xfer_time_seconds` (nixl/stats.py:140-162, `buckets[1:]`)."""
RAY_INF_FACTOR = 2
"""Ray counts the `+Inf` bucket at twice the last bound (open_telemetry_metric_recorder.py:317-328)."""

RECOMPUTE_SHARE_ALERT = 0.25
"""`KvRecomputing` fires when decode computes more than this share of the prompt tokens it takes (the
rest came over NIXL). Healthy, it computes one token per request for a hybrid model and none for an
attention-only one: under 1% of a prompt of a few hundred tokens; a quarter is far off that."""

DECODE = 'deployment=~"Decode:.*"'
TOKENS = "ray_vllm_prompt_tokens_by_source_total"
XFER = "ray_vllm_nixl_xfer_time_seconds"
FAILED = "ray_vllm_nixl_num_failed_transfers_total"

TRANSFERS = f"kv_path:transfers:rate{WINDOW}"
RECEIVED_TOKENS = f"kv_path:received_tokens:rate{WINDOW}"
RECEIVED_BYTES = f"kv_path:received_bytes:rate{WINDOW}"
SECONDS = f"kv_path:transfer_seconds:rate{WINDOW}"
SECONDS_LEAST = f"kv_path:transfer_seconds_least:rate{WINDOW}"
SECONDS_MOST = f"kv_path:transfer_seconds_most:rate{WINDOW}"
RATE = f"kv_path:gbytes_per_second:rate{WINDOW}"
RATE_MOST = f"kv_path:gbytes_per_second_most:rate{WINDOW}"
RATE_LEAST = f"kv_path:gbytes_per_second_least:rate{WINDOW}"
RECOMPUTE = f"kv_path:recompute_share:ratio{WINDOW}"
EFA_RECEIVED = f"kv_path:efa_received_bytes:rate{WINDOW}"
EFA_SHARE = f"kv_path:efa_share:ratio{WINDOW}"
RDMA_READ_SHARE = f"kv_path:efa_rdma_read_share:ratio{WINDOW}"
NOT_ON_EFA_SHARE = 0.1
"""`KvPathNotOnEfa`: the EFA devices received less than a tenth of the bytes NIXL moved. Over EFA they
receive them all (more with protocol overhead, and counted twice where a read's response also counts as
received): a TCP fallback leaves them near zero."""
NOT_RDMA_SHARE = 0.1
"""Where GPUDirect RDMA was planned: RDMA reads brought less than a tenth of the EFA bytes, so libfabric
emulates the reads with sends (`FI_EFA_USE_DEVICE_RDMA=0`, or a libfabric that does not use the
device's RDMA read)."""
FAILURES = f"kv_path:failed_transfers:increase{WINDOW}"


@dataclass(frozen=True)
class KvPathFigures:
    """What the plan says of the KV path, as the rules need it."""

    mechanism: Mechanism
    over_efa: bool
    expected_gbytes_s: tuple[float, float] | None
    floor_gbytes_s: float | None
    bytes_per_token: float | None
    """KV bytes of one prompt token, all tensor-parallel ranks together; None: not known (a model
    without `kvCacheBytesPerToken`)."""
    state_bytes_per_transfer: int
    """A hybrid model's per-sequence state, as one rank's transfer carries it."""
    efa_counters: bool = False
    """Whether the stack's node-exporter exports the EFA byte counters (its own kube-prometheus-stack,
    disaggregated: manifests/observability/efa_counters.py)."""

    @classmethod
    def of(cls, plan: Plan, tensor_parallel_size: int) -> KvPathFigures:
        """From the plan's own figures (planning/kv_path.py's `KvPath`, `TransferFloor`, `Crossing`)."""
        crossing = plan.kv_crossing
        per_token = None
        if crossing.kv_bytes is not None and crossing.tokens:
            ranks = max(tensor_parallel_size, 1)
            per_token = (crossing.kv_bytes - crossing.state_bytes) * ranks / crossing.tokens
        return cls(
            mechanism=plan.kv_path.mechanism,
            over_efa=plan.kv_path.over_efa,
            expected_gbytes_s=plan.kv_floor.expected_gbytes_s,
            floor_gbytes_s=plan.kv_floor.gbytes_s,
            bytes_per_token=per_token,
            state_bytes_per_transfer=crossing.state_bytes,
            efa_counters=plan.mode == "disaggregated"
            and plan.context is not None
            and plan.context.addons.installs("prometheus"),
        )

    @property
    def expected(self) -> str:
        if self.expected_gbytes_s is None:
            return "not known"
        low, high = self.expected_gbytes_s
        return f"{high:g}" if low == high else f"{low:g}-{high:g}"


def _le(bound: float) -> str:
    """A bucket's `le` matcher that holds whether the exporter writes `1` or `1.0` (Prometheus 3
    normalizes classic histograms' `le` to the float form; promtool's input does not)."""
    text = f"{bound:g}"
    return f'le=~"{text}|{text}\\\\.0"' if float(text).is_integer() else f'le="{text}"'


def _bucket_rate(bound: float) -> str:
    return f"sum by ({BY}) (rate({XFER}_bucket{{{_le(bound)}}}[{WINDOW}]))"


def seconds_least() -> str:
    """The least time the window's transfers can have taken: each at its bucket's lower bound, the `+Inf`
    bucket at the last bound. With C_i the cumulative count at bound u_i and N all: N u_n - sum C_i
    (u_i - u_(i-1))."""
    bounds = (0.0, *XFER_TIME_BOUNDS)
    terms = " + ".join(f"{_bucket_rate(u)} * {u - prev:g}" for prev, u in itertools.pairwise(bounds))
    return f"{TRANSFERS} * {XFER_TIME_BOUNDS[-1]:g} - ({terms})"


def seconds_most() -> str:
    """The most: each transfer at its bucket's upper bound, the `+Inf` bucket at twice the last bound as
    Ray counts it (a transfer over 5 s is far under any floor anyway): N u_top - sum C_i (u_(i+1) - u_i)."""
    top = XFER_TIME_BOUNDS[-1] * RAY_INF_FACTOR
    uppers = (*XFER_TIME_BOUNDS[1:], top)
    terms = " + ".join(
        f"{_bucket_rate(u)} * {upper - u:g}" for u, upper in zip(XFER_TIME_BOUNDS, uppers, strict=True)
    )
    return f"{TRANSFERS} * {top:g} - ({terms})"


def decode_only(expr: str) -> str:
    """Keeps the decode workers' series: Serve's request counter names each replica's deployment."""
    return (
        f"({expr}) * on ({BY}) group_left () max by ({BY}) "
        f"(ray_serve_deployment_request_counter_total{{{DECODE}}} * 0 + 1)"
    )


def recompute_share(local: str, received: str) -> str:
    """local / (local + received), where either may be no series: vLLM's Ray counters appear only at
    their first increment, so a decode that never computed a token (an attention-only model, healthy) has
    no `local_compute` series (share 0), and one that never received any has no `external_kv_transfer`
    series (share 1)."""
    return f"({local} or {received} * 0) / ((({local} + {received}) or {local} or {received}) > 0)"


def recording_rules(kv: KvPathFigures) -> list[dict[str, Any]]:
    """Per decode worker over 5 minutes: transfers, tokens and bytes received, transfer time (Ray's
    figure and the band around it), the achieved GB/s (decimal, per GPU: every rank's bytes over every
    rank's time), the share of prompt tokens decode computed rather than received, failures."""

    def record(name: str, expr: str) -> dict[str, Any]:
        return {"record": name, "expr": expr}

    def tokens(source: str) -> str:
        return f'sum by ({BY}) (rate({TOKENS}{{source="{source}"}}[{WINDOW}]))'

    rules = [
        record(TRANSFERS, f"sum by ({BY}) (rate({XFER}_count[{WINDOW}]))"),
        record(RECEIVED_TOKENS, tokens("external_kv_transfer")),
        record(SECONDS, f"sum by ({BY}) (rate({XFER}_sum[{WINDOW}]))"),
        record(SECONDS_LEAST, seconds_least()),
        record(SECONDS_MOST, seconds_most()),
        record(RECOMPUTE, decode_only(recompute_share(tokens("local_compute"), RECEIVED_TOKENS))),
        record(
            FAILURES,
            f"sum by ({BY}) (increase({FAILED}[{WINDOW}])) > 0 or "
            f"sum by ({BY}) ({FAILED} unless {FAILED} offset {WINDOW}) > 0",
        ),
    ]
    if kv.efa_counters:
        rx, read = (
            f"(sum(rate({metric(c)}[{WINDOW}])) or vector(0))" for c in ("rx_bytes", "rdma_read_bytes")
        )
        rules += [
            record(EFA_RECEIVED, f"{rx} + {read}"),
            record(RDMA_READ_SHARE, f"{read} / ({EFA_RECEIVED} > 0)"),
        ]
    if kv.bytes_per_token is not None:
        state = f" + {TRANSFERS} * {kv.state_bytes_per_transfer}" if kv.state_bytes_per_transfer else ""
        rules += [
            record(RECEIVED_BYTES, f"{RECEIVED_TOKENS} * {kv.bytes_per_token:g}{state}"),
            record(RATE, f"{RECEIVED_BYTES} / ({SECONDS} > 0) / 1e9"),
            record(RATE_MOST, f"{RECEIVED_BYTES} / ({SECONDS_LEAST} > 0) / 1e9"),
            record(RATE_LEAST, f"{RECEIVED_BYTES} / ({SECONDS_MOST} > 0) / 1e9"),
        ]
        if kv.efa_counters:
            rules.append(record(EFA_SHARE, f"{EFA_RECEIVED} / (sum({RECEIVED_BYTES}) > 0)"))
    return rules


def not_on_efa(kv: KvPathFigures) -> str:
    """NIXL moved bytes the EFA devices did not receive (`seen="tcp"`); where GPUDirect RDMA was planned,
    EFA received them without RDMA reads (`seen="emulated"`)."""
    tcp = f'label_replace({EFA_SHARE} < {NOT_ON_EFA_SHARE:g}, "seen", "tcp", "", "")'
    if kv.mechanism != "gpudirect":
        return tcp
    emulated = f"{RDMA_READ_SHARE} < {NOT_RDMA_SHARE:g} and on () {EFA_SHARE} >= {NOT_ON_EFA_SHARE:g}"
    return f'{tcp} or label_replace({emulated}, "seen", "emulated", "", "")'


KV_STATUS_QUERIES = {"rate": RATE, "least": RATE_LEAST, "most": RATE_MOST, "recompute": RECOMPUTE}
"""What `ops status` asks Prometheus, per decode worker: the recorded SLI."""
MECHANISM_QUERIES = {"efa_share": EFA_SHARE, "rdma_read_share": RDMA_READ_SHARE}
"""What `ops status` asks Prometheus of the mechanism: one figure each, for all GPU nodes."""


def seen_mechanism(efa_share: float | None, rdma_read_share: float | None) -> str | None:
    """What the EFA counters say carried NIXL's bytes, with the same thresholds as `KvPathNotOnEfa`; None
    where the counters or NIXL's bytes are not known."""
    if efa_share is None:
        return None
    if efa_share < NOT_ON_EFA_SHARE:
        return f"not EFA: the EFA devices received {efa_share:.0%} of NIXL's bytes (TCP)"
    how = (
        "RDMA reads"
        if rdma_read_share is not None and rdma_read_share >= NOT_RDMA_SHARE
        else "sends (emulated reads, or host buffers without RDMA read)"
    )
    return f"EFA, by {how}: the EFA devices received {efa_share:.2g}x NIXL's bytes"


MECHANISMS_SHORT: dict[Mechanism, str] = {
    "gpudirect": "the EFA device reads GPU memory (RDMA reads)",
    "emulated": "EFA sends, each packet copied between GPU and host memory",
    "host": "EFA moves host memory; vLLM copies the blocks to and from the GPU in bulk",
    "tcp": "UCX over TCP, not EFA",
}
"""How the planned mechanism moves the bytes, for the dashboard."""

RUNBOOK = 'docs/operations.md, "Is my KV path still what verify proved?"'


def alerts(kv: KvPathFigures) -> list[dict[str, Any]]:
    """`KvPathBelowFloor` where the plan has a floor and knows the model's KV bytes per token,
    `KvRecomputing` always."""
    planned = MECHANISM_NAMES[kv.mechanism]
    rules: list[dict[str, Any]] = []
    if kv.floor_gbytes_s is not None and kv.bytes_per_token is not None:
        rules.append(
            {
                "alert": "KvPathBelowFloor",
                "expr": f"{RATE_MOST} < {kv.floor_gbytes_s:g}",
                "for": FOR,
                "labels": {
                    "severity": "warning",
                    "mechanism": kv.mechanism,
                    "floor_gbytes_per_second": f"{kv.floor_gbytes_s:g}",
                },
                "annotations": {
                    "summary": "KV transfers into {{ $labels.WorkerId }} run under the plan's floor",
                    "description": 'At most {{ $value | printf "%.3f" }} GB/s per GPU over 5 minutes, '
                    "for 10 minutes, the most generous reading of vLLM's figures (each transfer at its "
                    f"time bucket's lower bound). The plan: {planned}, {kv.expected} GB/s to expect, "
                    f"floor {kv.floor_gbytes_s:g} GB/s (the one `ops verify` holds a probe to). A path "
                    "that fell back to TCP, lost rails or lost its EFA device reads so. "
                    f"{RUNBOOK}.",
                },
            }
        )
    if kv.over_efa and kv.efa_counters and kv.bytes_per_token is not None:
        rules.append(
            {
                "alert": "KvPathNotOnEfa",
                "expr": not_on_efa(kv),
                "for": FOR,
                "labels": {"severity": "warning", "mechanism": kv.mechanism},
                "annotations": {
                    "summary": "The KV cache does not cross on the planned mechanism ({{ $labels.seen }} "
                    "seen)",
                    "description": "For 10 minutes NIXL moved KV bytes that the nodes' EFA devices did "
                    "not receive (tcp: under a tenth of them; emulated: received without RDMA reads where "
                    f"GPUDirect RDMA was planned). The plan: {planned}. Silent fallbacks seen upstream: "
                    "UCX over TCP, an image or AMI that changed EFA or libfabric. "
                    f"{RUNBOOK}.",
                },
            }
        )
    rules.append(
        {
            "alert": "KvRecomputing",
            "expr": f"{RECOMPUTE} > {RECOMPUTE_SHARE_ALERT:g}",
            "for": FOR,
            "labels": {"severity": "warning", "mechanism": kv.mechanism},
            "annotations": {
                "summary": "Decode worker {{ $labels.WorkerId }} computes prompts instead of receiving "
                "their KV cache",
                "description": "{{ $value | humanizePercentage }} of the prompt tokens it took over 5 "
                "minutes, for 10 minutes, it computed itself rather than received over NIXL "
                f"(healthy: one token per request at most). Prefill's KV does not arrive: {RUNBOOK}.",
            },
        }
    )
    return rules


def kv_path_group(kv: KvPathFigures) -> dict[str, Any]:
    """The PrometheusRule group: the SLI's recording rules first (a group evaluates in order, so the
    alerts read this evaluation's figures), then the alerts."""
    return {"name": "kv-path", "rules": [*recording_rules(kv), *alerts(kv)]}
