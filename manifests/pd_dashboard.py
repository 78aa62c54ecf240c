"""The one dashboard that answers "is prefill/decode working?" on one screen, as Grafana JSON.

Rows: latency per side (time to first token, inter-token latency), load per side (requests running and
waiting, KV-cache usage), the KV cache crossing nodes (NIXL transfer latency, throughput, failures and
expired requests), the GPUs (utilisation and memory per worker), throughput, and scaling (what the
autoscaling policy decided per side, what Serve aims for and what runs).

vLLM's metrics (`ray_vllm_*`, vLLM 0.26 through Ray 2.58) carry `WorkerId` and `model_name` but not the
Serve deployment, and both sides serve the same model, so "per side" joins on `WorkerId` to a Serve
metric that has the deployment (`Prefill:<model>`, `Decode:<model>`), as Ray's own Serve LLM dashboard
does. That Serve metric exists once a replica has served a request.

With `serving.mode: aggregated` one deployment serves (`LLMServer:<model>`, Ray 2.58
ray/llm/_internal/serve/core/server/builder.py:64), the same panels show it, and the NIXL row says it
does not apply: no KV cache crosses nodes.
"""

from __future__ import annotations

import itertools
from typing import Any

from config import Settings
from config.sides import all_side_nodes, split
from manifests.observability import kv_path as kv
from manifests.observability.kv_path import KvPathFigures
from planning.kv_path import MECHANISM_NAMES

UID = "rayLlmPdDisaggregation"
DATASOURCE = {"type": "prometheus", "uid": "prometheus"}
"""kube-prometheus-stack's Grafana datasource."""
CLUSTER = 'ray_io_cluster=~"$cluster"'
DEPLOYMENTS = {"disaggregated": "(Prefill|Decode):.*", "aggregated": "LLMServer:.*"}
"""The Serve deployments of each `serving.mode` whose replicas run vLLM engines."""
STATUS_DEPLOYMENTS = "(Prefill|Decode|LLMServer):.*"
"""`ops status` may not know the stack's mode: it asks for either's."""


def side_join(deployments: str) -> str:
    """Appended to a vLLM series: gives it the Serve deployment of the worker it came from."""
    return (
        " * on (WorkerId) group_left (deployment) max by (WorkerId, deployment) "
        f'(ray_serve_deployment_request_counter_total{{{CLUSTER}, deployment=~"{deployments}"}} * 0 + 1)'
    )


NIXL = f"{{{CLUSTER}}}"
NIXL_LATENCY = (
    f"sum(rate(ray_vllm_nixl_xfer_time_seconds_sum{NIXL}[$__rate_interval])) / "
    f"sum(rate(ray_vllm_nixl_xfer_time_seconds_count{NIXL}[$__rate_interval]))"
)
NIXL_THROUGHPUT = f"sum(rate(ray_vllm_nixl_bytes_transferred_sum{NIXL}[$__rate_interval]))"
"""Ray's figure, which is not vLLM's: Ray rebuilds a histogram's sum from its bucket midpoints (ray/_private/
telemetry/open_telemetry_metric_recorder.py:317-328, used at :401-433), and vLLM 0.26 exports no byte
counter for NIXL (nixl/stats.py:140-238: histograms and failure counters only). So the panels show the
band the true figure lies in (`NIXL_BYTES_BAND`)."""
NIXL_BYTES_BUCKETS = tuple(2 ** (10 + i) for i in range(1, 25, 2))
"""vLLM 0.26's buckets of `vllm:nixl_bytes_transferred` (nixl/stats.py:177-178): 2 KiB to 8 GiB, each
bound four times the last."""


def midpoint_band(buckets: tuple[int, ...]) -> tuple[float, float]:
    """(low, high): the true sum of a histogram over Ray's midpoint sum lies in [low, high] for
    observations above the first bound and at most the last (a KV transfer moves at least one block of
    16 tokens, far above 2 KiB, and at most `maxModelLen` tokens, far below 8 GiB). An observation in
    (a, b] is counted as (a + b) / 2."""
    ratios = [(a / ((a + b) / 2), b / ((a + b) / 2)) for a, b in itertools.pairwise(buckets)]
    return min(lo for lo, _ in ratios), max(hi for _, hi in ratios)


NIXL_BYTES_BAND = midpoint_band(NIXL_BYTES_BUCKETS)
"""(0.4, 1.6): Ray's figure reads between 0.625x and 2.5x the bytes really moved."""


