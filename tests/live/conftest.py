"""The live tier: a real Ray 2.58 head and a real Prometheus on 127.0.0.1, running what the stack renders.

Run by `.ci/run` after the main pytest (which leaves this directory out: pyproject's `norecursedirs`):

    .venv/bin/python -m pytest tests/live -p no:xdist

Session-scoped fixtures, for any live test module:

- `live_stack`: the stack rendered under the mocks (dev's stack file with `LIVE_OVERRIDES`, and
  `live_stack_for(stack)` for another stack file), the source of everything below.
- `ray_head` (`LiveRay`): `ray start --head --block` from the pinned ray[serve] in .venv, CPU only, every
  address 127.0.0.1 (`RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0`: Ray's local-only mode, so it never takes
  the host's interface address), in its own temporary directory and process group, with the head's env
  as rendered (token auth as KubeRay 1.7 turns `authOptions.mode: token` into `RAY_AUTH_MODE=token` and
  `RAY_AUTH_TOKEN`; `RAY_PROMETHEUS_HOST` pointed at the live Prometheus; `RAY_CLUSTER_NAME` as KubeRay
  sets it; `PYTHONPATH` holding the plugins ConfigMap's files as rendered, and this directory for
  tests/live/standin.py). `deploy(applications)` PUTs a serve config through the dashboard's Serve REST
  API with the token, as KubeRay does; `applications()` reads it back.
- `prometheus` (`LivePrometheus`): a `prometheus` server on PATH, or the Debian package's that .ci/run
  unpacks (.cache/promtool/usr/bin, beside promtool), scraping the head's metrics ports with the labels
  the stack's PodMonitors give
  (prometheus-operator's own relabelings, pkg/prometheus/promcfg.go: namespace, pod, container, `job`
  `<monitor namespace>/<monitor name>`, `endpoint` the port's name; then the monitor's relabelings,
  which add `ray_io_cluster` from the pod's `ray.io/cluster` label), with the stack's PrometheusRule
  groups loaded as rendered. `query(expr)`, `alerts()`.

Time is kept short by settings only a test would take: Ray reports metrics every second (gauges
dropped after 2 s unset instead of about 20 s), Serve pushes request counts every 0.5 s, Prometheus
scrapes and evaluates every second. Everything started is stopped at the end, failed or not: the
Ray launcher by SIGTERM (it stops what it started), then its whole process group; Prometheus likewise.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fakes.pulumi import ROOT, StackRun, run_stack

HERE = Path(__file__).resolve().parent
RAYSERVICE = "kubernetes:ray.io/v1:RayService"
HOST = "127.0.0.1"
CLUSTER = "ray-llm-raycluster-live"
"""The RayCluster's name: KubeRay's `RAY_CLUSTER_NAME` and the pods' `ray.io/cluster` label."""
LIVE_OVERRIDES: dict[str, dict[str, Any]] = {
    "autoscaling": {
        "signal": "llm",
        "upscaleDelaySeconds": 1,
        "downscaleDelaySeconds": 3,
        "prefill": {"maxReplicas": 2},
        "decode": {"maxReplicas": 2},
    },
    "gpuNodes": {"minSize": 0, "desiredSize": 2, "maxSize": 4},
}
"""Each side may scale (1 to 2; aggregated 2 to 4) on the LLM signal, with delays short enough to watch."""
PROMETHEUS = Path(shutil.which("prometheus") or ROOT / ".cache" / "promtool" / "usr" / "bin" / "prometheus")
"""On PATH, or where .ci/run unpacks Debian's prometheus package (beside promtool)."""
DEADLINE = 120.0
"""Startup waits: a loaded two-core machine starts a Ray head in 10 to 60 s."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def wait_for(
    what: str,
    check: Callable[[], Any],
    timeout: float = DEADLINE,
    every: float = 0.5,
    describe: Callable[[], Any] | None = None,
) -> Any:
    """`check()`'s first truthy answer; fails naming `what` and the last answer (or `describe()`) after
    `timeout`."""
    start, last = time.monotonic(), None
    while time.monotonic() - start < timeout:
        try:
            last = check()
        except (OSError, urllib.error.URLError, ValueError, KeyError) as error:
            last = error
        else:
            if last:
                return last
        time.sleep(every)
    pytest.fail(f"{what}: not within {timeout:.0f} s; last: {describe() if describe else last!r}")


def get_json(url: str, token: str | None = None, timeout: float = 10) -> Any:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=timeout) as response:
        return json.load(response)


def live_stack_for(stack: str) -> StackRun:
    return run_stack(stack=stack, overrides=LIVE_OVERRIDES)


@pytest.fixture(scope="session")
def live_stack() -> StackRun:
    return live_stack_for("dev")


def serve_applications(run: StackRun) -> list[dict[str, Any]]:
    return yaml.safe_load(run.one(RAYSERVICE).inputs["spec"]["serveConfigV2"])["applications"]


def head_env(run: StackRun) -> dict[str, str]:
    (container,) = run.one(RAYSERVICE).inputs["spec"]["rayClusterConfig"]["headGroupSpec"]["template"][
        "spec"
    ]["containers"]
    return {e["name"]: e["value"] for e in container["env"] if "value" in e}


def running(process: subprocess.Popen[bytes], log: Path) -> bool:
    """True while `process` runs; its log's end as the failure once it stopped."""
    if process.poll() is not None:
        pytest.fail(
            f"{process.args!r} exited {process.returncode}: {log.read_text(errors='replace')[-3000:]}"
        )
    return True


