"""The stack's traffic, declared once: every way into a pod of a namespace the stack owns (who, to which
pods, on which ports, why, and when the flow exists), and the NetworkPolicies generated from it.

Each `Flow` is one entry of `FLOWS`. A namespace's policies (`policies`) are: no instance metadata, a
default deny of ingress, and one policy per `Flow.policy` name, whose rules are the namespace's flows
that exist in the stack (`When`), in the order declared. No other module writes a NetworkPolicy's peers
or ports (tests/test_traffic.py holds that); the peer and rule shapes are manifests/network_policy.py's.

Where a flow comes from (`Source.origin`):
- `pod`: pods by their labels, in the policy's namespace or another (a team's KubeRay operator or
  Prometheus: their own labels and namespace, read from the cluster);
- `namespace`: every pod of a namespace (the policy's own, or a client team's: `client_namespace`);
- `vpc`: the VPC's ranges, where a load balancer with IP targets and no client-IP preservation sends from;
- `api-server`: the VPC's ranges too: the control plane's calls (admission webhooks, its service proxy)
  come from ENIs in the cluster's subnets.

The kubelet's probes come from the node, which the VPC CNI's agent always allows: no flow lists them.
EFA traffic bypasses the kernel, so NIXL's KV transfers are not flows; their TCP side channel is.

The namespaces, and when the stack owns each (its component creates it and applies `policies` there):
the serving namespace always; KubeRay's where the stack installs the operator; Envoy Gateway's where the
endpoint is on and the stack installs Envoy Gateway; `monitoring` where the stack installs
kube-prometheus-stack; `node-agents` where it installs that or dcgm-exporter. In kube-system the stack
owns no namespace: its controllers there get only `no_instance_metadata`. No chart the stack installs
renders a NetworkPolicy of its own (none turns one on by default, and the stack sets none in their
values), so every NetworkPolicy in the stack's namespaces comes from here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from config import Settings
from manifests import ray_ports
from manifests.charts import KUBERAY_METRICS_PORT
from manifests.endpoint.chart import (
    ENVOY_GATEWAY_CONTROLLER_PODS,
    ENVOY_GATEWAY_WEBHOOK_PORT,
    GATEWAY_NAMESPACE,
)
from manifests.endpoint.gateway import (
    ENVOY_CONTAINER_PORT,
    ENVOY_READINESS_PORT,
    gateway_namespace_of,
    proxy_selector,
)
from manifests.network_policy import (
    BENCH_PODS,
    RAY_HEAD_PODS,
    RAY_PODS,
    RAY_WORKER_PODS,
    SAME_NAMESPACE,
    Port,
    every_pod_of,
    no_instance_metadata,
    pods,
    policy,
    vpc,
)
from manifests.observability.charts import (
    DCGM_EXPORTER_PORT,
    GRAFANA_CONTAINER_PORT,
    MONITORING_NAMESPACE,
    NODE_AGENTS_NAMESPACE,
    OPERATOR_WEBHOOK_PORT,
    PROMETHEUS_PORT,
)
from manifests.observability.monitors import (
    AUTOSCALER_METRICS_PORT,
    DASHBOARD_METRICS_PORT,
    OPERATOR_PODS,
    scraper,
)
from planning.context import ClusterContext
from planning.kv_path import KvPath
from planning.system_pods import ray_autoscaling

READY_CHECK_PODS = {"app.kubernetes.io/component": "serve-ready-check"}
"""The serve readiness Job's pods (manifests/readiness.py)."""
DECODE_HEAL_PODS = {"app.kubernetes.io/component": "decode-heal"}
"""`serving.selfHeal`'s CronJob pods (manifests/decode_heal.py)."""
KUBERAY_OPERATOR_PODS = {"app.kubernetes.io/name": "kuberay-operator"}


@dataclass(frozen=True)
class Stack:
    """What the flows' conditions and peers read: the settings, the cluster (its VPC ranges, which
    add-ons are a team's), and the plan's KV path (None: a namespace whose flows do not read it)."""

    settings: Settings
    context: ClusterContext
    kv_path: KvPath | None = None


@dataclass(frozen=True)
class When:
    """A condition under which a flow, or a port of one, exists."""

    text: str
    holds: Callable[[Stack], bool]


