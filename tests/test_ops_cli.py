"""The `python -m ops` command line and its plumbing: help and usage errors (exit 2), the kubeconfig taken
from `pulumi stack output` (a missing or failing pulumi CLI is a clear exit 2, the file is private and
removed afterwards), and the HTTP line reader that times a streamed completion chunk by chunk.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from ops.cli import main
from ops.kube import DirectHttp, OpsError, iter_lines
from ops.stack import kubeconfig_from_stack
from tests.fakes.kube import fixture_text, healthy_cluster
from tests.fakes.pulumi import ROOT


@pytest.mark.parametrize("command", ["verify", "status"])
def test_help_runs_as_a_module(command):
    result = subprocess.run(
        [sys.executable, "-m", "ops", command, "--help"], cwd=ROOT, capture_output=True, text=True, timeout=60
    )

    assert result.returncode == 0, result.stderr
    assert f"usage: python -m ops {command}" in result.stdout
    assert "--kubeconfig FILE" in result.stdout
    assert "--stack NAME" in result.stdout


def test_kubeconfig_and_stack_together_are_a_usage_error(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["status", "--kubeconfig", "kc.json", "--stack", "dev"])

    assert exit_.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


def test_missing_kubeconfig_file_exits_2(tmp_path, capsys):
    code = main(["status", "--kubeconfig", str(tmp_path / "nope.json")], connect=lambda _: healthy_cluster())

    assert code == 2
    assert f"no kubeconfig file {tmp_path / 'nope.json'}" in capsys.readouterr().err


def test_an_invalid_name_flag_exits_2(tmp_path, capsys):
    kubeconfig = tmp_path / "kc.json"
    kubeconfig.write_text("{}")

    code = main(
        ["status", "--kubeconfig", str(kubeconfig), "--name", "Ray_LLM"], connect=lambda _: healthy_cluster()
    )

    assert code == 2
    assert "--name 'Ray_LLM'" in capsys.readouterr().err


def _pulumi_missing(*_: Any, **__: Any) -> subprocess.CompletedProcess[str]:
    raise FileNotFoundError("pulumi")


def _pulumi_fails(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(command, 255, stdout="", stderr="error: no stack named 'dev' found")


def _pulumi_prints(text: str):
    def run(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(command, 0, stdout=text, stderr="")

    return run


@pytest.mark.parametrize(
    ("run", "message"),
    [
        (_pulumi_missing, "the pulumi CLI is not installed"),
        (_pulumi_fails, "failed (exit 255): error: no stack named 'dev' found"),
        (_pulumi_prints("null\n"), "is not a JSON kubeconfig"),
    ],
    ids=["missing", "fails", "not-a-kubeconfig"],
)
def test_stack_kubeconfig_problems_exit_2_with_the_reason(run, message, capsys):
    code = main(["verify", "--stack", "dev"], connect=lambda _: healthy_cluster(), run=run)

    assert code == 2
    assert message in capsys.readouterr().err


def test_stack_kubeconfig_is_private_and_removed_afterwards():
    text = json.dumps({"apiVersion": "v1", "clusters": [{"name": "eks"}], "users": []})

    for printed in (text + "\n", json.dumps(text)):  # plain, and as `pulumi stack output --json` prints it
        with kubeconfig_from_stack("dev", ROOT, run=_pulumi_prints(printed)) as path:
            assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
            assert json.loads(path.read_text()) == json.loads(text)
        assert not path.exists()


def test_stack_kubeconfig_is_removed_when_the_command_fails():
    with (
        pytest.raises(OpsError),
        kubeconfig_from_stack("dev", ROOT, run=_pulumi_prints('{"clusters": []}')) as path,
    ):
        raise OpsError("the cluster did not answer")
    assert not path.exists()


def test_lines_are_split_on_arrival_whatever_the_chunk_boundaries():
    chunks = [b'data: {"a"', b": 1}\n\nda", b"ta: \xc3", b"\xa9t\xc3\xa9\r\n", b"\ndata: [DONE]"]

    assert list(iter_lines(chunks)) == ['data: {"a": 1}', "", "data: \u00e9t\u00e9", "", "data: [DONE]"]


def test_each_line_is_yielded_before_the_next_chunk_is_read():
    read: list[bytes] = []

    def chunks() -> Iterator[bytes]:
        for chunk in (b"data: one\n", b"data: two\n"):
            read.append(chunk)
            yield chunk

    lines = iter_lines(chunks())
    assert next(lines) == "data: one"
    assert read == [b"data: one\n"]  # the first token's time is not delayed by later chunks


class _OpenAiStub(BaseHTTPRequestHandler):
    """A port-forwarded serve endpoint: /v1/models, and a chunked SSE stream for chat completions."""

    protocol_version = "HTTP/1.1"
    posted: list[dict[str, Any]] = []

    def do_GET(self) -> None:
        status, body = (200, fixture_text("models.json")) if self.path == "/v1/models" else (404, "{}")
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self) -> None:
        length = int(self.headers["Content-Length"])
        type(self).posted.append(json.loads(self.rfile.read(length)))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for event in fixture_text("chat_stream.sse").split("\n\n"):
            if event:
                data = (event + "\n\n").encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        self.wfile.write(b"0\r\n\r\n")

    def log_message(self, format: str, *args: Any) -> None:  # quiet test output
        pass


@pytest.fixture
def openai_stub() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _OpenAiStub)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1/"
    finally:
        server.shutdown()
        server.server_close()


def test_direct_http_reads_models_and_a_chunked_stream(openai_stub):
    http = DirectHttp(openai_stub, timeout=5, stream_timeout=5)

    models = http.get("models")
    lines = list(http.post_stream("chat/completions", {"model": "qwen3.5-9b", "stream": True}))

    assert models.status == 200
    assert json.loads(models.body)["data"][0]["id"] == "qwen3.5-9b"
    assert http.get("nothing").status == 404
    assert lines == fixture_text("chat_stream.sse").splitlines()
    assert _OpenAiStub.posted[-1] == {"model": "qwen3.5-9b", "stream": True}


def test_direct_http_unreachable_is_an_ops_error():
    http = DirectHttp("http://127.0.0.1:9/v1", timeout=2)

    with pytest.raises(OpsError, match=re.escape("cannot reach http://127.0.0.1:9/v1/models")):
        http.get("models")


def test_render_and_the_cli_do_not_load_the_kubernetes_client():
    # The client's import alone takes over a second; render and --help must not pay it.
    code = (
        "import sys, io, contextlib\n"
        "from ops.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    rc = main(['render', '--stack', 'dev'])\n"
        "sys.exit(3 if 'kubernetes' in sys.modules else rc)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )

    assert result.returncode == 0, result.stderr