def nixl_throughput_targets() -> list[tuple[str, str]]:
    low, high = NIXL_BYTES_BAND
    return [
        (f"{low:g} * {NIXL_THROUGHPUT}", "at least"),
        (f"{high:g} * {NIXL_THROUGHPUT}", "at most"),
        (NIXL_THROUGHPUT, "Ray's figure (bucket midpoints)"),
    ]


NIXL_FAILED = f"sum(increase(ray_vllm_nixl_num_failed_transfers_total{NIXL}[$__rate_interval]))"
NIXL_EXPIRED = f"sum(increase(ray_vllm_nixl_num_kv_expired_reqs_total{NIXL}[$__rate_interval]))"
NIXL_DONE = f"sum(increase(ray_vllm_nixl_xfer_time_seconds_count{NIXL}[$__rate_interval]))"
"""Transfers that completed: vLLM 0.26 observes the histogram only for a read NIXL reports DONE."""


def as_prometheus_query(expr: str, window: str = "5m") -> str:
    """A panel's query as Grafana sends it to Prometheus, every Ray cluster and a fixed window (what
    `ops status` asks Prometheus)."""
    return expr.replace("$__rate_interval", window).replace('=~"$cluster"', '=~".*"')


STATUS_QUERIES = {
    "ttft_p50": ("time to first token p50", "ray_vllm_time_to_first_token_seconds", 0.5),
    "ttft_p95": ("time to first token p95", "ray_vllm_time_to_first_token_seconds", 0.95),
    "itl_p50": ("inter-token latency p50", "ray_vllm_inter_token_latency_seconds", 0.5),
    "itl_p95": ("inter-token latency p95", "ray_vllm_inter_token_latency_seconds", 0.95),
}
"""What `ops status` shows per side: (label, histogram, quantile)."""


def status_queries() -> dict[str, str]:
    """The PromQL behind `ops status`'s serving figures, the same queries the PD dashboard runs."""
    queries = {
        key: as_prometheus_query(quantile(q, histogram, deployments=STATUS_DEPLOYMENTS))
        for key, (_, histogram, q) in STATUS_QUERIES.items()
    }
    queries |= {
        "nixl_latency": as_prometheus_query(NIXL_LATENCY),
        "nixl_throughput": as_prometheus_query(NIXL_THROUGHPUT),
        "nixl_failures": as_prometheus_query(NIXL_FAILED),
        "nixl_expired": as_prometheus_query(NIXL_EXPIRED),
        "nixl_done": as_prometheus_query(NIXL_DONE),
    }
    return queries


def per_side(selector: str, deployments: str = DEPLOYMENTS["disaggregated"]) -> str:
    """A vLLM series (or a rate of one) with its side's deployment label."""
    return f"({selector}){side_join(deployments)}"


def side_sum(
    increase: str, counter: str, matchers: str = "", deployments: str = DEPLOYMENTS["disaggregated"]
) -> str:
    """A vLLM counter's `rate` or `increase` summed per side."""
    selector = f"{increase}({counter}{{{CLUSTER}{matchers}}}[$__rate_interval])"
    return f"sum by (deployment) ({per_side(selector, deployments)})"


def prefix_hit_rate(deployments: str = DEPLOYMENTS["disaggregated"]) -> str:
    """The share of prompt tokens each side found in its prefix cache (vLLM 0.26's counters:
    v1/metrics/loggers.py:584-601)."""
    return (
        f"{side_sum('rate', 'ray_vllm_prefix_cache_hits_total', deployments=deployments)} / "
        f"{side_sum('rate', 'ray_vllm_prefix_cache_queries_total', deployments=deployments)}"
    )


def failed_requests(deployments: str = DEPLOYMENTS["disaggregated"]) -> str:
    """Requests vLLM ended with an error (a KV cache that did not arrive, with kvLoadFailurePolicy fail)."""
    return side_sum("increase", "ray_vllm_request_success_total", ', finished_reason="error"', deployments)


def quantile(
    q: float, histogram: str, by: str = "deployment", deployments: str = DEPLOYMENTS["disaggregated"]
) -> str:
    rate = per_side(f"rate({histogram}_bucket{{{CLUSTER}}}[$__rate_interval])", deployments)
    return f"histogram_quantile({q}, sum by (le, {by}) ({rate}))"


