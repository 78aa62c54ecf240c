"""The fake Kubernetes API the `ops` tests run against, replaying tests/fixtures/ops/ (a dev stack
after a good `pulumi up`). tests/test_ops_fixtures.py keeps those recordings honest."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ops.kube import EXEC_TIMEOUT_S, ExecResult, HttpResponse, OpsError, ServiceEndpoint, stack_prometheus
from tests.fakes.ops import KEYS

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "ops"
ACTIVE_CLUSTER = "ray-llm-6mzvd"
HEAD = f"{ACTIVE_CLUSTER}-head-7xq9t"
WORKERS = (f"{ACTIVE_CLUSTER}-gpu-workers-worker-k2l8p", f"{ACTIVE_CLUSTER}-gpu-workers-worker-w9f4d")
SYSTEM_NODE = "ip-10-0-3-142.sa-east-1.compute.internal"
GPU_NODES = ("ip-10-0-1-23.sa-east-1.compute.internal", "ip-10-0-1-87.sa-east-1.compute.internal")


def fixture_json(name: str) -> Any:
    return json.loads((FIXTURES / name).read_text())


def fixture_text(name: str) -> str:
    return (FIXTURES / name).read_text()


def grep_result(name: str) -> ExecResult:
    """A worker's grep as the exec API reports it: exit 0 on a match, 1 on none."""
    out = fixture_text(name)
    return ExecResult(out, "", 0 if out else 1)


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def selector_matches(labels: Mapping[str, str], selector: str) -> bool:
    """Equality-based label selectors (`k=v`, `k!=v`, `k`), as the API server applies them."""
    for term in filter(None, selector.split(",")):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.split("=", 1)
            if labels.get(key) != value:
                return False
        elif term not in labels:
            return False
    return True


