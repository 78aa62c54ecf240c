"""The metrics stack as data: kube-prometheus-stack's and dcgm-exporter's values, the monitors that
scrape Ray, the alert rules, the gp3 StorageClass and the dashboards' ConfigMaps, built from the
settings in one place (`build_observability`).

What was read upstream and decided here (kube-prometheus-stack 88.5.3, dcgm-exporter 4.8.2, KubeRay
1.7.0, Ray 2.58.0, vLLM 0.26.0):

- Everything but the node DaemonSets runs on the system nodes, with requests planning/system_pods.py
  counts (the chart sets none). Prometheus selects monitors and rules from every namespace
  (`*SelectorNilUsesHelmValues: false`; otherwise only objects labelled with its release), keeps
  `observability.retentionDays` and at most 90 % of its gp3 volume.
- EKS runs the control plane: the chart's scrapes of the controller manager, scheduler, etcd and
  kube-proxy (and their always-firing "down" alerts) are off.
- Grafana's admin password comes from a Secret the stack generates (`admin.existingSecret`); no
  anonymous access; embedding allowed, for the Ray dashboard's metrics tabs.
- Ray: KubeRay adds the `metrics` port (8080) to head and workers itself; the head also declares
  `as-metrics` (44217, autoscaler) and `dash-metrics` (44227, dashboard), as KubeRay's samples do.
  PodMonitors, not ServiceMonitors: a RayService has two head Services, which would count twice. The
  target gets `ray_io_cluster` from the pod's `ray.io/cluster` label, which Ray's dashboards filter on.
- vLLM's metrics reach Prometheus through Ray (`log_engine_metrics`, on by default) as `ray_vllm_*`,
  counters with `_total`. They carry `model_name` and `WorkerId` but no deployment: prefill and decode
  are told apart by joining on `WorkerId` to a Serve metric that has it (planning of the PD dashboard,
  manifests/pd_dashboard.py).
- dcgm-exporter: on the GPU nodes only, tolerating their taint; `honorLabels` keeps its `pod` and
  `namespace` labels (the GPU's pod) instead of renaming them `exported_*`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from config import Settings, versions
from manifests.charts import HelmChart
from manifests.k8s import namespace, pod_security_labels
from manifests.network_policy import PROMETHEUS_PODS
from manifests.pd_dashboard import pd_dashboard
from planning import system_pods as requests
from planning.context import ClusterContext
from planning.names import cluster_scoped_name
from planning.nodes import Placement, placement
from planning.reservation import CapacityPlan
from planning.system_pods import PodRequests, ray_autoscaling

MONITORING_NAMESPACE = "monitoring"
NODE_AGENTS_NAMESPACE = "node-agents"
"""node-exporter and dcgm-exporter: the two agents that need the host, in a privileged namespace of
their own so `monitoring` runs baseline."""
OPERATOR_WEBHOOK_PORT = 10250
"""The Prometheus operator's admission webhook (kube-prometheus-stack 88.5.3 values
`prometheusOperator.tls.internalPort`)."""
GRAFANA_CONTAINER_PORT = 3000
"""Grafana's container port behind its Service's port 80 (grafana 12.11.1 values `service.targetPort`)."""
DCGM_EXPORTER_PORT = 9400
"""dcgm-exporter's metrics port (dcgm-exporter 4.8.2 values `service.port`)."""
RELEASE = "kube-prometheus-stack"
FULLNAME = "kps"
"""The chart's fullnameOverride: Services `kps-prometheus` (9090) and `kps-alertmanager` (9093)."""
PROMETHEUS_SERVICE = f"{FULLNAME}-prometheus"
PROMETHEUS_PORT = 9090
GRAFANA_SERVICE = "grafana"
"""Grafana's fullnameOverride: Service `grafana`, port 80 (container 3000)."""
GRAFANA_PORT = 80
GRAFANA_ADMIN_SECRET = "grafana-admin"
GRAFANA_ADMIN_USER = "admin"
STORAGE_CLASS = "gp3"
DASHBOARD_LABEL = "grafana_dashboard"
DASHBOARD_FOLDER_ANNOTATION = "grafana_folder"
DASHBOARD_FOLDER = "Ray LLM"
RAY_DASHBOARDS = Path(__file__).resolve().parent / "dashboards" / f"ray-{versions.RAY_VERSION}"
"""Ray's own dashboards, generated from the Ray the image runs (PROVENANCE.md there)."""
DASHBOARD_METRICS_PORT: tuple[str, int] = ("dash-metrics", 44227)
"""Ray's dashboard metrics, on the head; KubeRay does not declare the port itself."""
AUTOSCALER_METRICS_PORT: tuple[str, int] = ("as-metrics", 44217)
"""KubeRay's autoscaler sidecar's metrics, in the head pod: only where it runs (a scraped port nobody
listens on would make kube-prometheus-stack's TargetDown fire for ever)."""