ALWAYS = When("always", lambda s: True)
ENDPOINT = When("endpoint on", lambda s: s.settings.endpoint.enabled)
NO_ENDPOINT = When("endpoint off", lambda s: not s.settings.endpoint.enabled)
OBSERVABILITY = When("observability on", lambda s: s.settings.observability.enabled)
UCX = When(
    "UCX moves the KV cache (the plan's KV path)",
    lambda s: s.kv_path is not None and "UCX" in s.kv_path.backends,
)
DISAGGREGATED = When(
    "serving.mode disaggregated (vLLM's NIXL connector runs)",
    lambda s: s.settings.serving.mode == "disaggregated",
)
RAY_AUTOSCALER = When("Ray's autoscaler runs", lambda s: ray_autoscaling(s.settings))
SELF_HEAL = When("serving.selfHeal", lambda s: s.settings.serving.self_heal)


@dataclass(frozen=True)
class Ports:
    """A flow's ports: TCP, each named as the receiving pods name it (or the range's meaning); a port
    with a `When` exists only where it holds."""

    ports: tuple[Port | tuple[Port, When], ...] = ()

    def of(self, stack: Stack) -> tuple[Port, ...]:
        found = []
        for entry in self.ports:
            port, when = entry if isinstance(entry, tuple) else (entry, ALWAYS)
            if when.holds(stack):
                found.append(port)
        return tuple(found)

    def text(self) -> str:
        def one(p: Port) -> str:
            number = f"{p.port}-{p.end_port}" if p.end_port is not None else str(p.port)
            return f"{number} {p.name}"

        if not self.ports:
            return "all"
        return ", ".join(one(p) if isinstance(p, Port) else f"{one(p[0])} ({p[1].text})" for p in self.ports)


Origin = Literal["pod", "namespace", "vpc", "api-server"]


@dataclass(frozen=True)
class Source:
    """Where a flow comes from; `peers`: the NetworkPolicy peers that stand for it in a stack."""

    key: str
    text: str
    origin: Origin
    peers: Callable[[Stack], tuple[dict[str, Any], ...]]


@dataclass(frozen=True)
class Namespace:
    """A namespace the stack owns."""

    key: str
    text: str
    name: Callable[[Stack], str]


@dataclass(frozen=True)
class Target:
    """The pods of a namespace a flow goes to (`selector` {}: every pod)."""

    key: str
    namespace: Namespace
    text: str
    selector: Callable[[Stack], dict[str, str]]


@dataclass(frozen=True)
class Flow:
    source: Source
    to: Target
    ports: Ports
    why: str
    policy: str
    """The NetworkPolicy that carries it (one per target pods: its rules are the flows naming it)."""
    when: When = ALWAYS
    rule_per_peer: bool = False
    """One rule per peer (the serving namespace's VPC flow: a rule per VPC range) rather than one rule
    with every peer."""


def client_namespace(name: str) -> Source:
    """Every pod of namespace `name` (a client team's): `Flow(client_namespace("tenant-a"), PROXIES,
    Ports((Port("listener", ENVOY_CONTAINER_PORT),)), "tenant-a's clients", "allow-tenant-a")`."""
    return Source(name, f"every pod of `{name}`", "namespace", lambda s: (every_pod_of(name),))


def _kuberay_peers(stack: Stack) -> tuple[dict[str, Any], ...]:
    """The KubeRay operator's pods: the stack's, or an existing cluster's (by its pod template's labels)."""
    settings, context = stack.settings, stack.context
    found = context.addons.found.get("kuberay")
    if found and found.workload and not context.addons.installs("kuberay"):
        labels = found.workload.pod_labels or KUBERAY_OPERATOR_PODS
        return (pods(dict(labels), found.workload.namespace),)
    return (pods(KUBERAY_OPERATOR_PODS, settings.kuberay.namespace),)


def _prometheus_peers(stack: Stack) -> tuple[dict[str, Any], ...]:
    found = scraper(stack.context)
    return (pods(found.pods, found.namespace),)


def _proxies(stack: Stack) -> dict[str, str]:
    return proxy_selector(stack.settings.serving.name, stack.settings.serving.namespace)


