"""The metric names the pinned versions export, with where each was read: what every alert rule and
our PD dashboard may use. A metric that is not exported makes a query return nothing, silently: a
dashboard panel stays empty, an alert never fires.

- vLLM 0.26.0 (Ray 2.58.0's `llm` extra pins it), through Ray Serve LLM's `RayPrometheusStatLogger`:
  `vllm:<name>` becomes `ray_vllm_<name>` (vllm/v1/metrics/ray_wrappers.py sanitizes, Ray's exporter
  prefixes `ray_`), counters get `_total`, histograms `_bucket`, `_sum`, `_count`.
  Core: vllm/v1/metrics/loggers.py; NIXL: vllm/distributed/kv_transfer/kv_connector/v1/nixl/stats.py.
  `request_success` counts finished requests by `finished_reason` (loggers.py:713-723, the strings of
  vllm/v1/engine/__init__.py:30); a request decode ends because its KV cache did not arrive is `error`
  (kv_load_failure_policy `fail`, v1/core/sched/scheduler.py:1868-1873). `nixl_num_failed_transfers`
  counts each read that failed or could not start (nixl/base_worker.py:2139-2155, stats.py:52-54,213-219).
  `prompt_tokens_by_source` counts prompt tokens by where their KV came from (loggers.py:680-693,
  1194-1200): on decode, `external_kv_transfer` is what NIXL brought (manifests/observability/kv_path.py).
- Ray 2.58.0 Serve: ray/serve/_private/application_state.py (`serve_application_status`),
  deployment_state.py (`serve_deployment_replica_healthy`, `serve_deployment_status`,
  `serve_autoscaling_target_replicas`), autoscaling_state.py (`serve_autoscaling_desired_replicas`, the
  policy's decision before bounds), replica.py (`serve_deployment_request_counter`, a counter;
  `serve_deployment_replica_starts`, a counter each replica increments once when it starts, :401-408).
- KubeRay 1.7.0 operator: ray-operator/controllers/ray/metrics/ (gauges).
- dcgm-exporter 4.8.2: the chart's counters ConfigMap (deployment/templates/metrics-configmap.yaml).
- kube-state-metrics 2.20.0 (kube-prometheus-stack 88.5.3).
"""

from __future__ import annotations

import re
from typing import Any

import promql_parser

from manifests.observability.efa_counters import COUNTERS as EFA_COUNTERS


def _histogram(name: str) -> set[str]:
    return {f"{name}_bucket", f"{name}_sum", f"{name}_count"}


VLLM_HISTOGRAMS = (
    "time_to_first_token_seconds",
    "inter_token_latency_seconds",
    "request_time_per_output_token_seconds",
    "e2e_request_latency_seconds",
    "request_queue_time_seconds",
    "request_prefill_time_seconds",
    "request_decode_time_seconds",
    "request_inference_time_seconds",
    "request_prompt_tokens",
    "request_generation_tokens",
    "nixl_xfer_time_seconds",
    "nixl_post_time_seconds",
    "nixl_bytes_transferred",
    "nixl_num_descriptors",
)
VLLM_GAUGES = ("num_requests_running", "num_requests_waiting", "kv_cache_usage_perc")
VLLM_COUNTERS = (
    "prompt_tokens",
    "prompt_tokens_by_source",
    "generation_tokens",
    "request_success",
    "prefix_cache_queries",
    "prefix_cache_hits",
    "nixl_num_failed_transfers",
    "nixl_num_failed_notifications",
    "nixl_num_kv_expired_reqs",
)

VLLM_LABEL_VALUES = {
    "finished_reason": frozenset({"stop", "length", "abort", "error", "repetition"}),
    "source": frozenset({"local_compute", "local_cache_hit", "external_kv_transfer"}),
}
"""Label values vLLM 0.26.0 writes (vllm/v1/engine/__init__.py:30 FINISH_REASON_STRINGS;
`prompt_tokens_by_source`'s `source`, vllm/v1/metrics/stats.py:316-320 PromptTokenStats.ALL_SOURCES)."""

