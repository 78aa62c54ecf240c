"""`ops bench` (issues 29 and 41): vLLM's benchmark client as a Job in the cluster against the stack's
own endpoint, its result parsed from vLLM 0.26.0's real output format (tests/fixtures/bench), the cost
per million output tokens, the result file that says what was measured, and a sweep of concurrencies
with its progress, against fakes."""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from manifests.bench import RESULT_MARKER, BenchOptions, bench_command, bench_job
from manifests.network_policy import BENCH_PODS
from ops.bench import FORMAT, dollars_per_million_output_tokens, parse_result, run_bench, stack_hourly
from ops.cli import main
from ops.kube import OpsError, job_state_of
from tests.fakes.bench import FIXTURES, SWEEP, fixture_log
from tests.fakes.kube import FakeClock, healthy_cluster
from tests.fakes.ops import KEYS, KUBECONFIG, pulumi_outputs
from tests.fakes.pulumi import ROOT, stack_settings
from tests.validators import object_errors

# The keys vLLM 0.26's `bench serve --save-result` writes (vllm/benchmarks/serve.py `benchmark` result and
# process_one_metric; per-request lists are dropped without --save-detailed), with made-up figures.
RESULT = {
    "date": "20261202-101500",
    "backend": "openai-chat",
    "model_id": "qwen3.5-9b",
    "duration": 80.0,
    "completed": 200,
    "failed": 0,
    "total_input_tokens": 204800,
    "total_output_tokens": 51200,
    "request_throughput": 2.5,
    "request_goodput": None,
    "output_throughput": 640.0,
    "total_token_throughput": 3200.0,
    "max_output_tokens_per_s": 800.0,
    "max_concurrent_requests": 8,
    "max_concurrency": 8,
    **{
        f"{stat}_{metric}_ms": value
        for metric, base in (("ttft", 180.0), ("tpot", 11.0), ("itl", 10.5), ("e2el", 3000.0))
        for stat, value in (
            ("mean", base),
            ("median", base * 0.95),
            ("std", base / 10),
            ("p50", base * 0.95),
            ("p90", base * 1.5),
            ("p99", base * 2.5),
        )
    },
}
LOG = "\n".join(
    [
        "INFO 12-02 10:14:00 Starting initial single prompt test run...",
        "============ Serving Benchmark Result ============",
        "Successful requests:                     200",
        RESULT_MARKER,
        json.dumps(RESULT),
    ]
)


def printed(log: str, label: str) -> float:
    """A figure of the summary vLLM prints (`{:<40} {:<10.2f}`, vllm/benchmarks/serve.py)."""
    (value,) = re.findall(rf"^{re.escape(label)}\s+(\S+)\s*$", log, flags=re.M)
    return float(value)


class TestTheResult:
    @pytest.mark.parametrize("log", sorted(FIXTURES.glob("*.log")), ids=lambda p: p.stem)
    def test_the_saved_json_of_a_real_format_log_is_what_vllm_printed(self, log: Path):
        """Each recorded log is vLLM 0.26.0's summary, the marker, then the --save-result file: what
        is parsed from the file is what the summary above it says."""
        text = log.read_text()
        result = parse_result(text)
        assert result.completed == printed(text, "Successful requests:")
        assert result.failed == printed(text, "Failed requests:")
        assert round(result.duration_s, 2) == printed(text, "Benchmark duration (s):")
        assert round(result.output_throughput, 2) == printed(text, "Output token throughput (tok/s):")
        assert round(result.request_throughput, 2) == printed(text, "Request throughput (req/s):")
        for metric, label in (("ttft", "TTFT"), ("tpot", "TPOT"), ("itl", "ITL"), ("e2el", "E2EL")):
            for p in ("50", "90", "99"):
                figure = printed(text, f"P{p} {label} (ms):")
                assert round(result.latencies_ms[metric][f"p{p}"], 2) == figure, (metric, p)
            assert round(result.latencies_ms[metric]["mean"], 2) == printed(text, f"Mean {label} (ms):")

    def test_parses_vllms_saved_json(self):
        result = parse_result(LOG)
        assert (result.completed, result.failed, result.output_throughput) == (200, 0, 640.0)
        assert result.latencies_ms["ttft"] == {"p50": 171.0, "p90": 270.0, "p99": 450.0, "mean": 180.0}
        assert set(result.latencies_ms) == {"ttft", "itl", "tpot", "e2el"}

    def test_no_result_says_what_the_client_printed_last(self):
        with pytest.raises(OpsError, match=r"(?s)printed no result.*HTTP 401"):
            parse_result("Traceback ...\nopenai.AuthenticationError: HTTP 401 Unauthorized")

    def test_cost_per_million_output_tokens(self):
        assert dollars_per_million_output_tokens(4.6, 640.0) == pytest.approx(4.6 / (640 * 3600) * 1e6)
        assert dollars_per_million_output_tokens(4.6, 0) is None

    def test_the_stacks_hourly_cost_is_the_plans(self):
        hourly, source = stack_hourly(stack_settings("dev"), ROOT / "nonexistent")
        assert hourly == pytest.approx(4.6, abs=0.01) and "price snapshot" in source


