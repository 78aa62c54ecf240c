"""Metrics, dashboards and alerts: what an operator of a disaggregated LLM service reads to know whether
prefill/decode works.

The failures these guard against are silent ones: a typo'd metric name (a panel stays empty, an alert
never fires), a monitor whose selector or port matches no Ray pod, a Prometheus that ignores monitors
outside its own release, a volume-less Prometheus that forgets on restart, a metrics stack that does
not fit the system node, a Grafana with a default password, and an alert that fires on a routine
upgrade or never at all (shown with promtool on synthetic series).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any

import promql_parser
import pytest
import yaml

from config import ConfigError, load_settings
from jobs.llm_autoscaling import kv_cache_query, mean_prompt_tokens_query
from manifests.observability.build import build_observability
from manifests.observability.monitors import pod_monitors
from manifests.observability.rules import alert_rules
from manifests.pd_dashboard import pd_dashboard
from manifests.rayservice import build_rayservice
from planning import plan_stack
from planning.context import own_cluster
from tests.exported_metrics import (
    EXPORTED,
    RAY_DASHBOARD_GAPS,
    RAY_DASHBOARD_UNUSED,
    unknown_label_values,
)
from tests.fakes.kube import fixture_json
from tests.fakes.pulumi import ROOT, STACKS, Secret, StackRun, run_stack, stack_file_config, stack_settings
from tests.promql import grafana_free as _grafana_free
from tests.promql import metric_names
from tests.ray_dashboards import generate
from tests.validators import crd_package_errors, promtool_expressions, promtool_in

RELEASE = "kubernetes:helm.sh/v3:Release"
CUSTOM = "kubernetes:monitoring.coreos.com/v1"
SYSTEM = {"role": "system"}
ALERT_TESTS = ROOT / "tests" / "fixtures" / "alerts" / "ray-llm.test.yaml"
KUBERAY_METRICS_PORT = "metrics"
"""KubeRay adds it (8080) to each Ray container without it (ray-operator/controllers/ray/common/pod.go)."""


def settings(**sections: dict[str, Any]):
    return stack_settings("dev", **sections)


def release(run: StackRun, chart: str):
    (found,) = [r for r in run.of_type(RELEASE) if r.inputs["chart"] == chart]
    return found


def depends_on(reg, other) -> bool:
    return other.urn in reg.dependencies


def values(run: StackRun) -> dict[str, Any]:
    return release(run, "kube-prometheus-stack").inputs["values"]


class TestTheMetricsStack:
    def test_everything_but_node_daemons_on_the_system_nodes(self, dev_stack):
        v = values(dev_stack)
        assert v["prometheus"]["prometheusSpec"]["nodeSelector"] == SYSTEM
        assert v["alertmanager"]["alertmanagerSpec"]["nodeSelector"] == SYSTEM
        assert v["prometheusOperator"]["nodeSelector"] == SYSTEM
        assert v["prometheusOperator"]["admissionWebhooks"]["patch"]["nodeSelector"] == SYSTEM
        assert v["grafana"]["nodeSelector"] == SYSTEM
        assert v["kube-state-metrics"]["nodeSelector"] == SYSTEM

    def test_prometheus_keeps_history_on_an_encrypted_gp3_volume(self, dev_stack):
        spec = values(dev_stack)["prometheus"]["prometheusSpec"]
        claim = spec["storageSpec"]["volumeClaimTemplate"]["spec"]
        assert claim["storageClassName"] == "gp3"
        assert claim["resources"]["requests"]["storage"] == "50Gi"
        assert (spec["retention"], spec["retentionSize"]) == ("15d", "45GiB")
        storage = dev_stack.one("kubernetes:storage.k8s.io/v1:StorageClass").inputs
        assert storage["provisioner"] == "ebs.csi.aws.com"
        assert storage["parameters"] == {
            "type": "gp3",
            "encrypted": "true",
            "kmsKeyId": "arn:aws:kms:sa-east-1:123456789012:key/cluster-volumes",  # the stack's EBS key
        }
        assert storage["volumeBindingMode"] == "WaitForFirstConsumer"
        assert depends_on(
            release(dev_stack, "kube-prometheus-stack"),
            dev_stack.one("kubernetes:storage.k8s.io/v1:StorageClass"),
        )

    def test_no_lifecycle_api_no_file_access_through_monitors_no_secret_listing(self, dev_stack):
        """Issue 39: the operator reloads Prometheus by signal, so its HTTP API takes no POST /-/quit; no
        ServiceMonitor reads files from Prometheus's disk; kube-state-metrics lists no Secret."""
        v = values(dev_stack)
        spec = v["prometheus"]["prometheusSpec"]
        assert spec["reloadStrategy"] == "ProcessSignal"
        assert spec["arbitraryFSAccessThroughSMs"] == {"deny": True}
        assert "secrets" in v["kube-state-metrics"]["collectorsExclude"]

    def test_prometheus_takes_monitors_only_from_the_namespaces_the_stack_puts_them_in(self, dev_stack):
        """Issue 39: every monitor and rule of the stack is selected, and no other namespace is."""
        spec = values(dev_stack)["prometheus"]["prometheusSpec"]
        selected = set()
        for kind in ("podMonitor", "serviceMonitor", "rule", "probe", "scrapeConfig"):
            (expression,) = spec[f"{kind}NamespaceSelector"]["matchExpressions"]
            assert (expression["key"], expression["operator"]) == ("kubernetes.io/metadata.name", "In")
            selected |= set(expression["values"])
        assert selected == {"monitoring", "node-agents", "kuberay-operator", "inference"}
        ours = {
            r.inputs["metadata"]["namespace"]
            for r in dev_stack.registrations
            if r.type.startswith("kubernetes:monitoring.coreos.com/")
        }
        charts = {
            release(dev_stack, c).inputs["namespace"] for c in ("kube-prometheus-stack", "dcgm-exporter")
        }
        node_exporter = values(dev_stack)["prometheus-node-exporter"]["namespaceOverride"]
        assert ours and ours | charts | {node_exporter} <= selected

    def test_retention_follows_the_config(self):
        run = run_stack(overrides={"observability": {"retentionDays": 30, "storageGib": 200}})
        spec = values(run)["prometheus"]["prometheusSpec"]
        assert (spec["retention"], spec["retentionSize"]) == ("30d", "180GiB")

    def test_prometheus_selects_monitors_and_rules_from_every_namespace(self, dev_stack):
        spec = values(dev_stack)["prometheus"]["prometheusSpec"]
        for kind in ("podMonitor", "serviceMonitor", "rule", "probe", "scrapeConfig"):
            assert spec[f"{kind}SelectorNilUsesHelmValues"] is False, kind

    def test_the_eks_managed_control_plane_is_not_scraped(self, dev_stack):
        v = values(dev_stack)
        for component in ("kubeControllerManager", "kubeScheduler", "kubeEtcd", "kubeProxy"):
            assert v[component] == {"enabled": False}, component

    def test_crds_come_from_the_stack_at_the_charts_version_and_stay(self, dev_stack):
        crds = dev_stack.one("kubernetes:yaml/v2:ConfigGroup", "observability-crds")
        assert crds.retain_on_delete is True
        assert len(crds.inputs["files"]) == 10
        assert all("/kube-prometheus-stack-88.5.3/" in url for url in crds.inputs["files"])
        chart = release(dev_stack, "kube-prometheus-stack")
        assert chart.inputs["version"] == "88.5.3" and chart.inputs["skipCrds"] is True
        assert chart.inputs["values"]["crds"] == {"enabled": False} and depends_on(chart, crds)

    def test_the_ebs_csi_driver_has_its_own_pod_identity_role(self, dev_stack):
        addon = dev_stack.one("aws:eks/addon:Addon", "observability-ebs-csi").inputs
        assert addon["addonName"] == "aws-ebs-csi-driver"
        (association,) = addon["podIdentityAssociations"]
        assert association["serviceAccount"] == "ebs-csi-controller-sa"
        role = dev_stack.one("aws:iam/role:Role", "observability-ebs-csi")
        assert association["roleArn"] == f"arn:aws:iam::123456789012:role/{role.name}"
        (trust,) = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
        assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
        policy = dev_stack.one("aws:iam/rolePolicyAttachment:RolePolicyAttachment", "observability-ebs-csi")
        assert policy.inputs["policyArn"] == "arn:aws:iam::aws:policy/AmazonEBSCSIDriverPolicyV2"

    def test_gpu_metrics_on_the_gpu_nodes_only_tolerating_their_taint(self, dev_stack):
        dcgm = release(dev_stack, "dcgm-exporter")
        assert dcgm.inputs["repositoryOpts"]["repo"] == "https://nvidia.github.io/dcgm-exporter/helm-charts"
        assert dcgm.inputs["version"] == "4.8.2"
        v = dcgm.inputs["values"]
        assert v["nodeSelector"] == {"role": "gpu-worker"}
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in v["tolerations"]
        # Without honorLabels its pod/namespace labels (the GPU's pod) become exported_pod, ...
        assert v["serviceMonitor"]["honorLabels"] is True
        assert depends_on(dcgm, dev_stack.one("eks:index:ManagedNodeGroup", "gpu-nodes"))
        assert depends_on(dcgm, dev_stack.one("kubernetes:yaml/v2:ConfigGroup", "observability-crds"))


