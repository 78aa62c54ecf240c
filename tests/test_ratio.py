"""Prefill:decode ratios. `autoscaling.ratio` keeps the sides' replicas within a band as the LLM-signal
policy scales them: a side whose own decision would leave the band goes only as far as it allows, and
never the other way (it waits for the other side); a band the sides cannot meet at rest is refused,
naming the key.

What would go unnoticed otherwise: a band step that moves a side against its own decision (scaling a
side down because the other one shrank), a band the rendered policy cannot take (kwargs Ray hands to
its constructor), a query on a metric Ray does not export, or a stack file without a band whose serve
config changed. And for `ops bench --ratios`: a ratio measured before Serve runs it, a stack left at
the last ratio after a failure. No stack runs: serve configs are built from settings as the program
builds them.
"""

from __future__ import annotations

import base64
import json
from types import SimpleNamespace
from typing import Any

import promql_parser
import pytest
import yaml

from config import ConfigError
from jobs import llm_autoscaling
from jobs.llm_autoscaling import LlmScalingPolicy, keep_in_band, replicas_query
from manifests.bench import RESULT_MARKER
from manifests.rayservice import serve_config_of
from ops.bench_ratio import parse_ratios, ratio_problems, ratio_state, run_ratio_sweep, with_ratio
from ops.cli import main
from ops.kube import OpsError, http_request_over
from planning import plan_stack
from tests.exported_metrics import EXPORTED
from tests.fakes.kube import healthy_cluster
from tests.fakes.ops import KEYS, KUBECONFIG, pulumi_outputs
from tests.fakes.pulumi import ROOT, stack_settings

P = "ray-llm-eks"
LLM: dict[str, Any] = {
    "autoscaling": {
        "signal": "llm",
        "ratio": {"min": 0.5, "max": 2},
        "prefill": {"maxReplicas": 4},
        "decode": {"maxReplicas": 4},
    },
    "gpuNodes": {"minSize": 0, "desiredSize": 2, "maxSize": 8},
}


class TestTheBand:
    @pytest.mark.parametrize(
        ("side", "wanted", "current", "peer", "expected"),
        [
            ("prefill", 3, 1, 1, 2),  # up: at most 2 x decode's 1
            ("prefill", 2, 2, 1, 2),  # no move, nothing to keep
            ("prefill", 5, 2, 4, 5),  # within the band: its own decision
            ("prefill", 1, 3, 4, 2),  # down: at least 0.5 x decode's 4
            ("prefill", 1, 3, 1, 1),  # down, within the band
            ("prefill", 3, 3, 8, 3),  # already below the band: never moved by it, only waits
            ("prefill", 4, 3, 1, 3),  # up from above the band: waits where it is
            ("decode", 4, 1, 1, 2),  # up: at most decode's 1 / 0.5
            ("decode", 1, 3, 4, 2),  # down: at least prefill's 4 / 2
            ("decode", 2, 1, 1, 2),
            ("decode", 3, 1, None, 3),  # the other side unknown: its own decision
            ("decode", 3, 1, 0, 3),  # the other side still starting
        ],
    )
    def test_a_side_goes_only_as_far_as_the_band_allows(self, side, wanted, current, peer, expected):
        assert keep_in_band(side, wanted, current, peer, 0.5, 2) == expected

    def test_exact_edges_are_inside(self):
        assert keep_in_band("prefill", 3, 1, 2, 0.5, 1.5) == 3
        assert keep_in_band("decode", 1, 4, 2, 0.5, 2) == 1


def ctx(deployment: str, requests: float, current: int, state: dict[str, Any] | None = None) -> Any:
    """What Ray hands the policy (ray/serve/config.py AutoscalingContext): the fields it reads."""
    return SimpleNamespace(
        app_name="qwen",
        deployment_name=deployment,
        total_num_requests=requests,
        target_num_replicas=current,
        capacity_adjusted_min_replicas=1,
        capacity_adjusted_max_replicas=4,
        policy_state=state or {},
        current_time=1000.0,
    )


