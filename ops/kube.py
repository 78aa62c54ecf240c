"""The narrow view of a cluster that `status` and `verify` need, and its one real implementation.

Every decision is made on plain API JSON (what `kubectl get -o json` prints) and on HTTP bodies, so the
tests replay recorded responses through a fake `KubeApi`. Only `KubeClient` talks to a cluster, and
it imports the `kubernetes` client lazily: that import alone takes over a second, which `render`,
`--help` and the tests should not pay.
"""

from __future__ import annotations

import codecs
import json
import os
import subprocess
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, cast

import yaml

RAY_NODE_TYPE_LABEL = "ray.io/node-type"
"""KubeRay labels every Ray pod `head` or `worker`."""
RAY_CLUSTER_LABEL = "ray.io/cluster"
"""KubeRay labels every Ray pod with its RayCluster; a RayService upgrade briefly runs two."""
SERVE_PORT = 8000

CONNECT_TIMEOUT_S = 10.0
API_TIMEOUT_S = 30.0
STREAM_TIMEOUT_S = 300.0
"""Read timeout between two chunks of a streamed completion (a cold engine may pause)."""
EXEC_TIMEOUT_S = 60.0


class OpsError(Exception):
    """A failure the CLI reports in one message. `exit_code` 2: the command could not start (usage,
    config, credentials); 1: the cluster answered, but not as hoped."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class ExecResult:
    stdout: str
    stderr: str
    returncode: int | None
    """None when the command did not finish within the timeout."""


@dataclass(frozen=True)
class HttpResponse:
    status: int
    body: str


Headers = Mapping[str, str]


class KubeApi(Protocol):
    """What the commands read from a cluster. HTTP paths are relative to the OpenAI API root `/v1`;
    `headers` None sends the connection's own (ConnectOptions.headers: the API key), `{}` none."""

    def check_access(self) -> None:
        """Raise OpsError (exit 2) unless the API server accepts our credentials: before any check, so
        the API server's own 401 is never read as an answer of the gateway's."""
        ...

    def get_rayservice(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def get_object(self, api_version: str, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        """A namespaced object (`v1` or `group/version`) as JSON, None when it does not exist."""
        ...

    def list_pods(self, namespace: str, label_selector: str) -> list[dict[str, Any]]: ...

    def prometheus_query(
        self, query: str, prometheus: ServiceEndpoint | None = None
    ) -> list[dict[str, Any]] | None:
        """An instant query's result vector from the stack's Prometheus, or the one at `prometheus`
        (through a port-forward to a ready pod behind the Service, which no NetworkPolicy governs, so
        Prometheus's port stays closed to the VPC); None when no Prometheus answers there."""
        ...

    def list_nodes(self, label_selector: str) -> list[dict[str, Any]]: ...

    def exec_in_pod(
        self,
        namespace: str,
        pod: str,
        container: str,
        command: Sequence[str],
        timeout: float = EXEC_TIMEOUT_S,
    ) -> ExecResult:
        """Run `command` in the container; its output and exit code, returncode None after `timeout`."""
        ...

    def create_job(self, namespace: str, manifest: Mapping[str, Any]) -> None:
        """Create a Job (OpsError when one of that name exists)."""
        ...

    def job_state(self, namespace: str, name: str) -> tuple[str, str]:
        """("running" | "succeeded" | "failed", what the Job's status says)."""
        ...

    def job_logs(self, namespace: str, name: str) -> str:
        """The log of the Job's (last) pod."""
        ...

    def http_get(self, path: str, headers: Headers | None = None) -> HttpResponse: ...

    def service_request(
        self,
        where: ServiceEndpoint,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        headers: Headers | None = None,
    ) -> HttpResponse | None:
        """`method` `path` on a ready pod behind the Service `where`, through a port-forward (which no
        NetworkPolicy governs, as for Prometheus); None when no ready pod serves that port."""
        ...

    def http_post_stream(
        self, path: str, body: Mapping[str, Any], headers: Headers | None = None
    ) -> Iterator[str]:
        """POST a JSON body and yield the response's lines as they arrive (raises OpsError on non-2xx)."""
        ...


@dataclass(frozen=True)
class ServiceEndpoint:
    """A Service reached through the API server's service proxy, so it needs no port-forward: where
    `verify` sends the OpenAI API requests (KubeRay's serve Service, or the endpoint's gateway Service,
    then the API key goes in `x-api-key`: the API server drops an `Authorization` header after
    authenticating with it); or the Prometheus `status` asks, by port-forward to a pod behind it."""

    namespace: str
    service: str
    port: int = SERVE_PORT

    def proxy_path(self, path: str, api: str = "v1") -> str:
        """`path` of the Service through the API server's proxy: under /v1 (OpenAI's API), or `api`."""
        ns, svc = (urllib.parse.quote(part, safe="") for part in (self.namespace, self.service))
        under = f"/{api}" if api else ""
        return f"/api/v1/namespaces/{ns}/services/{svc}:{self.port}/proxy{under}/{path.lstrip('/')}"


def stack_prometheus() -> ServiceEndpoint:
    """The stack's own Prometheus (kube-prometheus-stack's Service in its namespace)."""
    from manifests.observability.charts import MONITORING_NAMESPACE, PROMETHEUS_PORT, PROMETHEUS_SERVICE

    return ServiceEndpoint(MONITORING_NAMESPACE, PROMETHEUS_SERVICE, PROMETHEUS_PORT)


@dataclass(frozen=True)
class ConnectOptions:
    """How `status` and `verify` reach the cluster; the CLI builds it, `connect` turns it into a KubeApi."""

    kubeconfig: Path | None
    endpoint: ServiceEndpoint
    base_url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    """Sent with every OpenAI API request: the API key, in the header the route takes."""


def forward_target(
    service: Mapping[str, Any], pods: Sequence[Mapping[str, Any]], port: int
) -> tuple[str, int] | None:
    """(pod, container port) a port-forward to `service`'s `port` goes to, as `kubectl port-forward
    svc/...` picks it: a ready pod the Service selects, and the port's `targetPort` (a number, a
    container port's name, or the port itself when unset). None when no ready pod has it."""
    (spec_port,) = [p for p in (service.get("spec") or {}).get("ports") or [] if p.get("port") == port] or [
        None
    ]
    if spec_port is None:
        return None
    target = spec_port.get("targetPort", port)
    for pod in pods:
        status = pod.get("status") or {}
        ready = any(
            c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
        )
        if status.get("phase") != "Running" or not ready:
            continue
        if isinstance(target, int):
            return pod["metadata"]["name"], target
        for container in (pod.get("spec") or {}).get("containers") or []:
            for declared in container.get("ports") or []:
                if declared.get("name") == target:
                    return pod["metadata"]["name"], declared["containerPort"]
    return None


def http_get_over(sock: Any, path: str, timeout: float = API_TIMEOUT_S) -> HttpResponse:
    """GET `path` over a connected socket (a port-forward's) as HTTP/1.0, so the answer has no chunked
    framing and ends when the server closes the connection."""
    sock.settimeout(timeout)
    sock.sendall(f"GET {path} HTTP/1.0\r\nHost: localhost\r\nAccept: application/json\r\n\r\n".encode())
    raw = b""
    while chunk := sock.recv(65536):
        raw += chunk
    return parse_http_response(raw)


def http_request_over(
    sock: Any,
    method: str,
    path: str,
    body: Mapping[str, Any] | None = None,
    headers: Headers | None = None,
    timeout: float = API_TIMEOUT_S,
) -> HttpResponse:
    """`method` `path` with a JSON body over a connected socket, as HTTP/1.0 like `http_get_over`."""
    data = json.dumps(body).encode() if body is not None else b""
    lines = [
        f"{method} {path} HTTP/1.0",
        "Host: localhost",
        "Accept: application/json",
        *(["Content-Type: application/json", f"Content-Length: {len(data)}"] if body is not None else []),
        *(f"{k}: {v}" for k, v in (headers or {}).items()),
    ]
    sock.settimeout(timeout)
    sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode() + data)
    raw = b""
    while chunk := sock.recv(65536):
        raw += chunk
    return parse_http_response(raw)


def parse_http_response(raw: bytes) -> HttpResponse:
    head, separator, body = raw.partition(b"\r\n\r\n")
    status_line = head.split(b"\r\n", 1)[0].decode("latin-1")
    parts = status_line.split(" ", 2)
    if not separator or len(parts) < 2 or not parts[0].startswith("HTTP/") or not parts[1].isdigit():
        raise OpsError(f"not an HTTP answer: {excerpt(raw.decode('utf-8', 'replace'))}")
    return HttpResponse(int(parts[1]), body.decode("utf-8", "replace"))


def iter_lines(chunks: Iterable[bytes]) -> Iterator[str]:
    """Split a byte stream into text lines as soon as each line is complete (SSE is line-framed, and a
    chunk boundary may fall anywhere, even inside a UTF-8 character)."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending = ""
    for chunk in chunks:
        pending += decoder.decode(chunk)
        *complete, pending = pending.split("\n")
        for line in complete:
            yield line.removesuffix("\r")
    pending += decoder.decode(b"", final=True)
    if pending:
        yield pending.removesuffix("\r")


class DirectHttp:
    """HTTP straight to the OpenAI base URL (e.g. `http://127.0.0.1:8000/v1` behind a port-forward)."""

    def __init__(
        self, base_url: str, timeout: float = API_TIMEOUT_S, stream_timeout: float = STREAM_TIMEOUT_S
    ):
        self.base_url = base_url.rstrip("/")
        self.timeout = timeout
        self.stream_timeout = stream_timeout

    def url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}"

    def get(self, path: str, headers: Headers = {}) -> HttpResponse:  # noqa: B006 (never mutated)
        request = urllib.request.Request(self.url(path), headers={"Accept": "application/json", **headers})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return HttpResponse(response.status, response.read().decode("utf-8", "replace"))
        except urllib.error.HTTPError as error:
            return HttpResponse(error.code, error.read().decode("utf-8", "replace"))
        except (urllib.error.URLError, OSError) as error:
            raise OpsError(f"cannot reach {self.url(path)}: {getattr(error, 'reason', error)}") from None

    def post_stream(
        self,
        path: str,
        body: Mapping[str, Any],
        headers: Headers = {},  # noqa: B006 (never mutated)
    ) -> Iterator[str]:
        request = urllib.request.Request(
            self.url(path),
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json", "Accept": "text/event-stream", **headers},
            method="POST",
        )
        try:
            response = urllib.request.urlopen(request, timeout=self.stream_timeout)
        except urllib.error.HTTPError as error:
            text = error.read().decode("utf-8", "replace")
            raise OpsError(f"POST {self.url(path)} answered HTTP {error.code}: {excerpt(text)}") from None
        except (urllib.error.URLError, OSError) as error:
            raise OpsError(f"cannot reach {self.url(path)}: {getattr(error, 'reason', error)}") from None
        with response:
            # http.client's readline returns each line as soon as it is complete, chunked or not.
            for raw in response:
                yield raw.decode("utf-8", "replace").removesuffix("\n").removesuffix("\r")


def kubeconfig_path(kubeconfig: Path | None) -> Path:
    if kubeconfig:
        return kubeconfig
    first = (os.environ.get("KUBECONFIG") or "").split(os.pathsep)[0]
    return Path(first) if first else Path.home() / ".kube" / "config"


def exec_plugin_problem(
    kubeconfig: Path | None, run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run
) -> str | None:
    """Run the kubeconfig's exec credential plugin (EKS: `aws eks get-token`) as the client would, and
    say in one line why it fails: the client only logs such failures, and the API server then answers
    401 to everything. None when the plugin gives a token, or the kubeconfig has no plugin."""
    path = kubeconfig_path(kubeconfig)
    try:
        document = yaml.safe_load(path.read_text()) or {}
    except (OSError, yaml.YAMLError):
        return None  # the client reports an unreadable kubeconfig itself
    context_name = document.get("current-context")
    contexts = {c.get("name"): c.get("context", {}) for c in document.get("contexts") or []}
    user_name = contexts.get(context_name, {}).get("user")
    users = {u.get("name"): u.get("user", {}) for u in document.get("users") or []}
    plugin = (users.get(user_name) or {}).get("exec")
    if not plugin:
        return None
    command = [plugin["command"], *(plugin.get("args") or [])]
    env = {**os.environ, **{e["name"]: e["value"] for e in plugin.get("env") or []}}
    shown = " ".join(command[:3])
    try:
        result = run(command, capture_output=True, text=True, env=env, timeout=60)
    except FileNotFoundError:
        return f"the kubeconfig's credential plugin `{plugin['command']}` is not installed (or not on PATH)"
    except subprocess.TimeoutExpired:
        return f"the kubeconfig's credential plugin `{shown}` did not answer in 60 s"
    if result.returncode != 0:
        lines = (result.stderr or result.stdout or "").strip().splitlines()
        reason = next((line for line in reversed(lines) if line.strip()), f"exit {result.returncode}")
        return f"`{shown}` failed: {reason.strip()[:300]} (AWS credentials for the cluster's account?)"
    try:
        token = json.loads(result.stdout)["status"]["token"]
    except (ValueError, KeyError, TypeError):
        return f"`{shown}` printed no ExecCredential token"
    return None if token else f"`{shown}` gave an empty token"


def job_state_of(job: Mapping[str, Any]) -> tuple[str, str]:
    """A Job's state from its JSON status: its Complete/Failed condition, else its pod counts."""
    status = job.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "Complete":
            return "succeeded", "complete"
        if condition.get("type") == "Failed":
            return "failed", f"{condition.get('reason', 'Failed')}: {condition.get('message', '')}".strip(
                ": "
            )
    active = status.get("active") or 0
    return "running", f"{active} pod(s) running" if active else "waiting for its pod"


class KubeClient:
    """The real cluster, through the official `kubernetes` client and a kubeconfig (EKS kubeconfigs
    authenticate with an `aws eks get-token` exec plugin, which the client runs itself)."""

    def __init__(self, options: ConnectOptions):
        from kubernetes import client, config

        try:
            self._api = config.new_client_from_config(
                config_file=str(options.kubeconfig) if options.kubeconfig else None, persist_config=False
            )
        except (config.ConfigException, OSError) as error:
            where = options.kubeconfig or "the default kubeconfig (KUBECONFIG or ~/.kube/config)"
            raise OpsError(f"cannot load {where}: {error}", exit_code=2) from None
        self._core = client.CoreV1Api(self._api)
        self._custom = client.CustomObjectsApi(self._api)
        self._endpoint = options.endpoint
        self._headers = dict(options.headers)
        self._direct = DirectHttp(options.base_url) if options.base_url else None

    def check_access(self) -> None:
        """GET /apis: EKS lets anonymous requests read only /version and the health checks, so a 401
        or 403 here means the API server does not take our identity."""
        try:
            self._raw("/apis", "GET", _request_timeout=API_TIMEOUT_S)
        except self._errors() as error:
            status = getattr(error, "status", None)
            if status in (401, 403):
                raise OpsError(
                    f"the API server refuses the kubeconfig's identity (HTTP {status}): it belongs to "
                    "another account, or has no EKS access entry on the cluster (cluster.admins / "
                    "viewers in the stack file)",
                    exit_code=2,
                ) from None
            raise self._failure("cannot reach the API server", error) from None

    def _errors(self) -> tuple[type[BaseException], ...]:
        import urllib3
        from kubernetes.client.exceptions import ApiException

        return (ApiException, urllib3.exceptions.HTTPError, OSError)

    def _failure(self, what: str, error: BaseException) -> OpsError:
        status = getattr(error, "status", None)
        body = getattr(error, "body", None)
        if isinstance(body, bytes):
            body = body.decode("utf-8", "replace")
        reason = getattr(error, "reason", None)
        # Status 0 is the client's own failure (connection, TLS, websocket handshake): its reason says it.
        detail = f"HTTP {status} {reason or ''}".strip() if status else str(reason or error)
        if not status and " -+-+- " in detail:
            # websocket-client's handshake error: "status -+-+- headers -+-+- body"; the headers are noise.
            first, *_, last = detail.split(" -+-+- ")
            detail = f"{first}: {last}"
        if body:
            detail += f": {excerpt(str(body))}"
        if status in (401, 403):
            # The exec plugin's failures are only logged by the client; the API server then says 401.
            detail += (
                " (the kubeconfig runs `aws eks get-token`: are AWS credentials for the cluster's "
                "account set, and does the identity have an EKS access entry?)"
            )
        return OpsError(f"{what}: {detail}")

    def _list(self, what: str, call: Any, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        try:
            # Raw JSON rather than the client's models: the same camelCase shape the fixtures record.
            response = call(*args, _preload_content=False, _request_timeout=API_TIMEOUT_S, **kwargs)
            return json.loads(response.data)["items"]
        except self._errors() as error:
            raise self._failure(f"cannot list {what}", error) from None

    def get_rayservice(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            found = self._custom.get_namespaced_custom_object(
                "ray.io", "v1", namespace, "rayservices", name, _request_timeout=API_TIMEOUT_S
            )
            return cast(dict[str, Any], found)
        except self._errors() as error:
            if getattr(error, "status", None) == 404:
                return None
            raise self._failure(f"cannot read RayService {namespace}/{name}", error) from None

    def get_object(self, api_version: str, plural: str, namespace: str, name: str) -> dict[str, Any] | None:
        group, _, version = api_version.rpartition("/")
        base = f"/apis/{group}/{version}" if group else f"/api/{version}"
        try:
            response = self._raw(
                f"{base}/namespaces/{namespace}/{plural}/{name}", "GET", _request_timeout=API_TIMEOUT_S
            )
            return json.loads(response.data)
        except self._errors() as error:
            if getattr(error, "status", None) == 404:
                return None
            raise self._failure(f"cannot read {plural} {namespace}/{name}", error) from None

    def _ready_target(self, where: ServiceEndpoint) -> tuple[str, int] | None:
        """A ready pod behind the Service `where` and its port for `where.port`; None for no Service, no
        selector (an external Service) or no ready pod."""
        service = self.get_object("v1", "services", where.namespace, where.service)
        if service is None:
            return None
        selector = ",".join(
            f"{k}={v}" for k, v in ((service.get("spec") or {}).get("selector") or {}).items()
        )
        if not selector:
            return None
        return forward_target(service, self.list_pods(where.namespace, selector), where.port)

    def service_request(
        self,
        where: ServiceEndpoint,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        headers: Headers | None = None,
    ) -> HttpResponse | None:
        from kubernetes.stream import portforward

        target = self._ready_target(where)
        if target is None:
            return None
        pod, port = target
        core = type(self._core)(self._api)  # as in prometheus_query: the port-forward's own client
        try:
            forward = portforward(
                core.connect_get_namespaced_pod_portforward, pod, where.namespace, ports=str(port)
            )
            try:
                return http_request_over(forward.socket(port), method, path, body, headers)
            finally:
                forward.close()
        except self._errors() as error:
            what = f"cannot {method} {path} through a port-forward to {where.namespace}/{pod}"
            raise self._failure(what, error) from None

    def prometheus_query(
        self, query: str, prometheus: ServiceEndpoint | None = None
    ) -> list[dict[str, Any]] | None:
        from kubernetes.stream import portforward

        where = prometheus or stack_prometheus()
        target = self._ready_target(where)
        if target is None:  # no selector (an external Service), or no ready Prometheus
            return None
        pod, port = target
        path = "/api/v1/query?" + urllib.parse.urlencode({"query": query})
        # `portforward` swaps the ApiClient's transport for a websocket during the call, so it gets its own.
        core = type(self._core)(self._api)
        try:
            forward = portforward(
                core.connect_get_namespaced_pod_portforward, pod, where.namespace, ports=str(port)
            )
            try:
                response = http_get_over(forward.socket(port), path)
            finally:
                forward.close()
        except self._errors() as error:
            what = f"cannot query Prometheus through a port-forward to {where.namespace}/{pod}"
            raise self._failure(what, error) from None
        try:
            answer = json.loads(response.body)
        except ValueError:
            said = f"HTTP {response.status}: {excerpt(response.body)}"
            raise OpsError(f"Prometheus ({where.namespace}/{pod}:{port}) answered {said}") from None
        if answer.get("status") != "success":
            raise OpsError(f"Prometheus refused a query: {answer.get('error', answer)}")
        return answer["data"]["result"]

    def list_pods(self, namespace: str, label_selector: str) -> list[dict[str, Any]]:
        return self._list(
            f"pods in {namespace}", self._core.list_namespaced_pod, namespace, label_selector=label_selector
        )

    def list_nodes(self, label_selector: str) -> list[dict[str, Any]]:
        return self._list("nodes", self._core.list_node, label_selector=label_selector)

    def exec_in_pod(
        self,
        namespace: str,
        pod: str,
        container: str,
        command: Sequence[str],
        timeout: float = EXEC_TIMEOUT_S,
    ) -> ExecResult:
        from kubernetes.stream import stream

        # `stream` swaps the ApiClient's transport for a websocket during the call, so it gets its own.
        core = type(self._core)(self._api)
        try:
            ws = stream(
                core.connect_get_namespaced_pod_exec,
                pod,
                namespace,
                container=container,
                command=list(command),
                stdin=False,
                stdout=True,
                stderr=True,
                tty=False,
                _preload_content=False,
            )
        except self._errors() as error:
            raise self._failure(f"exec {command[0]} in container {container} failed", error) from None
        try:
            ws.run_forever(timeout=timeout)
            stdout, stderr = ws.read_stdout(), ws.read_stderr()
            try:
                returncode = ws.returncode
            except (TypeError, KeyError, ValueError, IndexError):
                returncode = None  # the connection closed without an exit status
            return ExecResult(stdout or "", stderr or "", returncode)
        finally:
            ws.close()

    def create_job(self, namespace: str, manifest: Mapping[str, Any]) -> None:
        from kubernetes import client

        try:
            client.BatchV1Api(self._api).create_namespaced_job(
                namespace, dict(manifest), _request_timeout=API_TIMEOUT_S
            )
        except self._errors() as error:
            if getattr(error, "status", None) == 409:
                name = manifest["metadata"]["name"]
                raise OpsError(
                    f"a Job {namespace}/{name} exists (a bench kept an hour): pass --name, or "
                    f"`kubectl -n {namespace} delete job {name}`",
                    exit_code=2,
                ) from None
            raise self._failure("cannot create the Job", error) from None

    def job_state(self, namespace: str, name: str) -> tuple[str, str]:
        from kubernetes import client

        try:
            response = client.BatchV1Api(self._api).read_namespaced_job_status(
                name, namespace, _preload_content=False, _request_timeout=API_TIMEOUT_S
            )
        except self._errors() as error:
            raise self._failure(f"cannot read Job {namespace}/{name}", error) from None
        return job_state_of(json.loads(cast(Any, response).data))

    def job_logs(self, namespace: str, name: str) -> str:
        pods = self.list_pods(namespace, f"job-name={name}")
        if not pods:
            raise OpsError(f"Job {namespace}/{name} has no pod to read the log of")
        pod = sorted(pods, key=lambda p: p["metadata"].get("creationTimestamp", ""))[-1]["metadata"]["name"]
        try:
            return self._core.read_namespaced_pod_log(pod, namespace, _request_timeout=API_TIMEOUT_S)
        except self._errors() as error:
            raise self._failure(f"cannot read the log of {namespace}/{pod}", error) from None

    def _raw(self, path: str, method: str, **kwargs: Any) -> Any:
        """An authenticated request returning the urllib3 response unread (the proxy API of the
        generated client cannot send a body, and would read a stream to its end)."""
        return self._api.call_api(
            path,
            method,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _return_http_data_only=True,
            **kwargs,
        )

    def http_get(self, path: str, headers: Headers | None = None) -> HttpResponse:
        headers = self._headers if headers is None else headers
        if self._direct:
            return self._direct.get(path, headers)
        from kubernetes.client.exceptions import ApiException

        try:
            response = self._raw(
                self._endpoint.proxy_path(path),
                "GET",
                header_params={"Accept": "application/json", **headers},
                _request_timeout=API_TIMEOUT_S,
            )
        except ApiException as error:
            if error.status:  # the proxy or the application answered with an error status
                body = error.body.decode("utf-8", "replace") if isinstance(error.body, bytes) else error.body
                return HttpResponse(error.status, body or str(error.reason))
            raise self._failure(f"GET {path} through the API server", error) from None
        except self._errors() as error:
            raise self._failure(f"GET {path} through the API server", error) from None
        return HttpResponse(response.status, response.data.decode("utf-8", "replace"))

    def http_post_stream(
        self, path: str, body: Mapping[str, Any], headers: Headers | None = None
    ) -> Iterator[str]:
        headers = self._headers if headers is None else headers
        if self._direct:
            yield from self._direct.post_stream(path, body, headers)
            return
        try:
            response = self._raw(
                self._endpoint.proxy_path(path),
                "POST",
                header_params={"Content-Type": "application/json", "Accept": "text/event-stream", **headers},
                body=dict(body),
                _request_timeout=(CONNECT_TIMEOUT_S, STREAM_TIMEOUT_S),
            )
        except self._errors() as error:
            raise self._failure(f"POST {path} through the API server", error) from None
        try:
            # The API server flushes text/event-stream responses as they come, chunked; urllib3 then
            # yields each chunk on arrival, so the first token is timed when it lands, not when a
            # buffer fills.
            yield from iter_lines(response.stream(1024))
        except self._errors() as error:
            raise self._failure(f"reading the stream of POST {path}", error) from None
        finally:
            response.release_conn()


def excerpt(text: str, limit: int = 300) -> str:
    """A response body cut down to one line for an error message."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."
