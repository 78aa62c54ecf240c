"""`ops dashboards`: Grafana, Prometheus and the Ray dashboard on this machine, through `kubectl
port-forward` with the stack's kubeconfig, until Ctrl-C.

Grafana answers on 127.0.0.1:3000, which is also where the Ray dashboard's metrics tabs load their
panels from (the head's RAY_GRAFANA_IFRAME_HOST), so both work side by side in one browser once you
are logged in to Grafana (user `admin`, password: the stack's `grafanaAdminPassword` output). The Ray
dashboard asks for Ray's token, which the output says how to read.

Where the stack uses a team's Prometheus (an existing cluster's, `addons.prometheus`), Prometheus is
that one (the stack's `prometheusService` output) and Grafana is the team's, so it is not forwarded.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from manifests.observability.charts import (
    DASHBOARD_FOLDER_ANNOTATION,
    DASHBOARD_LABEL,
    GRAFANA_ADMIN_USER,
    GRAFANA_PORT,
    GRAFANA_SERVICE,
    MONITORING_NAMESPACE,
    PROMETHEUS_PORT,
)
from manifests.observability.dashboards import DASHBOARD_FOLDER, GRAFANA_LOCAL_URL
from manifests.pd_dashboard import UID as PD_DASHBOARD_UID
from manifests.ray_auth import RAY_AUTH_KEY, RAY_AUTH_SECRET
from ops.kube import OpsError, ServiceEndpoint, stack_prometheus

RAY_DASHBOARD_PORT = 8265


class Process(Protocol):
    def poll(self) -> int | None: ...

    def terminate(self) -> None: ...

    def wait(self, timeout: float | None = None) -> int: ...


Popen = Callable[[Sequence[str]], Process]


@dataclass(frozen=True)
class Forward:
    what: str
    namespace: str
    service: str
    local_port: int
    remote_port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.local_port}"

    def command(self, kubeconfig: Path | None) -> list[str]:
        where = ["--kubeconfig", str(kubeconfig)] if kubeconfig else []
        return [
            "kubectl",
            "port-forward",
            *where,
            "--namespace",
            self.namespace,
            f"svc/{self.service}",
            f"{self.local_port}:{self.remote_port}",
        ]


def forwards(
    serving_namespace: str, rayservice: str, prometheus: ServiceEndpoint | None = None
) -> list[Forward]:
    """Grafana, Prometheus and the Ray dashboard; with a team's Prometheus (`prometheus`, where the stack
    uses the cluster's) no Grafana: the team's Grafana is the team's to reach."""
    grafana_port = int(GRAFANA_LOCAL_URL.rsplit(":", 1)[1])
    where = prometheus or stack_prometheus()
    return [
        *(
            []
            if prometheus
            else [Forward("Grafana", MONITORING_NAMESPACE, GRAFANA_SERVICE, grafana_port, GRAFANA_PORT)]
        ),
        Forward("Prometheus", where.namespace, where.service, PROMETHEUS_PORT, PROMETHEUS_PORT),
        # KubeRay's head Service of a RayService follows the cluster that serves.
        Forward(
            "Ray dashboard",
            serving_namespace,
            f"{rayservice}-head-svc",
            RAY_DASHBOARD_PORT,
            RAY_DASHBOARD_PORT,
        ),
    ]


def login(forward: Forward) -> str:
    """The Ray dashboard asks for Ray's token (manifests/ray_auth.py); say where it is."""
    if forward.remote_port != RAY_DASHBOARD_PORT:
        return ""
    return (
        f"  (token: kubectl get secret {RAY_AUTH_SECRET} --namespace {forward.namespace} "
        f"-o jsonpath='{{.data.{RAY_AUTH_KEY}}}' | base64 -d)"
    )


def describe(chosen: Sequence[Forward], stack: str | None) -> str:
    password = (
        f"`pulumi stack output grafanaAdminPassword --show-secrets --stack {stack}`"
        if stack
        else "the stack's grafanaAdminPassword output"
    )
    lines = []
    for forward in chosen:
        if forward.what == "Grafana":
            lines += [
                f"{forward.what:<14} {forward.url}  (user {GRAFANA_ADMIN_USER}, password: {password})",
                f"{'':<14} {forward.url}/d/{PD_DASHBOARD_UID}  (prefill/decode at a glance)",
            ]
        else:
            lines.append(f"{forward.what:<14} {forward.url}{login(forward)}")
    prometheus = next(f for f in chosen if f.what == "Prometheus")
    if not any(f.what == "Grafana" for f in chosen):
        lines.append(
            f"{'Grafana':<14} yours: the stack's dashboards are ConfigMaps labelled {DASHBOARD_LABEL}=1 in "
            f"{prometheus.namespace} for its dashboard sidecar (folder {DASHBOARD_FOLDER!r} where the "
            f"sidecar reads {DASHBOARD_FOLDER_ANNOTATION}; prefill/decode at a glance: /d/{PD_DASHBOARD_UID})"
        )
    return "\n".join([*lines, "Ctrl-C stops the port-forwards."])


def run_forwards(
    chosen: Sequence[Forward],
    kubeconfig: Path | None,
    popen: Popen,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Start every port-forward; return when one stops (1) or on Ctrl-C (0), stopping the others."""
    processes: list[tuple[Forward, Process]] = []
    try:
        for forward in chosen:
            try:
                processes.append((forward, popen(forward.command(kubeconfig))))
            except FileNotFoundError:
                raise OpsError("kubectl is not installed (or not on PATH)", exit_code=2) from None
        while True:
            for forward, process in processes:
                code = process.poll()
                if code is not None:
                    raise OpsError(
                        f"the port-forward to {forward.what} stopped (exit {code}); see its output above"
                    )
            sleep(1.0)
    except KeyboardInterrupt:
        return 0
    finally:
        for _, process in processes:
            if process.poll() is None:
                process.terminate()
                process.wait(timeout=10)


def default_popen(command: Sequence[str]) -> Process:
    return subprocess.Popen(list(command))