NOT_APPLICABLE = "Does not apply to serving.mode aggregated: no KV cache crosses nodes. "


def _panel(
    panel_id: int,
    title: str,
    targets: list[tuple[str, str]],
    unit: str,
    x: int,
    y: int,
    description: str,
    width: int = 12,
) -> dict[str, Any]:
    return {
        "id": panel_id,
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "gridPos": {"h": 8, "w": width, "x": x, "y": y},
        "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
        "options": {
            "legend": {"displayMode": "table", "placement": "bottom", "calcs": ["lastNotNull", "max"]}
        },
        "targets": [
            {"refId": chr(ord("A") + i), "datasource": DATASOURCE, "expr": expr, "legendFormat": legend}
            for i, (expr, legend) in enumerate(targets)
        ],
    }


def _row(panel_id: int, title: str, y: int) -> dict[str, Any]:
    return {
        "id": panel_id,
        "type": "row",
        "title": title,
        "collapsed": False,
        "gridPos": {"h": 1, "w": 24, "x": 0, "y": y},
        "panels": [],
    }


def scaling_description(settings: Settings) -> str:
    scaling = settings.autoscaling
    if scaling.signal == "llm":
        how = (
            "The stack's policy (autoscaling.signal: llm) decides: prefill on the prompt tokens it holds, "
            f"{scaling.prefill.target_prompt_tokens} per replica; decode on KV-cache use, "
            f"{scaling.decode.target_kv_cache_usage:.0%} per replica; fewer only below "
            f"{scaling.downscale_band:.0%} of that."
        )
    else:
        how = (
            "Ray Serve's policy decides on requests per replica (autoscaling.signal: requests): "
            f"prefill {scaling.prefill.target_ongoing_requests:g}, "
            f"decode {scaling.decode.target_ongoing_requests:g}."
        )
    return (
        f"{how} `decided` is the policy's answer before Serve's bounds; `target` what Serve then aims for "
        f"after the delays ({scaling.upscale_delay_seconds:g} s up, {scaling.downscale_delay_seconds:g} s "
        "down); `healthy` what runs. A side that does not scale shows its fixed target only."
    )


def _view(settings: Settings) -> tuple[float, str, str, str, str, str]:
    """What every row's panels read: the TTFT objective, the serving mode, its deployments (as a regex
    and as a selector), the KV row's title and what a panel that only disaggregation has says."""
    objective = settings.observability.ttft_objective_seconds
    mode = settings.serving.mode
    deployments = DEPLOYMENTS[mode]
    sides = f'{CLUSTER}, deployment=~"{deployments}"'
    # What only prefill/decode disaggregation has: said so on the panels in aggregated mode.
    nixl_row = "KV cache over NIXL (EFA)" + (": does not apply (aggregated)" if mode == "aggregated" else "")
    pd_only = NOT_APPLICABLE if mode == "aggregated" else ""
    return objective, mode, deployments, sides, nixl_row, pd_only


def _latency_and_load(settings: Settings) -> list[dict[str, Any]]:
    """The rows of latency and load per side."""
    objective, _mode, deployments, _sides, _nixl_row, _pd_only = _view(settings)

    def side_quantile(q: float, histogram: str) -> str:
        return quantile(q, histogram, deployments=deployments)

    def by_side(selector: str) -> str:
        return per_side(selector, deployments)

    return [
        _row(1, "Latency per side", 0),
        _panel(
            2,
            "Time to first token (p50, p95)",
            [
                (side_quantile(0.5, "ray_vllm_time_to_first_token_seconds"), "p50 {{deployment}}"),
                (side_quantile(0.95, "ray_vllm_time_to_first_token_seconds"), "p95 {{deployment}}"),
            ],
            "s",
            0,
            1,
            f"Prefill computes the first token; the objective is {objective:g} s at p95 "
            "(observability.ttftObjectiveSeconds).",
        ),
        _panel(
            3,
            "Inter-token latency (p50, p95)",
            [
                (side_quantile(0.5, "ray_vllm_inter_token_latency_seconds"), "p50 {{deployment}}"),
                (side_quantile(0.95, "ray_vllm_inter_token_latency_seconds"), "p95 {{deployment}}"),
            ],
            "s",
            12,
            1,
            "Decode's pace: the time between two tokens of one stream.",
        ),
        _row(4, "Load per side", 9),
        _panel(
            5,
            "Requests running and waiting",
            [
                (
                    f"sum by (deployment) ({by_side(f'ray_vllm_num_requests_running{{{CLUSTER}}}')})",
                    "running {{deployment}}",
                ),
                (
                    f"sum by (deployment) ({by_side(f'ray_vllm_num_requests_waiting{{{CLUSTER}}}')})",
                    "waiting {{deployment}}",
                ),
            ],
            "short",
            0,
            10,
            "Balanced sides keep `waiting` near zero on both; a queue on one side says which needs replicas.",
        ),
        _panel(
            6,
            "KV-cache usage",
            [
                (
                    f"max by (deployment) ({by_side(f'ray_vllm_kv_cache_usage_perc{{{CLUSTER}}}')})",
                    "{{deployment}}",
                )
            ],
            "percentunit",
            12,
            10,
            "Of each engine's KV-cache blocks; near 100 % for minutes, requests queue.",
        ),
    ]


