"""`ops status` with the stack's Prometheus (latency per side, NIXL figures) and `ops dashboards`
(Grafana, Prometheus and the Ray dashboard through port-forwards), against fakes."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from manifests.observability.kv_path import KV_STATUS_QUERIES, MECHANISM_QUERIES
from manifests.pd_dashboard import status_queries
from ops.cli import main
from ops.status import INSTANCE_TYPE_LABEL, collect_status
from planning.nodes import GPU_SIDE_LABEL
from tests.fakes.kube import healthy_cluster
from tests.fakes.ops import DECODE, PREFILL, FakeProcess, no_wait, prometheus_answers, vector
from tests.fakes.pulumi import ROOT


def test_status_shows_latency_per_side_and_the_kv_cache_over_nixl():
    cluster = healthy_cluster()
    cluster.prometheus = prometheus_answers()

    report = collect_status(cluster, "inference", "ray-llm").format()

    assert "Serving metrics (Prometheus, last 5 minutes)" in report
    assert f"time to first token p95: {DECODE} 520 ms, {PREFILL} 480 ms" in report
    assert f"inter-token latency p50: {DECODE} 19 ms" in report
    assert "NIXL: transfer 3 ms, 0.48-1.92 GB/s, 0 failed, 0 expired KV requests" in report


def test_status_says_when_every_kv_transfer_failed():
    cluster = healthy_cluster()
    cluster.prometheus = prometheus_answers()
    queries = status_queries()
    cluster.prometheus[queries["nixl_failures"]] = [vector(7)]

    # Some failed among many that completed: counted, no diagnosis.
    report = collect_status(cluster, "inference", "ray-llm").format()
    assert "7 failed" in report and "stale NIXL agent" not in report

    # Failed, and nothing completed: the stale agent of a prefill that restarted in place.
    cluster.prometheus[queries["nixl_done"]] = [vector(0)]
    report = collect_status(cluster, "inference", "ray-llm").format()
    assert "every KV transfer failed, none completed: decode may hold a stale NIXL agent" in report


def test_status_asks_prometheus_the_pd_dashboards_own_queries():
    cluster = healthy_cluster()
    cluster.prometheus = prometheus_answers()

    collect_status(cluster, "inference", "ray-llm")

    asked = [c[1] for c in cluster.calls if c[0] == "prometheus_query"]
    assert asked == [*status_queries().values(), *KV_STATUS_QUERIES.values(), *MECHANISM_QUERIES.values()]
    assert all("$" not in query for query in asked)  # no Grafana variable reaches Prometheus


def test_status_before_any_request_and_without_prometheus():
    cluster = healthy_cluster()
    cluster.prometheus = {}
    assert (
        "Serving metrics (Prometheus, last 5 minutes)\n  no requests yet"
        in collect_status(cluster, "inference", "ray-llm").format()
    )
    cluster.prometheus = None
    assert (
        "Serving metrics: no Prometheus in the stack"
        in collect_status(cluster, "inference", "ray-llm").format()
    )


def stack_outputs(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
    kubeconfig = {"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "eks"}]}
    return subprocess.CompletedProcess(command, 0, json.dumps(kubeconfig), "")


def test_dashboards_forwards_grafana_prometheus_and_ray_until_one_stops(capsys):
    started: list[FakeProcess] = []

    def popen(command):
        started.append(FakeProcess(list(command), exits_after=3 if "svc/kps-prometheus" in command else None))
        return started[-1]

    code = main(
        ["dashboards", "--stack", "dev", "--root", str(ROOT)], run=stack_outputs, popen=popen, sleep=no_wait
    )

    out, err = capsys.readouterr()
    assert code == 1 and "the port-forward to Prometheus stopped" in err
    targets = [(p.command[p.command.index("--namespace") + 1], p.command[-2], p.command[-1]) for p in started]
    assert targets == [
        ("monitoring", "svc/grafana", "3000:80"),
        ("monitoring", "svc/kps-prometheus", "9090:9090"),
        ("inference", "svc/ray-llm-head-svc", "8265:8265"),
    ]
    assert all("--kubeconfig" in p.command for p in started)
    assert all(p.terminated for p in started if "svc/kps-prometheus" not in p.command)
    assert "http://127.0.0.1:3000  (user admin, password: `pulumi stack output grafanaAdminPassword" in out
    assert "http://127.0.0.1:3000/d/rayLlmPdDisaggregation" in out
    assert (
        "http://127.0.0.1:8265  (token: kubectl get secret ray-auth-token --namespace inference "
        "-o jsonpath='{.data.auth_token}' | base64 -d)" in out
    )


def test_dashboards_stop_cleanly_on_ctrl_c(capsys):
    started: list[FakeProcess] = []

    interrupted = []

    class Interrupting(FakeProcess):
        def poll(self) -> int | None:
            if not interrupted and self.polls >= 2:
                interrupted.append(True)  # Ctrl-C arrives once, while the command waits
                raise KeyboardInterrupt
            return super().poll()

    def popen(command):
        started.append(Interrupting(list(command), exits_after=None))
        return started[-1]

    assert (
        main(
            ["dashboards", "--stack", "dev", "--root", str(ROOT)],
            run=stack_outputs,
            popen=popen,
            sleep=no_wait,
        )
        == 0
    )
    assert all(p.terminated for p in started)


def test_dashboards_of_a_stack_without_metrics_is_a_usage_error(tmp_path, capsys):
    stack = (ROOT / "Pulumi.dev.yaml").read_text() + "  ray-llm-eks:observability:\n    enabled: false\n"
    (tmp_path / "Pulumi.bare.yaml").write_text(stack)

    code = main(["dashboards", "--stack", "bare", "--root", str(tmp_path)], run=stack_outputs)

    assert code == 2
    assert "runs no metrics stack" in capsys.readouterr().err


@pytest.mark.parametrize("missing", ["kubectl"])
def test_dashboards_without_kubectl_says_so(missing, capsys):
    def popen(command):
        raise FileNotFoundError(missing)

    code = main(
        ["dashboards", "--stack", "dev", "--root", str(ROOT)], run=stack_outputs, popen=popen, sleep=no_wait
    )

    assert code == 2
    assert "kubectl is not installed" in capsys.readouterr().err


def test_status_of_a_parked_stack_says_so_and_exits_0(tmp_path, capsys):
    stack = (ROOT / "Pulumi.dev.yaml").read_text() + "  ray-llm-eks:autoscaling:\n    parked: true\n"
    (tmp_path / "Pulumi.parked.yaml").write_text(stack)
    cluster = healthy_cluster()
    cluster.rayservice = None
    cluster.nodes = [n for n in cluster.nodes if n["metadata"]["labels"].get("role") != "gpu-worker"]

    code = main(
        ["status", "--stack", "parked", "--root", str(tmp_path)], connect=lambda _: cluster, run=stack_outputs
    )

    out = capsys.readouterr().out
    assert code == 0, out
    assert "parked (autoscaling.parked): no RayService and no GPU workers; the endpoint answers 503" in out


def test_status_shows_what_the_stack_costs_now_from_the_cached_prices(tmp_path, capsys, price_cache):
    (tmp_path / "Pulumi.dev.yaml").write_text((ROOT / "Pulumi.dev.yaml").read_text())
    cache = price_cache
    prices = {"eks": 0.1, "ec2:m7i.2xlarge": 0.4, "ec2:g6.8xlarge": 2.0, "nat": 0.05, "nlb": 0.02}
    cache.write_text(json.dumps({f"sa-east-1/{k}": {"usd_per_hour": v, "at": 0} for k, v in prices.items()}))

    code = main(
        ["status", "--stack", "dev", "--root", str(tmp_path)],
        connect=lambda _: healthy_cluster(),
        run=stack_outputs,
    )

    out = capsys.readouterr().out
    assert code == 0
    # Two GPU nodes run (the fixture's); prices of any age are shown, they are what the last preview saw.
    assert "Cost now: $4.57/h on demand, with 2 GPU node(s); at most $4.57/h" in out


def test_status_prices_each_sides_running_nodes_where_the_sides_have_groups(tmp_path, capsys, price_cache):
    """Pulumi.hetero.example.yaml: prefill on g6.8xlarge, decode on g6e.8xlarge, told apart by the
    nodes' side label (planning/nodes.py GPU_SIDE_LABEL); its cost was at desiredSize before."""
    (tmp_path / "Pulumi.hetero.example.yaml").write_text((ROOT / "Pulumi.hetero.example.yaml").read_text())
    prices = {"eks": 0.1, "ec2:m7i.2xlarge": 0.4, "ec2:g6.8xlarge": 2.0, "ec2:g6e.8xlarge": 4.5, "nat": 0.05}
    cached = {f"sa-east-1/{k}": {"usd_per_hour": v, "at": 0} for k, v in {**prices, "nlb": 0.02}.items()}
    price_cache.write_text(json.dumps(cached))
    cluster = healthy_cluster()
    gpu = [n for n in cluster.nodes if n["metadata"]["labels"].get("role") == "gpu-worker"]
    # Prefill's group scaled to nothing (minSize 0), decode's one node running.
    cluster.nodes = [n for n in cluster.nodes if n is not gpu[0]]
    gpu[1]["metadata"]["labels"].update({GPU_SIDE_LABEL: "decode", INSTANCE_TYPE_LABEL: "g6e.8xlarge"})

    code = main(
        ["status", "--stack", "hetero.example", "--root", str(tmp_path)],
        connect=lambda _: cluster,
        run=stack_outputs,
    )

    out = capsys.readouterr().out
    assert code == 0, out
    # Decode's node at g6e.8xlarge's $4.50/h on top of the fixed $0.57/h; at most, both sides' one node.
    assert "Cost now: $5.07/h on demand, with 1 GPU node(s) (0 prefill, 1 decode); at most $7.07/h" in out


def test_status_without_cached_prices_says_how_to_get_them(tmp_path, capsys):
    (tmp_path / "Pulumi.dev.yaml").write_text((ROOT / "Pulumi.dev.yaml").read_text())

    main(
        ["status", "--stack", "dev", "--root", str(tmp_path)],
        connect=lambda _: healthy_cluster(),
        run=stack_outputs,
    )

    assert "Cost now: unknown (no price cached: run `pulumi preview`)" in capsys.readouterr().out


def test_verify_of_a_parked_stack_says_so_instead_of_failing_every_check(tmp_path, capsys):
    stack = (ROOT / "Pulumi.dev.yaml").read_text() + "  ray-llm-eks:autoscaling:\n    parked: true\n"
    (tmp_path / "Pulumi.parked.yaml").write_text(stack)

    code = main(
        ["verify", "--stack", "parked", "--root", str(tmp_path)],
        connect=lambda _: healthy_cluster(),
        run=stack_outputs,
    )

    assert code == 1
    assert "is parked (autoscaling.parked): no model serves" in capsys.readouterr().err
