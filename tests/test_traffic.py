"""The stack's traffic (issue 49): one module declares every flow, and no other writes a NetworkPolicy's
peers or ports; the NetworkPolicies of every stack file are what it generates; and the reachability
matrix, in the spirit of Kubernetes' NetworkPolicy e2e tests: the expected (from, to, port) matrix,
allowed and denied pairs alike, held against the policies each stack file renders."""

from __future__ import annotations

import ast
import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import pytest

from manifests import traffic
from manifests.network_policy import IMDS_V4, RAY_HEAD_PODS, RAY_WORKER_PODS
from manifests.observability.monitors import scraper
from planning import plan_stack
from planning.system_pods import ray_autoscaling
from tests.fakes.kube import fixture_json
from tests.fakes.pulumi import ROOT, STACKS, StackRun, plan_of, run_stack, stack_settings

POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"

# --- one module writes the peers and ports ---------------------------------------------------------

PEER_AND_PORT_KEYS = {"ipBlock", "podSelector", "policyTypes", "endPort"}
"""A NetworkPolicy's peer and port fields (namespaceSelector is also a monitor's field, so the import
rule below covers it: only manifests/network_policy.py's `pods` writes one for a policy)."""
SHAPES = "manifests/network_policy.py"
DECLARATION = "manifests/traffic.py"
OTHERS_MAY_IMPORT = {"no_instance_metadata", "IMDS_V4", "IMDS_V6"}
"""What another module may take from manifests/network_policy.py: the IMDS policy (kube-system's
controllers) and pod labels (`*_PODS`, `*_APP`), never a peer, a port or a policy builder."""
READERS = {"policy/rules.py"}
"""The policy pack reads policies (it checks every namespace has a default deny); it writes none."""


def product_modules() -> list[str]:
    skip = {"tests", ".venv", ".cache", "node_modules", ".ci"}
    # Each top-level folder walked but the skipped ones (.venv alone holds some 20,000 modules).
    tops = [p for p in ROOT.iterdir() if p.name not in skip]
    found = [p for top in tops for p in ([top] if top.is_file() else top.rglob("*.py")) if p.suffix == ".py"]
    return sorted(
        str(p.relative_to(ROOT))
        for p in found
        if not skip & set(p.relative_to(ROOT).parts) and str(p.relative_to(ROOT)) not in {SHAPES, DECLARATION}
    )


def writes_peers_or_ports(source: str) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Constant) and node.value in PEER_AND_PORT_KEYS:
            found.append(f"line {node.lineno}: {node.value!r}")
        if isinstance(node, ast.ImportFrom) and node.module == "manifests.network_policy":
            for alias in node.names:
                name = alias.name
                if name not in OTHERS_MAY_IMPORT and not name.endswith(("_PODS", "_APP")):
                    found.append(f"line {node.lineno}: imports {name}")
        if (
            isinstance(node, ast.ImportFrom)
            and node.module == "manifests"
            and any(a.name == "network_policy" for a in node.names)
        ):
            found.append(f"line {node.lineno}: imports the module")
        if isinstance(node, ast.Constant) and node.value == "NetworkPolicy":
            found.append(f"line {node.lineno}: a NetworkPolicy object")
    return found


def test_no_module_but_the_traffic_declaration_writes_a_network_policys_peers_or_ports():
    modules = product_modules()
    assert "manifests/endpoint/gateway.py" in modules and "__main__.py" in modules  # the scan sees them
    offenders = {
        m: found
        for m in modules
        if m not in READERS and (found := writes_peers_or_ports((ROOT / m).read_text()))
    }
    assert offenders == {}


def test_the_scan_catches_a_peer_written_elsewhere():
    assert writes_peers_or_ports('rule = {"from": [{"ipBlock": {"cidr": cidr}}]}')
    assert writes_peers_or_ports("from manifests.network_policy import Port, pods")
    assert not writes_peers_or_ports("from manifests.network_policy import BENCH_PODS, no_instance_metadata")


def stack_of(stack: str, **sections: dict[str, Any]) -> traffic.Stack:
    s = stack_settings(stack, **sections)
    plan = replace(plan_stack(s, stack=stack), context=plan_of(stack).context)
    return traffic.Stack(s, plan.cluster_context, plan.kv_path)