def sides_policy_kwargs(**sections: dict[str, Any]) -> dict[str, dict[str, Any]]:
    settings = stack_settings("dev", **sections)
    config = serve_config_of(settings, plan_stack(settings, stack="dev")).to_dict()
    args = config["applications"][0]["args"]
    return {
        side: args[f"{side}_config"]["deployment_config"]["autoscaling_config"]["policy"]["policy_kwargs"]
        for side in ("prefill", "decode")
    }


class TestThePolicy:
    def test_the_band_is_a_step_after_the_sides_own_decision(self, monkeypatch):
        kwargs = sides_policy_kwargs(**LLM)["decode"]
        asked: list[str] = []

        def answer(url: str, query: str, timeout: float) -> float:
            asked.append(query)
            return 1.0 if "replica_healthy" in query else 1.9  # 2 engines at 95 % KV; prefill has 1

        monkeypatch.setenv("RAY_PROMETHEUS_HOST", "http://prometheus:9090")
        monkeypatch.setattr(llm_autoscaling, "ask_prometheus", answer)
        policy = LlmScalingPolicy(**kwargs)  # the kwargs as Ray hands them to the class
        replicas, state = policy(ctx("Decode:qwen3_5-9b", 40, 1))
        assert replicas == 2  # its own decision is 3 (1.9 / 0.7); prefill's 1 allows 2 at 0.5
        assert state["llm_peer"] == 1.0
        assert asked[1] == replicas_query(
            None, "qwen", "Prefill:qwen3_5-9b", kwargs["namespace"], kwargs["jobs"]
        )

    def test_the_peers_replicas_are_read_only_with_the_sides_own_figure(self, monkeypatch):
        kwargs = sides_policy_kwargs(**LLM)["prefill"]
        asked: list[str] = []
        monkeypatch.setenv("RAY_PROMETHEUS_HOST", "http://prometheus:9090")
        monkeypatch.setattr(llm_autoscaling, "ask_prometheus", lambda u, q, t: asked.append(q) or 2.0)
        policy = LlmScalingPolicy(**kwargs)
        _, state = policy(ctx("Prefill:qwen3_5-9b", 3, 1))
        policy(ctx("Prefill:qwen3_5-9b", 3, 1, state))  # the next control-loop tick: no new reads
        assert len(asked) == 2

    def test_a_half_given_band_is_refused(self):
        with pytest.raises(ValueError, match="ratio band needs"):
            LlmScalingPolicy("kv_cache", 0.7, 0.8, side="decode", ratio_min=0.5, ratio_max=2)

    def test_its_query_reads_an_exported_metric_of_the_stacks_own_pods(self):
        query = replicas_query("ray-llm-a", "qwen", "Prefill:qwen3_5-9b", "inference", "inference/x")
        names: set[str] = set()

        def visit(node: Any) -> None:
            if isinstance(node, promql_parser.VectorSelector) and node.name:
                names.add(node.name)

        promql_parser.walk(promql_parser.parse(query), visit)
        assert names == {"ray_serve_deployment_replica_healthy"} and names <= EXPORTED
        assert 'deployment="Prefill:qwen3_5-9b"' in query and 'ray_io_cluster="ray-llm-a"' in query


