"""The README's OpenAI client example, run as written: with the real `openai` package, against a
local stand-in for the gateway that, like Envoy's api_key_auth filter, refuses a request unless its
`Authorization: Bearer <key>` carries one of the stack's keys, and a stand-in `pulumi` that prints
the stack's keys. The stand-in listens where the README's port-forward puts the gateway, but on a free
port. If the README's snippet, the output names, the key's form or the port-forward drift, this fails.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.fakes.pulumi import ROOT

KEY = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKL"
WORDS = ["Hello", " from", " prefill", " and", " decode", "."]


LOCAL = "http://127.0.0.1:8000/v1"
"""Where the README's client connects: its port-forward's local port."""


def readme_snippet() -> str:
    readme = (ROOT / "README.md").read_text()
    (snippet,) = re.findall(r"```python\n(.*?)```", readme, re.S)
    (forward,) = re.findall(r"^kubectl port-forward .* (\d+):\d+ ", readme, re.M)
    assert f'base_url="{LOCAL}"' in snippet and LOCAL.startswith(f"http://127.0.0.1:{forward}/")
    return snippet


class Gateway(BaseHTTPRequestHandler):
    seen: list[tuple[str, str | None]] = []

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_POST(self) -> None:
        Gateway.seen.append((self.path, self.headers.get("Authorization")))
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.headers.get("Authorization", "").removeprefix("Bearer ") != KEY:
            self.send_response(401)
            self.end_headers()
            self.wfile.write(b"Client authentication failed.")
            return
        if self.path != "/v1/chat/completions" or not body.get("stream"):
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for event in self._events(body["model"]):
            self.wfile.write(f"data: {event}\n\n".encode())
            self.wfile.flush()

    @staticmethod
    def _events(model: str) -> Iterator[str]:
        base = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": model}
        for word in WORDS:
            yield json.dumps({**base, "choices": [{"index": 0, "delta": {"content": word}}]})
        yield json.dumps({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        yield "[DONE]"


@pytest.fixture
def gateway() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Gateway)
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    Gateway.seen = []
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


def fake_pulumi(bin_dir: Path, outputs: dict[str, object]) -> None:
    """A `pulumi` on PATH that answers `pulumi stack output apiKeys --stack dev --json --show-secrets`:
    the README names its stack, never the one `make up` last selected."""
    script = bin_dir / "pulumi"
    script.write_text(
        f"#!{sys.executable}\n"
        "import sys\n"
        "wanted = ['stack', 'output', 'apiKeys', '--stack', 'dev', '--json', '--show-secrets']\n"
        "assert sys.argv[1:] == wanted, sys.argv\n"
        f"print({json.dumps(outputs['apiKeys'])!r})\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


def run_snippet(tmp_path: Path, url: str, key: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's snippet, as written but for the gateway's port, run in this process (the `openai`
    import is most of its time, so two interpreters paid it twice); it prints to this test's stdout."""
    fake_pulumi(tmp_path, {"endpointUrl": url, "apiKeys": {"default": key}})
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    exec(compile(readme_snippet().replace(LOCAL, url), "README.md", "exec"), {"__name__": "readme"})


def test_the_readme_example_streams_a_completion_with_the_stacks_key(tmp_path, gateway, monkeypatch, capsys):
    run_snippet(tmp_path, gateway, KEY, monkeypatch)

    assert capsys.readouterr().out == "".join(WORDS)
    assert Gateway.seen == [("/v1/chat/completions", f"Bearer {KEY}")]


def test_the_readme_example_is_refused_with_a_wrong_key(tmp_path, gateway, monkeypatch):
    import openai

    with pytest.raises(openai.AuthenticationError, match="401"):
        run_snippet(tmp_path, gateway, "not-the-key", monkeypatch)
