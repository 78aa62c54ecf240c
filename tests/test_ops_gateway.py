"""`ops verify` and `ops status` through the endpoint, the way applications reach the model: with the
stack's endpoint on, verify calls the gateway with a key from the stack's `apiKeys` output, proves a
request without one gets 401 (it never reaches Ray), and streams a completion with one; status shows
whether the Gateway, the route and the key policy are in force and what the NLB's name is.

The gateway here is a fake that decides like Envoy's api_key_auth filter; the Gateway API objects'
status is hand-built in the shape Envoy Gateway writes (tests/fixtures/ops/README.md).
"""

from __future__ import annotations

from typing import Any

import pytest

from ops.cli import main
from ops.kube import ServiceEndpoint
from ops.status import collect_status
from ops.verify import CHECK_AUTH, CHECK_CHAT, CHECK_MODELS, VerifyTarget, verify
from tests.fakes.kube import FakeKubeApi, connect_with, fixture_json, gateway_cluster, healthy_cluster
from tests.fakes.nixl import SMALL_PROBE, probe_sleep
from tests.fakes.ops import KEY, KEYS, KUBECONFIG, pulumi_outputs
from tests.fakes.pulumi import NLB_HOSTNAME, ROOT

GATEWAY = ServiceEndpoint("envoy-gateway-system", "ray-llm-gateway", 80)


def verify_dev(cluster: FakeKubeApi, capsys, *argv: str, **outputs: Any) -> tuple[int, str, list[Any]]:
    seen: list[Any] = []
    run = pulumi_outputs(kubeconfig=KUBECONFIG, apiKeys=KEYS, **outputs)
    code = main(
        ["verify", "--stack", "dev", "--root", str(ROOT), *SMALL_PROBE, *argv],
        connect=connect_with(cluster, seen),
        run=run,
        clock=cluster.clock,
        sleep=probe_sleep(cluster.clock),
    )
    return code, capsys.readouterr().out, seen


def test_through_the_gateway_a_keyless_request_gets_401_and_a_keyed_one_streams(capsys):
    cluster = gateway_cluster()

    code, out, seen = verify_dev(cluster, capsys)

    assert code == 0, out
    (options,) = seen
    assert options.endpoint == GATEWAY  # the gateway's Service, through the API server's proxy
    # The API server drops Authorization after authenticating with it: the key goes in x-api-key.
    assert options.headers == {"x-api-key": KEY}  # client `default`
    assert f"PASS  {CHECK_AUTH}: a request without a key gets 401" in out
    assert f"PASS  {CHECK_CHAT}" in out
    keyless = [c for c in cluster.calls if c[0] == "GET" and c[2] == {}]
    assert len(keyless) == 1


def test_the_client_option_picks_whose_key(capsys):
    cluster = gateway_cluster(KEYS["batch"])

    code, out, seen = verify_dev(cluster, capsys, "--client", "batch")

    assert code == 0, out
    assert seen[0].headers == {"x-api-key": KEYS["batch"]}


def test_an_unknown_client_is_a_usage_error(capsys):
    code = main(
        ["verify", "--stack", "dev", "--root", str(ROOT), "--client", "nobody"],
        connect=connect_with(gateway_cluster()),
        run=pulumi_outputs(kubeconfig=KUBECONFIG, apiKeys=KEYS),
    )
    assert code == 2
    assert "--client nobody: the stack's clients are batch, default" in capsys.readouterr().err


def test_a_gateway_that_serves_without_a_key_fails_the_check():
    cluster = healthy_cluster()  # no key checked: the SecurityPolicy is not in force

    report = verify(
        cluster, VerifyTarget("inference", "ray-llm", "qwen3.5-9b", gateway=True), clock=cluster.clock
    )

    checks = {c.name: c for c in report.checks}
    assert not checks[CHECK_AUTH].passed
    assert "served" in checks[CHECK_AUTH].reason and not report.passed


def test_a_wrong_key_fails_models_and_chat_with_a_hint(capsys):
    cluster = gateway_cluster("another-key-another-key-another")

    code, out, _ = verify_dev(cluster, capsys)

    assert code == 1
    assert f"FAIL  {CHECK_MODELS}: HTTP 401 (the gateway refused the API key" in out
    assert f"FAIL  {CHECK_CHAT}" in out and "401" in out


def test_base_url_sends_the_key_as_a_bearer_token_like_openai_clients(capsys):
    cluster = gateway_cluster()

    code, out, seen = verify_dev(cluster, capsys, "--base-url", f"http://{NLB_HOSTNAME}/v1")

    assert code == 0, out
    assert seen[0].base_url == f"http://{NLB_HOSTNAME}/v1"
    assert seen[0].headers == {"Authorization": f"Bearer {KEY}"}
    assert f"PASS  {CHECK_AUTH}" in out