class TestTheConfig:
    def test_each_side_renders_the_band_and_its_peer(self):
        kwargs = sides_policy_kwargs(**LLM)
        assert {k: kwargs["prefill"][k] for k in ("side", "peer", "ratio_min", "ratio_max")} == {
            "side": "prefill",
            "peer": "Decode:qwen3_5-9b",
            "ratio_min": 0.5,
            "ratio_max": 2,
        }
        assert kwargs["decode"]["side"] == "decode" and kwargs["decode"]["peer"] == "Prefill:qwen3_5-9b"

    def test_without_a_band_the_policy_gets_none(self):
        llm = {**LLM, "autoscaling": {k: v for k, v in LLM["autoscaling"].items() if k != "ratio"}}
        assert not {"side", "peer", "ratio_min", "ratio_max"} & sides_policy_kwargs(**llm)["prefill"].keys()

    def test_a_band_the_sides_cannot_meet_at_rest_is_refused(self):
        with pytest.raises(ConfigError) as caught:
            stack_settings("dev", **{**LLM, "model": {"prefillReplicas": 3, "decodeReplicas": 1}})
        message = str(caught.value)
        assert f"{P}:autoscaling.ratio: {{min: 0.5, max: 2}} cannot be met" in message
        assert "model.prefillReplicas 3 : model.decodeReplicas 1 = 3" in message

    @pytest.mark.parametrize(
        ("sections", "says"),
        [
            ({"autoscaling": {"ratio": {"min": 0.5, "max": 2}}}, "autoscaling.signal: llm"),
            ({**LLM, "serving": {"mode": "aggregated"}}, "serving.mode aggregated"),
            ({"autoscaling": {"signal": "llm", "ratio": {"min": 2, "max": 1}}}, "min 2 is above max 1"),
        ],
    )
    def test_a_band_that_cannot_work_is_refused_naming_the_key(self, sections, says):
        with pytest.raises(ConfigError) as caught:
            stack_settings("dev", **sections)
        assert "autoscaling.ratio" in str(caught.value) and says in str(caught.value)


def test_rendered_kwargs_are_plain_yaml():
    """policy_kwargs travel in serveConfigV2's YAML: the band's numbers stay numbers."""
    settings = stack_settings("dev", **LLM)
    text = serve_config_of(settings, plan_stack(settings, stack="dev")).to_yaml()
    policy = yaml.safe_load(text)["applications"][0]["args"]["decode_config"]["deployment_config"]
    assert policy["autoscaling_config"]["policy"]["policy_kwargs"]["ratio_max"] == 2


# `ops bench --ratios`: the ratio set on the live stack through Serve's REST API, measured, put back.

RESULT = {
    "completed": 64,
    "failed": 0,
    "duration": 20.0,
    "request_throughput": 3.2,
    "output_throughput": 819.2,
    **{f"{s}_{m}_ms": v for m in ("ttft", "itl", "tpot", "e2el") for s, v in (("mean", 10.0), ("p50", 9.0))},
}


class FakeServe:
    """Ray's dashboard as `put_all_applications` and `get_serve_instance_details` answer (ray/dashboard/
    modules/serve/serve_head.py, ray/serve/schema.py ServeInstanceDetails): what was PUT is deployed,
    and its replicas run after `start_polls` GETs."""

    def __init__(self, applications: list[dict[str, Any]], start_polls: int = 1) -> None:
        self.deployed = applications
        self.puts: list[list[dict[str, Any]]] = []
        self.headers: list[dict[str, str]] = []
        self.start_polls = start_polls
        self.polls = 0

    def details(self) -> dict[str, Any]:
        self.polls += 1
        apps = {}
        for app in self.deployed:
            args = app["args"]
            deployments = {}
            for side, prefix in (("prefill", "Prefill"), ("decode", "Decode")):
                config = args[f"{side}_config"]["deployment_config"]
                target = config.get("num_replicas") or config["autoscaling_config"]["min_replicas"]
                running = target if self.polls > self.start_polls else 1
                deployments[f"{prefix}:qwen3_5-9b"] = {
                    "name": f"{prefix}:qwen3_5-9b",
                    "status": "HEALTHY",
                    "target_num_replicas": target,
                    "replicas": [{"replica_id": f"{side}{i}", "state": "RUNNING"} for i in range(running)],
                }
            apps[app["name"]] = {"status": "RUNNING", "deployed_app_config": app, "deployments": deployments}
        return {"applications": apps}

    def get(self) -> dict[str, Any]:
        return self.details()

    def put(self, applications: Any) -> None:
        self.puts.append(list(applications))
        self.deployed = list(applications)
        self.polls = 0

    def handler(self, where: Any, method: str, path: str, body: Any, headers: Any) -> Any:
        from ops.kube import HttpResponse

        assert (where.service, where.port, path) == ("ray-llm-head-svc", 8265, "/api/serve/applications/")
        self.headers.append(dict(headers or {}))
        if method == "PUT":
            self.put(body["applications"])
            return HttpResponse(200, "")
        return HttpResponse(200, json.dumps(self.get()))


