"""`ops status` asks Prometheus through a port-forward to a ready pod behind its Service (issue 39): a
port-forward enters the pod from the kubelet, which no NetworkPolicy governs, so Prometheus's 9090 is
closed to the VPC. The real KubeClient runs here against a fake websocket port-forward."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any

import pytest

from ops.kube import (
    ConnectOptions,
    KubeClient,
    OpsError,
    ServiceEndpoint,
    forward_target,
    parse_http_response,
)

SERVICE = {  # kube-prometheus-stack's Service: port 9090 to the container port named http-web
    "metadata": {"name": "kps-prometheus", "namespace": "monitoring"},
    "spec": {
        "selector": {"app.kubernetes.io/name": "prometheus", "operator.prometheus.io/name": "kps-prometheus"},
        "ports": [
            {"name": "http-web", "port": 9090, "targetPort": "http-web"},
            {"port": 8080, "targetPort": 8080},
        ],
    },
}


def pod(name: str, ready: bool = True, phase: str = "Running") -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "prometheus", "ports": [{"name": "http-web", "containerPort": 9091}]}]
        },
        "status": {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
    }


def test_the_forward_goes_to_a_ready_pod_and_the_named_container_port():
    pods = [pod("starting", ready=False), pod("prometheus-kps-0")]
    assert forward_target(SERVICE, pods, 9090) == ("prometheus-kps-0", 9091)
    assert forward_target(SERVICE, pods, 8080) == ("prometheus-kps-0", 8080)


def test_no_ready_pod_or_no_such_port_is_no_prometheus():
    assert forward_target(SERVICE, [pod("a", ready=False), pod("b", phase="Pending")], 9090) is None
    assert forward_target(SERVICE, [pod("a")], 9999) is None


def test_an_http_answer_is_read_and_anything_else_refused():
    answer = parse_http_response(b'HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n{"status": 1}')
    assert (answer.status, answer.body) == (200, '{"status": 1}')
    with pytest.raises(OpsError, match="not an HTTP answer"):
        parse_http_response(b"garbage")


class FakeForward:
    """kubernetes.stream.portforward's PortForward: one socket per port, its far end served here."""

    def __init__(self, body: bytes, requests: list[bytes]):
        self.near, far = socket.socketpair()

        def serve() -> None:
            requests.append(far.recv(65536))
            far.sendall(b"HTTP/1.0 200 OK\r\nContent-Type: application/json\r\n\r\n" + body)
            far.close()

        threading.Thread(target=serve, daemon=True).start()
        self.closed = False

    def socket(self, port: int) -> socket.socket:
        return self.near

    def close(self) -> None:
        self.closed = True
        self.near.close()


@pytest.fixture
def client(tmp_path: Path) -> KubeClient:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: t}}]\n"
    )
    return KubeClient(ConnectOptions(kubeconfig, ServiceEndpoint("inference", "svc")))


def test_a_query_goes_through_a_port_forward_never_the_service_proxy(client, monkeypatch):
    import kubernetes.stream

    requests: list[bytes] = []
    calls: list[tuple[Any, ...]] = []
    result = [{"metric": {}, "value": [0, "1"]}]
    forwards: list[FakeForward] = []

    def portforward(api_method: Any, name: str, namespace: str, ports: str) -> FakeForward:
        calls.append((name, namespace, ports))
        forwards.append(
            FakeForward(json.dumps({"status": "success", "data": {"result": result}}).encode(), requests)
        )
        return forwards[-1]

    def no_proxy(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"the API server was asked {args}: a service proxy needs 9090 open to the VPC")

    monkeypatch.setattr(kubernetes.stream, "portforward", portforward)
    monkeypatch.setattr(client, "get_object", lambda v, plural, ns, name: SERVICE)
    monkeypatch.setattr(client, "list_pods", lambda ns, selector: [pod("prometheus-kps-0")])
    monkeypatch.setattr(client, "_raw", no_proxy)

    assert client.prometheus_query('up{job="x"}') == result
    assert calls == [("prometheus-kps-0", "monitoring", "9091")]
    assert requests[0].startswith(b"GET /api/v1/query?query=up%7Bjob%3D%22x%22%7D HTTP/1.0\r\n")
    assert forwards[0].closed


def test_no_service_or_no_ready_pod_is_no_prometheus(client, monkeypatch):
    monkeypatch.setattr(client, "get_object", lambda v, plural, ns, name: None)
    assert client.prometheus_query("up") is None
    monkeypatch.setattr(client, "get_object", lambda v, plural, ns, name: SERVICE)
    monkeypatch.setattr(client, "list_pods", lambda ns, selector: [pod("p", ready=False)])
    assert client.prometheus_query("up") is None