class TestTheJob:
    def test_a_valid_job_from_the_serving_image_with_one_clients_key(self):
        settings = stack_settings("dev")
        job = bench_job(settings, "image:tag", BenchOptions(client="batch"))
        assert object_errors(job) == []
        pod = job["spec"]["template"]
        assert pod["metadata"]["labels"] == BENCH_PODS
        assert pod["spec"]["nodeSelector"] == {"role": "system"}
        (container,) = pod["spec"]["containers"]
        assert container["image"] == "image:tag"
        (key,) = [e for e in container["env"] if e["name"] == "OPENAI_API_KEY"]
        assert key["valueFrom"]["secretKeyRef"] == {"name": "ray-llm-api-keys", "key": "batch"}

    def test_the_command_targets_the_gateway_with_the_asked_load(self):
        settings = stack_settings("dev")
        command = bench_command(
            settings, BenchOptions(input_len=512, output_len=64, concurrency=4, requests=40)
        )
        words = " ".join(shlex.split(command[-1]))  # the words sh sees, as shlex quoted them
        for part in (
            "vllm bench serve --backend openai-chat",
            "--base-url http://ray-llm-gateway.envoy-gateway-system.svc:80",
            "--model qwen3.5-9b --tokenizer Qwen/Qwen3.5-9B",
            "--random-input-len 512 --random-output-len 64",
            "--num-prompts 40 --max-concurrency 4",
            "--percentile-metrics ttft,tpot,itl,e2el --metric-percentiles 50,90,99",
            f"echo {RESULT_MARKER} && cat /tmp/bench/result.json",
        ):
            assert part in words, part

    def test_without_the_endpoint_it_calls_serve_directly(self):
        settings = stack_settings("dev", endpoint={"enabled": False})
        script = bench_command(settings, BenchOptions())[-1]
        assert "http://ray-llm-serve-svc.inference.svc:8000" in shlex.split(script)
        job = bench_job(settings, "i", BenchOptions())
        assert not [
            e
            for e in job["spec"]["template"]["spec"]["containers"][0]["env"]
            if e["name"] == "OPENAI_API_KEY"
        ]

    def test_a_jobs_state_from_its_status(self):
        assert job_state_of({"status": {"active": 1}}) == ("running", "1 pod(s) running")
        assert (
            job_state_of({"status": {"conditions": [{"type": "Complete", "status": "True"}]}})[0]
            == "succeeded"
        )
        failed = {
            "status": {"conditions": [{"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded"}]}
        }
        assert job_state_of(failed) == ("failed", "BackoffLimitExceeded")


@pytest.fixture(autouse=True)
def in_a_scratch_directory(tmp_path, monkeypatch):
    """`ops bench` writes its result file in the working directory unless --json says where."""
    monkeypatch.chdir(tmp_path)


def bench_dev(cluster, capsys, *argv):
    run = pulumi_outputs(kubeconfig=KUBECONFIG, apiKeys=KEYS)
    code = main(
        ["bench", "--stack", "dev", "--root", str(ROOT), *argv],
        connect=lambda _: cluster,
        run=run,
        sleep=lambda _: None,
    )
    return code, capsys.readouterr()


