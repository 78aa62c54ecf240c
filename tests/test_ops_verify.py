"""`python -m ops verify` against recorded answers: a healthy stack passes every check and exits 0;
NIXL on UCX (the silent TCP-speed fallback), no backend logged yet, a GPU node without EFA and a model
missing from /v1/models each fail with a reason that says what to do; time to first token and
tokens/s come from a recorded stream timed by a fake clock.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from ops.cli import main
from ops.kube import ExecResult, HttpResponse, OpsError, ServiceEndpoint
from ops.verify import (
    CHECK_BANDWIDTH,
    CHECK_CHAT,
    CHECK_MODELS,
    CHECK_NIXL,
    CHECK_NODES,
    CHECK_TRANSFER,
    NIXL_BACKEND_GREP,
    VerifyTarget,
    check_chat,
    summarize_stream,
    verify,
)
from tests.fakes.kube import (
    ACTIVE_CLUSTER,
    GPU_NODES,
    WORKERS,
    FakeClock,
    FakeKubeApi,
    fixture_text,
    grep_result,
    healthy_cluster,
)
from tests.fakes.nixl import SMALL_PROBE, probe_sleep

TARGET = VerifyTarget("inference", "ray-llm", "qwen3.5-9b")
REPLY = (
    "Prefill/decode disaggregation runs the compute-bound prompt pass and the memory-bound token "
    "generation on separate GPUs, so long prompts no longer stall ongoing streams."
)


def run_verify(
    cluster: FakeKubeApi, capsys: pytest.CaptureFixture[str], kubeconfig: Path, *argv: str
) -> tuple[int, str]:
    code = main(
        ["verify", "--kubeconfig", str(kubeconfig), *SMALL_PROBE, *argv],
        connect=lambda _: cluster,
        clock=cluster.clock,
        sleep=probe_sleep(cluster.clock),
    )
    return code, capsys.readouterr().out


def verdicts(cluster: FakeKubeApi) -> dict[str, tuple[bool, str]]:
    report = verify(cluster, TARGET, clock=cluster.clock)
    return {c.name: (c.passed, c.reason) for c in report.checks}


def test_healthy_stack_passes_every_check_and_exits_0(capsys, kubeconfig):
    cluster = healthy_cluster()

    code, out = run_verify(cluster, capsys, kubeconfig)

    assert code == 0, out
    assert [line.split(":")[0] for line in out.splitlines() if line[:4] in ("PASS", "FAIL")] == [
        f"PASS  {name}"
        for name in (CHECK_MODELS, CHECK_CHAT, CHECK_NIXL, CHECK_TRANSFER, CHECK_BANDWIDTH, CHECK_NODES)
    ]
    assert "6 of 6 checks passed" in out
    # The command the seed ran by hand, in the worker container of each worker of the active cluster.
    assert NIXL_BACKEND_GREP == (
        "grep",
        "-rhoE",
        "Backend (LIBFABRIC|UCX) was instantiated|rails using provider=[A-Za-z0-9_;.-]+"
        "|Using provider (with|without) FI_HMEM support|Failed to register CUDA buffer with the EFA device"
        "|FI_HMEM cannot be supported because no compatible libraries were found",
        "/tmp/ray/session_latest/logs/",
    )
    greps = [c for c in cluster.calls if c[0] == "exec" and c[4] == NIXL_BACKEND_GREP]
    assert greps == [("exec", "inference", worker, "ray-worker", NIXL_BACKEND_GREP) for worker in WORKERS]
    post = next(c for c in cluster.calls if c[0] == "POST")
    assert post[1] == "chat/completions"
    assert post[2]["model"] == "qwen3.5-9b"
    assert post[2]["stream"] is True
    assert post[2]["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(
    "grep_output",
    [fixture_text("grep_ucx.txt"), fixture_text("grep_libfabric.txt") + fixture_text("grep_ucx.txt")],
    ids=["ucx-only", "libfabric-and-ucx"],
)
def test_ucx_in_a_worker_fails_loudly_with_the_tcp_speed_warning(grep_output, capsys, kubeconfig):
    cluster = healthy_cluster()
    cluster.grep[WORKERS[1]] = ExecResult(grep_output, "", 0)

    code, out = run_verify(cluster, capsys, kubeconfig)

    assert code == 1
    nixl = next(line for line in out.splitlines() if line.startswith(f"FAIL  {CHECK_NIXL}"))
    assert "NIXL fell back to UCX, which runs at TCP speed" in nixl
    for remedy in ("backends: [LIBFABRIC]", "EFA device plugin", "FI_PROVIDER=efa"):
        assert remedy in nixl
    assert f"{WORKERS[1]}: " in out and "UCX x2" in out
    assert "FAILED: NIXL backend" in out


def test_no_backend_logged_yet_fails(capsys, kubeconfig):
    cluster = healthy_cluster()
    cluster.grep[WORKERS[0]] = grep_result("grep_empty.txt")

    code, out = run_verify(cluster, capsys, kubeconfig)

    assert code == 1
    assert f"FAIL  {CHECK_NIXL}: no NIXL backend was logged yet" in out
    assert f"{WORKERS[0]}: no NIXL backend was logged yet" in out
    assert f"{WORKERS[1]}: LIBFABRIC x2" in out


def test_aggregated_workers_run_no_nixl_connector_so_none_is_searched_for():
    cluster = healthy_cluster()
    cluster.grep[WORKERS[0]] = grep_result("grep_empty.txt")
    report = verify(cluster, replace(TARGET, kv_connector=False), clock=cluster.clock)
    nixl = {c.name: c for c in report.checks}[CHECK_NIXL]
    assert nixl.passed and "serving.mode is aggregated" in nixl.reason
    assert not [c for c in cluster.calls if c[0] == "exec" and c[4] == NIXL_BACKEND_GREP]


def test_unreadable_worker_logs_fail_with_grep_s_error():
    cluster = healthy_cluster()
    cluster.grep[WORKERS[0]] = ExecResult(
        "", "grep: /tmp/ray/session_latest/logs/: No such file or directory", 2
    )

    passed, reason = verdicts(cluster)[CHECK_NIXL]

    assert not passed
    assert "No such file or directory" in reason


def test_a_worker_that_cannot_be_exec_ed_fails_and_the_other_is_still_read():
    cluster = healthy_cluster()
    cluster.grep[WORKERS[0]] = OpsError("exec grep in container ray-worker failed: HTTP 403 Forbidden")

    passed, reason = verdicts(cluster)[CHECK_NIXL]

    assert not passed
    assert f"{WORKERS[0]}: exec grep in container ray-worker failed: HTTP 403 Forbidden" in reason
    assert f"{WORKERS[1]}: LIBFABRIC x2" in reason


def test_nixl_check_reads_only_the_workers_of_the_active_ray_cluster():
    cluster = healthy_cluster()
    stale = json.loads(json.dumps(cluster.pod(WORKERS[0])))
    stale["metadata"]["name"] = "ray-llm-old42-gpu-workers-worker-x1x1x"
    stale["metadata"]["labels"]["ray.io/cluster"] = "ray-llm-old42"
    cluster.pods.append(stale)
    cluster.grep[stale["metadata"]["name"]] = grep_result("grep_ucx.txt")

    passed, reason = verdicts(cluster)[CHECK_NIXL]

    assert passed, reason
    assert (
        "list_pods",
        "inference",
        f"ray.io/node-type=worker,ray.io/cluster={ACTIVE_CLUSTER}",
    ) in cluster.calls


def test_gpu_node_without_efa_fails_naming_the_node(capsys, kubeconfig):
    cluster = healthy_cluster()
    del cluster.node(GPU_NODES[1])["status"]["allocatable"]["vpc.amazonaws.com/efa"]

    code, out = run_verify(cluster, capsys, kubeconfig)

    assert code == 1
    assert f"FAIL  {CHECK_NODES}: {GPU_NODES[1]}: allocatable vpc.amazonaws.com/efa is 0" in out
    assert GPU_NODES[0] not in out.split(f"FAIL  {CHECK_NODES}")[1]
    assert "5 of 6 checks passed" in out


def test_gpu_node_without_gpus_fails():
    cluster = healthy_cluster()
    cluster.node(GPU_NODES[0])["status"]["allocatable"]["nvidia.com/gpu"] = "0"

    passed, reason = verdicts(cluster)[CHECK_NODES]

    assert not passed
    assert f"{GPU_NODES[0]}: allocatable nvidia.com/gpu is 0" in reason


def test_no_gpu_node_at_all_fails():
    cluster = healthy_cluster()
    cluster.nodes = [n for n in cluster.nodes if n["metadata"]["name"] not in GPU_NODES]

    passed, reason = verdicts(cluster)[CHECK_NODES]

    assert not passed
    assert "no node is labelled role=gpu-worker" in reason


def test_models_list_without_the_model_fails(capsys, kubeconfig):
    cluster = healthy_cluster()
    listing = json.loads(cluster.models.body)
    listing["data"][0]["id"] = "llama-3.1-8b"
    cluster.models = HttpResponse(200, json.dumps(listing))

    code, out = run_verify(cluster, capsys, kubeconfig)

    assert code == 1
    assert f"FAIL  {CHECK_MODELS}: model qwen3.5-9b is not served (served: llama-3.1-8b)" in out


def test_model_flag_overrides_the_default(capsys, kubeconfig):
    code, out = run_verify(healthy_cluster(), capsys, kubeconfig, "--model", "qwen3-32b")

    assert code == 1
    assert "model qwen3-32b is not served (served: qwen3.5-9b)" in out


def test_models_endpoint_unavailable_fails_with_the_status():
    cluster = healthy_cluster()
    cluster.models = HttpResponse(503, 'no endpoints available for service "ray-llm-serve-svc"')

    passed, reason = verdicts(cluster)[CHECK_MODELS]

    assert not passed
    assert reason.startswith("HTTP 503")
    assert "ops status" in reason


def test_stream_timing_uses_usage_tokens():
    # Events arrive 0.40 s after the request, then every 0.05 s: role chunk 0.40, ten text chunks
    # 0.45 .. 0.90, finish chunk 0.95, usage chunk 1.00, [DONE] 1.05.
    cluster = healthy_cluster()
    clock = cluster.clock
    clock.now = 100.0

    stats = summarize_stream(cluster.http_post_stream("chat/completions", {}), clock(), clock)

    assert stats.text == REPLY
    assert stats.done and stats.error is None
    assert stats.finish_reason == "stop"
    assert stats.ttft_s == pytest.approx(0.45)
    assert (stats.tokens, stats.token_source, stats.content_chunks) == (32, "usage", 10)
    assert stats.tokens_per_s == pytest.approx(31 / 0.50)  # tokens after the first, 0.45 s -> 0.95 s


def test_stream_timing_counts_text_chunks_without_usage():
    cluster = healthy_cluster()
    cluster.stream = [line for line in cluster.stream if '"usage"' not in line]

    stats = summarize_stream(cluster.http_post_stream("chat/completions", {}), 0.0, cluster.clock)

    assert (stats.tokens, stats.token_source) == (10, "content chunks")
    assert stats.ttft_s == pytest.approx(0.45)
    assert stats.tokens_per_s == pytest.approx(9 / 0.50)


def test_chat_check_reports_time_to_first_token_and_rate():
    cluster = healthy_cluster()

    result = check_chat(cluster, "qwen3.5-9b", cluster.clock)

    assert result.passed
    assert result.reason.startswith("time to first token 0.45 s, 62.0 tokens/s (32 tokens by usage")
    assert "Prefill/decode disaggregation runs" in result.reason


def test_reasoning_deltas_count_as_text():
    clock = FakeClock()
    lines = [
        'data: {"choices":[{"index":0,"delta":{"reasoning_content":"Thinking"},"finish_reason":null}]}',
        'data: {"choices":[{"index":0,"delta":{"content":"Answer"},"finish_reason":"stop"}]}',
        "data: [DONE]",
    ]

    stats = summarize_stream(iter(lines), 0.0, clock)

    assert (stats.reasoning, stats.text, stats.content_chunks) == ("Thinking", "Answer", 2)


@pytest.mark.parametrize(
    ("stream", "reason"),
    [
        (
            ['data: {"error":{"object":"error","message":"max_tokens is too large","code":400}}'],
            "the stream reported an error: max_tokens is too large",
        ),
        (
            [
                'data: {"choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}',
                'data: {"choices":[{"index":0,"delta":{"content":""},"finish_reason":"length"}]}',
                "data: [DONE]",
            ],
            "the stream carried no text (finish_reason length)",
        ),
        (
            ['data: {"choices":[{"index":0,"delta":{"content":"Pre"},"finish_reason":null}]}'],
            "the stream stopped after 1 text chunks without [DONE]",
        ),
    ],
    ids=["error-event", "no-text", "cut-off"],
)
def test_broken_streams_fail_the_chat_check(stream, reason):
    cluster = healthy_cluster()
    cluster.stream = stream

    assert verdicts(cluster)[CHECK_CHAT] == (False, reason)


def test_every_check_runs_even_when_the_endpoint_is_down():
    cluster = healthy_cluster()
    cluster.models = HttpResponse(503, "no endpoints available")
    cluster.stream = []

    checks = verdicts(cluster)

    assert [name for name, (passed, _) in checks.items() if passed] == [CHECK_NIXL, CHECK_NODES]


def test_http_goes_through_the_api_server_service_proxy():
    endpoint = ServiceEndpoint("inference", "ray-llm-serve-svc")

    assert (
        endpoint.proxy_path("models")
        == "/api/v1/namespaces/inference/services/ray-llm-serve-svc:8000/proxy/v1/models"
    )
    assert endpoint.proxy_path("/chat/completions").endswith(
        "/services/ray-llm-serve-svc:8000/proxy/v1/chat/completions"
    )


def test_base_url_reaches_the_connection_options(capsys, kubeconfig):
    seen = []

    def connect(options):
        seen.append(options)
        return healthy_cluster()

    code = main(
        [
            "verify",
            "--kubeconfig",
            str(kubeconfig),
            "--base-url",
            "http://127.0.0.1:8000/v1",
            "--kv-probe-mib",
            "0",
        ],
        connect=connect,
        clock=FakeClock(),
    )
    capsys.readouterr()

    assert code == 0
    assert seen[0].base_url == "http://127.0.0.1:8000/v1"
    assert seen[0].endpoint == ServiceEndpoint("inference", "ray-llm-serve-svc")