# Where flows come from.
RAY = Source("ray", "Ray pods", "pod", lambda s: (pods(RAY_PODS),))
RAY_WORKERS = Source("ray-workers", "Ray's GPU workers", "pod", lambda s: (pods(RAY_WORKER_PODS),))
RAY_HEAD_OF_SERVING = Source(
    "ray-head",
    "the Ray head (serving namespace)",
    "pod",
    lambda s: (pods(RAY_HEAD_PODS, s.settings.serving.namespace),),
)
KUBERAY = Source("kuberay", "KubeRay's operator (the stack's or the team's)", "pod", _kuberay_peers)
READY_CHECK = Source("ready-check", "the serve readiness Job", "pod", lambda s: (pods(READY_CHECK_PODS),))
BENCH = Source("bench", "`ops bench`'s Job", "pod", lambda s: (pods(BENCH_PODS),))
DECODE_HEAL = Source("decode-heal", "decode self-heal's CronJob", "pod", lambda s: (pods(DECODE_HEAL_PODS),))
DECODE_HEAL_OF_SERVING = Source(
    "decode-heal",
    "decode self-heal's CronJob (serving namespace)",
    "pod",
    lambda s: (pods(DECODE_HEAL_PODS, s.settings.serving.namespace),),
)
BENCH_OF_SERVING = Source(
    "bench",
    "`ops bench`'s Job (serving namespace)",
    "pod",
    lambda s: (pods(BENCH_PODS, s.settings.serving.namespace),),
)
GATEWAY = Source(
    "gateway",
    "Envoy's proxies (the gateway's namespace)",
    "pod",
    lambda s: (pods(_proxies(s), gateway_namespace_of(s.context)),),
)
PROMETHEUS = Source("prometheus", "Prometheus (the stack's or the team's)", "pod", _prometheus_peers)
SAME = Source("within", "every pod of the namespace", "namespace", lambda s: (SAME_NAMESPACE,))
VPC = Source("vpc", "the VPC's ranges", "vpc", lambda s: vpc(s.context.vpc_cidrs))
API_SERVER = Source(
    "api-server", "the API server (the VPC's ranges)", "api-server", lambda s: vpc(s.context.vpc_cidrs)
)

# The namespaces the stack owns.
SERVING = Namespace("serving", "serving (`inference`)", lambda s: s.settings.serving.namespace)
KUBERAY_NS = Namespace("kuberay", "KubeRay's (`kuberay-operator`)", lambda s: s.settings.kuberay.namespace)
GATEWAY_NS = Namespace("gateway", f"Envoy Gateway's (`{GATEWAY_NAMESPACE}`)", lambda s: GATEWAY_NAMESPACE)
MONITORING = Namespace("monitoring", f"`{MONITORING_NAMESPACE}`", lambda s: MONITORING_NAMESPACE)
NODE_AGENTS = Namespace("node-agents", f"`{NODE_AGENTS_NAMESPACE}`", lambda s: NODE_AGENTS_NAMESPACE)
NAMESPACES = (SERVING, KUBERAY_NS, GATEWAY_NS, MONITORING, NODE_AGENTS)

# Where flows go.
HEAD = Target("head", SERVING, "the Ray head", lambda s: dict(RAY_HEAD_PODS))
WORKERS = Target("workers", SERVING, "the Ray workers", lambda s: dict(RAY_WORKER_PODS))
KUBERAY_PODS = Target("operator", KUBERAY_NS, "every pod", lambda s: {})
GATEWAY_PODS = Target("gateway", GATEWAY_NS, "every pod", lambda s: {})
PROXIES = Target("proxies", GATEWAY_NS, "Envoy's proxies", _proxies)
GATEWAY_CONTROLLER = Target(
    "controller", GATEWAY_NS, "Envoy Gateway's controller", lambda s: dict(ENVOY_GATEWAY_CONTROLLER_PODS)
)
MONITORING_PODS = Target("monitoring", MONITORING, "every pod", lambda s: {})
PROMETHEUS_OPERATOR = Target("operator", MONITORING, "the Prometheus operator", lambda s: dict(OPERATOR_PODS))
NODE_AGENT_PODS = Target("node-agents", NODE_AGENTS, "every pod (dcgm-exporter)", lambda s: {})


_HEAD = ray_ports.container_ports(head=True)
_WORKER = ray_ports.container_ports(head=False)
_NODE = ("node-manager", "object-manager", "runtime-env", "agent-grpc", "agent-http")
_WORKER_RANGE = Port("worker-ports", ray_ports.MIN_WORKER_PORT, ray_ports.MAX_WORKER_PORT)
_DASHBOARD_METRICS = Port(*DASHBOARD_METRICS_PORT)
_AUTOSCALER_METRICS = (Port(*AUTOSCALER_METRICS_PORT), RAY_AUTOSCALER)
SERVE = "Envoy's proxies to Serve's HTTP proxy (KubeRay's serve Service selects the head and the workers)"
NO_GATEWAY = "the API server's service proxy (`ops verify`; no gateway)"