def deployed(stack: str = "dev", **sections: dict[str, Any]) -> list[dict[str, Any]]:
    settings = stack_settings(stack, **sections)
    return serve_config_of(settings, plan_stack(settings, stack=stack)).to_dict()["applications"]


class TestRatioSweep:
    def test_ratios_parse_and_bad_ones_are_named(self):
        assert parse_ratios("1:1, 2:1,1:2") == ((1, 1), (2, 1), (1, 2))
        for bad, says in (("2-1", "'2-1' is not"), ("0:1", "at least 1"), ("1:1,1:1", "given twice")):
            with pytest.raises(ValueError, match=says):
                parse_ratios(bad)

    def test_a_ratio_beyond_the_worker_groups_is_refused(self):
        settings = stack_settings("dev")
        (problem,) = ratio_problems(settings, plan_stack(settings, stack="dev"), [(1, 1), (2, 1)])
        assert problem.startswith("--ratios 2:1: 3 replicas > 2 GPU worker pods")
        aggregated = stack_settings("dev", serving={"mode": "aggregated"})
        assert "aggregated" in ratio_problems(aggregated, plan_stack(aggregated, stack="dev"), [(1, 1)])[0]

    def test_a_ratio_is_fixed_replicas_on_both_sides_and_nothing_else(self):
        (app,) = deployed("dev", **LLM)
        changed = with_ratio(app, (2, 1))
        for side, n in (("prefill", 2), ("decode", 1)):
            config = changed["args"][f"{side}_config"]["deployment_config"]
            assert config["num_replicas"] == n and "autoscaling_config" not in config
            assert (
                config["max_ongoing_requests"]
                == app["args"][f"{side}_config"]["deployment_config"]["max_ongoing_requests"]
            )
        assert (
            changed["args"]["prefill_config"]["engine_kwargs"]
            == app["args"]["prefill_config"]["engine_kwargs"]
        )
        assert "num_replicas" not in app["args"]["prefill_config"]["deployment_config"]  # a copy

    def test_each_ratio_runs_before_it_is_measured_and_the_stack_comes_back(self):
        original = deployed("prod")
        serve = FakeServe(original, start_polls=2)
        seen: list[tuple[int, int]] = []

        def measure(ratio: tuple[int, int]) -> str:
            assert ratio_state(serve.get(), "qwen", ratio)[0]  # running as asked when measured
            seen.append(ratio)
            return f"points {ratio}"

        results = run_ratio_sweep(serve, "qwen", [(1, 2), (2, 1)], measure, lambda _: None, lambda _: None)
        assert results == [((1, 2), "points (1, 2)"), ((2, 1), "points (2, 1)")] and seen == [(1, 2), (2, 1)]
        assert len(serve.puts) == 3 and serve.puts[-1] == original  # put back as deployed

    def test_a_failure_still_puts_the_stack_back(self):
        original = deployed("prod")
        serve = FakeServe(original)

        def measure(ratio: tuple[int, int]) -> None:
            raise OpsError("the benchmark Job failed")

        with pytest.raises(OpsError, match="Job failed"):
            run_ratio_sweep(serve, "qwen", [(2, 1)], measure, lambda _: None, lambda _: None)
        assert serve.puts[-1] == original

    def test_a_ratio_that_never_runs_times_out_and_puts_back(self):
        serve = FakeServe(deployed("prod"), start_polls=10**9)
        ticks = iter(range(0, 10**6, 100))
        with pytest.raises(OpsError, match="not running after 1800 s: prefill 1, decode 1 running"):
            run_ratio_sweep(
                serve, "qwen", [(2, 1)], lambda _: None, lambda _: None, lambda _: None, lambda: next(ticks)
            )
        assert serve.puts[-1] == deployed("prod")

    def test_the_command_runs_each_ratio_and_compares_them(self, capsys, tmp_path, monkeypatch):
        monkeypatch.chdir(tmp_path)
        cluster = healthy_cluster()
        cluster.job_states = [("succeeded", "complete")]
        cluster.job_log = f"{RESULT_MARKER}\n{json.dumps(RESULT)}\n"
        serve = FakeServe(deployed("prod"))
        cluster.service_handler = serve.handler
        token = base64.b64encode(b"ray-token").decode()
        cluster.objects[("v1", "secrets", "inference", "ray-auth-token")] = {"data": {"auth_token": token}}
        code = main(
            ["bench", "--stack", "prod", "--root", str(ROOT), "--ratios", "1:2,2:1", "--json", "pd.json"],
            connect=lambda _: cluster,
            run=pulumi_outputs(kubeconfig=KUBECONFIG, apiKeys=KEYS),
            sleep=lambda _: None,
        )
        captured = capsys.readouterr()
        assert code == 0, captured.err
        assert list(cluster.jobs) == ["bench-r1x2", "bench-r2x1"]
        for ratio, name in (((1, 2), "pd-1x2.json"), ((2, 1), "pd-2x1.json")):
            saved = json.loads((tmp_path / name).read_text())
            assert saved["ratio"] == {"prefill": ratio[0], "decode": ratio[1]}
            assert (saved["gpu"]["workers"], saved["gpu"]["gpus"]) == (3, 3)
            assert saved["label"].endswith(f"P:D {ratio[0]}:{ratio[1]}")
        assert "disaggregated, P:D 2:1" in captured.out  # ops bench compare's run lines
        assert {h["X-Ray-Authorization"] for h in serve.headers} == {"Bearer ray-token"}
        assert serve.puts[-1] == deployed("prod")

    def test_the_command_refuses_a_ratio_the_stack_cannot_hold(self, capsys, tmp_path, monkeypatch):
        monkeypatch.chdir(tmp_path)
        code = main(
            ["bench", "--stack", "dev", "--root", str(ROOT), "--ratios", "2:1"],
            connect=lambda _: healthy_cluster(),
            run=pulumi_outputs(kubeconfig=KUBECONFIG, apiKeys=KEYS),
            sleep=lambda _: None,
        )
        assert code == 2 and "--ratios 2:1: 3 replicas > 2" in capsys.readouterr().err


