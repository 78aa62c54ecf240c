"""The stack's alert rules (PrometheusRule `ray-llm-alerts`): Serve's application and the RayService, the KV
transfer and cache, time to first token, the GPUs and their workers, and a Capacity Block's end;
tests/fixtures/alerts holds their promtool tests.
"""

from __future__ import annotations

from typing import Any

from config import Settings
from manifests.observability.kv_path import KvPathFigures, kv_path_group
from manifests.observability.monitors import monitor_metadata
from planning.context import ClusterContext
from planning.reservation import CapacityPlan

SERVE_RUNNING = 6
"""`ray_serve_application_status`: 0 UNKNOWN, 1 DEPLOY_FAILED, 2 UNHEALTHY, 3 NOT_STARTED, 4 DELETING,
5 DEPLOYING, 6 RUNNING (ray/serve/_private/application_state.py, Ray 2.58)."""


BLOCK_ENDING_WARNING_SECONDS = 2 * 3600
"""How long before a Capacity Block ends its alert fires: EKS empties the node group 40 minutes before."""


def capacity_block_alert(capacity: CapacityPlan) -> dict[str, Any] | None:
    """While GPU nodes run (dcgm-exporter reports a GPU), a Capacity Block's last two hours: its end,
    read at preview, is written into the rule (the next `up` after an extension rewrites it)."""
    if not capacity.block or capacity.ends is None:
        return None
    end = int(capacity.ends.timestamp())
    return {
        "alert": "CapacityBlockEnding",
        "expr": f"vector({end}) - time() < {BLOCK_ENDING_WARNING_SECONDS} > 0 "
        "and on() count(DCGM_FI_DEV_GPU_UTIL) > 0",
        "for": "0m",
        "labels": {"severity": "warning", "reservation": capacity.reference},
        "annotations": {
            "summary": f"Capacity Block {capacity.reference} ends in {{{{ $value | humanizeDuration }}}}",
            "description": "EKS scales the GPU nodes to 0 forty minutes before the block ends and EC2 stops "
            "them 30 minutes before: serving stops. Extend the block (`aws ec2 "
            "purchase-capacity-block-extension`) and `pulumi up`, or move to other capacity "
            f"({capacity.section}.capacityReservation).",
        },
    }


INCREASE_WINDOW = "5m"


def increased(series: str, by: str, window: str = INCREASE_WINDOW) -> str:
    """A counter that went up within `window`, as Ray exports vLLM's counters: a series appears only at
    its first increment (vLLM's Ray wrapper skips zero increments, vllm/v1/metrics/ray_wrappers.py
    `RayCounterWrapper.inc`; Ray keeps no 0 sample), so `increase()` alone misses the first failure of
    every fresh worker: a window holding one sample has no increase. A series that exists now and did
    not `window` ago counts as its whole value."""
    return (
        f"sum by ({by}) (increase({series}[{window}])) > 0 or "
        f"sum by ({by}) ({series} unless {series} offset {window}) > 0"
    )