VLLM = (
    {m for name in VLLM_HISTOGRAMS for m in _histogram(f"ray_vllm_{name}")}
    | {f"ray_vllm_{name}" for name in VLLM_GAUGES}
    | {f"ray_vllm_{name}_total" for name in VLLM_COUNTERS}
)
RAY_SERVE = {
    "ray_serve_application_status",
    "ray_serve_deployment_status",
    "ray_serve_deployment_replica_healthy",
    "ray_serve_deployment_request_counter_total",
    "ray_serve_deployment_replica_starts_total",
    "ray_serve_autoscaling_target_replicas",
    "ray_serve_autoscaling_desired_replicas",
}
KUBERAY = {
    "kuberay_service_info",
    "kuberay_service_condition_ready",
    "kuberay_service_condition_upgrade_in_progress",
    "kuberay_cluster_info",
    "kuberay_cluster_condition_provisioned",
    "kuberay_cluster_provisioned_duration_seconds",
}
DCGM = {
    f"DCGM_FI_{name}"
    for name in (
        "DEV_SM_CLOCK",
        "DEV_MEM_CLOCK",
        "DEV_MEMORY_TEMP",
        "DEV_GPU_TEMP",
        "DEV_POWER_USAGE",
        "DEV_TOTAL_ENERGY_CONSUMPTION",
        "DEV_PCIE_REPLAY_COUNTER",
        "DEV_GPU_UTIL",
        "DEV_MEM_COPY_UTIL",
        "DEV_ENC_UTIL",
        "DEV_DEC_UTIL",
        "DEV_XID_ERRORS",
        "DEV_FB_FREE",
        "DEV_FB_USED",
        "DEV_NVLINK_BANDWIDTH_TOTAL",
        "DEV_VGPU_LICENSE_STATUS",
        "DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "DEV_CORRECTABLE_REMAPPED_ROWS",
        "DEV_ROW_REMAP_FAILURE",
        "PROF_GR_ENGINE_ACTIVE",
        "PROF_PIPE_TENSOR_ACTIVE",
        "PROF_DRAM_ACTIVE",
        "PROF_PCIE_TX_BYTES",
        "PROF_PCIE_RX_BYTES",
    )
}
KUBE_STATE_METRICS = {"kube_pod_container_status_restarts_total", "kube_pod_status_phase"}
NODE_EFA = {f"node_efa_{name}_total" for name in EFA_COUNTERS}
"""The EFA devices' byte counters, which the stack's own node-exporter sidecar writes for the textfile
collector (manifests/observability/efa_counters.py; node-exporter 1.12.1's InfiniBand collector does not
read EFA's hw_counters)."""

EXPORTED = VLLM | RAY_SERVE | KUBERAY | DCGM | KUBE_STATE_METRICS | NODE_EFA

RAY_DASHBOARD_GAPS = {"ray_vllm_num_requests_swapped", "ray_vllm_nixl_num_failed_transfers"}
"""Names Ray 2.58's own Serve LLM dashboard queries that vLLM 0.26 through Ray does not export (its
"Swapped" and "KV Transfer Failures" panels stay empty; manifests/dashboards/ray-2.58.0/PROVENANCE.md)."""
RAY_DASHBOARD_UNUSED = ("ray_vllm_kv_offload_", "ray_vllm_external_prefix_cache_")
"""Panels of KV-cache offloading connectors this stack does not run (collapsed in Ray's dashboard)."""


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (a parse error raises)."""
    names: set[str] = set()

    def visit(node: Any) -> None:
        selector = node.vector_selector if isinstance(node, promql_parser.MatrixSelector) else node
        if isinstance(selector, promql_parser.VectorSelector):
            if selector.name:
                names.add(selector.name)
            for matcher in selector.matchers.matchers:
                if matcher.name == "__name__" and matcher.op == promql_parser.MatchOp.Equal:
                    names.add(matcher.value)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return names


def unknown_label_values(query: str) -> set[str]:
    """`label="value"` matchers on a label whose values vLLM fixes, with a value it never writes."""
    return {
        f'{label}="{value}"'
        for label, value in re.findall(r'(\w+)="([^"]*)"', query)
        if label in VLLM_LABEL_VALUES and value not in VLLM_LABEL_VALUES[label]
    }