def stop_group(process: subprocess.Popen[bytes], grace: float) -> None:
    """SIGTERM to the process we started, then to its process group (only ours: a session of its own)."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(grace)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


@dataclass
class LiveRay:
    dashboard: str
    token: str
    ports: dict[str, int]
    """The head's metrics ports by the names the PodMonitor uses: metrics, dash-metrics, as-metrics."""
    serve_port: int
    prometheus_port: int
    """Where the head's `RAY_PROMETHEUS_HOST` points: the `prometheus` fixture listens there."""
    session: Path

    def deploy(self, applications: list[dict[str, Any]]) -> dict[str, Any]:
        """PUT the serve config, as KubeRay does, on the proxy's loopback port."""
        config = {"http_options": {"host": HOST, "port": self.serve_port}, "applications": applications}
        request = urllib.request.Request(
            f"{self.dashboard}/api/serve/applications/",
            data=json.dumps(config).encode(),
            method="PUT",
            headers={"Authorization": f"Bearer {self.token}", "Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60):
            pass
        return config

    def applications(self) -> dict[str, Any]:
        return get_json(f"{self.dashboard}/api/serve/applications/?api_type=declarative", self.token)

    def running_replicas(self, application: str, deployment: str) -> int:
        found = self.applications()["applications"].get(application) or {}
        replicas = (found.get("deployments") or {}).get(deployment, {}).get("replicas") or []
        return sum(1 for r in replicas if r.get("state") == "RUNNING")

    def controller_log(self) -> str:
        return "".join(
            p.read_text(errors="replace")
            for p in sorted((self.session / "logs" / "serve").glob("controller_*.log"))
        )


@pytest.fixture(scope="session")
def ray_head(live_stack: StackRun, tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveRay]:
    spec = live_stack.one(RAYSERVICE).inputs["spec"]["rayClusterConfig"]
    assert spec["authOptions"]["mode"] == "token"  # what KubeRay turns into RAY_AUTH_MODE=token
    plugins = tmp_path_factory.mktemp("plugins")
    for name, text in (
        live_stack.one("kubernetes:core/v1:ConfigMap", "ray-llm-plugins").inputs["data"].items()
    ):
        (plugins / name).write_text(text)
    temp = Path(tempfile.mkdtemp(prefix="rl46a", dir="/tmp"))  # Ray's socket paths must stay short
    ports = {"metrics": free_port(), "dash-metrics": free_port(), "as-metrics": free_port()}
    dashboard_port, gcs_port, serve_port = free_port(), free_port(), free_port()
    token = secrets.token_hex(32)
    prometheus_port = free_port()
    env = {
        **os.environ,
        **head_env(live_stack),
        "RAY_AUTH_MODE": "token",
        "RAY_AUTH_TOKEN": token,
        "RAY_CLUSTER_NAME": CLUSTER,
        "RAY_PROMETHEUS_HOST": f"http://{HOST}:{prometheus_port}",
        "PYTHONPATH": os.pathsep.join([str(plugins), str(HERE)]),
        "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
        "RAY_metrics_report_interval_ms": "1000",
        "RAY_SERVE_REPLICA_AUTOSCALING_METRIC_PUSH_INTERVAL_S": "0.5",
        "RAY_SERVE_HANDLE_AUTOSCALING_METRIC_PUSH_INTERVAL_S": "0.5",
        "DASHBOARD_METRIC_PORT": str(ports["dash-metrics"]),
        "AUTOSCALER_METRIC_PORT": str(ports["as-metrics"]),
        "RAY_USAGE_STATS_ENABLED": "0",
        # A Ray job's `python` (the self-heal driver) is this Python, as the image's is its own.
        "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    }
    for key in ("RAY_GRAFANA_HOST", "RAY_GRAFANA_IFRAME_HOST", "RAY_ADDRESS"):
        env.pop(key, None)
    ray = Path(sys.executable).with_name("ray")
    command = [
        str(ray), "start", "--head", "--block", f"--node-ip-address={HOST}", f"--port={gcs_port}",
        f"--dashboard-host={HOST}", f"--dashboard-port={dashboard_port}",
        f"--metrics-export-port={ports['metrics']}", f"--ray-client-server-port={free_port()}",
        f"--dashboard-agent-listen-port={free_port()}", "--num-cpus=8", f"--temp-dir={temp}",
        "--disable-usage-stats", "--include-dashboard=true",
    ]  # fmt: skip
    log_path = temp / "ray-start.log"
    log = log_path.open("wb")
    process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    head = LiveRay(
        f"http://{HOST}:{dashboard_port}", token, ports, serve_port, prometheus_port, temp / "session_latest"
    )
    try:
        wait_for("the Ray dashboard", lambda: running(process, log_path) and head.applications() is not None)
        yield head
    finally:
        stop_group(process, grace=5)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def scrape_configs(run: StackRun, ray: LiveRay) -> list[dict[str, Any]]:
    """The stack's PodMonitors as prometheus-operator writes them, for the one Ray pod here: the head."""
    pod = {"ray.io/cluster": CLUSTER, "ray.io/node-type": "head"}
    jobs = []
    for monitor in run.of_type("kubernetes:monitoring.coreos.com/v1:PodMonitor"):
        meta, spec = monitor.inputs["metadata"], monitor.inputs["spec"]
        if any(pod.get(k) != v for k, v in spec["selector"]["matchLabels"].items()):
            continue  # the workers' monitor: no worker pod here
        for index, endpoint in enumerate(spec["podMetricsEndpoints"]):
            relabelings = [
                {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
                {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
                {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
                {"target_label": "job", "replacement": f"{meta['namespace']}/{meta['name']}"},
                {"target_label": "endpoint", "replacement": endpoint["port"]},
                *(
                    {_snake(k): v for k, v in relabeling.items()}
                    for relabeling in endpoint.get("relabelings", [])
                ),
            ]
            labels = {
                "__meta_kubernetes_namespace": run.one(RAYSERVICE).inputs["metadata"]["namespace"],
                "__meta_kubernetes_pod_name": f"{CLUSTER}-head-live",
                "__meta_kubernetes_pod_container_name": "ray-head",
                **{
                    f"__meta_kubernetes_pod_label_{re.sub('[^a-zA-Z0-9_]', '_', k)}": v
                    for k, v in pod.items()
                },
            }
            jobs.append(
                {
                    "job_name": f"podMonitor/{meta['namespace']}/{meta['name']}/{index}",
                    "static_configs": [
                        {"targets": [f"{HOST}:{ray.ports[endpoint['port']]}"], "labels": labels}
                    ],
                    "relabel_configs": relabelings,
                }
            )
    return jobs


def _snake(key: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in key)


@dataclass
class LivePrometheus:
    url: str

    def query(self, expr: str) -> list[dict[str, Any]]:
        answer = get_json(f"{self.url}/api/v1/query?{urllib.parse.urlencode({'query': expr})}")
        return answer["data"]["result"]

    def alerts(self) -> list[dict[str, Any]]:
        return get_json(f"{self.url}/api/v1/alerts")["data"]["alerts"]


@pytest.fixture(scope="session")
def prometheus(live_stack: StackRun, ray_head: LiveRay) -> Iterator[LivePrometheus]:
    assert PROMETHEUS.exists(), f"{PROMETHEUS}: .ci/run unpacks Debian's prometheus package there"
    work = Path(tempfile.mkdtemp(prefix="rl46aprom"))
    (rule,) = live_stack.of_type("kubernetes:monitoring.coreos.com/v1:PrometheusRule")
    (work / "rules.yaml").write_text(yaml.safe_dump({"groups": rule.inputs["spec"]["groups"]}))
    config = {
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": ["rules.yaml"],
        "scrape_configs": scrape_configs(live_stack, ray_head),
    }
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = ray_head.prometheus_port
    log = (work / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            str(PROMETHEUS),
            f"--config.file={work / 'prometheus.yml'}",
            f"--storage.tsdb.path={work / 'data'}",
            f"--web.listen-address={HOST}:{port}",
        ],
        cwd=work,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    live = LivePrometheus(f"http://{HOST}:{port}")
    try:
        wait_for(
            "Prometheus's rules",
            lambda: (
                running(process, work / "prometheus.log")
                and get_json(f"{live.url}/api/v1/rules")["data"]["groups"]
            ),
        )
        wait_for("Ray's metrics scraped", lambda: live.query('up{job=~".*/ray-head-monitor"} == 1'))
        yield live
    finally:
        stop_group(process, grace=5)
        log.close()
        shutil.rmtree(work, ignore_errors=True)