class TestTheCommand:
    def test_runs_the_job_and_reports_latency_throughput_and_cost(self, capsys, tmp_path):
        cluster = healthy_cluster()
        cluster.job_states = [
            ("running", "waiting for its pod"),
            ("running", "1 pod(s) running"),
            ("succeeded", "complete"),
        ]
        cluster.job_log = LOG
        out_json = tmp_path / "bench.json"
        code, captured = bench_dev(cluster, capsys, "--requests", "200", "--json", str(out_json))
        assert code == 0, captured.err
        assert "job bench: 1 pod(s) running" in captured.err
        out = captured.out
        assert "200 requests, 1024 tokens in, 256 out, concurrency 8" in out
        assert "2.50 requests/s, 640.0 output tokens/s" in out
        assert "TTFT                         171.0     270.0     450.0" in out
        per_million = 4.6 / (640 * 3600) * 1e6
        assert f"${per_million:,.2f} per million output tokens" in out
        saved = json.loads(out_json.read_text())
        assert saved["format"] == FORMAT
        assert (saved["stack"], saved["mode"], saved["label"]) == (
            "dev",
            "disaggregated",
            "dev (disaggregated)",
        )
        assert saved["gpu"] | {"gpu": ""} == {
            "instance_type": "g6.8xlarge",
            "gpu": "",
            "gpus_per_node": 1,
            "nodes": 2,
            "workers": 2,
            "gpus_per_worker": 1,
            "gpus": 2,
        }
        assert saved["kv_path"] | {"expected_gbytes_s": None} == {
            "backends": ["LIBFABRIC"],
            "buffer_device": "cuda",
            "mechanism": "emulated",
            "over_efa": True,
            "expected_gbytes_s": None,
        }
        assert saved["workload"] == {
            "input_len": 1024,
            "output_len": 256,
            "requests": 200,
            "request_rate": "inf",
            "tokenizer": "Qwen/Qwen3.5-9B",
            "client": "vllm bench serve (vLLM 0.26.0)",
        }
        (point,) = saved["points"]
        assert point["concurrency"] == 8 and point["output_throughput"] == 640.0 and point["failed"] == 0
        assert point["latencies_ms"]["itl"]["p99"] == pytest.approx(26.25)
        assert point["usd_per_million_output_tokens"] == pytest.approx(per_million, rel=1e-3)
        assert saved["price"]["usd_per_hour"] == pytest.approx(4.6, abs=0.01)
        (job,) = cluster.jobs.values()
        assert job["metadata"]["namespace"] == "inference"

    def test_failed_requests_exit_1(self, capsys):
        cluster = healthy_cluster()
        cluster.job_states = [("succeeded", "complete")]
        cluster.job_log = LOG.replace('"failed": 0', '"failed": 3')
        code, captured = bench_dev(cluster, capsys)
        assert code == 1 and "failed 3" in captured.out

    def test_a_failed_job_exits_1_with_its_last_lines(self, capsys):
        cluster = healthy_cluster()
        cluster.job_states = [("failed", "BackoffLimitExceeded")]
        cluster.job_log = "OSError: Qwen/Qwen3.5-9B is not a valid model identifier"
        code, captured = bench_dev(cluster, capsys)
        assert code == 1 and "not a valid model identifier" in captured.err

    def test_an_unknown_client_or_a_bad_size_is_2(self, capsys):
        assert bench_dev(healthy_cluster(), capsys, "--client", "nobody")[0] == 2
        assert bench_dev(healthy_cluster(), capsys, "--requests", "0")[0] == 2


def sweep_cluster(mode: str = "disaggregated", failing: int | None = None):
    """A cluster whose bench Jobs print the recorded log of their concurrency; `failing`: that one's Job
    fails."""
    cluster = healthy_cluster()
    cluster.job_states = [("succeeded", "complete")]
    states = cluster.job_state

    def job_state(namespace: str, name: str) -> tuple[str, str]:
        if failing is not None and name == f"bench-c{failing}":
            return ("failed", "BackoffLimitExceeded")
        return states(namespace, name)

    cluster.job_state = job_state  # type: ignore[method-assign]
    cluster.job_logs = lambda _ns, name: fixture_log(mode, int(name.removeprefix("bench-c")))  # type: ignore[method-assign]
    return cluster