class TestGrafana:
    def test_admin_password_is_a_generated_secret_and_an_output(self, dev_stack):
        password = dev_stack.exports["grafanaAdminPassword"]
        assert len(password) == 32 and "grafanaAdminPassword" in dev_stack.secret_exports
        secret = dev_stack.one("kubernetes:core/v1:Secret", "observability-grafana-admin")
        data = secret.inputs["stringData"]
        assert isinstance(data, Secret) and data.value == {"admin-user": "admin", "admin-password": password}
        grafana = values(dev_stack)["grafana"]
        assert grafana["admin"] == {
            "existingSecret": "grafana-admin",
            "userKey": "admin-user",
            "passwordKey": "admin-password",
        }
        assert "adminPassword" not in grafana
        for reg in dev_stack.registrations:
            if reg.name != "observability-grafana-admin":
                assert password not in json.dumps(reg.inputs, default=lambda _: "<secret>"), reg.name

    def test_no_anonymous_access_and_embedding_for_the_ray_dashboard(self, dev_stack):
        ini = values(dev_stack)["grafana"]["grafana.ini"]
        assert "auth.anonymous" not in ini
        assert ini["security"] == {"allow_embedding": True}

    def test_dashboards_are_labelled_configmaps_for_the_sidecar(self, dev_stack):
        grafana = values(dev_stack)["grafana"]
        sidecar = grafana["sidecar"]["dashboards"]
        assert (sidecar["label"], sidecar["labelValue"], sidecar["resource"]) == (
            "grafana_dashboard",
            "1",
            "configmap",
        )
        # Its own namespace only (the chart's default without searchNamespace), with a Role, and never
        # Secrets: the review found a cluster-wide read on Secrets.
        assert "searchNamespace" not in sidecar and grafana["rbac"] == {"namespaced": True}
        assert grafana["sidecar"]["datasources"] == {"resource": "configmap"}
        maps = [
            c
            for c in dev_stack.of_type("kubernetes:core/v1:ConfigMap")
            if c.name.startswith("observability-dashboard-")
        ]
        assert sorted(c.inputs["metadata"]["name"] for c in maps) == [
            "dashboard-default-grafana-dashboard",
            "dashboard-pd-dashboard",
            "dashboard-serve-deployment-grafana-dashboard",
            "dashboard-serve-grafana-dashboard",
            "dashboard-serve-llm-grafana-dashboard",
        ]
        uids = set()
        for config_map in maps:
            assert config_map.inputs["metadata"]["labels"] == {"grafana_dashboard": "1"}
            ((_, content),) = config_map.inputs["data"].items()
            uids.add(json.loads(content)["uid"])
        assert len(uids) == 5

    def test_the_ray_dashboards_are_what_ray_2_58_generates(self):
        """Regenerate with `make dashboards` after a Ray bump."""
        committed = {
            p.name: p.read_text() for p in (ROOT / "manifests" / "dashboards" / "ray-2.58.0").glob("*.json")
        }
        assert committed == generate()

    def test_the_ray_head_points_its_metrics_tabs_at_grafana_and_prometheus(self, dev_stack):
        head = dev_stack.one("kubernetes:ray.io/v1:RayService").inputs["spec"]["rayClusterConfig"][
            "headGroupSpec"
        ]
        (container,) = head["template"]["spec"]["containers"]
        env = {e["name"]: e["value"] for e in container["env"]}
        assert {k: v for k, v in env.items() if k.startswith("RAY_")} == {
            "RAY_GRAFANA_HOST": "http://grafana.monitoring.svc:80",
            "RAY_PROMETHEUS_HOST": "http://kps-prometheus.monitoring.svc:9090",
            "RAY_GRAFANA_IFRAME_HOST": "http://127.0.0.1:3000",
        }