@pytest.mark.parametrize("stack", STACKS)
def test_every_network_policy_with_ingress_rules_is_generated_from_the_flows(stack):
    run = run_stack(stack=stack)
    rendered = {
        (r.inputs["metadata"]["namespace"], r.inputs["metadata"]["name"]): r.inputs["spec"]
        for r in run.of_type(POLICY)
    }
    owned = {r.inputs["metadata"]["name"] for r in run.of_type("kubernetes:core/v1:Namespace")}
    where = stack_of(stack)
    generated = {
        (p["metadata"]["namespace"], p["metadata"]["name"]): p["spec"]
        for namespace in traffic.NAMESPACES
        if namespace.name(where) in owned
        for p in traffic.policies(namespace, where)
    }
    # Everything else is kube-system's controllers' IMDS policy, which has no ingress.
    assert {k: v for k, v in rendered.items() if k[0] != "kube-system"} == generated
    assert all("ingress" not in v for k, v in rendered.items() if k[0] == "kube-system")


def network_policy_keys(values: Any, path: str = "") -> list[str]:
    """Key paths in Helm values that would switch on or shape a chart's own NetworkPolicy: a key
    (`networkPolicy.enabled`) or a value (KubeRay's `featureGates: [{name: RayClusterNetworkPolicy}]`,
    under which the operator writes policies into the serving namespace) naming one."""
    found = []
    if isinstance(values, str) and "networkpolic" in values.lower():
        found.append(path)
    if isinstance(values, dict):
        for key, value in values.items():
            where = f"{path}.{key}" if path else str(key)
            if "networkpolic" in str(key).lower():
                found.append(where)
            found += network_policy_keys(value, where)
    elif isinstance(values, list):
        for i, value in enumerate(values):
            found += network_policy_keys(value, f"{path}[{i}]")
    return found


@pytest.mark.parametrize("stack", STACKS)
def test_no_chart_is_handed_a_network_policy_of_its_own(stack):
    """The charts' values carry no NetworkPolicy setting: a chart's policy would be a flow declared
    outside manifests/traffic.py (add it there, and pass the chart what the flows generate)."""
    releases = run_stack(stack=stack).of_type("kubernetes:helm.sh/v3:Release")
    assert releases
    assert {r.inputs["chart"]: network_policy_keys(r.inputs.get("values", {})) for r in releases} == {
        r.inputs["chart"]: [] for r in releases
    }
    assert network_policy_keys({"grafana": {"networkPolicy": {"enabled": True}}}) == ["grafana.networkPolicy"]
    gate = {"featureGates": [{"name": "RayClusterNetworkPolicy", "enabled": True}]}
    assert network_policy_keys(gate) == ["featureGates[0].name"]


def test_each_flow_names_its_reason_and_origin():
    for flow in traffic.FLOWS:
        assert flow.why and flow.source.origin in ("pod", "namespace", "vpc", "api-server"), flow
    keys = [(f.source.key, f.to.namespace.key, f.to.key, f.policy, f.when.text) for f in traffic.FLOWS]
    assert len(keys) == len(set(keys))  # one entry per flow


# --- the reachability matrix ------------------------------------------------------------------------


@dataclass(frozen=True)
class Actor:
    """A pod (namespace and labels) or an address outside the pod network (namespace None)."""

    name: str
    namespace: str | None
    labels: dict[str, str] = field(default_factory=dict)
    ip: str = ""


PROBED_PORTS = (
    *(6379, 8265, 6380, 6381, 6382, 6383, 52365, 10001, 10002, 15000, 19999, 20000, 20100, 20199, 20200),
    *(8000, 8080, 44217, 44227, 9090, 3000, 10250, 9400, 10080, 19003, 9443, 22, 443),
)
RAY_NODE = (6380, 6381, 6382, 6383, 52365, *(p for p in PROBED_PORTS if 10002 <= p <= 19999))
"""The raylet, object manager, runtime env and agent ports, and every probed port of Ray's worker range
(10002-19999: its ends, and the other pods' ports that fall in it)."""


def labels_of_kuberay_pods() -> tuple[dict[str, str], dict[str, str]]:
    """A head's and a worker's labels as KubeRay 1.7 sets them (a RayService's pods, recorded)."""
    pods = fixture_json("pods.json")["items"]
    head = next(p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "head")
    worker = next(p for p in pods if p["metadata"]["labels"].get("ray.io/node-type") == "worker")
    return head["metadata"]["labels"], worker["metadata"]["labels"]


