"""`python -m ops status` from recorded cluster answers: the RayService's Ready condition, deprecated
serviceStatus and application statuses, where each Ray pod runs, and what each GPU node offers; with
--stack, the namespace, name and kubeconfig come from the stack.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from ops.cli import main
from ops.kube import ConnectOptions, ServiceEndpoint
from ops.stack import load_stack_config
from ops.status import Condition, collect_status
from tests.fakes.kube import GPU_NODES, HEAD, SYSTEM_NODE, WORKERS, FakeKubeApi, healthy_cluster
from tests.fakes.pulumi import ROOT


def run_status(cluster: FakeKubeApi, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["status", *argv], connect=lambda _: cluster)
    out, err = capsys.readouterr()
    return code, out, err


def test_status_report_reads_service_apps_pods_and_gpu_capacity():
    report = collect_status(healthy_cluster(), "inference", "ray-llm")

    service = report.rayservice
    assert service is not None
    assert service.service_status == "Running"
    assert service.ready == Condition(
        "Ready", "True", "NonZeroServeEndpoints", "Number of serve endpoints is greater than 0"
    )
    assert service.active_cluster == "ray-llm-6mzvd"
    assert service.pending_cluster is None
    assert [(a.name, a.status) for a in service.applications] == [("qwen", "RUNNING")]
    assert dict(service.applications[0].deployments) == {
        "Decode:qwen3_5-9b": "HEALTHY",
        "OpenAiIngress": "HEALTHY",
        "Prefill:qwen3_5-9b": "HEALTHY",
    }
    assert [(p.name, p.node_type, p.node, p.phase, p.ready) for p in report.pods] == [
        (HEAD, "head", SYSTEM_NODE, "Running", True),
        (WORKERS[0], "worker", GPU_NODES[0], "Running", True),
        (WORKERS[1], "worker", GPU_NODES[1], "Running", True),
    ]
    # Only GPU nodes, with their allocatable GPUs and EFA interfaces; the system node is not listed.
    assert [(n.name, n.instance_type, n.zone, n.gpus, n.efa) for n in report.gpu_nodes] == [
        (GPU_NODES[0], "g6.8xlarge", "sa-east-1a", 1, 1),
        (GPU_NODES[1], "g6.8xlarge", "sa-east-1a", 1, 1),
    ]


def test_status_prints_the_report_and_exits_0(capsys, kubeconfig):
    code, out, _ = run_status(healthy_cluster(), capsys, "--kubeconfig", str(kubeconfig))

    assert code == 0
    assert "RayService inference/ray-llm" in out
    assert "Ready: True (NonZeroServeEndpoints" in out
    assert "serviceStatus: Running" in out
    assert "application qwen: RUNNING" in out
    assert "    Prefill:qwen3_5-9b: HEALTHY" in out
    assert re.search(rf"{WORKERS[0]}\s+worker\s+Running\s+yes\s+{re.escape(GPU_NODES[0])}", out)
    assert re.search(rf"{HEAD}\s+head\s+Running\s+yes\s+{re.escape(SYSTEM_NODE)}", out)
    assert re.search(rf"{re.escape(GPU_NODES[1])}\s+g6\.8xlarge\s+sa-east-1a\s+1\s+1$", out, re.MULTILINE)


def test_status_while_deploying_shows_what_is_not_ready_yet(capsys, kubeconfig):
    cluster = healthy_cluster()
    assert cluster.rayservice is not None
    status = cluster.rayservice["status"]
    del status["serviceStatus"]
    status["conditions"][0].update(status="False", reason="Initializing", message="")
    app = status["activeServiceStatus"]["applicationStatuses"]["qwen"]
    app.update(status="DEPLOYING", message="Deploying app 'qwen'.")
    app["serveDeploymentStatuses"]["Decode:qwen3_5-9b"] = {"status": "UPDATING"}
    worker: dict[str, Any] = cluster.pod(WORKERS[1])
    del worker["spec"]["nodeName"]
    worker["status"] = {"phase": "Pending", "conditions": []}

    code, out, _ = run_status(cluster, capsys, "--kubeconfig", str(kubeconfig))

    assert code == 0
    assert "Ready: False (Initializing)" in out
    assert "serviceStatus: (empty)" in out
    assert "application qwen: DEPLOYING (Deploying app 'qwen'.)" in out
    assert "    Decode:qwen3_5-9b: UPDATING" in out
    assert re.search(rf"{WORKERS[1]}\s+worker\s+Pending\s+no\s+-\s+-\s+-$", out, re.MULTILINE)


def test_status_of_a_missing_rayservice_exits_1(capsys, kubeconfig):
    cluster = healthy_cluster()
    cluster.rayservice = None

    code, out, _ = run_status(cluster, capsys, "--kubeconfig", str(kubeconfig))

    assert code == 1
    assert "not found" in out
    # Pods and nodes are still reported: they tell why the RayService may be missing.
    assert "GPU nodes (role=gpu-worker): 2" in out


def test_status_with_stack_reads_namespace_name_and_kubeconfig_from_the_stack(tmp_path, capsys):
    config = load_stack_config(ROOT, "dev")
    config["ray-llm-eks:serving"] = {"namespace": "llm", "name": "chat"}
    (tmp_path / "Pulumi.staging.yaml").write_text(yaml.safe_dump({"config": config}))
    kubeconfig_json = json.dumps({"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "eks"}]})
    commands: list[tuple[list[str], Path]] = []
    seen: dict[str, Any] = {}

    def pulumi(command: list[str], **kwargs: Any) -> subprocess.CompletedProcess[str]:
        commands.append((command, kwargs["cwd"]))
        return subprocess.CompletedProcess(command, 0, stdout=kubeconfig_json + "\n", stderr="")

    def connect(options: ConnectOptions) -> FakeKubeApi:
        assert options.kubeconfig is not None
        seen["options"] = options
        seen["mode"] = stat.S_IMODE(os.stat(options.kubeconfig).st_mode)
        seen["content"] = options.kubeconfig.read_text()
        return healthy_cluster()

    cluster_code = main(
        ["status", "--stack", "staging", "--root", str(tmp_path)], connect=connect, run=pulumi
    )
    out, err = capsys.readouterr()

    assert commands == [
        (
            ["pulumi", "stack", "output", "kubeconfig", "--show-secrets", "--json", "--stack", "staging"],
            tmp_path,
        )
    ]
    assert seen["mode"] == 0o600
    assert json.loads(seen["content"]) == json.loads(kubeconfig_json)
    assert not seen["options"].kubeconfig.exists(), "the temporary kubeconfig outlived the command"
    assert seen["options"].endpoint == ServiceEndpoint("llm", "chat-serve-svc")
    assert "RayService llm/chat" in out
    assert cluster_code == 1  # the fake holds inference/ray-llm only
    assert "pulumi stack output kubeconfig" in err  # progress on stderr


def test_status_shows_how_long_each_ray_pod_took_to_start_and_to_serve(capsys, kubeconfig):
    """From the pod objects: creation to containers running (scheduling, image pull), and to Ready (a
    worker: model downloaded, loaded, serving); docs/time-to-serving.md has the figures to compare."""
    report = collect_status(healthy_cluster(), "inference", "ray-llm")
    timings = {p.name: (p.started_s, p.ready_s) for p in report.pods}
    assert timings[HEAD] == (254, 261)
    assert timings[WORKERS[0]] == (254, 529)
    code, out, _ = run_status(healthy_cluster(), capsys, "--kubeconfig", str(kubeconfig))
    assert code == 0
    assert re.search(rf"{WORKERS[0]}\s+worker\s+Running\s+yes\s+\S+\s+4m14s\s+8m49s$", out, re.MULTILINE)


def test_a_gpu_nodes_zone_comes_from_the_current_label_not_the_deprecated_one():
    """Kubernetes set both until 1.x; newer kubelets set only topology.kubernetes.io/zone."""
    from ops.status import parse_gpu_node

    node = {
        "metadata": {
            "name": "ip-10-0-1-2",
            "labels": {
                "topology.kubernetes.io/zone": "sa-east-1b",
                "failure-domain.beta.kubernetes.io/zone": "sa-east-1a",
            },
        },
        "status": {"allocatable": {"nvidia.com/gpu": "1", "vpc.amazonaws.com/efa": "1"}},
    }
    assert parse_gpu_node(node).zone == "sa-east-1b"
    del node["metadata"]["labels"]["topology.kubernetes.io/zone"]
    assert parse_gpu_node(node).zone == "?"