def head_metrics_ports(settings: Settings) -> dict[str, int]:
    """The head's metrics ports beside KubeRay's own `metrics` (8080)."""
    chosen = (
        [AUTOSCALER_METRICS_PORT, DASHBOARD_METRICS_PORT]
        if ray_autoscaling(settings)
        else [DASHBOARD_METRICS_PORT]
    )
    return {name: port for name, port in chosen}


GRAFANA_LOCAL_URL = "http://127.0.0.1:3000"
"""Where the browser reaches Grafana through `ops dashboards` (the Ray dashboard's iframes load from here)."""


def _resources(pod: PodRequests, memory_limit: str | None = None) -> dict[str, Any]:
    resources: dict[str, Any] = {"requests": {"cpu": pod.cpu, "memory": pod.memory}}
    if memory_limit:
        resources["limits"] = {"memory": memory_limit}
    return resources


def monitored_namespaces(settings: Settings) -> dict[str, Any]:
    """Where the stack's own Prometheus takes monitors and rules from: its own namespace (the chart's
    monitors), the node agents' (node-exporter, dcgm-exporter), the KubeRay operator's and the serving
    namespace (the Ray PodMonitors and the alert rules), by the name label the API server sets."""
    names = sorted(
        {MONITORING_NAMESPACE, NODE_AGENTS_NAMESPACE, settings.kuberay.namespace, settings.serving.namespace}
    )
    return {"matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": names}]}


def kube_prometheus_stack_chart(settings: Settings) -> HelmChart:
    observe = settings.observability
    on_system = placement(settings).on_system_nodes()
    reloader = _resources(requests.PROMETHEUS_CONFIG_RELOADER, "64Mi")
    return HelmChart(
        chart="kube-prometheus-stack",
        version=versions.KUBE_PROMETHEUS_STACK_CHART_VERSION,
        repo=versions.KUBE_PROMETHEUS_STACK_CHART_REPO,
        namespace=MONITORING_NAMESPACE,
        values={
            "fullnameOverride": FULLNAME,
            # The stack applies the CRDs itself (Helm would never upgrade them).
            "crds": {"enabled": False},
            # EKS runs these; scraping them fails and their "down" alerts would fire forever.
            "kubeControllerManager": {"enabled": False},
            "kubeScheduler": {"enabled": False},
            "kubeEtcd": {"enabled": False},
            "kubeProxy": {"enabled": False},
            "prometheusOperator": {
                **on_system,
                "resources": _resources(requests.PROMETHEUS_OPERATOR, "256Mi"),
                "admissionWebhooks": {"patch": on_system},
                # The operator passes these to every config-reloader sidecar it injects (chart 88.5.3
                # reads them here, templates/prometheus-operator/deployment.yaml; not at the top level).
                "prometheusConfigReloader": {"resources": reloader},
            },
            "prometheus": {
                "prometheusSpec": {
                    **on_system,
                    "resources": _resources(requests.PROMETHEUS, "4Gi"),
                    "retention": f"{observe.retention_days}d",
                    "retentionSize": f"{int(observe.storage_gib * 0.9)}GiB",
                    "storageSpec": {
                        "volumeClaimTemplate": {
                            "spec": {
                                "storageClassName": cluster_scoped_name(settings, STORAGE_CLASS),
                                "accessModes": ["ReadWriteOnce"],
                                "resources": {"requests": {"storage": f"{observe.storage_gib}Gi"}},
                            }
                        }
                    },
                    # No lifecycle API: the operator reloads Prometheus by SIGHUP instead of POST /-/reload,
                    # so no pod that reaches :9090 can POST /-/quit (operator v0.70+, promcfg.go).
                    "reloadStrategy": "ProcessSignal",
                    # No ServiceMonitor may point Prometheus at files on its own disk (bearer tokens, TLS).
                    "arbitraryFSAccessThroughSMs": {"deny": True},
                    # Monitors and rules whatever their labels, not only those labelled for this release,
                    # but only from the namespaces the stack puts them in (issue 39): a monitor in any
                    # other namespace cannot point this Prometheus at pods, files or credentials.
                    **{
                        f"{kind}SelectorNilUsesHelmValues": False
                        for kind in ("podMonitor", "serviceMonitor", "rule", "probe", "scrapeConfig")
                    },
                    **{
                        f"{kind}NamespaceSelector": monitored_namespaces(settings)
                        for kind in ("podMonitor", "serviceMonitor", "rule", "probe", "scrapeConfig")
                    },
                }
            },
            "alertmanager": {
                "alertmanagerSpec": {
                    **on_system,
                    "resources": _resources(requests.ALERTMANAGER, "256Mi"),
                }
            },
            "grafana": {
                "fullnameOverride": GRAFANA_SERVICE,
                **on_system,
                "resources": _resources(requests.GRAFANA, "512Mi"),
                "admin": {
                    "existingSecret": GRAFANA_ADMIN_SECRET,
                    "userKey": "admin-user",
                    "passwordKey": "admin-password",
                },
                # No anonymous access (Grafana's default); the Ray dashboard embeds Grafana panels.
                "grafana.ini": {"security": {"allow_embedding": True}},
                # Grafana reads its own namespace only (a Role, not a ClusterRole), and its sidecars read
                # ConfigMaps only, never Secrets (the chart's default is both, cluster-wide with "ALL").
                "rbac": {"namespaced": True},
                "sidecar": {
                    "dashboards": {
                        "enabled": True,
                        "label": DASHBOARD_LABEL,
                        "labelValue": "1",
                        "resource": "configmap",
                        "folderAnnotation": DASHBOARD_FOLDER_ANNOTATION,
                        "provider": {"foldersFromFilesStructure": True},
                    },
                    "datasources": {"resource": "configmap"},
                },
            },
            "kube-state-metrics": {
                **on_system,
                "resources": _resources(requests.KUBE_STATE_METRICS, "256Mi"),
                # Its ClusterRole then lists no Secret anywhere (the chart drops the rule with it).
                "collectorsExclude": ["secrets"],
            },
            # On every node (its chart tolerates every NoSchedule taint, the GPU taint included).
            # In the privileged node-agents namespace (`node_agents_namespace`), with its ServiceMonitor.
            "prometheus-node-exporter": {
                "namespaceOverride": NODE_AGENTS_NAMESPACE,
                "resources": _resources(requests.NODE_EXPORTER, "64Mi"),
            },
        },
        skip_crds=True,
    )


