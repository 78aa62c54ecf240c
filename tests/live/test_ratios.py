"""Prefill:decode ratios on a real Ray 2.58 head and Prometheus (tests/live/conftest.py): `ops bench
--ratios` sets each ratio through the dashboard's Serve REST API (ops/bench_ratio.py `DashboardRest`,
its bytes sent by ops/kube.py `http_request_over` as through the port-forward, with Ray's token in
`X-Ray-Authorization`), measures only once Serve runs it, and puts the deployed config back; the
`autoscaling.ratio` policy's query for the other side's replicas (jobs/llm_autoscaling.py
`replicas_query`) counts them in Prometheus as the controller exports them.

What the fakes could not tell: whether Ray's GET carries `deployed_app_config` in a form its PUT takes
back, whether replicas report `RUNNING` as the sweep reads them, whether the token header passes Ray's
auth, and whether the controller's per-replica health gauge carries the labels the query selects.
"""

from __future__ import annotations

import copy
import socket
import time
from collections.abc import Mapping
from typing import Any

import pytest

from jobs.llm_autoscaling import replicas_query
from ops.bench_ratio import DashboardRest, run_ratio_sweep
from ops.kube import HttpResponse, ServiceEndpoint, http_request_over
from tests.fakes.pulumi import StackRun
from tests.live.conftest import CLUSTER, HOST, LivePrometheus, LiveRay, serve_applications, wait_for

STANDIN = {"ray.serve.llm:build_pd_openai_app": "standin:build_pd_openai_app"}
APP = "qwen"
PREFILL, DECODE = "Prefill:qwen3_5-9b", "Decode:qwen3_5-9b"


class LoopbackKube:
    """`KubeApi.service_request` as `KubeClient` does it, with the port-forward's socket replaced by a
    TCP connection to the live head's dashboard."""

    def __init__(self, ray: LiveRay) -> None:
        self.port = int(ray.dashboard.rsplit(":", 1)[1])

    def service_request(
        self,
        where: ServiceEndpoint,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> HttpResponse | None:
        with socket.create_connection((HOST, self.port), timeout=30) as sock:
            return http_request_over(sock, method, path, body, headers, timeout=60)


@pytest.fixture(scope="module")
def pd(ray_head: LiveRay, live_stack: StackRun) -> list[dict[str, Any]]:
    """The stack's PD application (dev's, scaling 1 to 2 per side) with the stand-in engines."""
    applications = copy.deepcopy(serve_applications(live_stack))
    for app in applications:
        app["import_path"] = STANDIN[app["import_path"]]
        for side in ("prefill_config", "decode_config"):
            app["args"][side]["deployment_config"].pop("request_router_config", None)
    ray_head.deploy(applications)
    wait_for(
        "both sides running",
        lambda: ray_head.running_replicas(APP, PREFILL) == 1 and ray_head.running_replicas(APP, DECODE) == 1,
    )
    return applications


def test_each_ratio_runs_before_it_is_measured_and_the_deployed_config_comes_back(
    ray_head: LiveRay, pd: list[dict[str, Any]], prometheus: LivePrometheus
):
    serve = DashboardRest(
        LoopbackKube(ray_head),  # type: ignore[arg-type]  # the one KubeApi method DashboardRest calls
        ServiceEndpoint("inference", "ray-llm-head-svc", 8265),
        ray_head.token,
    )
    before = serve.get()["applications"][APP]["deployed_app_config"]
    scope = pd[0]["args"]["decode_config"]["deployment_config"]["autoscaling_config"]["policy"][
        "policy_kwargs"
    ]
    seen: dict[tuple[int, int], tuple[int, int, float]] = {}

    def healthy(deployment: str) -> float:
        query = replicas_query(CLUSTER, APP, deployment, scope["namespace"], scope["jobs"])
        result = prometheus.query(query)
        return float(result[0]["value"][1]) if result else -1.0

    def measure(ratio: tuple[int, int]) -> None:
        replicas = (ray_head.running_replicas(APP, PREFILL), ray_head.running_replicas(APP, DECODE))
        # what the other side's policy reads, once the controller's gauges are scraped
        counted = wait_for(
            f"Prometheus counting {ratio[0]} prefill replicas",
            lambda: (found := healthy(PREFILL)) == ratio[0] and found,
        )
        seen[ratio] = (*replicas, counted)

    # Ending at the stack's own 1:1 leaves the policy nothing to undo once it is back, so its log holds
    # no line of this test's (test_serving.py reads the session's controller log).
    ratios = [(2, 1), (1, 2), (1, 1)]
    run_ratio_sweep(serve, APP, ratios, measure, lambda _: None, time.sleep, timeout_s=120)
    assert seen == {(2, 1): (2, 1, 2.0), (1, 2): (1, 2, 1.0), (1, 1): (1, 1, 1.0)}
    assert serve.get()["applications"][APP]["deployed_app_config"] == before
    # back on the stack's own autoscaling: each side at its minimum again
    wait_for(
        "the deployed replicas again",
        lambda: ray_head.running_replicas(APP, PREFILL) == 1 and ray_head.running_replicas(APP, DECODE) == 1,
    )
