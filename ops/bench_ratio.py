"""`ops bench --ratios 1:1,2:1,1:2`: the same load at several prefill:decode ratios on the live stack, with
no new deploy: Ray Serve's replica counts change through the Ray dashboard's Serve REST API, the way KubeRay
submits the serve config itself.

For each ratio: read what Serve runs (`GET /api/serve/applications/`, each application's
`deployed_app_config`), `PUT /api/serve/applications/` the same applications with the stack's
prefill and decode deployments at fixed `num_replicas` (autoscaling off for the point, so the ratio
holds while it is measured), wait until both sides run that many replicas, then run the benchmark's
points. At the end, or on any failure, the applications as they were go back. PUT is declarative for
every application on the cluster (ray/dashboard/modules/serve/serve_head.py `put_all_applications`
hands it to `deploy_apps`), so the others are sent back unchanged.

KubeRay does not undo the change meanwhile: it submits the serve config again only when the spec's
differs from the one it cached, or the cluster reports no application (KubeRay 1.7.0
rayservice_controller.go:1551-1570 `checkIfNeedSubmitServeApplications`). An operator restart during the
sweep submits the spec's config again, which ends the ratio early; the points measured say what ran
(the sweep checks the replicas before each ratio's points, not during them).

The dashboard is reached through a port-forward to the head (which no NetworkPolicy governs; the API
server's service proxy is not let in to port 8265), with Ray's token in `X-Ray-Authorization` (Ray 2.58
_private/authentication/http_token_authentication.py reads it after `Authorization`).
"""

from __future__ import annotations

import base64
import copy
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from config import Settings
from manifests.ray_auth import RAY_AUTH_KEY, RAY_AUTH_SECRET
from manifests.ray_ports import DASHBOARD
from ops.kube import KubeApi, OpsError, ServiceEndpoint, excerpt
from planning import Plan

Ratio = tuple[int, int]
"""(prefill replicas, decode replicas)."""
APPLICATIONS = "/api/serve/applications/"
SIDES = {"prefill": "Prefill:", "decode": "Decode:"}
"""Ray Serve LLM's deployment name prefixes (prefill_decode/builder.py `name_prefix`)."""


def parse_ratios(text: str) -> tuple[Ratio, ...]:
    """`1:1,2:1,1:2` -> ((1, 1), (2, 1), (1, 2)); ValueError naming what is wrong."""
    ratios: list[Ratio] = []
    for word in text.split(","):
        parts = word.strip().split(":")
        if len(parts) != 2 or not all(p.strip().isdigit() and int(p) >= 1 for p in parts):
            raise ValueError(f"{word.strip()!r} is not PREFILL:DECODE replicas, each at least 1 (e.g. 2:1)")
        ratio = (int(parts[0]), int(parts[1]))
        if ratio in ratios:
            raise ValueError(f"{ratio[0]}:{ratio[1]} is given twice")
        ratios.append(ratio)
    return tuple(ratios)


def ratio_name(ratio: Ratio) -> str:
    return f"{ratio[0]}:{ratio[1]}"


def ratio_problems(settings: Settings, plan: Plan, ratios: Sequence[Ratio]) -> list[str]:
    """Ratios the stack cannot run: no sides (aggregated), or more replicas than its GPU worker groups
    may hold (their maxReplicas: beyond them a replica waits for a pod KubeRay never adds)."""
    if plan.mode == "aggregated":
        return ["--ratios: serving.mode aggregated has no prefill and decode sides"]
    problems = []
    for ratio in ratios:
        if plan.split_workers:
            room = {p.side: p.max_workers for p in plan.sides}
            over = [
                f"{side} {n} > {room[side]}"
                for side, n in zip(("prefill", "decode"), ratio, strict=True)
                if n > room[side]
            ]
        else:
            over = (
                [f"{sum(ratio)} replicas > {plan.max_gpu_workers}"]
                if sum(ratio) > plan.max_gpu_workers
                else []
            )
        if over:
            problems.append(
                f"--ratios {ratio_name(ratio)}: {', '.join(over)} GPU worker pods the worker groups may hold "
                f"(model.prefillReplicas/decodeReplicas and autoscaling.<side>.maxReplicas of stack "
                f"{settings.serving.name}); raise the sides' maxReplicas (and gpuNodes.maxSize) to bench it"
            )
    return problems


def side_of(deployment: str) -> str | None:
    return next((side for side, prefix in SIDES.items() if deployment.startswith(prefix)), None)


def with_ratio(app: Mapping[str, Any], ratio: Ratio) -> dict[str, Any]:
    """The application's config with prefill and decode at fixed replica counts: `num_replicas`, no
    `autoscaling_config` (Serve takes one or the other)."""
    changed = copy.deepcopy(dict(app))
    args = changed.get("args") or {}
    for (side, _), replicas in zip(SIDES.items(), ratio, strict=True):
        config = args.get(f"{side}_config")
        if config is None:
            raise OpsError(f"application {app.get('name')} has no {side}_config: not build_pd_openai_app's")
        deployment = dict(config.get("deployment_config") or {})
        deployment.pop("autoscaling_config", None)
        deployment["num_replicas"] = replicas
        config["deployment_config"] = deployment
    return changed


