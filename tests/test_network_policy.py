"""Network policies (issue 15): no pod of the stack's namespaces reaches IMDS, and the serving namespace
takes no traffic but the listed paths, each on a port the receiving pods declare."""

from __future__ import annotations

import ipaddress
from dataclasses import replace
from typing import Any, NamedTuple

import pytest

from manifests import ray_ports
from manifests.network_policy import BENCH_PODS, IMDS_V4, IMDS_V6, Port
from manifests.network_policy import RAY_HEAD_PODS as RAY_HEAD
from manifests.network_policy import RAY_WORKER_PODS as RAY_WORKER
from manifests.rayservice import build_rayservice, build_serving
from manifests.traffic import SERVING, Stack, flows
from manifests.traffic import policies as namespace_policies
from planning import plan_stack
from tests.fakes.kube import fixture_json
from tests.fakes.pulumi import STACKS, StackRun, plan_of, run_stack, stack_settings
from tests.validators import object_errors

POLICY = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
RAYSERVICE = "kubernetes:ray.io/v1:RayService"
POD_IDENTITY_AGENT = "169.254.170.23"


settings = stack_settings


class Path(NamedTuple):
    """One flow into the serving namespace by one of its peers."""

    peer: str
    to: str
    ports: tuple[Port, ...]
    peer_selector: dict[str, Any]


def traffic_of(s: Any, stack: str = "dev") -> Stack:
    plan = replace(plan_stack(s, stack=stack), context=plan_of(stack).context)
    return Stack(s, plan.cluster_context, plan.kv_path)


def paths_of(s: Any, stack: str = "dev") -> list[Path]:
    """The serving namespace's flows, one per peer, for the KV path the stack's plan chose."""
    return [
        Path(f.flow.source.key, f.flow.to.key, f.ports, peer)
        for f in flows(SERVING, traffic_of(s, stack))
        for peer in f.peers
    ]


def policies(run: StackRun) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (r.inputs["metadata"]["namespace"], r.inputs["metadata"]["name"]): r.inputs
        for r in run.of_type(POLICY)
    }


def matches(selector: dict[str, Any], labels: dict[str, str]) -> bool:
    wanted = selector.get("matchLabels", {})
    exprs = selector.get("matchExpressions", [])
    assert all(e["operator"] == "In" for e in exprs)
    return wanted.items() <= labels.items() and all(labels.get(e["key"]) in e["values"] for e in exprs)


def declared_ports(pod_spec: dict[str, Any]) -> dict[str, int]:
    (container,) = pod_spec["containers"]
    return {p["name"]: p["containerPort"] for p in container.get("ports", [])}


class TestNoInstanceMetadata:
    @pytest.mark.parametrize(
        "namespace", ["inference", "monitoring", "node-agents", "envoy-gateway-system", "kuberay-operator"]
    )
    def test_every_workload_namespace_denies_egress_to_imds_and_only_that(self, dev_stack, namespace):
        spec = policies(dev_stack)[(namespace, "no-instance-metadata")]["spec"]
        assert spec["podSelector"] == {} and spec["policyTypes"] == ["Egress"]
        blocks = [peer["ipBlock"] for rule in spec["egress"] for peer in rule["to"] if "ipBlock" in peer]
        assert {(b["cidr"], tuple(b["except"])) for b in blocks} == {
            ("0.0.0.0/0", (IMDS_V4,)),
            ("::/0", (IMDS_V6,)),
        }
        assert (IMDS_V4, IMDS_V6) == ("169.254.169.254/32", "fd00:ec2::254/128")
        # EKS Pod Identity's agent stays reachable: the pods' credentials come from it
        assert ipaddress.ip_address(POD_IDENTITY_AGENT) in ipaddress.ip_network(blocks[0]["cidr"])
        assert not any(
            ipaddress.ip_address(POD_IDENTITY_AGENT) in ipaddress.ip_network(e) for e in blocks[0]["except"]
        )
        assert {"to": [{"namespaceSelector": {}}]} in spec["egress"]  # pods, DNS

    def test_the_controllers_in_kube_system_are_selected_by_their_chart_labels(self):
        run = run_stack(overrides={"gpuNodes": {"minSize": 0, "maxSize": 2}})
        found = policies(run)
        lbc = found[("kube-system", "aws-load-balancer-controller-no-instance-metadata")]["spec"]
        ca = found[("kube-system", "aws-cluster-autoscaler-no-instance-metadata")]["spec"]
        assert lbc["podSelector"] == {
            "matchLabels": {"app.kubernetes.io/name": "aws-load-balancer-controller"}
        }
        assert ca["podSelector"] == {"matchLabels": {"app.kubernetes.io/name": "aws-cluster-autoscaler"}}
        # nothing else in kube-system: the add-ons AWS manages stay as EKS ships them
        assert sorted(k for k in found if k[0] == "kube-system") == [
            ("kube-system", "aws-cluster-autoscaler-no-instance-metadata"),
            ("kube-system", "aws-load-balancer-controller-no-instance-metadata"),
        ]

    def test_the_sdks_in_ray_pods_never_ask_imds(self, dev_stack):
        spec = dev_stack.one(RAYSERVICE).inputs["spec"]["rayClusterConfig"]
        pods = [spec["headGroupSpec"]["template"]["spec"], spec["workerGroupSpecs"][0]["template"]["spec"]]
        for pod in pods:
            env = {e["name"]: e.get("value") for e in pod["containers"][0]["env"]}
            assert env["AWS_EC2_METADATA_DISABLED"] == "true"
            assert env["AWS_REGION"] == env["AWS_DEFAULT_REGION"] == "sa-east-1"