def gpu_targets(settings: Settings, expr: str, legend: str) -> list[tuple[str, str]]:
    """A GPU panel's queries: one over every worker's GPUs, or where the sides have GPU nodes of their
    own (`prefillNodes`, `decodeNodes`) one per side, its pods selected by their worker group's name
    (manifests/rayservice.py `side_worker_group`) and its type in the legend."""
    if not split(settings):
        return [(expr.replace("{selector}", ""), legend)]
    return [
        (
            expr.replace("{selector}", f'{{pod=~".+-{side.side}-workers-.+"}}'),
            f"{side.side} ({side.config.instance_type}): {legend}",
        )
        for side in all_side_nodes(settings)
    ]


def _kv_and_gpus(settings: Settings) -> list[dict[str, Any]]:
    """The rows of the KV cache over NIXL and of the GPUs."""
    _objective, _mode, deployments, _sides, nixl_row, pd_only = _view(settings)

    def side_quantile(q: float, histogram: str) -> str:
        return quantile(q, histogram, deployments=deployments)

    def by_side(selector: str) -> str:
        return per_side(selector, deployments)

    return [
        _row(7, nixl_row, 18),
        _panel(
            8,
            "NIXL transfer latency",
            [
                (NIXL_LATENCY, "mean"),
                (
                    "histogram_quantile(0.95, sum by (le) "
                    f"(rate(ray_vllm_nixl_xfer_time_seconds_bucket{NIXL}[$__rate_interval])))",
                    "p95",
                ),
            ],
            "s",
            0,
            19,
            f"{pd_only}How long moving one request's KV cache takes. Milliseconds on EFA; far more means "
            "NIXL fell back to UCX/TCP (`python -m ops verify`). The mean rests on Ray's sum rebuilt from "
            "bucket midpoints, so it is approximate (within a bucket's width); p95 rests on the counts.",
            width=8,
        ),
        _panel(
            9,
            "NIXL throughput",
            nixl_throughput_targets(),
            "Bps",
            8,
            19,
            f"{pd_only}KV-cache bytes moved between the sides per second: between `at least` and `at most`. "
            "vLLM 0.26 counts NIXL's bytes only in a histogram whose bounds step by 4x, and Ray rebuilds "
            "its sum from the bucket midpoints, so Ray's figure reads between "
            f"{1 / NIXL_BYTES_BAND[1]:g}x and {1 / NIXL_BYTES_BAND[0]:g}x the bytes really moved "
            '(docs/design.md, "Observability").',
            width=8,
        ),
        _panel(
            10,
            "NIXL failures and expired requests",
            [
                (NIXL_FAILED, "failed transfers"),
                (
                    f"sum(increase(ray_vllm_nixl_num_failed_notifications_total{NIXL}[$__rate_interval]))",
                    "failed notifications",
                ),
                (NIXL_EXPIRED, "expired KV requests"),
            ],
            "short",
            16,
            19,
            f"{pd_only}Should stay at zero; the NixlTransferFailures and NixlKvRequestsExpired alerts fire "
            "otherwise.",
            width=8,
        ),
        _row(11, "GPUs", 27),
        _panel(
            12,
            "GPU utilisation per worker",
            gpu_targets(
                settings,
                "avg by (Hostname, gpu, pod) (DCGM_FI_DEV_GPU_UTIL{selector})",
                "{{pod}} GPU {{gpu}} ({{Hostname}})",
            ),
            "percent",
            0,
            28,
            "dcgm-exporter, per GPU and the pod using it.",
        ),
        _panel(
            13,
            "GPU memory used per worker",
            gpu_targets(
                settings,
                "max by (Hostname, gpu, pod) (DCGM_FI_DEV_FB_USED{selector}) * 1024 * 1024",
                "{{pod}} GPU {{gpu}}",
            ),
            "bytes",
            12,
            28,
            "vLLM takes gpuMemoryUtilization of it at start; it stays flat.",
        ),
    ]