def test_a_put_over_a_port_forwards_socket_carries_its_json_body():
    """What DashboardRest sends through the port-forward (ops/kube.py `http_request_over`), read back as
    the dashboard's aiohttp server would: a request line, headers with the body's length, the body."""
    import socket
    import threading

    ours, theirs = socket.socketpair()
    received: list[bytes] = []

    def dashboard() -> None:
        data = b""
        while b"\r\n\r\n" not in data:
            data += theirs.recv(65536)
        head, _, body = data.partition(b"\r\n\r\n")
        length = int(
            next(h for h in head.split(b"\r\n") if h.lower().startswith(b"content-length")).split(b":")[1]
        )
        while len(body) < length:
            body += theirs.recv(65536)
        received.extend([head, body])
        theirs.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{}")
        theirs.close()

    thread = threading.Thread(target=dashboard)
    thread.start()
    answer = http_request_over(
        ours,
        "PUT",
        "/api/serve/applications/",
        {"applications": [{"name": "qwen"}]},
        {"X-Ray-Authorization": "Bearer t"},
    )
    thread.join(5)
    ours.close()
    head, body = received
    assert head.startswith(b"PUT /api/serve/applications/ HTTP/1.0\r\n")
    assert b"X-Ray-Authorization: Bearer t" in head and b"Content-Type: application/json" in head
    assert json.loads(body) == {"applications": [{"name": "qwen"}]}
    assert (answer.status, answer.body) == (200, "{}")
