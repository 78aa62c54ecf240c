"""A Prometheus HTTP API on loopback that answers instant queries the way a test says: what the
autoscaling policies (jobs/llm_autoscaling.py) ask of it, with no Prometheus server."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest


class FakePrometheus:
    """`/api/v1/query` answered by `answer(query)`: one sample of that value, or no series for None.
    Every query asked is kept in `queries`."""

    def __init__(self) -> None:
        self.queries: list[str] = []
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                url = urlparse(self.path)
                assert url.path == "/api/v1/query"
                query = parse_qs(url.query)["query"][0]
                fake.queries.append(query)
                value = fake.answer(query)
                result = [] if value is None else [{"metric": {}, "value": [time.time(), value]}]
                body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}})
                self.send_response(200)
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = HTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"

    def answer(self, query: str) -> str | None:
        raise NotImplementedError


@contextmanager
def serving(fake: FakePrometheus, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """`fake` serving, where the policies look for Prometheus (`RAY_PROMETHEUS_HOST`) and their cluster."""
    thread = threading.Thread(target=fake.server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    monkeypatch.setenv("RAY_PROMETHEUS_HOST", fake.url)
    monkeypatch.setenv("RAY_CLUSTER_NAME", "ray-llm-raycluster-abcde")
    try:
        yield
    finally:
        fake.server.shutdown()