def _throughput_scaling_routing(settings: Settings) -> list[dict[str, Any]]:
    """The rows of throughput, scaling, routing and KV failures."""
    _objective, _mode, deployments, sides, _nixl_row, _pd_only = _view(settings)

    def side_quantile(q: float, histogram: str) -> str:
        return quantile(q, histogram, deployments=deployments)

    def by_side(selector: str) -> str:
        return per_side(selector, deployments)

    return [
        _row(14, "Throughput", 36),
        _panel(
            15,
            "Tokens per second",
            [
                (f"sum(rate(ray_vllm_prompt_tokens_total{{{CLUSTER}}}[$__rate_interval]))", "prompt"),
                (f"sum(rate(ray_vllm_generation_tokens_total{{{CLUSTER}}}[$__rate_interval]))", "generated"),
            ],
            "short",
            0,
            37,
            "Across both sides.",
        ),
        _panel(
            16,
            "Serve application status",
            [("max by (application) (ray_serve_application_status{" + CLUSTER + "})", "{{application}}")],
            "short",
            12,
            37,
            "6 is RUNNING; 5 DEPLOYING, 2 UNHEALTHY, 1 DEPLOY_FAILED.",
        ),
        _row(17, "Scaling", 45),
        _panel(
            18,
            "Replicas per side: decided, target, healthy",
            [
                (
                    f"max by (deployment) (ray_serve_autoscaling_desired_replicas{{{sides}}})",
                    "decided {{deployment}}",
                ),
                (
                    f"max by (deployment) (ray_serve_autoscaling_target_replicas{{{sides}}})",
                    "target {{deployment}}",
                ),
                (
                    f"sum by (deployment) (ray_serve_deployment_replica_healthy{{{sides}}})",
                    "healthy {{deployment}}",
                ),
            ],
            "short",
            0,
            46,
            scaling_description(settings),
            width=24,
        ),
        _row(19, "Routing and KV failures", 54),
        _panel(
            20,
            "Prefix cache hit rate",
            [(prefix_hit_rate(deployments), "{{deployment}}")],
            "percentunit",
            0,
            55,
            "Share of prompt tokens each side found in its own prefix cache, what prefix-affinity routing "
            "raises (serving.requestRouter). On decode a hit is a block not pulled over NIXL.",
        ),
        _panel(
            21,
            "KV transfer failures and failed requests",
            [
                (
                    f"sum by (WorkerId) (increase(ray_vllm_nixl_num_failed_transfers_total{NIXL}"
                    "[$__rate_interval]))",
                    "failed transfers into {{WorkerId}}",
                ),
                (
                    failed_requests(deployments),
                    "requests ended with an error, {{deployment}}",
                ),
            ],
            "short",
            12,
            55,
            "Failures that go on for minutes into one worker are a stale NIXL agent "
            "(NixlTransfersKeepFailing); requests end with an error where model.kvLoadFailurePolicy is fail.",
        ),
    ]


KV_PATH_ROW_Y = 63