class TestMonitors:
    def test_pod_monitors_select_the_pods_kuberay_labels_and_the_ports_they_declare(self):
        s = settings()
        plan = plan_stack(s, stack="dev")
        pods = fixture_json("pods.json")["items"]  # as KubeRay 1.7 labels a RayService's pods
        cluster = build_rayservice(s, plan).to_dict()["spec"]["rayClusterConfig"]
        declared = {
            "head": [
                p["name"] for p in cluster["headGroupSpec"]["template"]["spec"]["containers"][0]["ports"]
            ],
            "worker": [],
        }
        monitors = {
            m["spec"]["selector"]["matchLabels"]["ray.io/node-type"]: m
            for m in pod_monitors(s, own_cluster(s))
        }
        assert set(monitors) == {"head", "worker"}
        for node_type, monitor in monitors.items():
            wanted = monitor["spec"]["selector"]["matchLabels"]
            matched = [p for p in pods if wanted.items() <= p["metadata"]["labels"].items()]
            assert matched and all(p["metadata"]["labels"]["ray.io/node-type"] == node_type for p in matched)
            for endpoint in monitor["spec"]["podMetricsEndpoints"]:
                assert endpoint["port"] in [*declared[node_type], KUBERAY_METRICS_PORT], endpoint["port"]
                assert endpoint["relabelings"][0]["targetLabel"] == "ray_io_cluster"
        head_ports = [e["port"] for e in monitors["head"]["spec"]["podMetricsEndpoints"]]
        # No autoscaler here, so nothing listens on as-metrics: a target for it would always be down.
        assert head_ports == ["metrics", "dash-metrics"]

    def test_the_autoscalers_metrics_are_scraped_where_it_runs(self):
        s = settings(autoscaling={"decode": {"maxReplicas": 2}}, gpuNodes={"maxSize": 3})
        (head,) = [m for m in pod_monitors(s, own_cluster(s)) if m["metadata"]["name"] == "ray-head-monitor"]
        assert [e["port"] for e in head["spec"]["podMetricsEndpoints"]] == [
            "metrics",
            "as-metrics",
            "dash-metrics",
        ]
        plan = plan_stack(s, stack="dev")
        ports = build_rayservice(s, plan).to_dict()["spec"]["rayClusterConfig"]["headGroupSpec"]["template"][
            "spec"
        ]
        assert {"name": "as-metrics", "containerPort": 44217} in ports["containers"][0]["ports"]

    def test_monitors_and_rules_live_beside_the_rayservice_after_the_operator(self, dev_stack):
        chart = release(dev_stack, "kube-prometheus-stack")
        for kind, name in (
            ("PodMonitor", "ray-head-monitor"),
            ("PodMonitor", "ray-workers-monitor"),
            ("PrometheusRule", "ray-llm-alerts"),
        ):
            reg = dev_stack.one(f"{CUSTOM}:{kind}", f"observability-{name}")
            assert reg.inputs["metadata"]["namespace"] == "inference"
            assert depends_on(reg, chart), name
        operator = dev_stack.one(f"{CUSTOM}:ServiceMonitor", "observability-kuberay-operator")
        assert operator.inputs["metadata"]["namespace"] == "kuberay-operator"
        assert operator.inputs["spec"]["endpoints"] == [
            {"port": "http", "path": "/metrics", "honorLabels": True}
        ]

    def test_monitors_and_rules_pass_the_prometheus_operator_schemas(self):
        manifests = build_observability(settings(), own_cluster(settings()))
        objects = manifests.monitoring_objects()
        assert crd_package_errors(objects) == [[] for _ in objects]

    def test_the_schemas_catch_a_broken_monitor_and_rule(self):
        manifests = build_observability(settings(), own_cluster(settings()))
        monitor = json.loads(json.dumps(manifests.pod_monitors[0]))
        del monitor["spec"]["selector"]
        rule = json.loads(json.dumps(manifests.prometheus_rule))
        del rule["spec"]["groups"][0]["rules"][0]["expr"]
        errors = crd_package_errors([monitor, rule])
        assert all(errors), errors