def kube_prometheus_stack_crds() -> list[str]:
    return [versions.kube_prometheus_stack_crd_url(plural) for plural in versions.KUBE_PROMETHEUS_STACK_CRDS]


def dcgm_exporter_chart(placement: Placement) -> HelmChart:
    """On the GPU nodes only, in the node-agents namespace; its ServiceMonitor is scraped like any
    other (every namespace)."""
    return HelmChart(
        chart="dcgm-exporter",
        version=versions.DCGM_EXPORTER_CHART_VERSION,
        repo=versions.DCGM_EXPORTER_CHART_REPO,
        namespace=NODE_AGENTS_NAMESPACE,
        values={
            "nodeSelector": placement.gpu_selector,
            "tolerations": [placement.gpu_toleration],
            "serviceMonitor": {"enabled": True, "interval": "15s", "honorLabels": True},
        },
    )


def storage_class(settings: Settings) -> dict[str, Any]:
    """gp3 through the EBS CSI driver, encrypted, created where the pod lands (the volume's zone); kept
    or deleted at `destroy` as `observability.keepVolumeOnDestroy` says; named apart from the team's on a
    team's cluster (planning/names.py)."""
    keep_volume = settings.observability.keep_volume_on_destroy
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": cluster_scoped_name(settings, STORAGE_CLASS)},
        "provisioner": "ebs.csi.aws.com",
        "parameters": {"type": "gp3", "encrypted": "true"},
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowVolumeExpansion": True,
        "reclaimPolicy": "Retain" if keep_volume else "Delete",
    }


def monitoring_namespace() -> dict[str, Any]:
    """baseline enforced, restricted audited: nothing there needs a host namespace, a host path or a
    capability once the node agents live in their own namespace. Not restricted: not every pod the
    charts make (admission Jobs, Grafana's init containers) was read against it at the pinned versions;
    the audit label reports any that would fail."""
    return namespace(MONITORING_NAMESPACE, pod_security_labels("baseline"))


def node_agents_namespace() -> dict[str, Any]:
    """node-exporter needs the host's network and PID namespaces and host paths, dcgm-exporter the
    kubelet's pod-resources socket and SYS_ADMIN: privileged enforced, baseline audited, so anything
    else that lands here stands out. Nothing else runs here."""
    return namespace(NODE_AGENTS_NAMESPACE, pod_security_labels("privileged", audit="baseline"))


PROMETHEUS_OPERATED = "prometheus-operated"
"""The governing Service prometheus-operator makes for every Prometheus in its namespace (port 9090)."""