def ratio_state(details: Mapping[str, Any], app: str, ratio: Ratio) -> tuple[bool, str]:
    """Whether the application runs exactly `ratio` replicas, RUNNING, and what it runs."""
    found = (details.get("applications") or {}).get(app)
    if not found:
        return False, f"application {app} not reported"
    running: dict[str, int] = {}
    for name, deployment in (found.get("deployments") or {}).items():
        side = side_of(name)
        if side:
            running[side] = sum(1 for r in deployment.get("replicas") or [] if r.get("state") == "RUNNING")
    prefill, decode = running.get("prefill", 0), running.get("decode", 0)
    now = f"prefill {prefill}, decode {decode} running, {found.get('status')}"
    reached = (prefill, decode) == ratio and found.get("status") == "RUNNING"
    return reached, now


class ServeRest(Protocol):
    """The Ray dashboard's Serve REST API."""

    def get(self) -> dict[str, Any]: ...

    def put(self, applications: Sequence[Mapping[str, Any]]) -> None: ...


@dataclass(frozen=True)
class DashboardRest:
    """The Serve REST API of the stack's Ray head, through `api.service_request` (a port-forward)."""

    api: KubeApi
    where: ServiceEndpoint
    token: str

    def _call(self, method: str, body: Mapping[str, Any] | None = None) -> str:
        headers = {"X-Ray-Authorization": f"Bearer {self.token}"}
        answer = self.api.service_request(self.where, method, APPLICATIONS, body, headers)
        if answer is None:
            raise OpsError(f"no ready Ray head behind {self.where.namespace}/{self.where.service}")
        if not 200 <= answer.status < 300:
            raise OpsError(
                f"Ray's dashboard answered {method} {APPLICATIONS} HTTP {answer.status}: "
                f"{excerpt(answer.body)}"
            )
        return answer.body

    def get(self) -> dict[str, Any]:
        return json.loads(self._call("GET"))

    def put(self, applications: Sequence[Mapping[str, Any]]) -> None:
        self._call("PUT", {"applications": list(applications)})


def dashboard_rest(api: KubeApi, settings: Settings) -> DashboardRest:
    """The stack's Ray head's dashboard (`<rayservice>-head-svc`, which KubeRay points at the active
    cluster), with the Ray token from its Secret."""
    namespace = settings.serving.namespace
    secret = api.get_object("v1", "secrets", namespace, RAY_AUTH_SECRET)
    encoded = ((secret or {}).get("data") or {}).get(RAY_AUTH_KEY)
    if not encoded:
        raise OpsError(f"cannot read Ray's token (Secret {namespace}/{RAY_AUTH_SECRET}, key {RAY_AUTH_KEY})")
    token = base64.b64decode(encoded).decode()
    return DashboardRest(
        api, ServiceEndpoint(namespace, f"{settings.serving.name}-head-svc", DASHBOARD), token
    )


def run_ratio_sweep(
    serve: ServeRest,
    app: str,
    ratios: Sequence[Ratio],
    measure: Callable[[Ratio], Any],
    progress: Callable[[str], None],
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    timeout_s: float = 1800,
) -> list[tuple[Ratio, Any]]:
    """Each ratio in turn: PUT, wait until it runs, `measure` it. The applications as they were go back
    at the end, also after a failure."""
    details = serve.get()
    applications = details.get("applications") or {}
    if app not in applications:
        raise OpsError(
            f"Serve runs no application {app} (it runs {', '.join(sorted(applications)) or 'none'})"
        )
    original = [a["deployed_app_config"] for a in applications.values() if a.get("deployed_app_config")]
    results: list[tuple[Ratio, Any]] = []
    try:
        for ratio in ratios:
            progress(
                f"ratio {ratio_name(ratio)}: asking Serve for {ratio[0]} prefill and {ratio[1]} decode "
                "replicas"
            )
            serve.put([with_ratio(a, ratio) if a.get("name") == app else a for a in original])
            start = clock()
            while True:
                reached, now = ratio_state(serve.get(), app, ratio)
                if reached:
                    break
                if clock() - start > timeout_s:
                    raise OpsError(f"ratio {ratio_name(ratio)} not running after {timeout_s:.0f} s: {now}")
                progress(f"ratio {ratio_name(ratio)}: {now} ({clock() - start:.0f} s)")
                sleep(10.0)
            results.append((ratio, measure(ratio)))
    finally:
        serve.put(original)
        progress("Serve's applications are back as the stack deployed them")
    return results