def _head(*names: str) -> tuple[Port, ...]:
    return tuple(Port(n, _HEAD[n]) for n in names)


def _worker(*names: str) -> tuple[Port, ...]:
    return tuple(Port(n, _WORKER[n]) for n in names)


FLOWS: tuple[Flow, ...] = (
    # The serving namespace: Ray's own traffic on the ports manifests/ray_ports.py pins.
    Flow(
        RAY,
        HEAD,
        Ports((*_head("gcs-server", "dashboard", *_NODE), _WORKER_RANGE)),
        "the GCS, the dashboard, the raylet, object transfers, the agents, actors (Serve's controller "
        "and replicas)",
        "ray-head-ingress",
    ),
    Flow(
        RAY,
        WORKERS,
        Ports((*_worker(*_NODE), _WORKER_RANGE)),
        "the raylet, object transfers, the agents, actors (the replicas)",
        "ray-workers-ingress",
    ),
    Flow(
        RAY_WORKERS,
        WORKERS,
        Ports(_worker("nixl-side")),
        "vLLM's NIXL handshake between prefill and decode (the KV cache itself goes over EFA)",
        "ray-workers-ingress",
        DISAGGREGATED,
    ),
    Flow(
        RAY_WORKERS,
        WORKERS,
        Ports((Port("ucx-tcp", ray_ports.UCX_TCP.first, ray_ports.UCX_TCP.last),)),
        "the KV cache over UCX's tcp transport (UCX_TCP_PORT_RANGE)",
        "ray-workers-ingress",
        UCX,
    ),
    Flow(
        KUBERAY,
        HEAD,
        Ports(_head("dashboard", "serve")),
        "KubeRay submits the serve config to the dashboard and checks the head's Serve proxy",
        "ray-head-ingress",
    ),
    Flow(
        READY_CHECK,
        HEAD,
        Ports(_head("dashboard")),
        "the serve readiness Job asks the dashboard which applications run",
        "ray-head-ingress",
    ),
    Flow(
        DECODE_HEAL,
        HEAD,
        Ports(_head("dashboard")),
        "decode self-heal restarts a decode replica through Ray's Jobs API",
        "ray-head-ingress",
        SELF_HEAL,
    ),
    Flow(GATEWAY, HEAD, Ports(_head("serve")), SERVE, "ray-head-ingress", ENDPOINT),
    Flow(GATEWAY, WORKERS, Ports(_worker("serve")), SERVE, "ray-workers-ingress", ENDPOINT),
    Flow(VPC, HEAD, Ports(_head("serve")), NO_GATEWAY, "ray-head-ingress", NO_ENDPOINT, rule_per_peer=True),
    Flow(
        VPC,
        WORKERS,
        Ports(_worker("serve")),
        NO_GATEWAY,
        "ray-workers-ingress",
        NO_ENDPOINT,
        rule_per_peer=True,
    ),
    Flow(BENCH, HEAD, Ports(_head("serve")), "ops bench's load test", "ray-head-ingress", NO_ENDPOINT),
    Flow(
        BENCH, WORKERS, Ports(_worker("serve")), "ops bench's load test", "ray-workers-ingress", NO_ENDPOINT
    ),
    Flow(
        PROMETHEUS,
        HEAD,
        Ports((*_head("metrics"), _AUTOSCALER_METRICS, _DASHBOARD_METRICS)),
        "metrics",
        "ray-head-ingress",
        OBSERVABILITY,
    ),
    Flow(PROMETHEUS, WORKERS, Ports(_worker("metrics")), "metrics", "ray-workers-ingress", OBSERVABILITY),
    # KubeRay's operator (no admission webhook at 1.7.0).
    Flow(
        PROMETHEUS,
        KUBERAY_PODS,
        Ports((Port("metrics", KUBERAY_METRICS_PORT),)),
        "metrics",
        "allow-prometheus",
        OBSERVABILITY,
    ),
    # Envoy Gateway: `endpoint.sourceRanges` is enforced on the NLB's security group, not here.
    Flow(
        SAME,
        GATEWAY_PODS,
        Ports(),
        "the proxies' xDS stream to the controller, certgen",
        "allow-within",
    ),
    Flow(
        VPC,
        PROXIES,
        Ports((Port("listener", ENVOY_CONTAINER_PORT), Port("readiness", ENVOY_READINESS_PORT))),
        "the NLB's traffic and health checks; ops verify through the API server's proxy",
        "allow-load-balancer",
    ),
    Flow(
        BENCH_OF_SERVING,
        PROXIES,
        Ports((Port("listener", ENVOY_CONTAINER_PORT),)),
        "ops bench's load test, from the serving namespace",
        "allow-bench",
    ),
    Flow(
        API_SERVER,
        GATEWAY_CONTROLLER,
        Ports((Port("webhook", ENVOY_GATEWAY_WEBHOOK_PORT),)),
        "admission calls to the controller's webhook, and no other pod",
        "allow-api-server",
    ),
    # monitoring: `ops status` and `ops dashboards` port-forward, which enters from the kubelet.
    Flow(
        SAME,
        MONITORING_PODS,
        Ports(),
        "Grafana, Prometheus, Alertmanager, the operator",
        "allow-within",
    ),
    Flow(
        API_SERVER,
        PROMETHEUS_OPERATOR,
        Ports((Port("webhook", OPERATOR_WEBHOOK_PORT),)),
        "admission calls to the operator's webhook, and no other pod",
        "allow-api-server-webhook",
    ),
    Flow(
        RAY_HEAD_OF_SERVING,
        MONITORING_PODS,
        Ports((Port("prometheus", PROMETHEUS_PORT), Port("grafana", GRAFANA_CONTAINER_PORT))),
        "the Ray dashboard's metrics tabs",
        "allow-ray-dashboard",
    ),
    Flow(
        DECODE_HEAL_OF_SERVING,
        MONITORING_PODS,
        Ports((Port("prometheus", PROMETHEUS_PORT),)),
        "decode self-heal reads the KV transfers' figures",
        "allow-decode-heal",
        SELF_HEAL,
    ),
    # node-agents: node-exporter runs on the host network, where no policy applies.
    Flow(
        PROMETHEUS,
        NODE_AGENT_PODS,
        Ports((Port("metrics", DCGM_EXPORTER_PORT),)),
        "GPU metrics",
        "allow-prometheus",
    ),
)