@dataclass(frozen=True)
class Scraper:
    """The Prometheus that scrapes the stack's pods: the stack's own, or an existing cluster's."""

    namespace: str
    pods: dict[str, str]
    """Its pods' labels (prometheus-operator's: pkg/prometheus/server/operator.go `makeSelectorLabels`)."""
    service: str
    """The Service in front of it (kube-prometheus-stack's, or the `prometheus-operated` one
    prometheus-operator makes in every namespace with a Prometheus), on PROMETHEUS_PORT."""

    @property
    def url(self) -> str:
        """Where the Ray head asks it for the dashboard's metrics tabs."""
        return f"http://{self.service}.{self.namespace}.svc:{PROMETHEUS_PORT}"

    @property
    def ref(self) -> str:
        """`namespace/service`: the stack's `prometheusService` output, where `ops` asks it."""
        return f"{self.namespace}/{self.service}"


def scraper(context: ClusterContext) -> Scraper:
    existing = context.addons.prometheus
    if existing:
        return Scraper(
            existing.namespace,
            {"app.kubernetes.io/name": "prometheus", "operator.prometheus.io/name": existing.name},
            PROMETHEUS_OPERATED,
        )
    return Scraper(MONITORING_NAMESPACE, dict(PROMETHEUS_PODS), PROMETHEUS_SERVICE)


OPERATOR_PODS = {"app": "kube-prometheus-stack-operator"}
"""prometheus-operator's pods (kube-prometheus-stack 88.5.3 templates/prometheus-operator/deployment.yaml:
`app: {{ kube-prometheus-stack.name }}-operator`, the chart's name without nameOverride)."""


def _relabel_cluster() -> list[dict[str, Any]]:
    return [
        {
            "action": "replace",
            "sourceLabels": ["__meta_kubernetes_pod_label_ray_io_cluster"],
            "targetLabel": "ray_io_cluster",
        }
    ]


def monitor_metadata(
    name: str, namespace_: str, context: ClusterContext, rule: bool = False
) -> dict[str, Any]:
    """A monitor's or rule's metadata: in `namespace_`, or where an existing Prometheus looks (its own
    namespace, which planning/addons.py checks its namespace selectors take in), labelled as its
    selectors ask."""
    existing = context.addons.prometheus
    if existing is None:
        return {"name": name, "namespace": namespace_}
    labels = existing.rule_labels if rule else existing.monitor_labels
    return {"name": name, "namespace": existing.namespace, **({"labels": dict(labels)} if labels else {})}


def pod_monitors(settings: Settings, context: ClusterContext) -> list[dict[str, Any]]:
    """KubeRay's PodMonitors (config/prometheus/podMonitor.yaml at v1.7.0) for the serving namespace's Ray
    pods: in that namespace, or in an existing Prometheus's, naming the serving namespace."""
    serving_namespace = settings.serving.namespace

    def monitor(name: str, node_type: str, ports: list[str]) -> dict[str, Any]:
        spec: dict[str, Any] = {
            "selector": {"matchLabels": {"ray.io/node-type": node_type}},
            "podMetricsEndpoints": [{"port": port, "relabelings": _relabel_cluster()} for port in ports],
        }
        if context.addons.prometheus:
            spec["namespaceSelector"] = {"matchNames": [serving_namespace]}
        return {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PodMonitor",
            "metadata": monitor_metadata(name, serving_namespace, context),
            "spec": spec,
        }

    return [
        monitor("ray-head-monitor", "head", ["metrics", *head_metrics_ports(settings)]),
        monitor("ray-workers-monitor", "worker", ["metrics"]),
    ]


def kuberay_service_monitor(settings: Settings, context: ClusterContext) -> dict[str, Any]:
    """The KubeRay operator's own metrics (RayService Ready, upgrades), from its Service's `http` port:
    in the operator's namespace, or in an existing Prometheus's, naming the operator's."""
    spec: dict[str, Any] = {
        "selector": {"matchLabels": {"app.kubernetes.io/name": "kuberay-operator"}},
        "endpoints": [{"port": "http", "path": "/metrics", "honorLabels": True}],
    }
    if context.addons.prometheus:
        spec["namespaceSelector"] = {"matchNames": [settings.kuberay.namespace]}
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": monitor_metadata("kuberay-operator", settings.kuberay.namespace, context),
        "spec": spec,
    }


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
            "(gpuNodes.capacityReservation).",
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


def alert_rules(settings: Settings, capacity: CapacityPlan | None = None) -> list[dict[str, Any]]:
    """The alerts that matter for a disaggregated LLM service, one group (the PrometheusRule's spec);
    with a Capacity Block (`capacity`), its end too."""
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
        }
    ]


