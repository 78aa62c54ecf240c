"""`ops status`: where the RayService stands, where each Ray pod runs and how long it took to start
and to become Ready (docs/time-to-serving.md), and what each GPU node offers.

It replaces the seed's `deploy_ray_service.sh status`. KubeRay 1.7 still fills the deprecated
`serviceStatus`, but the `Ready` condition is what `pulumi up` waits for, so both are shown.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from config import Settings
from manifests.endpoint.chart import GATEWAY_NAMESPACE
from manifests.endpoint.gateway import api_keys_name, load_balancer_service_name
from manifests.observability.kv_path import (
    KV_STATUS_QUERIES,
    MECHANISM_QUERIES,
    KvPathFigures,
    seen_mechanism,
)
from manifests.pd_dashboard import NIXL_BYTES_BAND, STATUS_QUERIES, status_queries
from ops.kube import RAY_CLUSTER_LABEL, RAY_NODE_TYPE_LABEL, KubeApi, ServiceEndpoint
from planning import nodes
from planning.kv_path import MECHANISM_NAMES
from planning.nodes import EFA_RESOURCE, GPU_RESOURCE, GPU_SIDE_LABEL

GPU_NODE_SELECTOR = ",".join(f"{k}={v}" for k, v in nodes.GPU_NODE_SELECTOR.items())
"""The GPU nodes as a label selector (the seed's `role=gpu-worker`)."""


def gpu_node_selector(settings: Settings | None) -> str:
    """The stack's GPU nodes as a label selector: on a team's cluster its own label
    (planning/nodes.py `placement`), which no team node carries; else `role=gpu-worker`."""
    if settings is None:
        return GPU_NODE_SELECTOR
    return ",".join(f"{k}={v}" for k, v in nodes.placement(settings).gpu_selector.items())


INSTANCE_TYPE_LABEL = "node.kubernetes.io/instance-type"
ZONE_LABEL = "topology.kubernetes.io/zone"

Progress = Callable[[str], None]


def quiet(_: str) -> None:
    """The default progress reporter of library calls: silence (the CLI passes its own)."""


@dataclass(frozen=True)
class Condition:
    type: str
    status: str
    reason: str
    message: str


@dataclass(frozen=True)
class AppStatus:
    name: str
    status: str
    message: str
    deployments: Mapping[str, str]
    """Serve deployment name -> status (HEALTHY, UPDATING, UNHEALTHY, ...)."""


@dataclass(frozen=True)
class RayServiceStatus:
    service_status: str | None
    """The deprecated `status.serviceStatus` (`Running` or empty)."""
    ready: Condition | None
    upgrade_in_progress: Condition | None
    active_cluster: str | None
    pending_cluster: str | None
    applications: tuple[AppStatus, ...]


@dataclass(frozen=True)
class PodInfo:
    name: str
    node_type: str
    cluster: str
    node: str | None
    phase: str
    ready: bool
    started_s: float | None = None
    """Seconds from the pod's creation to its containers running (scheduling, image pull)."""
    ready_s: float | None = None
    """Seconds from the pod's creation to Ready (for a worker: the model downloaded, loaded, serving)."""


@dataclass(frozen=True)
class GpuNodeInfo:
    name: str
    instance_type: str
    zone: str
    gpus: int
    efa: int
    side: str | None = None
    """`prefill` or `decode` where the sides have node groups of their own (planning/nodes.py
    GPU_SIDE_LABEL); None on shared GPU nodes."""


@dataclass(frozen=True)
class ObjectConditions:
    kind: str
    namespace: str
    name: str
    conditions: tuple[Condition, ...]
    """The controller's conditions (for a route or policy: those of its first parent)."""

    def format(self) -> str:
        shown = ", ".join(
            f"{c.type} {c.status}" + (f" ({c.reason}: {c.message})" if c.status != "True" else "")
            for c in self.conditions
        )
        return f"{self.kind} {self.namespace}/{self.name}: {shown or 'no status yet'}"


@dataclass(frozen=True)
class EndpointStatus:
    """The endpoint's gateway objects and its load balancer, as their controllers report them."""

    objects: tuple[ObjectConditions, ...]
    load_balancer: str
    load_balancer_hostname: str | None
    scheme: str
    port: int | None

    def format(self) -> list[str]:
        lines = ["Endpoint (Envoy Gateway, NLB)"]
        lines += [f"  {o.format()}" for o in self.objects]
        where = f"  load balancer {self.load_balancer}: "
        if self.load_balancer_hostname:
            lines.append(f"{where}{self.load_balancer_hostname} ({self.scheme}, port {self.port})")
        elif self.port is None:
            lines.append(f"{where}not found")
        else:
            lines.append(
                f"{where}no address yet (is the AWS Load Balancer Controller running? kubectl -n "
                "kube-system logs deploy/aws-load-balancer-controller)"
            )
        return lines


@dataclass(frozen=True)
class ServingMetrics:
    """What Prometheus saw in the last 5 minutes: latency per side, and the KV cache over NIXL."""

    latency: dict[str, dict[str, float]]
    """STATUS_QUERIES key -> Serve deployment (Prefill:..., Decode:...) -> seconds."""
    nixl: dict[str, float]
    """nixl_latency (s), nixl_throughput (bytes/s), nixl_failures, nixl_expired, nixl_done."""
    kv_path: dict[str, dict[str, float]] = field(default_factory=dict)
    """Decode WorkerId -> KV_STATUS_QUERIES key -> value: the KV-path SLI the stack's rules record."""
    plan: KvPathFigures | None = None
    """The plan's KV path, which the live figures are printed beside (with --stack)."""
    mechanism: dict[str, float] = field(default_factory=dict)
    """MECHANISM_QUERIES key -> value: what the EFA counters say of NIXL's bytes."""

    @property
    def every_transfer_failed(self) -> bool:
        """KV transfers failed and none completed: what decode does with a stale NIXL agent of a
        prefill that restarted in place (vllm#49238), rather than one bad transfer among many."""
        failed, done = self.nixl.get("nixl_failures") or 0, self.nixl.get("nixl_done") or 0
        return failed >= 1 and not done >= 1

    def format(self) -> list[str]:
        lines = ["Serving metrics (Prometheus, last 5 minutes)"]
        if not any(self.latency.values()) and not self.nixl:
            return [*lines, "  no requests yet"]
        for key, (label, _, _) in STATUS_QUERIES.items():
            sides = self.latency.get(key) or {}
            shown = ", ".join(f"{side} {_seconds(value)}" for side, value in sorted(sides.items())) or "-"
            lines.append(f"  {label}: {shown}")
        if self.nixl:
            n = self.nixl
            lines.append(
                f"  NIXL: transfer {_seconds(n.get('nixl_latency'))}, "
                f"{_rate(n.get('nixl_throughput'))}, {_count(n.get('nixl_failures'))} failed, "
                f"{_count(n.get('nixl_expired'))} expired KV requests"
            )
        lines += self._kv_path_lines()
        if self.every_transfer_failed:
            lines.append(
                "  every KV transfer failed, none completed: decode may hold a stale NIXL agent of a "
                'restarted prefill; docs/operations.md, "KV transfers keep failing"'
            )
        return lines

    def _kv_path_lines(self) -> list[str]:
        """Per decode worker, the live KV rate (with the band Ray's midpoint time leaves) and recompute
        share, then the plan's mechanism, expected rate and floor; a worker surely under the floor is
        said so."""
        plan = self.plan
        lines = []
        for worker, figures in sorted(self.kv_path.items()):
            rate = figures.get("rate")
            shown = (
                f"{rate:.2f} GB/s per GPU ({figures.get('least', float('nan')):.2f}-"
                f"{figures.get('most', float('nan')):.2f})"
                if rate is not None
                else "no rate"
            )
            share = figures.get("recompute")
            recomputed = f", {share:.1%} of prompt tokens recomputed" if share is not None else ""
            below = (
                plan is not None
                and plan.floor_gbytes_s is not None
                and figures.get("most") is not None
                and figures["most"] < plan.floor_gbytes_s
            )
            lines.append(
                f"  KV path into {worker}: {shown}{recomputed}"
                + (", under the plan's floor" if below else "")
            )
        seen = seen_mechanism(self.mechanism.get("efa_share"), self.mechanism.get("rdma_read_share"))
        if seen:
            lines.append(f"  KV path seen: {seen}")
        if plan is not None and (self.kv_path or self.nixl):
            floor = f"{plan.floor_gbytes_s:g} GB/s" if plan.floor_gbytes_s is not None else "none"
            lines.append(
                f"  KV path planned: {MECHANISM_NAMES[plan.mechanism]}, {plan.expected} GB/s per GPU to "
                f"expect, floor {floor}"
            )
        return lines


def _seconds(value: float | None) -> str:
    if value is None or value != value:  # NaN: no samples
        return "-"
    return f"{value * 1000:.0f} ms" if value < 1 else f"{value:.2f} s"


def _rate(value: float | None) -> str:
    """Ray's midpoint-rebuilt byte rate as the band the true rate lies in (manifests/pd_dashboard.py
    NIXL_BYTES_BAND)."""
    if value is None or value != value:
        return "-"
    low, high = NIXL_BYTES_BAND
    return f"{low * value / 1e9:.2f}-{high * value / 1e9:.2f} GB/s"


def _count(value: float | None) -> str:
    return "-" if value is None or value != value else f"{value:.0f}"


@dataclass(frozen=True)
class StatusReport:
    namespace: str
    name: str
    rayservice: RayServiceStatus | None
    """None when the RayService does not exist."""
    pods: tuple[PodInfo, ...]
    gpu_nodes: tuple[GpuNodeInfo, ...]
    endpoint: EndpointStatus | None = None
    """None when the RayService has no Gateway (the endpoint is off)."""
    metrics: ServingMetrics | None = None
    """None when no Prometheus of the stack answers (observability off)."""
    parked: bool = False
    """The stack file says `autoscaling.parked`: no RayService, by design."""
    gpu_selector: str = GPU_NODE_SELECTOR
    """How the GPU nodes were listed."""
    cost: str | None = None
    """What the stack costs now (from the prices the last preview cached), when run with --stack."""

    def format(self) -> str:
        lines = [f"RayService {self.namespace}/{self.name}"]
        rs = self.rayservice
        if rs is None and self.parked:
            lines.append(
                "  parked (autoscaling.parked): no RayService and no GPU workers; the endpoint answers 503. "
                "Set autoscaling.parked: false and `pulumi up` to serve again."
            )
        elif rs is None:
            lines.append("  not found (has `pulumi up` created it, in this namespace?)")
        else:
            ready = rs.ready
            lines.append(
                f"  Ready: {ready.status} ({ready.reason}{': ' + ready.message if ready.message else ''})"
                if ready
                else "  Ready: no condition yet"
            )
            lines.append(f"  serviceStatus: {rs.service_status or '(empty)'}  [deprecated by KubeRay]")
            if rs.upgrade_in_progress and rs.upgrade_in_progress.status == "True":
                lines.append(f"  upgrade in progress: {rs.upgrade_in_progress.reason}")
            lines.append(f"  active Ray cluster: {rs.active_cluster or '(none)'}")
            if rs.pending_cluster:
                lines.append(f"  pending Ray cluster: {rs.pending_cluster}")
            if not rs.applications:
                lines.append("  applications: none reported yet")
            for app in rs.applications:
                lines.append(f"  application {app.name}: {app.status}{_suffix(app.message)}")
                for deployment, status in app.deployments.items():
                    lines.append(f"    {deployment}: {status}")
        lines.append("")
        lines.append(f"Ray pods in {self.namespace}: {len(self.pods)}")
        if self.pods:
            lines += _table(
                ("POD", "TYPE", "PHASE", "READY", "NODE", "STARTED", "READY AFTER"),
                [
                    (
                        p.name,
                        p.node_type,
                        p.phase,
                        "yes" if p.ready else "no",
                        p.node or "-",
                        _duration(p.started_s),
                        _duration(p.ready_s),
                    )
                    for p in self.pods
                ],
            )
        lines.append("")
        lines.append(f"GPU nodes ({self.gpu_selector}): {len(self.gpu_nodes)}, with allocatable GPUs and EFA")
        if self.gpu_nodes and any(n.side for n in self.gpu_nodes):
            # Each side on nodes of its own: which side each node serves.
            lines += _table(
                ("NODE", "SIDE", "INSTANCE", "ZONE", GPU_RESOURCE, EFA_RESOURCE),
                [
                    (n.name, n.side or "-", n.instance_type, n.zone, str(n.gpus), str(n.efa))
                    for n in self.gpu_nodes
                ],
            )
        elif self.gpu_nodes:
            lines += _table(
                ("NODE", "INSTANCE", "ZONE", GPU_RESOURCE, EFA_RESOURCE),
                [(n.name, n.instance_type, n.zone, str(n.gpus), str(n.efa)) for n in self.gpu_nodes],
            )
        lines.append("")
        if self.endpoint:
            lines += self.endpoint.format()
        else:
            lines.append(
                f"Endpoint: no Gateway {self.namespace}/{self.name} (endpoint off: use kubectl port-forward)"
            )
        lines.append("")
        lines += self.metrics.format() if self.metrics else ["Serving metrics: no Prometheus in the stack"]
        if self.cost:
            lines += ["", self.cost]
        return "\n".join(lines)


def collect_status(
    api: KubeApi,
    namespace: str,
    name: str,
    progress: Progress = quiet,
    gateway_namespace: str = GATEWAY_NAMESPACE,
    prometheus: ServiceEndpoint | None = None,
    gpu_selector: str = GPU_NODE_SELECTOR,
) -> StatusReport:
    """`gateway_namespace`: where the endpoint's load balancer Service is (Envoy Gateway's namespace);
    `prometheus`: the Prometheus that scrapes the stack, if not the stack's own; `gpu_selector`: the
    stack's GPU nodes (`gpu_node_selector`)."""
    progress(f"reading RayService {namespace}/{name}")
    rayservice = api.get_rayservice(namespace, name)
    progress(f"listing Ray pods in {namespace}")
    pods = api.list_pods(namespace, RAY_NODE_TYPE_LABEL)
    progress(f"listing GPU nodes ({gpu_selector})")
    nodes = api.list_nodes(gpu_selector)
    progress(f"reading the endpoint's Gateway {namespace}/{name}")
    endpoint = collect_endpoint(api, namespace, name, gateway_namespace)
    progress("asking Prometheus for latency and NIXL figures")
    metrics = collect_metrics(api, prometheus)
    return StatusReport(
        endpoint=endpoint,
        metrics=metrics,
        namespace=namespace,
        name=name,
        rayservice=parse_rayservice(rayservice) if rayservice is not None else None,
        pods=tuple(parse_pod(p) for p in sorted(pods, key=_pod_order)),
        gpu_nodes=tuple(parse_gpu_node(n) for n in sorted(nodes, key=lambda n: n["metadata"]["name"])),
        gpu_selector=gpu_selector,
    )


GATEWAY_API = "gateway.networking.k8s.io/v1"
ENVOY_GATEWAY_API = "gateway.envoyproxy.io/v1alpha1"


def collect_endpoint(
    api: KubeApi, namespace: str, name: str, gateway_namespace: str = GATEWAY_NAMESPACE
) -> EndpointStatus | None:
    gateway = api.get_object(GATEWAY_API, "gateways", namespace, name)
    if gateway is None:
        return None
    policy_name = api_keys_name(name)
    route = api.get_object(GATEWAY_API, "httproutes", namespace, name)
    policy = api.get_object(ENVOY_GATEWAY_API, "securitypolicies", namespace, policy_name)
    service_name = load_balancer_service_name(name)
    service = api.get_object("v1", "services", gateway_namespace, service_name) or {}
    ingress = ((service.get("status") or {}).get("loadBalancer") or {}).get("ingress") or []
    annotations = (service.get("metadata") or {}).get("annotations") or {}
    ports = (service.get("spec") or {}).get("ports") or []
    return EndpointStatus(
        objects=(
            _object_conditions("Gateway", namespace, name, (gateway.get("status") or {}).get("conditions")),
            _object_conditions("HTTPRoute", namespace, name, _first(route, "parents")),
            _object_conditions("SecurityPolicy", namespace, policy_name, _first(policy, "ancestors")),
        ),
        load_balancer=f"{gateway_namespace}/{service_name}",
        load_balancer_hostname=(ingress[0].get("hostname") or ingress[0].get("ip")) if ingress else None,
        scheme=annotations.get("service.beta.kubernetes.io/aws-load-balancer-scheme", "internal"),
        port=ports[0].get("port") if ports else None,
    )


def collect_metrics(api: KubeApi, prometheus: ServiceEndpoint | None = None) -> ServingMetrics | None:
    latency: dict[str, dict[str, float]] = {}
    nixl: dict[str, float] = {}
    for key, query in status_queries().items():
        result = api.prometheus_query(query, prometheus)
        if result is None:
            return None
        if key in STATUS_QUERIES:
            latency[key] = {r["metric"].get("deployment", "?"): float(r["value"][1]) for r in result}
        elif result:
            nixl[key] = float(result[0]["value"][1])
    kv_path: dict[str, dict[str, float]] = {}
    for key, query in KV_STATUS_QUERIES.items():
        for r in api.prometheus_query(query, prometheus) or []:
            kv_path.setdefault(r["metric"].get("WorkerId", "?"), {})[key] = float(r["value"][1])
    mechanism = {
        key: float(result[0]["value"][1])
        for key, query in MECHANISM_QUERIES.items()
        if (result := api.prometheus_query(query, prometheus))
    }
    return ServingMetrics(latency, nixl, kv_path, mechanism=mechanism)


def _first(obj: Mapping[str, Any] | None, statuses: str) -> list[Mapping[str, Any]] | None:
    """The conditions a controller wrote for the first parent (route) or ancestor (policy)."""
    if obj is None:
        return None
    found = (obj.get("status") or {}).get(statuses) or []
    return found[0].get("conditions") if found else []


def _object_conditions(
    kind: str, namespace: str, name: str, conditions: list[Mapping[str, Any]] | None
) -> ObjectConditions:
    if conditions is None:
        missing = Condition(type="Exists", status="False", reason="NotFound", message="not created")
        return ObjectConditions(kind, namespace, name, (missing,))
    return ObjectConditions(kind, namespace, name, tuple(_condition(c) for c in conditions))


def parse_rayservice(obj: Mapping[str, Any]) -> RayServiceStatus:
    status = obj.get("status") or {}
    conditions = {c.get("type"): _condition(c) for c in status.get("conditions") or []}
    active = status.get("activeServiceStatus") or {}
    pending = status.get("pendingServiceStatus") or {}
    apps = active.get("applicationStatuses") or {}
    return RayServiceStatus(
        service_status=status.get("serviceStatus") or None,
        ready=conditions.get("Ready"),
        upgrade_in_progress=conditions.get("UpgradeInProgress"),
        active_cluster=active.get("rayClusterName") or None,
        pending_cluster=pending.get("rayClusterName") or None,
        applications=tuple(
            AppStatus(
                name=app_name,
                status=app.get("status") or "UNKNOWN",
                message=app.get("message") or "",
                deployments={
                    d: (info or {}).get("status") or "UNKNOWN"
                    for d, info in sorted((app.get("serveDeploymentStatuses") or {}).items())
                },
            )
            for app_name, app in sorted(apps.items())
        ),
    )


def _seconds_between(start: str | None, end: str | None) -> float | None:
    if not start or not end:
        return None
    parse = lambda t: datetime.fromisoformat(t.replace("Z", "+00:00"))  # noqa: E731
    return (parse(end) - parse(start)).total_seconds()


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    minutes, rest = divmod(int(seconds), 60)
    return f"{minutes}m{rest:02d}s" if minutes else f"{rest}s"


def parse_pod(pod: Mapping[str, Any]) -> PodInfo:
    meta, spec, status = pod["metadata"], pod.get("spec") or {}, pod.get("status") or {}
    labels = meta.get("labels") or {}
    conditions = {c.get("type"): c for c in status.get("conditions") or []}
    ready = conditions.get("Ready", {}).get("status") == "True"
    running = [
        (c.get("state") or {}).get("running", {}).get("startedAt")
        for c in status.get("containerStatuses") or []
    ]
    created = meta.get("creationTimestamp")
    return PodInfo(
        started_s=_seconds_between(created, max(running)) if running and all(running) else None,
        ready_s=_seconds_between(created, conditions["Ready"].get("lastTransitionTime")) if ready else None,
        name=meta["name"],
        node_type=labels.get(RAY_NODE_TYPE_LABEL, "?"),
        cluster=labels.get(RAY_CLUSTER_LABEL, ""),
        node=spec.get("nodeName"),
        phase=status.get("phase") or "Unknown",
        ready=ready,
    )


def parse_gpu_node(node: Mapping[str, Any]) -> GpuNodeInfo:
    labels = node["metadata"].get("labels") or {}
    allocatable = (node.get("status") or {}).get("allocatable") or {}
    return GpuNodeInfo(
        name=node["metadata"]["name"],
        instance_type=labels.get(INSTANCE_TYPE_LABEL, "?"),
        zone=labels.get(ZONE_LABEL, "?"),
        gpus=resource_count(allocatable.get(GPU_RESOURCE)),
        efa=resource_count(allocatable.get(EFA_RESOURCE)),
        side=labels.get(GPU_SIDE_LABEL),
    )


def resource_count(quantity: str | int | None) -> int:
    """An extended resource's quantity (always a whole number, `"1"`); absent counts as 0."""
    if quantity is None:
        return 0
    try:
        return int(str(quantity))
    except ValueError:
        return 0


def _condition(raw: Mapping[str, Any]) -> Condition:
    return Condition(
        type=raw.get("type", ""),
        status=raw.get("status", "Unknown"),
        reason=raw.get("reason", ""),
        message=raw.get("message", ""),
    )


def _pod_order(pod: Mapping[str, Any]) -> tuple[int, str]:
    node_type = (pod["metadata"].get("labels") or {}).get(RAY_NODE_TYPE_LABEL)
    return (0 if node_type == "head" else 1, pod["metadata"]["name"])


def _suffix(message: str) -> str:
    return f" ({' '.join(message.split())})" if message else ""


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]
    return [
        "  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
        for row in [header, *rows]
    ]