def actors(where: traffic.Stack, run: StackRun | None) -> list[Actor]:
    s, context = where.settings, where.context
    serving = s.serving.namespace
    head, worker = labels_of_kuberay_pods()
    assert RAY_HEAD_PODS.items() <= head.items() and RAY_WORKER_PODS.items() <= worker.items()
    prometheus = scraper(context)
    found = context.addons.found.get("kuberay")
    kuberay = (
        (found.workload.namespace, dict(found.workload.pod_labels))
        if found and found.workload and not context.addons.installs("kuberay")
        else (
            s.kuberay.namespace,
            {"app.kubernetes.io/name": "kuberay-operator", "app.kubernetes.io/instance": "kuberay"},
        )
    )
    proxies = traffic.PROXIES.selector(where)
    if run is not None and s.endpoint.enabled:  # the pods the NLB's Service sends to
        (lb,) = [
            r
            for r in run.of_type("kubernetes:core/v1:Service")
            if r.inputs["spec"].get("type") == "LoadBalancer"
        ]
        proxies = lb.inputs["spec"]["selector"]
    pods = [
        Actor("head", serving, head),
        Actor("worker", serving, worker),
        Actor("ready-check", serving, {"app.kubernetes.io/component": "serve-ready-check", "job-name": "x"}),
        Actor(
            "bench",
            serving,
            {"app.kubernetes.io/component": "bench", "app.kubernetes.io/part-of": "ray-llm-eks"},
        ),
        Actor("model-copy", serving, {"job-name": "model-copy"}),
        Actor("kuberay", *kuberay),
        Actor("prometheus", prometheus.namespace, {**prometheus.pods, "prometheus": "kps"}),
        Actor("grafana", "monitoring", {"app.kubernetes.io/name": "grafana"}),
        Actor(
            "prometheus-operator", "monitoring", {"app": "kube-prometheus-stack-operator", "release": "kps"}
        ),
        Actor("dcgm-exporter", "node-agents", {"app.kubernetes.io/name": "dcgm-exporter"}),
        Actor("envoy", traffic.GATEWAY_NS.name(where), dict(proxies)),
        Actor("envoy-gateway", traffic.GATEWAY_NS.name(where), {"control-plane": "envoy-gateway"}),
        Actor("tenant", "tenant-a", {"app": "client"}),
    ]
    network = ipaddress.ip_network(context.vpc_cidrs[0])
    pods = [replace(p, ip=str(network[10 + i])) for i, p in enumerate(pods)]  # the VPC CNI: VPC addresses
    return [
        *pods,
        Actor("vpc", None, ip=str(network[5])),  # an ENI of the cluster's subnets: the NLB, the API server
        Actor("internet", None, ip="203.0.113.7"),
    ]


def expected(where: traffic.Stack, cast: Sequence[Actor], owned: set[str]) -> set[tuple[str, str, int]]:
    """What may reach what, stated apart from the flows: every pair not here must be denied."""
    s = where.settings
    by_name = {a.name: a for a in cast}
    pods = [a.name for a in cast if a.namespace is not None]
    # Every pod has a VPC address; whether an ipBlock matches pods is the implementation's choice, and
    # the matrix takes the wider reading (it does), so a VPC-range rule admits every pod.
    in_vpc = [*pods, "vpc"]
    allowed: set[tuple[str, str, int]] = set()

    def allow(froms: Iterable[str], to: str, ports: Iterable[int]) -> None:
        allowed.update((f, to, p) for f in froms for p in ports)

    def within(namespace: str) -> None:
        members = [a.name for a in cast if a.namespace == namespace]
        for to in members:
            allow(members, to, PROBED_PORTS)

    allow(["head", "worker"], "head", (6379, 8265, *RAY_NODE))
    allow(["head", "worker"], "worker", RAY_NODE)
    if s.serving.mode == "disaggregated":  # vLLM's NIXL handshake; aggregated replicas move no KV cache
        allow(["worker"], "worker", [20000])
    if where.kv_path is not None and "UCX" in where.kv_path.backends:
        allow(["worker"], "worker", [20100, 20199])
    allow(["kuberay"], "head", [8265, 8000])
    allow(["ready-check"], "head", [8265])
    for ray in ("head", "worker"):
        allow(["envoy"] if s.endpoint.enabled else [*in_vpc, "bench"], ray, [8000])
    if s.observability.enabled:
        allow(["prometheus"], "head", [8080, 44227, *([44217] if ray_autoscaling(s) else [])])
        allow(["prometheus"], "worker", [8080])
        allow(["prometheus"], "kuberay", [8080])
    within("monitoring")
    allow(in_vpc, "prometheus-operator", [10250])
    for monitoring in ("prometheus", "grafana", "prometheus-operator"):
        allow(["head"], monitoring, [9090, 3000])
    allow(["prometheus"], "dcgm-exporter", [9400])
    within(traffic.GATEWAY_NS.name(where))
    allow(in_vpc, "envoy", [10080, 19003])
    allow(["bench"], "envoy", [10080])
    allow(in_vpc, "envoy-gateway", [9443])
    # Only the namespaces the stack owns are the stack's to govern (a team's are as its team made them).
    return {(f, t, p) for f, t, p in allowed if by_name[t].namespace in owned}