def _panels(panels: list[dict[str, Any]]):
    for panel in panels:
        yield panel
        yield from _panels(panel.get("panels", []))


def dashboard_queries(dashboard: dict[str, Any]) -> list[str]:
    queries = [t["expr"] for p in _panels(dashboard["panels"]) for t in p.get("targets", []) if t.get("expr")]
    queries += [
        v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        for v in dashboard.get("templating", {}).get("list", [])
        if v.get("type") == "query"
    ]
    return queries


def _label_values(query: str) -> str:
    """`label_values(metric, label)` (a Grafana variable query) as the PromQL selector it reads."""
    match = re.fullmatch(r"label_values\((.+),\s*\w+\)", query.strip())
    return match.group(1) if match else query


@pytest.mark.parametrize("stack", STACKS)
class TestPromQL:
    def test_every_alert_parses_and_uses_only_exported_metrics(self, stack):
        for group in alert_rules(load_settings(stack_file_config(stack))):
            for rule in group["rules"]:
                names = metric_names(rule["expr"])
                assert names, rule["alert"]
                assert names <= EXPORTED, f"{rule['alert']}: {sorted(names - EXPORTED)} are not exported"
                assert not unknown_label_values(rule["expr"]), rule["alert"]

    def test_every_pd_dashboard_query_parses_and_uses_only_exported_metrics(self, stack):
        dashboard = pd_dashboard(load_settings(stack_file_config(stack)))
        queries = dashboard_queries(dashboard)
        assert len(queries) >= 15
        for query in queries:
            names = metric_names(_grafana_free(_label_values(query)))
            assert names and names <= EXPORTED, f"{query}: {sorted(names - EXPORTED)} are not exported"
            assert not unknown_label_values(query), query