def test_base_url_without_a_stack_takes_the_key_from_openai_api_key(capsys, kubeconfig, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    seen: list[Any] = []
    cluster = gateway_cluster()

    code = main(
        ["verify", "--kubeconfig", str(kubeconfig), "--base-url", "https://llm.example.com/v1", *SMALL_PROBE],
        connect=connect_with(cluster, seen),
        clock=cluster.clock,
        sleep=probe_sleep(cluster.clock),
    )

    assert code == 0, capsys.readouterr().out
    assert seen[0].headers == {"Authorization": f"Bearer {KEY}"}


def test_without_the_endpoint_verify_calls_the_serve_service_without_a_key(capsys, tmp_path, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    stack = (ROOT / "Pulumi.dev.yaml").read_text() + "  ray-llm-eks:endpoint:\n    enabled: false\n"
    (tmp_path / "Pulumi.plain.yaml").write_text(stack)
    seen: list[Any] = []

    cluster = healthy_cluster()
    code = main(
        ["verify", "--stack", "plain", "--root", str(tmp_path), *SMALL_PROBE],
        connect=connect_with(cluster, seen),
        run=pulumi_outputs(kubeconfig=KUBECONFIG),
        sleep=probe_sleep(cluster.clock),
    )

    out = capsys.readouterr().out
    assert code == 0, out
    assert seen[0].endpoint == ServiceEndpoint("inference", "ray-llm-serve-svc")
    assert seen[0].headers == {} and CHECK_AUTH not in out


def gateway_objects() -> dict[tuple[str, str, str, str], dict[str, Any]]:
    recorded = fixture_json("gateway.json")
    return {
        (o["apiVersion"], plural, o["metadata"]["namespace"], o["metadata"]["name"]): o
        for plural, o in zip(
            ("gateways", "httproutes", "securitypolicies", "services"), recorded["items"], strict=True
        )
    }


class TestStatusShowsTheEndpoint:
    def test_gateway_route_policy_and_nlb_in_force(self):
        cluster = healthy_cluster()
        cluster.objects = gateway_objects()

        report = collect_status(cluster, "inference", "ray-llm").format()

        assert "Endpoint (Envoy Gateway, NLB)" in report
        assert "Gateway inference/ray-llm: Accepted True, Programmed True" in report
        assert "HTTPRoute inference/ray-llm: Accepted True, ResolvedRefs True" in report
        assert "SecurityPolicy inference/ray-llm-api-keys: Accepted True" in report
        assert (
            f"load balancer envoy-gateway-system/ray-llm-gateway: {NLB_HOSTNAME} (internal, port 80)"
            in report
        )

    def test_a_route_whose_backend_is_missing_says_why(self):
        cluster = healthy_cluster()
        objects = gateway_objects()
        route = next(o for k, o in objects.items() if k[1] == "httproutes")
        conditions = route["status"]["parents"][0]["conditions"]
        conditions[1].update(
            status="False", reason="BackendNotFound", message="Service inference/ray-llm-serve-svc not found"
        )
        cluster.objects = objects

        report = collect_status(cluster, "inference", "ray-llm").format()

        assert "ResolvedRefs False (BackendNotFound: Service inference/ray-llm-serve-svc not found)" in report

    def test_an_nlb_not_made_yet_is_pending(self):
        cluster = healthy_cluster()
        objects = gateway_objects()
        next(o for k, o in objects.items() if k[1] == "services")["status"] = {"loadBalancer": {}}
        cluster.objects = objects

        report = collect_status(cluster, "inference", "ray-llm").format()

        assert "ray-llm-gateway: no address yet (is the AWS Load Balancer Controller running?" in report

    def test_no_gateway_no_endpoint_section_beyond_one_line(self):
        report = collect_status(healthy_cluster(), "inference", "ray-llm").format()

        assert "Endpoint: no Gateway inference/ray-llm (endpoint off: use kubectl port-forward)" in report


@pytest.mark.parametrize("client", sorted(KEYS))
def test_each_clients_key_is_one_the_fake_gateway_accepts(client):
    cluster = gateway_cluster(KEYS[client])
    assert cluster.http_get("models", {"Authorization": f"Bearer {KEYS[client]}"}).status == 200
    assert cluster.http_get("models", {"Authorization": KEYS[client]}).status == 200
    assert cluster.http_get("models", {"Authorization": "Bearer nope"}).status == 401
