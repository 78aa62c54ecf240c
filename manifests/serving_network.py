"""The serving namespace's NetworkPolicies: no instance metadata, and no ingress but the paths
`serving_paths` lists: Ray's own traffic between its pods on the ports manifests/ray_ports.py pins,
the NIXL side channel between GPU workers (and UCX's tcp ports, when UCX moves the KV cache), the
gateway to Serve's HTTP port, KubeRay's operator to the dashboard and the head's proxy health check,
the serve readiness Job to the dashboard, and Prometheus to the metrics ports. The kubelet's probes
(KubeRay's HTTP liveness probe on the dashboard agent port) come from the node, which the agent always
allows.

EFA traffic bypasses the kernel's network stack (libfabric talks to the device), so NIXL's KV
transfers are not seen by any policy: only its TCP side channel is. UCX's tcp transport is TCP like any
other, so where UCX moves the KV cache its ports are pinned and allowed between the GPU workers.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from config import Settings
from manifests import ray_ports
from manifests.endpoint import gateway_namespace_of, proxy_selector
from manifests.network_policy import (
    BENCH_PODS,
    RAY_HEAD_PODS,
    RAY_PODS,
    RAY_WORKER_PODS,
    Port,
    no_instance_metadata,
    pods,
    policy,
    vpc,
)
from manifests.observability import head_metrics_ports, scraper
from planning.context import ClusterContext
from planning.kv_path import KvPath

READY_CHECK = {"app.kubernetes.io/component": "serve-ready-check"}
KUBERAY_OPERATOR = {"app.kubernetes.io/name": "kuberay-operator"}

Peer = Literal["ray", "ray-workers", "gateway", "kuberay", "ready-check", "prometheus", "vpc", "bench"]


@dataclass(frozen=True)
class IngressPath:
    """One allowed way into a Ray pod: who, to which pods, on which ports."""

    peer: Peer
    to: Literal["head", "workers"]
    ports: tuple[Port, ...]
    why: str
    peer_selector: dict[str, Any] = field(default_factory=dict)

    def rule(self) -> dict[str, Any]:
        return {"from": [self.peer_selector], "ports": [p.rule() for p in self.ports]}


def _ports(names: dict[str, int], *wanted: str) -> tuple[Port, ...]:
    return tuple(Port(n, names[n]) for n in wanted)


def kuberay_peer(settings: Settings, context: ClusterContext) -> dict[str, Any]:
    """The KubeRay operator's pods: the stack's, or an existing cluster's (by its pod template's labels)."""
    found = context.addons.found.get("kuberay")
    if found and found.workload and not context.addons.installs("kuberay"):
        labels = found.workload.pod_labels or {"app.kubernetes.io/name": "kuberay-operator"}
        return pods(dict(labels), found.workload.namespace)
    return pods(KUBERAY_OPERATOR, settings.kuberay.namespace)


def serving_paths(settings: Settings, kv_path: KvPath, context: ClusterContext) -> list[IngressPath]:
    """Every allowed path into the serving namespace's Ray pods (`kv_path`: the plan's, which says
    whether UCX moves the KV cache between the GPU workers; `context`: the cluster's VPC ranges and
    which KubeRay, gateway and Prometheus reach the pods)."""
    head = {**ray_ports.container_ports(head=True), **head_metrics_ports(settings)}
    worker = ray_ports.container_ports(head=False)
    workers_range = Port("worker-ports", ray_ports.MIN_WORKER_PORT, ray_ports.MAX_WORKER_PORT)
    node = ("node-manager", "object-manager", "runtime-env", "agent-grpc", "agent-http")
    ray = pods(RAY_PODS)
    paths = [
        IngressPath(
            "ray",
            "head",
            (*_ports(head, "gcs-server", "dashboard", *node), workers_range),
            "the GCS, the dashboard, the raylet, object transfers, the agents, actors (Serve's "
            "controller and replicas)",
            ray,
        ),
        IngressPath(
            "ray",
            "workers",
            (*_ports(worker, *node), workers_range),
            "the raylet, object transfers, the agents, actors (the replicas)",
            ray,
        ),
        IngressPath(
            "ray-workers",
            "workers",
            _ports(worker, "nixl-side"),
            "vLLM's NIXL handshake between prefill and decode (the KV cache itself goes over EFA)",
            pods(RAY_WORKER_PODS),
        ),
        *(
            [
                IngressPath(
                    "ray-workers",
                    "workers",
                    (Port("ucx-tcp", ray_ports.UCX_TCP.first, ray_ports.UCX_TCP.last),),
                    "the KV cache over UCX's tcp transport (UCX_TCP_PORT_RANGE)",
                    pods(RAY_WORKER_PODS),
                )
            ]
            if "UCX" in kv_path.backends
            else []
        ),
        IngressPath(
            "kuberay",
            "head",
            _ports(head, "dashboard", "serve"),
            "KubeRay submits the serve config to the dashboard and checks the head's Serve proxy",
            kuberay_peer(settings, context),
        ),
        IngressPath(
            "ready-check",
            "head",
            _ports(head, "dashboard"),
            "the serve readiness Job asks the dashboard which applications run",
            pods(READY_CHECK),
        ),
    ]
    if settings.endpoint.enabled:
        # KubeRay's serve Service selects the head and the workers: Serve runs a proxy on every node.
        gateway = pods(
            proxy_selector(settings.serving.name, settings.serving.namespace), gateway_namespace_of(context)
        )
        why = "Envoy's proxies to Serve's HTTP proxy"
        paths += [
            IngressPath("gateway", "head", _ports(head, "serve"), why, gateway),
            IngressPath("gateway", "workers", _ports(worker, "serve"), why, gateway),
        ]
    else:
        # Without the gateway the API server's service proxy reaches Serve (`ops verify`); it comes
        # from the control plane's ENIs in the cluster's subnets, so the VPC's range, pods included.
        why = "the API server's service proxy (no gateway)"
        bench = pods(BENCH_PODS)
        for peer in vpc(context.vpc_cidrs):
            paths += [
                IngressPath("vpc", "head", _ports(head, "serve"), why, peer),
                IngressPath("vpc", "workers", _ports(worker, "serve"), why, peer),
            ]
        paths += [
            IngressPath("bench", "head", _ports(head, "serve"), "ops bench's load test", bench),
            IngressPath("bench", "workers", _ports(worker, "serve"), "ops bench's load test", bench),
        ]
    if settings.observability.enabled:
        scraped_on_head = ("metrics", *(n for n in head_metrics_ports(settings)))
        prometheus = scraper(context).peer()
        paths += [
            IngressPath("prometheus", "head", _ports(head, *scraped_on_head), "metrics", prometheus),
            IngressPath("prometheus", "workers", _ports(worker, "metrics"), "metrics", prometheus),
        ]
    return paths


def serving_policies(settings: Settings, kv_path: KvPath, context: ClusterContext) -> list[dict[str, Any]]:
    """The serving namespace: no IMDS, no ingress but the listed paths."""
    namespace = settings.serving.namespace
    paths = serving_paths(settings, kv_path, context)
    policies = [
        no_instance_metadata(namespace),
        policy("default-deny-ingress", namespace, {"podSelector": {}, "policyTypes": ["Ingress"]}),
    ]
    targets: tuple[tuple[Literal["head", "workers"], dict[str, str]], ...] = (
        ("head", RAY_HEAD_PODS),
        ("workers", RAY_WORKER_PODS),
    )
    for to, selector in targets:
        policies.append(
            policy(
                f"ray-{to}-ingress",
                namespace,
                {
                    "podSelector": {"matchLabels": dict(selector)},
                    "policyTypes": ["Ingress"],
                    "ingress": [p.rule() for p in paths if p.to == to],
                },
            )
        )
    return policies