def test_the_pd_dashboard_answers_the_pd_questions():
    dashboard = pd_dashboard(settings())
    titles = [p["title"] for p in _panels(dashboard["panels"]) if p["type"] != "row"]
    for needed in (
        "Time to first token",
        "Inter-token latency",
        "Requests running and waiting",
        "KV-cache usage",
        "NIXL transfer latency",
        "NIXL throughput",
        "NIXL failures",
        "GPU utilisation",
        "Prefix cache hit rate",
        "KV transfer failures and failed requests",
    ):
        assert any(t.startswith(needed) for t in titles), needed
    per_side = [
        p
        for p in _panels(dashboard["panels"])
        if p.get("title", "").startswith(("Time to first", "Inter-token", "Requests running", "Prefix cache"))
    ]
    assert all("group_left (deployment)" in t["expr"] for p in per_side for t in p["targets"])


def test_ray_dashboards_parse_and_their_vllm_names_are_exported_but_for_known_upstream_gaps():
    vllm_names: set[str] = set()
    for content in generate().values():
        for query in dashboard_queries(json.loads(content)):
            names = metric_names(_grafana_free(_label_values(query)))
            vllm_names |= {
                n for n in names if n.startswith("ray_vllm_") and not n.startswith(RAY_DASHBOARD_UNUSED)
            }
    assert vllm_names - EXPORTED == RAY_DASHBOARD_GAPS


def test_a_typo_in_a_metric_name_is_caught():
    assert metric_names("sum(rate(ray_vllm_time_to_first_tokens_seconds_bucket[5m]))") - EXPORTED == {
        "ray_vllm_time_to_first_tokens_seconds_bucket"
    }
    with pytest.raises(ValueError):
        promql_parser.parse("sum(rate(ray_vllm_num_requests_running[5m])")
    assert unknown_label_values('ray_vllm_request_success_total{finished_reason="errors"}') == {
        'finished_reason="errors"'
    }