def alert_rules(
    settings: Settings, capacity: CapacityPlan | None = None, kv: KvPathFigures | None = None
) -> list[dict[str, Any]]:
    """The alerts that matter for a disaggregated LLM service (the PrometheusRule's spec); a Capacity
    Block's end (`capacity`); the plan's KV path (`kv`) watched, in a group of its own (kv_path.py)."""
    serving_namespace = settings.serving.namespace
    objective = settings.observability.ttft_objective_seconds

    def alert(name: str, expr: str, duration: str, severity: str, summary: str, description: str):
        return {
            "alert": name,
            "expr": expr,
            "for": duration,
            "labels": {"severity": severity},
            "annotations": {"summary": summary, "description": description},
        }

    return [
        {
            "name": "ray-llm",
            "rules": [
                alert(
                    "RayServeApplicationNotRunning",
                    f"max by (application, ray_io_cluster) (ray_serve_application_status) != {SERVE_RUNNING}",
                    "10m",
                    "critical",
                    "Serve application {{ $labels.application }} is not RUNNING",
                    "Status {{ $value }} (1 DEPLOY_FAILED, 2 UNHEALTHY, 5 DEPLOYING) for 10 minutes, longer "
                    "than a Ray cluster change takes; `python -m ops status` shows why.",
                ),
                alert(
                    "RayServiceNotReady",
                    'max by (namespace, name) (kuberay_service_condition_ready{condition="false"}) == 1',
                    "10m",
                    "critical",
                    "RayService {{ $labels.namespace }}/{{ $labels.name }} is not Ready",
                    "KubeRay reports no serve endpoint for 10 minutes: requests fail.",
                ),
                alert(
                    "NixlTransferFailures",
                    " or ".join(
                        increased(f"ray_vllm_nixl_num_failed_{what}_total", "ray_io_cluster")
                        for what in ("transfers", "notifications")
                    ),
                    "0m",
                    "warning",
                    "NIXL failed to move KV caches from prefill to decode",
                    "Failed transfers or notifications in the last 5 minutes: those requests were recomputed "
                    "or failed. Check the EFA device plugin and the workers' logs.",
                ),
                alert(
                    "NixlTransfersKeepFailing",
                    increased("ray_vllm_nixl_num_failed_transfers_total", "ray_io_cluster, WorkerId"),
                    "10m",
                    "critical",
                    "KV transfers into worker {{ $labels.WorkerId }} have failed for 10 minutes",
                    "Not a blip: decode may hold a stale NIXL agent of a prefill that restarted in "
                    "place (vllm#49238), and every request it takes is recomputed or fails. Restart "
                    'the decode replicas: docs/operations.md, "KV transfers keep failing".',
                ),
                alert(
                    "KvLoadFailedRequests",
                    increased('ray_vllm_request_success_total{finished_reason="error"}', "ray_io_cluster"),
                    "0m",
                    "warning",
                    "vLLM ended requests with an error",
                    "In the last 5 minutes; clients got HTTP 500. With model.kvLoadFailurePolicy fail, a "
                    "KV cache that did not arrive ends its request this way; NixlTransferFailures says "
                    "whether transfers failed too.",
                ),
                alert(
                    "NixlKvRequestsExpired",
                    increased("ray_vllm_nixl_num_kv_expired_reqs_total", "ray_io_cluster"),
                    "0m",
                    "warning",
                    "Prefill KV caches expired before decode fetched them",
                    "In the last 5 minutes: decode is too slow to pull them, or lost the requests.",
                ),
                alert(
                    "KvCacheNearlyFull",
                    "max by (ray_io_cluster, WorkerId) (ray_vllm_kv_cache_usage_perc) > 0.95",
                    "10m",
                    "warning",
                    "An engine's KV cache has been above 95 % for 10 minutes",
                    "Requests queue (num_requests_waiting) and latency grows: add replicas of that side "
                    "or lower maxModelLen.",
                ),
                alert(
                    "TimeToFirstTokenAboveObjective",
                    "histogram_quantile(0.95, sum by (le, ray_io_cluster) "
                    f"(rate(ray_vllm_time_to_first_token_seconds_bucket[5m]))) > {objective:g}",
                    "10m",
                    "warning",
                    f"Time to first token p95 above {objective:g} s",
                    "For 10 minutes (observability.ttftObjectiveSeconds): prefill is saturated or queued; "
                    "the PD dashboard shows which side waits.",
                ),
                alert(
                    "GpuXidError",
                    "max by (Hostname, gpu, err_code, err_msg) (DCGM_FI_DEV_XID_ERRORS) > 0",
                    "0m",
                    "critical",
                    "XID {{ $labels.err_code }} on GPU {{ $labels.gpu }} of {{ $labels.Hostname }}",
                    "{{ $labels.err_msg }}: the GPU reported an error; the worker on it may have failed.",
                ),
                alert(
                    "GpuWorkerRestarting",
                    "sum by (namespace, pod) (increase(kube_pod_container_status_restarts_total"
                    f'{{namespace="{serving_namespace}", container="ray-worker"}}[15m])) > 0',
                    "0m",
                    "warning",
                    "GPU worker {{ $labels.pod }} restarted",
                    "A prefill or decode worker restarted in the last 15 minutes (OOM, a GPU error, a "
                    "failed health check): `kubectl describe pod` says why.",
                ),
                *([ending] if (ending := capacity and capacity_block_alert(capacity)) else []),
            ],
        },
        *([kv_path_group(kv)] if kv and settings.serving.mode == "disaggregated" else []),
    ]


def prometheus_rule(
    settings: Settings,
    context: ClusterContext,
    capacity: CapacityPlan | None = None,
    kv: KvPathFigures | None = None,
) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": monitor_metadata("ray-llm-alerts", settings.serving.namespace, context, rule=True),
        "spec": {"groups": alert_rules(settings, capacity, kv)},
    }
