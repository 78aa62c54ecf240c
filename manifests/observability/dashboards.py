"""The dashboards' ConfigMaps Grafana's sidecar loads (Ray's own, generated from the image's Ray, and the
PD dashboard), and the head's settings that point Ray's dashboard at Grafana and Prometheus.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from config import Settings, versions
from manifests.observability.charts import (
    DASHBOARD_FOLDER_ANNOTATION,
    DASHBOARD_LABEL,
    GRAFANA_PORT,
    GRAFANA_SERVICE,
    MONITORING_NAMESPACE,
)
from manifests.observability.kv_path import KvPathFigures
from manifests.observability.monitors import scraper
from manifests.pd_dashboard import pd_dashboard
from planning.context import ClusterContext

DASHBOARD_FOLDER = "Ray LLM"
RAY_DASHBOARDS = Path(__file__).resolve().parent.parent / "dashboards" / f"ray-{versions.RAY_VERSION}"
"""Ray's own dashboards, generated from the Ray the image runs (PROVENANCE.md there)."""


GRAFANA_LOCAL_URL = "http://127.0.0.1:3000"
"""Where the browser reaches Grafana through `ops dashboards` (the Ray dashboard's iframes load from here)."""


def ray_dashboards() -> dict[str, str]:
    """Ray's own dashboards for the image's Ray: file name -> JSON."""
    return {path.name: path.read_text() for path in sorted(RAY_DASHBOARDS.glob("*.json"))}


def dashboard_config_maps(
    settings: Settings, context: ClusterContext, kv: KvPathFigures | None = None
) -> list[dict[str, Any]]:
    """One ConfigMap per dashboard, labelled for Grafana's sidecar, in a folder of their own: beside the
    stack's Grafana, or in an existing Prometheus's namespace (kube-prometheus-stack's Grafana sidecar
    looks for the same label in every namespace: `sidecar.dashboards.searchNamespace: ALL` at 88.5.3)."""
    existing = context.addons.prometheus
    dashboards = {**ray_dashboards(), "pd_dashboard.json": json.dumps(pd_dashboard(settings, kv), indent=2)}
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