@dataclass(frozen=True)
class Resolved:
    """A flow as it is in one stack: its peers and ports."""

    flow: Flow
    peers: tuple[dict[str, Any], ...]
    ports: tuple[Port, ...]

    def rules(self) -> list[dict[str, Any]]:
        groups = [(peer,) for peer in self.peers] if self.flow.rule_per_peer else [self.peers]
        return [
            {"from": list(group), **({"ports": [p.rule() for p in self.ports]} if self.ports else {})}
            for group in groups
        ]


def flows(namespace: Namespace, stack: Stack) -> list[Resolved]:
    """The flows into `namespace` that exist in `stack`, in the order declared."""
    return [
        Resolved(f, f.source.peers(stack), f.ports.of(stack))
        for f in FLOWS
        if f.to.namespace is namespace and f.when.holds(stack)
    ]


def policies(namespace: Namespace, stack: Stack) -> list[dict[str, Any]]:
    """`namespace`'s NetworkPolicies: no instance metadata, no ingress but its flows, one policy per
    `Flow.policy`, so `kubectl get networkpolicy` reads like the list."""
    name = namespace.name(stack)
    generated = [
        no_instance_metadata(name),
        policy("default-deny-ingress", name, {"podSelector": {}, "policyTypes": ["Ingress"]}),
    ]
    by_policy: dict[str, list[Resolved]] = {}
    for resolved in flows(namespace, stack):
        by_policy.setdefault(resolved.flow.policy, []).append(resolved)
    for policy_name, members in by_policy.items():
        selector = members[0].flow.to.selector(stack)
        assert all(m.flow.to.selector(stack) == selector for m in members), policy_name
        generated.append(
            policy(
                policy_name,
                name,
                {
                    "podSelector": {"matchLabels": dict(selector)} if selector else {},
                    "policyTypes": ["Ingress"],
                    "ingress": [rule for m in members for rule in m.rules()],
                },
            )
        )
    return generated


def table() -> str:
    """The flows as a Markdown table, for docs/design.md (`make docs`)."""
    lines = [
        "| Into | From | Origin | To | Ports | When | Why |",
        "|---|---|---|---|---|---|---|",
    ]
    for f in FLOWS:
        cells = (
            f.to.namespace.text,
            f.source.text,
            f.source.origin,
            f.to.text,
            f.ports.text(),
            f.when.text,
            f.why,
        )
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)