class TestTheLlmAutoscalingPolicysQueries:
    """jobs/llm_autoscaling.py asks the stack's Prometheus; the dashboard shows what it decided."""

    SCOPE = {"namespace": "inference", "jobs": "inference/ray-head-monitor|inference/ray-workers-monitor"}
    QUERIES = (
        mean_prompt_tokens_query("ray-llm-a", **SCOPE),
        mean_prompt_tokens_query(None),
        kv_cache_query("ray-llm-a", "qwen", "Decode:qwen3_5-9b", **SCOPE),
        kv_cache_query(None, None, "Decode:qwen3_5-9b"),
    )

    def test_they_parse_and_use_only_exported_metrics(self):
        for query in self.QUERIES:
            names = metric_names(query)
            assert names and names <= EXPORTED, f"{query}: {sorted(names - EXPORTED)} are not exported"

    def test_they_read_their_own_side_and_ray_cluster(self, tmp_path: Path):
        """promtool evaluates them on series as Ray exports them and the stack's PodMonitors label them:
        a decode and a prefill engine of this Ray cluster, a decode engine of another (a NewCluster
        upgrade's), and one that another team's pod exports with this cluster's label into a shared
        Prometheus (another namespace, another monitor), which the scoped queries leave out. Prompts
        of 3000 tokens: vLLM counts each one's tokens and its first token in the same step."""

        def engine(
            worker: str, cluster: str, deployment: str, kv: float, namespace: str = "inference"
        ) -> list[dict[str, str]]:
            job = f"{namespace}/ray-workers-monitor"
            where = f'ray_io_cluster="{cluster}", namespace="{namespace}", job="{job}", WorkerId="{worker}"'
            serve = f'{where}, application="qwen", deployment="{deployment}", replica="{worker}", route="/"'
            return [
                {"series": f"ray_vllm_kv_cache_usage_perc{{{where}}}", "values": f"{kv}x10"},
                {"series": f"ray_serve_deployment_request_counter_total{{{serve}}}", "values": "1+1x10"},
                {"series": f"ray_vllm_prompt_tokens_total{{{where}}}", "values": "3000+3000x10"},
                {"series": f"ray_vllm_time_to_first_token_seconds_count{{{where}}}", "values": "1+1x10"},
            ]

        forged = engine("x1", "ray-llm-a", "Decode:qwen3_5-9b", 0.25, namespace="team-b")
        forged[2]["values"] = "13000+13000x10"
        series = [
            *engine("d1", "ray-llm-a", "Decode:qwen3_5-9b", 0.75),
            *engine("d2", "ray-llm-a", "Decode:qwen3_5-9b", 0.5),
            *engine("p1", "ray-llm-a", "Prefill:qwen3_5-9b", 0.125),
            *engine("d3", "ray-llm-b", "Decode:qwen3_5-9b", 0.5),
            *forged,
        ]
        # Unscoped, the forged engine counts: what the policy read before it selected its own pods.
        expected = (3000, 5000, 1.25, 2.0)
        tests = [
            {"expr": q, "eval_time": "5m", "exp_samples": [{"labels": "{}", "value": v}]}
            for q, v in zip(self.QUERIES, expected, strict=True)
        ]
        promtool_expressions(tmp_path, series, tests)

    def test_the_pd_dashboard_shows_the_decisions_per_side(self):
        scaling = {"signal": "llm", "prefill": {"maxReplicas": 2}, "decode": {"maxReplicas": 3}}
        (panel,) = [
            p
            for p in _panels(pd_dashboard(settings(autoscaling=scaling))["panels"])
            if p["title"].startswith("Replicas per side")
        ]
        assert set().union(*(metric_names(t["expr"]) for t in panel["targets"])) == {
            "ray_serve_autoscaling_desired_replicas",
            "ray_serve_autoscaling_target_replicas",
            "ray_serve_deployment_replica_healthy",
        }
        assert all('deployment=~"(Prefill|Decode):.*"' in t["expr"] for t in panel["targets"])
        assert "8192 per replica" in panel["description"] and "70% per replica" in panel["description"]
        requests = pd_dashboard(settings())["panels"]
        assert (
            "requests per replica" in next(p for p in requests if p.get("id") == panel["id"])["description"]
        )


class TestAlertsWithPromtool:
    def test_the_rules_and_their_templates_are_valid(self, tmp_path: Path):
        rules = tmp_path / "rules.yaml"
        rules.write_text(yaml.safe_dump({"groups": alert_rules(settings())}))
        result = promtool_in(tmp_path, "check", "rules", "rules.yaml")
        assert "SUCCESS: 10 rules found" in result.stdout

    def test_each_alert_fires_and_stays_quiet_when_it_should(self, tmp_path: Path):
        groups = alert_rules(settings())
        for group in groups:
            for rule in group["rules"]:
                rule.pop(
                    "annotations"
                )  # promtool compares them to the letter; their templates are checked above
        (tmp_path / "rules.yaml").write_text(yaml.safe_dump({"groups": groups}))
        shutil.copy(ALERT_TESTS, tmp_path / "tests.yaml")
        promtool_in(tmp_path, "test", "rules", "tests.yaml")
        tested = set(re.findall(r"alertname: (\w+)", ALERT_TESTS.read_text()))
        assert tested == {r["alert"] for g in groups for r in g["rules"]}

    def test_a_quieter_objective_changes_when_the_ttft_alert_fires(self, tmp_path: Path):
        groups = alert_rules(settings(observability={"ttftObjectiveSeconds": 10}))
        (rule,) = [r for g in groups for r in g["rules"] if r["alert"] == "TimeToFirstTokenAboveObjective"]
        assert rule["expr"].endswith("> 10")