def prometheus_rule(
    settings: Settings, context: ClusterContext, capacity: CapacityPlan | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": monitor_metadata("ray-llm-alerts", settings.serving.namespace, context, rule=True),
        "spec": {"groups": alert_rules(settings, capacity)},
    }


def ray_dashboards() -> dict[str, str]:
    """Ray's own dashboards for the image's Ray: file name -> JSON."""
    return {path.name: path.read_text() for path in sorted(RAY_DASHBOARDS.glob("*.json"))}


def dashboard_config_maps(settings: Settings, context: ClusterContext) -> list[dict[str, Any]]:
    """One ConfigMap per dashboard, labelled for Grafana's sidecar, in a folder of their own: beside the
    stack's Grafana, or in an existing Prometheus's namespace (kube-prometheus-stack's Grafana sidecar
    looks for the same label in every namespace: `sidecar.dashboards.searchNamespace: ALL` at 88.5.3)."""
    existing = context.addons.prometheus
    dashboards = {**ray_dashboards(), "pd_dashboard.json": json.dumps(pd_dashboard(settings), indent=2)}
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": f"dashboard-{name.removesuffix('.json').replace('_', '-')}",
                "namespace": existing.namespace if existing else MONITORING_NAMESPACE,
                "labels": {DASHBOARD_LABEL: "1"},
                "annotations": {DASHBOARD_FOLDER_ANNOTATION: DASHBOARD_FOLDER},
            },
            "data": {name: content},
        }
        for name, content in dashboards.items()
    ]


def head_dashboard_env(context: ClusterContext) -> dict[str, str]:
    """The Ray dashboard's metrics tabs: Grafana and Prometheus in the cluster for the head's own
    queries, Grafana through `ops dashboards` for the browser's iframes. With an existing Prometheus,
    only Prometheus (through the Service prometheus-operator makes for it): where its Grafana is, the
    stack cannot know."""
    if context.addons.prometheus:
        return {"RAY_PROMETHEUS_HOST": scraper(context).url}
    return {
        "RAY_GRAFANA_HOST": f"http://{GRAFANA_SERVICE}.{MONITORING_NAMESPACE}.svc:{GRAFANA_PORT}",
        "RAY_PROMETHEUS_HOST": scraper(context).url,
        "RAY_GRAFANA_IFRAME_HOST": GRAFANA_LOCAL_URL,
    }


@dataclass(frozen=True)
class ObservabilityManifests:
    serving_namespace: str
    """Where the monitors and rules go unless an existing Prometheus wants them in its own namespace."""
    namespace: dict[str, Any]
    node_agents_namespace: dict[str, Any]
    """node-exporter and dcgm-exporter, privileged, apart from the rest."""
    storage_class: dict[str, Any]
    kube_prometheus_stack: HelmChart | None
    """None: an existing Prometheus scrapes; the stack ships only monitors, rules and dashboards."""
    dcgm_exporter: HelmChart | None
    """None: the cluster's own dcgm-exporter."""
    pod_monitors: list[dict[str, Any]]
    kuberay_service_monitor: dict[str, Any] | None
    """None: the cluster's own KubeRay operator, which its team monitors."""
    prometheus_rule: dict[str, Any]
    dashboards: list[dict[str, Any]]

    def monitoring_objects(self) -> list[dict[str, Any]]:
        """What needs the prometheus-operator CRDs, for `ops render` and the program alike."""
        service = [self.kuberay_service_monitor] if self.kuberay_service_monitor else []
        return [*self.pod_monitors, *service, self.prometheus_rule]


def build_observability(
    settings: Settings, context: ClusterContext, capacity: CapacityPlan | None = None
) -> ObservabilityManifests:
    """`capacity`: the reservation the GPU nodes run on, read at preview (a Capacity Block's end is an
    alert)."""
    addons = context.addons
    return ObservabilityManifests(
        serving_namespace=settings.serving.namespace,
        namespace=monitoring_namespace(),
        node_agents_namespace=node_agents_namespace(),
        storage_class=storage_class(settings),
        kube_prometheus_stack=kube_prometheus_stack_chart(settings)
        if addons.installs("prometheus")
        else None,
        dcgm_exporter=dcgm_exporter_chart(placement(settings)) if addons.installs("dcgmExporter") else None,
        pod_monitors=pod_monitors(settings, context),
        kuberay_service_monitor=kuberay_service_monitor(settings, context)
        if addons.installs("kuberay")
        else None,
        prometheus_rule=prometheus_rule(settings, context, capacity),
        dashboards=dashboard_config_maps(settings, context),
    )