class TestServingNamespace:
    def test_denies_all_ingress_by_default(self, dev_stack):
        spec = policies(dev_stack)[("inference", "default-deny-ingress")]["spec"]
        assert spec == {"podSelector": {}, "policyTypes": ["Ingress"]}

    def test_only_ray_pods_take_any_ingress(self, dev_stack):
        allowing = {
            name: p["spec"]["podSelector"]
            for (ns, name), p in policies(dev_stack).items()
            if ns == "inference" and p["spec"].get("ingress")
        }
        assert allowing == {
            "ray-head-ingress": {"matchLabels": RAY_HEAD},
            "ray-workers-ingress": {"matchLabels": RAY_WORKER},
        }

    def test_policies_are_in_place_before_the_rayservice(self, dev_stack):
        ray = dev_stack.one(RAYSERVICE)
        for reg in dev_stack.of_type(POLICY):
            if reg.inputs["metadata"]["namespace"] == "inference":
                assert reg.urn in ray.dependencies, reg.name

    @pytest.mark.parametrize("stack", STACKS)
    def test_policies_are_valid_kubernetes_objects(self, stack):
        for variant in ({}, {"endpoint": {"enabled": False}, "observability": {"enabled": False}}):
            s = settings(stack, **variant)
            for policy in namespace_policies(SERVING, traffic_of(s, stack)):
                assert object_errors(policy) == [], policy["metadata"]["name"]

    def test_selectors_match_the_pods_kuberay_creates(self):
        pods = fixture_json("pods.json")["items"]  # as KubeRay 1.7 labels a RayService's pods
        heads = [p for p in pods if matches({"matchLabels": RAY_HEAD}, p["metadata"]["labels"])]
        workers = [p for p in pods if matches({"matchLabels": RAY_WORKER}, p["metadata"]["labels"])]
        assert [p["metadata"]["name"] for p in heads] == ["ray-llm-6mzvd-head-7xq9t"]
        assert len(workers) == 2 and not set(map(id, heads)) & set(map(id, workers))