class TestTheSystemNodesHoldIt:
    def test_the_seed_system_node_is_refused_with_the_metrics_stack_naming_the_keys(self):
        fits = (
            r"serving.head.cpuRequest: 2 does not fit beside the system pods and the stack's own .*prometheus"
        )
        with pytest.raises(
            ConfigError,
            match=fits + r".*systemNodes.desiredSize 1",
        ):
            plan_stack(settings(systemNodes={"instanceType": "m7i.xlarge"}), stack="dev")

    def test_a_second_seed_node_or_no_metrics_stack_makes_room(self):
        plan_stack(
            settings(systemNodes={"instanceType": "m7i.xlarge", "desiredSize": 2, "maxSize": 2}), stack="dev"
        )
        plan_stack(
            settings(systemNodes={"instanceType": "m7i.xlarge"}, observability={"enabled": False}),
            stack="dev",
        )


class TestSwitchedOff:
    def test_nothing_of_it_and_the_head_has_no_dashboard_env(self):
        run = run_stack(overrides={"observability": {"enabled": False}})
        charts = {r.inputs["chart"] for r in run.of_type(RELEASE)}
        assert not charts & {"kube-prometheus-stack", "dcgm-exporter"}
        assert run.of_type("aws:eks/addon:Addon") and not any(
            a.name.startswith("observability") for a in run.of_type("aws:eks/addon:Addon")
        )
        assert not [r for r in run.registrations if r.type.startswith(CUSTOM)]
        assert "grafanaAdminPassword" not in run.exports
        head = run.one("kubernetes:ray.io/v1:RayService").inputs["spec"]["rayClusterConfig"]["headGroupSpec"]
        env = head["template"]["spec"]["containers"][0]["env"]
        assert not [e for e in env if e["name"].startswith("RAY_")]


def test_nixl_throughput_shows_the_band_the_true_rate_lies_in():
    """Ray rebuilds a histogram's sum from its bucket midpoints (Ray's own recorder, used here), and vLLM
    0.26 counts NIXL's bytes in no counter: over transfers of any size a KV transfer can have, the bytes
    really moved lie between the panel's `at least` and `at most`, which Ray's figure alone does not."""
    import random

    from ray._private.telemetry.open_telemetry_metric_recorder import OpenTelemetryMetricRecorder

    from manifests.pd_dashboard import NIXL_BYTES_BAND, NIXL_BYTES_BUCKETS, NIXL_THROUGHPUT

    recorder = OpenTelemetryMetricRecorder()
    recorder.register_histogram_metric("nixl_bytes", "test", list(NIXL_BYTES_BUCKETS))
    midpoints = recorder.get_histogram_bucket_midpoints("nixl_bytes")
    low, high = NIXL_BYTES_BAND

    def ray_sum(sizes: list[float]) -> float:
        bucket = [next(i for i, b in enumerate(NIXL_BYTES_BUCKETS) if s <= b) for s in sizes]
        return sum(midpoints[i] for i in bucket)

    rng = random.Random(46)
    one_block, whole_context = 16 * 32 * 1024, 4096 * 32 * 1024  # the default model, 16 to 4096 tokens
    just_above, at_bound = float(2**19 + 1), float(2**19)  # 2**19: a bound, and one block of 16 tokens
    for sizes in (
        [just_above] * 50,  # Ray counts each as its bucket's midpoint: 2.5x
        [at_bound] * 50,  # at the top of its bucket: 0.625x
        [rng.uniform(one_block, whole_context) for _ in range(500)],
    ):
        assert low * ray_sum(sizes) <= sum(sizes) <= high * ray_sum(sizes)
    assert ray_sum([just_above]) / just_above > 2.4  # why Ray's figure alone is not the answer

    panel = next(
        p for p in _panels(pd_dashboard(settings())["panels"]) if p.get("title") == "NIXL throughput"
    )
    legends = {t["legendFormat"]: t["expr"] for t in panel["targets"]}
    assert legends["at least"] == f"{low:g} * {NIXL_THROUGHPUT}"
    assert legends["at most"] == f"{high:g} * {NIXL_THROUGHPUT}"
    assert "0.625x and 2.5x" in panel["description"]
    for expr in legends.values():
        promql_parser.parse(_grafana_free(expr))