class TestTheSweep:
    def test_one_job_per_concurrency_each_point_recorded_with_progress(self, capsys, tmp_path):
        cluster = sweep_cluster()
        out_json = tmp_path / "pd.json"
        code, captured = bench_dev(
            cluster, capsys, "--sweep", "1,4,16,64", "--requests", "64", "--json", str(out_json)
        )
        assert code == 0, captured.err
        assert list(cluster.jobs) == ["bench-c1", "bench-c4", "bench-c16", "bench-c64"]
        assert [
            j["spec"]["template"]["spec"]["containers"][0]["command"][-1].count("--max-concurrency 16")
            for j in cluster.jobs.values()
        ] == [0, 0, 1, 0]
        for number, concurrency in enumerate(SWEEP, 1):
            assert f"point {number} of 4: concurrency {concurrency}, 64 requests" in captured.err
        assert "point 4 of 4 done: 453.3 output tokens/s, TTFT p50 900 ms, 0 failed" in captured.err
        saved = json.loads(out_json.read_text())
        assert [p["concurrency"] for p in saved["points"]] == list(SWEEP)
        assert [round(p["output_throughput"], 1) for p in saved["points"]] == [15.1, 58.0, 201.9, 453.3]
        assert "sweep of stack dev (disaggregated), 64 requests per point:" in captured.out
        assert re.search(r"^\s+64\s+1\.77\s+453\.3\s+900\s+2600\s+130\.0\s+170\.0", captured.out, re.M)

    def test_a_failed_point_keeps_the_points_before_it(self, capsys, tmp_path):
        out_json = tmp_path / "partial.json"
        code, captured = bench_dev(
            sweep_cluster(failing=16), capsys, "--sweep", "1,4,16,64", "--json", str(out_json)
        )
        assert code == 1 and "BackoffLimitExceeded" in captured.err
        assert [p["concurrency"] for p in json.loads(out_json.read_text())["points"]] == [1, 4]

    def test_an_aggregated_stack_records_its_mode_and_no_kv_path(self, capsys, tmp_path):
        run = pulumi_outputs(kubeconfig=KUBECONFIG, apiKeys=KEYS)
        code = main(
            [
                "bench",
                "--stack",
                "aggregated.example",
                "--root",
                str(ROOT),
                "--sweep",
                "4,16",
                "--label",
                "agg",
            ],
            connect=lambda _: sweep_cluster("aggregated"),
            run=run,
            sleep=lambda _: None,
        )
        assert code == 0, capsys.readouterr().err
        (written,) = tmp_path.glob("bench-aggregated.example-aggregated-*.json")
        saved = json.loads(written.read_text())
        assert (saved["mode"], saved["kv_path"], saved["label"]) == ("aggregated", None, "agg")
        assert [p["concurrency"] for p in saved["points"]] == [4, 16]

    def test_a_bad_sweep_is_a_usage_error(self, capsys):
        for bad in ("1,0", "4,4", "a,b"):
            with pytest.raises(SystemExit) as exit_:
                bench_dev(healthy_cluster(), capsys, "--sweep", bad)
            assert exit_.value.code == 2

    def test_a_long_job_says_it_still_runs(self):
        cluster = healthy_cluster()
        cluster.job_states = [("running", "1 pod(s) running")] * 5 + [("succeeded", "complete")]
        cluster.job_log = LOG
        clock = FakeClock()
        said: list[str] = []

        def sleep(seconds: float) -> None:
            clock.now += seconds * 6  # 30 s a poll

        run_bench(cluster, stack_settings("dev"), "i", BenchOptions(), said.append, sleep=sleep, clock=clock)
        running = [s for s in said if "1 pod(s) running" in s]
        assert running == [
            "job bench: 1 pod(s) running (0 s)",
            "job bench: 1 pod(s) running (60 s)",
            "job bench: 1 pod(s) running (120 s)",
        ]