@dataclass
class FakeKubeApi:
    """Answers like a cluster would, from the fixtures; records every call so tests can check them.

    The streamed completion moves `clock` as each `data:` event arrives: the first event
    `first_event_s` after the request, then one every `event_interval_s`."""

    rayservice: dict[str, Any] | None
    pods: list[dict[str, Any]]
    nodes: list[dict[str, Any]]
    grep: dict[str, ExecResult | OpsError]
    """Per worker pod: what its grep printed, or the error exec raised."""
    models: HttpResponse
    stream: list[str]
    objects: dict[tuple[str, str, str, str], dict[str, Any]] = field(default_factory=dict)
    """(apiVersion, plural, namespace, name) -> object, for get_object."""
    prometheus: dict[str, list[dict[str, Any]]] | None = None
    """query -> result vector; None: no Prometheus in the stack."""
    prometheus_at: ServiceEndpoint = field(default_factory=stack_prometheus)
    """The Service the Prometheus answers behind; a query asking another finds none."""
    api_key: str | None = None
    """Set: HTTP goes through a gateway that answers 401 unless a request carries this key."""
    headers: dict[str, str] = field(default_factory=dict)
    """What the connection sends by default (ConnectOptions.headers; `connect_with` sets it)."""
    clock: FakeClock = field(default_factory=FakeClock)
    first_event_s: float = 0.40
    event_interval_s: float = 0.05
    calls: list[tuple[Any, ...]] = field(default_factory=list)
    access_error: OpsError | None = None
    """Set: the API server refuses our identity (check_access raises it)."""
    jobs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Jobs created (name -> manifest)."""
    job_states: list[tuple[str, str]] = field(default_factory=list)
    """What job_state answers, one per call (the last repeats)."""
    job_log: str = ""
    exec_handler: Callable[[str, Sequence[str], float], ExecResult | None] | None = None
    """Answers an exec other than the log grep (pod, command, timeout), e.g. tests/fakes/nixl.py's
    probe pods; None from it falls back to `grep`."""
    service_handler: (
        Callable[
            [ServiceEndpoint, str, str, Mapping[str, Any] | None, Mapping[str, str] | None], HttpResponse
        ]
        | None
    ) = None
    """Answers `service_request` (where, method, path, body, headers), e.g. a Ray dashboard's Serve REST
    API (tests/test_ratio.py); None: no ready pod behind any Service."""

    def create_job(self, namespace: str, manifest: Mapping[str, Any]) -> None:
        self.calls.append(("create_job", namespace, manifest["metadata"]["name"]))
        if manifest["metadata"]["name"] in self.jobs:
            raise OpsError(f"a Job {namespace}/{manifest['metadata']['name']} exists", exit_code=2)
        self.jobs[manifest["metadata"]["name"]] = copy.deepcopy(dict(manifest))

    def job_state(self, namespace: str, name: str) -> tuple[str, str]:
        self.calls.append(("job_state", namespace, name))
        return self.job_states.pop(0) if len(self.job_states) > 1 else self.job_states[0]

    def job_logs(self, namespace: str, name: str) -> str:
        self.calls.append(("job_logs", namespace, name))
        return self.job_log

    def check_access(self) -> None:
        self.calls.append(("check_access",))
        if self.access_error:
            raise self.access_error

    def get_rayservice(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls.append(("get_rayservice", namespace, name))
        found = self.rayservice
        if found and (found["metadata"]["namespace"], found["metadata"]["name"]) == (namespace, name):
            return copy.deepcopy(found)
        return None

    def list_pods(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        self.calls.append(("list_pods", namespace, label_selector))
        return [
            copy.deepcopy(p)
            for p in self.pods
            if p["metadata"]["namespace"] == namespace
            and selector_matches(p["metadata"].get("labels", {}), label_selector)
        ]

    def list_nodes(self, label_selector: str) -> list[dict[str, Any]]:
        self.calls.append(("list_nodes", label_selector))
        return [
            copy.deepcopy(n)
            for n in self.nodes
            if selector_matches(n["metadata"].get("labels", {}), label_selector)
        ]

    def exec_in_pod(
        self,
        namespace: str,
        pod: str,
        container: str,
        command: Sequence[str],
        timeout: float = EXEC_TIMEOUT_S,
    ) -> ExecResult:
        self.calls.append(("exec", namespace, pod, container, tuple(command)))
        found = next((p for p in self.pods if p["metadata"]["name"] == pod), None)
        if found is None or container not in [c["name"] for c in found["spec"]["containers"]]:
            raise OpsError(f"pod {pod!r} has no container {container!r}")
        if self.exec_handler is not None:
            answer = self.exec_handler(pod, command, timeout)
            if answer is not None:
                return answer
        result = self.grep[pod]
        if isinstance(result, OpsError):
            raise result
        return result

    def get_object(self, api_version: str, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        self.calls.append(("get_object", api_version, plural, namespace, name))
        found = self.objects.get((api_version, plural, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    def prometheus_query(
        self, query: str, prometheus: ServiceEndpoint | None = None
    ) -> list[dict[str, Any]] | None:
        self.calls.append(("prometheus_query", query))
        if self.prometheus is None or (prometheus or stack_prometheus()) != self.prometheus_at:
            return None  # the API server's proxy: no such Service
        return copy.deepcopy(self.prometheus.get(query, []))

    def service_request(
        self,
        where: ServiceEndpoint,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> HttpResponse | None:
        self.calls.append(("service_request", where, method, path))
        if self.service_handler is None:
            return None
        return self.service_handler(where, method, path, copy.deepcopy(body), headers)

    def _refused(self, headers: Mapping[str, str] | None) -> bool:
        """What Envoy's api_key_auth filter decides: the key from x-api-key or Authorization (a
        `Bearer ` prefix stripped) must be one of the Secret's."""
        if self.api_key is None:
            return False
        sent = dict(self.headers if headers is None else headers)
        given = sent.get("x-api-key") or sent.get("Authorization", "").removeprefix("Bearer ")
        return given != self.api_key

    def http_get(self, path: str, headers: Mapping[str, str] | None = None) -> HttpResponse:
        self.calls.append(("GET", path, dict(self.headers if headers is None else headers)))
        if self._refused(headers):
            return HttpResponse(401, "Client authentication failed.")
        return self.models if path == "models" else HttpResponse(404, '{"detail":"Not Found"}')

    def http_post_stream(
        self, path: str, body: Mapping[str, Any], headers: Mapping[str, str] | None = None
    ) -> Iterator[str]:
        self.calls.append(("POST", path, dict(body)))
        if self._refused(headers):
            raise OpsError(f"POST {path} answered HTTP 401: Client authentication failed.")
        if path != "chat/completions":
            raise OpsError(f"POST {path} answered HTTP 404")
        return self._replay()

    def _replay(self) -> Iterator[str]:
        start, event = self.clock.now, 0
        for line in self.stream:
            if line.startswith("data:"):
                self.clock.now = start + self.first_event_s + self.event_interval_s * event
                event += 1
            yield line

    def pod(self, name: str) -> dict[str, Any]:
        return next(p for p in self.pods if p["metadata"]["name"] == name)

    def node(self, name: str) -> dict[str, Any]:
        return next(n for n in self.nodes if n["metadata"]["name"] == name)


def connect_with(cluster: FakeKubeApi, seen: list[Any] | None = None):
    """A `connect` for ops.cli.main: the cluster sends what ConnectOptions says (and `seen` records it)."""

    def connect(options: Any) -> FakeKubeApi:
        cluster.headers = dict(options.headers)
        if seen is not None:
            seen.append(options)
        return cluster

    return connect


def healthy_cluster() -> FakeKubeApi:
    """The dev stack after a good `pulumi up`: Ready, RUNNING, NIXL on LIBFABRIC, EFA on both nodes, and
    workers that move the transfer probe's bytes intact over EFA (tests/fakes/nixl.py)."""
    from tests.fakes.nixl import ProbePods

    cluster = FakeKubeApi(
        rayservice=fixture_json("rayservice.json"),
        pods=fixture_json("pods.json")["items"],
        nodes=fixture_json("nodes.json")["items"],
        grep={worker: grep_result("grep_libfabric.txt") for worker in WORKERS},
        models=HttpResponse(200, fixture_text("models.json")),
        stream=fixture_text("chat_stream.sse").splitlines(),
    )
    cluster.exec_handler = ProbePods(cluster.clock)
    return cluster


def gateway_cluster(key: str | None = KEYS["default"]) -> FakeKubeApi:
    """A healthy cluster whose gateway wants `key` (None: no key policy)."""
    cluster = healthy_cluster()
    cluster.api_key = key
    return cluster
