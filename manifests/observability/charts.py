"""kube-prometheus-stack's and dcgm-exporter's chart values, their namespaces and the gp3 StorageClass.

What was read upstream and decided here (kube-prometheus-stack 88.5.3, dcgm-exporter 4.8.2):

- Everything but the node DaemonSets runs on the system nodes, with requests planning/system_pods.py
  counts (the chart sets none). Prometheus selects monitors and rules from every namespace
  (`*SelectorNilUsesHelmValues: false`; otherwise only objects labelled with its release), keeps
  `observability.retentionDays` and at most 90 % of its gp3 volume.
- EKS runs the control plane: the chart's scrapes of the controller manager, scheduler, etcd and
  kube-proxy (and their always-firing "down" alerts) are off.
- Grafana's admin password comes from a Secret the stack generates (`admin.existingSecret`); no
  anonymous access; embedding allowed, for the Ray dashboard's metrics tabs.
- dcgm-exporter: on the GPU nodes only, tolerating their taint; `honorLabels` keeps its `pod` and
  `namespace` labels (the GPU's pod) instead of renaming them `exported_*`.
"""

from __future__ import annotations

from typing import Any

from config import Settings, versions
from manifests.charts import HelmChart
from manifests.k8s import namespace, pod_security_labels
from manifests.observability.efa_counters import node_exporter_values
from planning import system_pods as requests
from planning.names import cluster_scoped_name
from planning.nodes import Placement, placement
from planning.system_pods import PodRequests

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
            # With prefill/decode disaggregation, a sidecar exports the EFA devices' byte counters,
            # which node-exporter's InfiniBand collector does not read (efa_counters.py).
            "prometheus-node-exporter": {
                "namespaceOverride": NODE_AGENTS_NAMESPACE,
                "resources": _resources(requests.NODE_EXPORTER, "64Mi"),
                **(
                    node_exporter_values(_resources(requests.EFA_COUNTERS, "32Mi"))
                    if requests.efa_counters(settings)
                    else {}
                ),
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