class TestEveryPathIsOnAPortThePodsDeclare:
    """Each allowed port is one the receiving pod template declares, or Ray's worker port range exactly as
    `ray start` is given it: a policy for a port nobody listens on, or a listener no policy allows, fails."""

    @pytest.mark.parametrize(
        "variant",
        [
            {},
            {"endpoint": {"enabled": False}},
            {"observability": {"enabled": False}},
            {"gpuNodes": {"minSize": 0}},
        ],
    )
    @pytest.mark.parametrize("stack", STACKS)
    def test_paths_against_the_pod_templates(self, stack, variant):
        if "gpuNodes" in variant and settings(stack).prefill_nodes is not None:
            variant = {"prefillNodes": variant["gpuNodes"]}  # the sides' own sections replace gpuNodes
        s = settings(stack, **variant)
        plan = replace(plan_stack(s, stack=stack), context=plan_of(stack).context)
        rayservice = build_rayservice(s, plan).to_dict()
        cluster = rayservice["spec"]["rayClusterConfig"]
        head = (declared_ports(cluster["headGroupSpec"]["template"]["spec"]), cluster["headGroupSpec"])
        # Each worker group (one, or each side's own) declares every port the policies allow workers.
        for path, group in ((p, g) for p in paths_of(s, stack) for g in cluster["workerGroupSpecs"]):
            workers = (declared_ports(group["template"]["spec"]), group)
            declared, node_group = head if path.to == "head" else workers
            for port in path.ports:
                if port.end_port is None:
                    assert declared.get(port.name) == port.port, (path.peer, path.to, port)
                elif port.name == "ucx-tcp":  # exactly the range UCX is told to listen in
                    env = {
                        e["name"]: e.get("value")
                        for e in node_group["template"]["spec"]["containers"][0]["env"]
                    }
                    assert env["UCX_TCP_PORT_RANGE"] == f"{port.port}-{port.end_port}"
                else:  # the worker range: exactly what `ray start` binds workers to
                    params = node_group["rayStartParams"]
                    assert (params["min-worker-port"], params["max-worker-port"]) == (
                        str(port.port),
                        str(port.end_port),
                    )

    def test_every_port_ray_is_told_to_use_is_pinned_and_declared(self):
        s = settings()
        cluster = build_rayservice(s, plan_stack(s, stack="dev")).to_dict()["spec"]["rayClusterConfig"]
        head, (workers,) = cluster["headGroupSpec"], cluster["workerGroupSpecs"]
        for node_group, head_node in ((head, True), (workers, False)):
            params = node_group["rayStartParams"]
            declared = set(declared_ports(node_group["template"]["spec"]).values())
            # every random-by-default port is fixed (python/ray/_private/parameter.py)
            for flag in (
                "node-manager-port",
                "object-manager-port",
                "runtime-env-agent-port",
                "dashboard-agent-grpc-port",
            ):
                assert params[flag] != "0" and int(params[flag]) in declared, flag
            assert int(params["dashboard-agent-listen-port"]) in declared
            assert int(params["metrics-export-port"]) in declared
            if head_node:
                assert {int(params["port"]), int(params["dashboard-port"])} <= declared

    def test_the_nixl_side_channel_is_open_between_gpu_workers_only(self, dev_stack):
        s = settings()
        (nixl,) = [p for p in paths_of(s) if any(port.name == "nixl-side" for port in p.ports)]
        assert (nixl.peer, nixl.to) == ("ray-workers", "workers")
        assert nixl.peer_selector == {"podSelector": {"matchLabels": RAY_WORKER}}
        worker = dev_stack.one(RAYSERVICE).inputs["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]
        env = {e["name"]: e.get("value") for e in worker["template"]["spec"]["containers"][0]["env"]}
        # Ray Serve LLM leaves a set port alone (kv_transfer/nixl.py); vLLM 0.26 listens on it (+ DP index 0)
        assert (
            env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == str(ray_ports.NIXL_SIDE_CHANNEL) == str(nixl.ports[0].port)
        )

    def test_ucx_listens_where_the_workers_admit_it_and_only_when_ucx_moves_the_kv_cache(self):
        """A stack that moves the KV cache with UCX (model.nixlBackends: [UCX]): its tcp transport must
        listen on ports the worker policy admits from the other GPU workers, or the decode side's reads
        hang."""
        with_ucx = settings(model={"nixlBackends": ["UCX"]})
        (ucx,) = [p for p in paths_of(with_ucx) if any(port.name == "ucx-tcp" for port in p.ports)]
        assert (ucx.peer, ucx.to) == ("ray-workers", "workers")
        assert ucx.peer_selector == {"podSelector": {"matchLabels": RAY_WORKER}}
        (port,) = ucx.ports
        assert port.end_port is not None and (port.port, port.end_port) == ray_ports.UCX_TCP_PORTS
        assert not port.port <= ray_ports.NIXL_SIDE_CHANNEL <= port.end_port
        assert port.end_port < 32768  # below Linux's ephemeral range, where outgoing connections bind

        def worker_env(s: Any) -> dict[str, Any]:
            spec = build_rayservice(s, plan_stack(s, stack="dev")).to_dict()["spec"]["rayClusterConfig"]
            container = spec["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
            return {e["name"]: e.get("value") for e in container["env"]}

        assert worker_env(with_ucx)["UCX_TCP_PORT_RANGE"] == f"{port.port}-{port.end_port}"
        # Where LIBFABRIC carries it (every default plan, dev's g6 included), neither the range nor the path.
        for default in (
            settings(),
            settings(gpuNodes={"instanceType": "p5.48xlarge"}, model={"tensorParallelSize": 8}),
        ):
            assert not [p for p in paths_of(default) if any(port.name == "ucx-tcp" for port in p.ports)]
            assert "UCX_TCP_PORT_RANGE" not in worker_env(default)


class TestPeers:
    def test_the_gateway_path_selects_the_pods_the_load_balancer_sends_to(self, dev_stack):
        service = next(
            r
            for r in dev_stack.of_type("kubernetes:core/v1:Service")
            if r.inputs["spec"].get("type") == "LoadBalancer"
        )
        gateway = [p for p in paths_of(settings()) if p.peer == "gateway"]
        assert {p.to for p in gateway} == {"head", "workers"}  # KubeRay's serve Service selects both
        for path in gateway:
            assert path.peer_selector == {
                "podSelector": {"matchLabels": service.inputs["spec"]["selector"]},
                "namespaceSelector": {
                    "matchLabels": {"kubernetes.io/metadata.name": service.inputs["metadata"]["namespace"]}
                },
            }
            assert [p.port for p in path.ports] == [8000]

    def test_the_ready_check_path_selects_the_ready_check_pod(self):
        s = settings()
        serving = build_serving(s, plan_stack(s, stack="dev"))
        pod_labels = serving.ready_check.job.to_dict()["spec"]["template"]["metadata"]["labels"]
        (path,) = [p for p in paths_of(s) if p.peer == "ready-check"]
        assert matches(path.peer_selector["podSelector"], pod_labels)
        assert [p.port for p in path.ports] == [8265]  # DASHBOARD_URL of the check

    def test_the_operator_path_selects_the_operator(self, dev_stack):
        monitor = next(
            r for r in dev_stack.registrations if r.inputs.get("kind") == "ServiceMonitor"
        )  # selects the operator's Service, which selects its pods by the same name label
        (path,) = [p for p in paths_of(settings()) if p.peer == "kuberay"]
        assert path.peer_selector["podSelector"] == monitor.inputs["spec"]["selector"]
        assert path.peer_selector["namespaceSelector"]["matchLabels"] == {
            "kubernetes.io/metadata.name": "kuberay-operator"
        }
        assert sorted(p.port for p in path.ports) == [8000, 8265]  # proxy health, serve config

    def test_without_the_gateway_serve_is_open_to_the_vpc_only_for_the_api_server_proxy(self):
        s = settings(endpoint={"enabled": False})
        paths = paths_of(s)
        assert not [p for p in paths if p.peer == "gateway"]
        vpc = [p for p in paths if p.peer == "vpc"]
        assert {p.to for p in vpc} == {"head", "workers"}
        assert all(p.peer_selector == {"ipBlock": {"cidr": str(s.network.vpc_cidr)}} for p in vpc)
        assert all([port.port for port in p.ports] == [8000] for p in vpc)

    def test_prometheus_scrapes_only_the_metrics_ports(self):
        with_metrics = [p for p in paths_of(settings()) if p.peer == "prometheus"]
        assert {p.to: sorted(port.port for port in p.ports) for p in with_metrics} == {
            "head": [8080, 44227],
            "workers": [8080],
        }
        assert not [p for p in paths_of(settings(observability={"enabled": False})) if p.peer == "prometheus"]


def ingress_allowed(run: StackRun, namespace: str) -> dict[str, tuple[dict[str, Any], list[dict], list]]:
    """A namespace's allow policies: name -> (pods, peers, ports); asserts the default deny is there."""
    found = {name: spec for (ns, name), spec in policies(run).items() if ns == namespace}
    deny = found.pop("default-deny-ingress")["spec"]
    assert deny == {"podSelector": {}, "policyTypes": ["Ingress"]}
    found.pop("no-instance-metadata")
    allowed = {}
    for name, policy in found.items():
        spec = policy["spec"]
        assert spec["policyTypes"] == ["Ingress"], name
        (rule,) = spec["ingress"]
        allowed[name] = (spec["podSelector"], rule["from"], [p["port"] for p in rule.get("ports", [])])
    return allowed


PROMETHEUS = {
    "podSelector": {
        "matchLabels": {
            "app.kubernetes.io/name": "prometheus",
            "app.kubernetes.io/managed-by": "prometheus-operator",
        }
    },
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
}


class TestEveryNamespaceWeOwnDeniesIngress:
    """Default deny in every namespace the stack creates, and only the paths listed (issue 27)."""

    @pytest.mark.parametrize("stack", STACKS)
    def test_every_namespace_has_a_default_deny(self, stack):
        run = run_stack(stack=stack)
        namespaces = {r.inputs["metadata"]["name"] for r in run.of_type("kubernetes:core/v1:Namespace")}
        denied = {ns for (ns, name) in policies(run) if name == "default-deny-ingress"}
        assert denied == namespaces
        for policy in run.of_type(POLICY):
            assert (
                object_errors(dict(policy.inputs, apiVersion="networking.k8s.io/v1", kind="NetworkPolicy"))
                == []
            )

    def test_monitoring_takes_its_own_pods_the_api_server_and_the_ray_dashboard(self, dev_stack):
        vpc = {"ipBlock": {"cidr": str(settings("dev").network.vpc_cidr)}}
        ray_head = {
            "podSelector": {"matchLabels": RAY_HEAD},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "inference"}},
        }
        # Issue 39: from the VPC (the API server) the webhook's port to the operator only; Prometheus's
        # 9090 to nobody outside the namespace but the Ray dashboard (`ops status` port-forwards).
        assert ingress_allowed(dev_stack, "monitoring") == {
            "allow-within": ({}, [{"podSelector": {}}], []),
            "allow-api-server-webhook": (
                {"matchLabels": {"app": "kube-prometheus-stack-operator"}},
                [vpc],
                [10250],
            ),
            "allow-ray-dashboard": ({}, [ray_head], [9090, 3000]),
        }

    def test_the_node_agents_take_prometheus_only(self, dev_stack):
        assert ingress_allowed(dev_stack, "node-agents") == {"allow-prometheus": ({}, [PROMETHEUS], [9400])}

    def test_the_kuberay_operator_takes_prometheus_only(self, dev_stack):
        assert ingress_allowed(dev_stack, "kuberay-operator") == {
            "allow-prometheus": ({}, [PROMETHEUS], [8080])
        }

    def test_the_gateway_takes_the_load_balancer_on_the_listener_and_health_ports_only(self, dev_stack):
        vpc = {"ipBlock": {"cidr": str(settings("dev").network.vpc_cidr)}}
        allowed = ingress_allowed(dev_stack, "envoy-gateway-system")
        proxies, peers, ports = allowed.pop("allow-load-balancer")
        assert (peers, ports) == ([vpc], [10080, 19003])
        # the pods the NLB's Service selects
        service = dev_stack.one("kubernetes:core/v1:Service", "endpoint-load-balancer").inputs
        assert proxies == {"matchLabels": service["spec"]["selector"]}
        assert service["spec"]["ports"][0]["targetPort"] == 10080
        bench = {
            "podSelector": {"matchLabels": BENCH_PODS},
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "inference"}},
        }
        assert allowed == {
            "allow-within": ({}, [{"podSelector": {}}], []),
            "allow-bench": (proxies, [bench], [10080]),
            # Issue 39: the webhook's port from the VPC to the controller only.
            "allow-api-server": ({"matchLabels": {"control-plane": "envoy-gateway"}}, [vpc], [9443]),
        }