def _kv_path(figures: KvPathFigures) -> list[dict[str, Any]]:
    """The KV path against the plan (manifests/observability/kv_path.py's recorded series, per decode
    worker): the rate against the floor, the mechanism, the recompute share, failures."""
    y = KV_PATH_ROW_Y
    worker = f"{{{CLUSTER}}}"
    planned = (
        f"Planned: {MECHANISM_NAMES[figures.mechanism]}, {figures.expected} GB/s per GPU to expect, floor "
        + (f"{figures.floor_gbytes_s:g} GB/s" if figures.floor_gbytes_s is not None else "none")
        + " (the preview's figures; `ops verify` holds its probe to the floor)."
    )
    rate: list[tuple[str, str]] = [
        (f"{kv.RATE}{worker}", "{{WorkerId}}"),
        (f"{kv.RATE_LEAST}{worker}", "at least {{WorkerId}}"),
        (f"{kv.RATE_MOST}{worker}", "at most {{WorkerId}}"),
    ]
    if figures.floor_gbytes_s is not None:
        rate.append((f"vector({figures.floor_gbytes_s:g})", "floor (plan)"))
    if figures.expected_gbytes_s is not None:
        rate.append((f"vector({figures.expected_gbytes_s[1]:g})", "expected (plan)"))
    rate_description = (
        f"{planned} The rate: prompt tokens decode received over NIXL (an exact counter) times the plan's "
        "KV bytes per token, over the time NIXL's reads took. Ray rebuilds that time from bucket "
        "midpoints, so the true rate lies between `at least` and `at most`; KvPathBelowFloor fires when "
        "`at most` stays under the floor for 10 minutes."
        if figures.bytes_per_token is not None
        else f"{planned} No rate: the plan does not know the model's KV bytes per token "
        "(model.kvCacheBytesPerToken)."
    )
    return [
        _row(40, "KV path: live against the plan", y),
        _panel(41, "KV rate per decode worker against the floor", rate, "GBs", 0, y + 1, rate_description),
        _panel(
            42,
            "KV bytes: what NIXL moved, what EFA received",
            [
                (f"{kv.RECEIVED_BYTES}{worker}", "NIXL into {{WorkerId}}"),
                *(
                    [
                        (kv.EFA_RECEIVED, "EFA devices received (all GPU nodes)"),
                        (f"{kv.EFA_RECEIVED} * {kv.RDMA_READ_SHARE}", "of which by RDMA reads"),
                    ]
                    if figures.efa_counters
                    else []
                ),
            ],
            "Bps",
            12,
            y + 1,
            f"The mechanism planned: {kv.MECHANISMS_SHORT[figures.mechanism]}. {planned} "
            + (
                "Over EFA the devices receive at least what NIXL moved; near zero while NIXL moves bytes is "
                "TCP (KvPathNotOnEfa). RDMA reads show only where the device reads (GPUDirect RDMA, or host "
                "buffers on a device with RDMA read); emulated reads arrive as sends."
                if figures.efa_counters
                else "The EFA counters come from the stack's own node-exporter, which this stack does "
                "not run."
            ),
        ),
        _panel(
            43,
            "Recompute share per decode worker",
            [
                (f"{kv.RECOMPUTE}{worker}", "{{WorkerId}}"),
                (f"vector({kv.RECOMPUTE_SHARE_ALERT:g})", "KvRecomputing"),
            ],
            "percentunit",
            0,
            y + 9,
            "Of the prompt tokens decode took, the share it computed rather than received over NIXL. "
            "Healthy: one token per request for a hybrid model, none for an attention-only one.",
        ),
        _panel(
            44,
            "Failed KV transfers per decode worker",
            [(f"{kv.FAILURES}{worker}", "{{WorkerId}}")],
            "short",
            12,
            y + 9,
            "In 5 minutes. Failing for minutes with none completing is a stale NIXL agent "
            '(docs/operations.md, "KV transfers keep failing").',
        ),
    ]


def panels(settings: Settings, figures: KvPathFigures | None = None) -> list[dict[str, Any]]:
    path = _kv_path(figures) if figures and settings.serving.mode == "disaggregated" else []
    return [
        *_latency_and_load(settings),
        *_kv_and_gpus(settings),
        *_throughput_scaling_routing(settings),
        *path,
    ]


def pd_dashboard(settings: Settings, figures: KvPathFigures | None = None) -> dict[str, Any]:
    """`figures`: the plan's KV path, which the "KV path" row holds the live figures to (disaggregated
    only)."""
    return {
        "uid": UID,
        "title": "Ray LLM: prefill/decode disaggregation"
        + (
            " (serving aggregated: the NIXL panels do not apply)"
            if settings.serving.mode == "aggregated"
            else ""
        ),
        "tags": ["ray", "vllm", "nixl", "pd"],
        "timezone": "browser",
        "schemaVersion": 39,
        "time": {"from": "now-1h", "to": "now"},
        "refresh": "30s",
        "templating": {
            "list": [
                {
                    "name": "cluster",
                    "label": "Ray cluster",
                    "type": "query",
                    "datasource": DATASOURCE,
                    "query": "label_values(ray_serve_application_status, ray_io_cluster)",
                    "refresh": 2,
                    "includeAll": True,
                    "multi": True,
                    "current": {"text": "All", "value": "$__all"},
                }
            ]
        },
        "panels": panels(settings, figures),
    }
