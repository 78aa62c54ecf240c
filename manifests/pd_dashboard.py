"""The one dashboard that answers "is prefill/decode working?" on one screen, as Grafana JSON.

Rows: latency per side (time to first token, inter-token latency), load per side (requests running and
waiting, KV-cache usage), the KV cache crossing nodes (NIXL transfer latency, throughput, failures and
expired requests), the GPUs (utilisation and memory per worker), and throughput.

vLLM's metrics (`ray_vllm_*`, vLLM 0.26 through Ray 2.58) carry `WorkerId` and `model_name` but not the
Serve deployment, and both sides serve the same model, so "per side" joins on `WorkerId` to a Serve
metric that has the deployment (`Prefill:<model>`, `Decode:<model>`), as Ray's own Serve LLM dashboard
does. That Serve metric exists once a replica has served a request.

With `serving.mode: aggregated` one deployment serves (`LLMServer:<model>`, Ray 2.58
ray/llm/_internal/serve/core/server/builder.py:64), the same panels show it, and the NIXL row says it
does not apply: no KV cache crosses nodes.
"""

from __future__ import annotations

from typing import Any

from config import Settings

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
NIXL_FAILED = f"sum(increase(ray_vllm_nixl_num_failed_transfers_total{NIXL}[$__rate_interval]))"
NIXL_EXPIRED = f"sum(increase(ray_vllm_nixl_num_kv_expired_reqs_total{NIXL}[$__rate_interval]))"


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
    }
    return queries


def per_side(selector: str, deployments: str = DEPLOYMENTS["disaggregated"]) -> str:
    """A vLLM series (or a rate of one) with its side's deployment label."""
    return f"({selector}){side_join(deployments)}"


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


def panels(settings: Settings) -> list[dict[str, Any]]:
    objective = settings.observability.ttft_objective_seconds
    mode = settings.serving.mode
    deployments = DEPLOYMENTS[mode]

    def side_quantile(q: float, histogram: str) -> str:
        return quantile(q, histogram, deployments=deployments)

    def by_side(selector: str) -> str:
        return per_side(selector, deployments)

    # What only prefill/decode disaggregation has: said so on the panels in aggregated mode.
    nixl_row = "KV cache over NIXL (EFA)" + (": does not apply (aggregated)" if mode == "aggregated" else "")
    pd_only = NOT_APPLICABLE if mode == "aggregated" else ""
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
            "NIXL fell back to UCX/TCP (`python -m ops verify`).",
            width=8,
        ),
        _panel(
            9,
            "NIXL throughput",
            [(NIXL_THROUGHPUT, "bytes/s")],
            "Bps",
            8,
            19,
            f"{pd_only}KV-cache bytes moved between the sides per second.",
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
            [("avg by (Hostname, gpu, pod) (DCGM_FI_DEV_GPU_UTIL)", "{{pod}} GPU {{gpu}} ({{Hostname}})")],
            "percent",
            0,
            28,
            "dcgm-exporter, per GPU and the pod using it.",
        ),
        _panel(
            13,
            "GPU memory used per worker",
            [("max by (Hostname, gpu, pod) (DCGM_FI_DEV_FB_USED) * 1024 * 1024", "{{pod}} GPU {{gpu}}")],
            "bytes",
            12,
            28,
            "vLLM takes gpuMemoryUtilization of it at start; it stays flat.",
        ),
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
    ]


def pd_dashboard(settings: Settings) -> dict[str, Any]:
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
        "panels": panels(settings),
    }