def _selects(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    assert set(selector) <= {"matchLabels"}, selector
    return selector.get("matchLabels", {}).items() <= labels.items()


def _peer_matches(peer: dict[str, Any], source: Actor, namespace: str) -> bool:
    if "ipBlock" in peer:
        block = peer["ipBlock"]
        ip = ipaddress.ip_address(source.ip)
        inside = ip.version == ipaddress.ip_network(block["cidr"]).version and ip in ipaddress.ip_network(
            block["cidr"]
        )
        return inside and not any(
            ip in ipaddress.ip_network(e)
            for e in block.get("except", [])
            if ip.version == ipaddress.ip_network(e).version
        )
    if source.namespace is None:
        return False
    if "namespaceSelector" in peer:
        in_namespace = _selects(peer["namespaceSelector"], {"kubernetes.io/metadata.name": source.namespace})
    else:
        in_namespace = source.namespace == namespace
    return in_namespace and _selects(peer.get("podSelector", {}), source.labels)


def _port_matches(ports: list[dict[str, Any]] | None, port: int) -> bool:
    if not ports:
        return True
    for p in ports:
        # Numbers, never a named port (the mocks hand them back as floats).
        assert p["protocol"] == "TCP" and isinstance(p["port"], int | float), p
        if p["port"] <= port <= p.get("endPort", p["port"]):
            return True
    return False


def reachable(policies: Sequence[dict[str, Any]], source: Actor, target: Actor, port: int) -> bool:
    """Kubernetes' NetworkPolicy semantics, ingress side: a pod no Ingress policy selects takes
    everything; one that some do takes what any of their rules allows (peers and ports both match)."""
    selecting = [
        p
        for p in policies
        if p["metadata"]["namespace"] == target.namespace
        and "Ingress" in p["spec"]["policyTypes"]
        and _selects(p["spec"]["podSelector"], target.labels)
    ]
    if not selecting:
        return True
    return any(
        any(_peer_matches(peer, source, target.namespace or "") for peer in rule.get("from", []))
        and _port_matches(rule.get("ports"), port)
        for p in selecting
        for rule in p["spec"].get("ingress", [])
    )


def egress_allowed(policies: Sequence[dict[str, Any]], source: Actor, ip: str) -> bool:
    """The egress side, for an address (IMDS)."""
    selecting = [
        p
        for p in policies
        if p["metadata"]["namespace"] == source.namespace
        and "Egress" in p["spec"]["policyTypes"]
        and _selects(p["spec"]["podSelector"], source.labels)
    ]
    address = Actor("address", None, ip=ip)
    return not selecting or any(
        _peer_matches(peer, address, source.namespace or "")
        for p in selecting
        for rule in p["spec"].get("egress", [])
        for peer in rule.get("to", [])
    )


def check_matrix(
    where: traffic.Stack, policies: Sequence[dict[str, Any]], owned: set[str], run: StackRun | None
) -> None:
    cast = actors(where, run)
    want = expected(where, cast, owned)
    wrong = []
    for target in cast:
        if target.namespace not in owned:
            continue
        for source in cast:
            for port in PROBED_PORTS:
                got = reachable(policies, source, target, port)
                if got != ((source.name, target.name, port) in want):
                    wrong.append(f"{source.name} -> {target.name}:{port} {'allowed' if got else 'denied'}")
    assert wrong == [], f"{len(wrong)} pairs differ from the expected matrix: {wrong[:20]}"
    assert any(t in owned for t in ("monitoring", "node-agents", where.settings.serving.namespace))
    for pod in cast:
        if pod.namespace in owned:  # no pod of the stack's namespaces reaches the instance metadata
            assert not egress_allowed(policies, pod, IMDS_V4.split("/")[0]), pod.name
            assert egress_allowed(policies, pod, "169.254.170.23"), pod.name  # EKS Pod Identity's agent


@pytest.mark.parametrize("stack", STACKS)
def test_the_reachability_matrix_of_every_stack_file(stack):
    run = run_stack(stack=stack)
    policies = [
        dict(r.inputs, apiVersion="networking.k8s.io/v1", kind="NetworkPolicy") for r in run.of_type(POLICY)
    ]
    owned = {r.inputs["metadata"]["name"] for r in run.of_type("kubernetes:core/v1:Namespace")}
    check_matrix(stack_of(stack), policies, owned, run)


VARIANTS = {
    "no endpoint": {"endpoint": {"enabled": False}},
    "no observability": {"observability": {"enabled": False}},
    "UCX": {"model": {"nixlBackends": ["UCX"]}},
    "Ray autoscaler": {"gpuNodes": {"minSize": 0}},
    "aggregated": {"serving": {"mode": "aggregated"}},
}


@pytest.mark.parametrize("variant", VARIANTS, ids=list(VARIANTS))
@pytest.mark.parametrize("stack", ["dev", "byo.example"])
def test_the_reachability_matrix_of_each_condition(stack, variant):
    """The conditions no stack file turns on, on the policies the flows generate for the namespaces
    the stack file's run owns."""
    where = stack_of(stack, **VARIANTS[variant])
    owned = {
        r.inputs["metadata"]["name"] for r in run_stack(stack=stack).of_type("kubernetes:core/v1:Namespace")
    }
    policies = [
        p for ns in traffic.NAMESPACES if ns.name(where) in owned for p in traffic.policies(ns, where)
    ]
    check_matrix(where, policies, owned, None)


def test_the_matrix_fails_when_a_flow_is_dropped_or_widened():
    where = stack_of("dev")
    owned = {"inference", "monitoring", "node-agents", "envoy-gateway-system", "kuberay-operator"}
    policies = [p for ns in traffic.NAMESPACES for p in traffic.policies(ns, where)]
    check_matrix(where, policies, owned, None)
    head_ingress = next(p for p in policies if p["metadata"]["name"] == "ray-head-ingress")
    dropped = [p for p in policies if p is not head_ingress]
    with pytest.raises(AssertionError, match="denied"):
        check_matrix(where, dropped, owned, None)
    widened = [
        *policies,
        {**head_ingress, "spec": {**head_ingress["spec"], "ingress": [{"from": [{"podSelector": {}}]}]}},
    ]
    with pytest.raises(AssertionError, match="allowed"):
        check_matrix(where, widened, owned, None)


def test_a_client_namespace_is_one_entry(monkeypatch):
    """The change recipe of docs/design.md: one Flow, and the tenant's pods reach Serve on the head."""
    where = stack_of("dev")
    tenant = next(a for a in actors(where, None) if a.name == "tenant")
    head = next(a for a in actors(where, None) if a.name == "head")

    def generated() -> list[dict[str, Any]]:
        return [p for ns in traffic.NAMESPACES for p in traffic.policies(ns, where)]

    assert not reachable(generated(), tenant, head, 8000)
    entry = traffic.Flow(
        traffic.client_namespace("tenant-a"),
        traffic.HEAD,
        traffic.Ports((traffic.Port("serve", 8000),)),
        "tenant-a's clients",
        "ray-head-ingress",
    )
    monkeypatch.setattr(traffic, "FLOWS", (*traffic.FLOWS, entry))
    assert reachable(generated(), tenant, head, 8000)
    assert not reachable(generated(), tenant, head, 8265)
    assert "| every pod of `tenant-a` | namespace | the Ray head | 8000 serve |" in traffic.table()
