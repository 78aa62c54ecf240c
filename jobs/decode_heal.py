"""Decode heals itself after a stale NIXL agent (`serving.selfHeal`): run every minute by a CronJob in the
serving namespace (manifests/decode_heal.py), on the serving image, standard library only.

The stale-agent signature (vllm-project/vllm#49238, docs/design.md "KV failures"): every KV transfer into
one decode replica failed over the last 5 minutes and none completed, and a prefill replica of the same
Ray cluster started within the window (it came back in place under the same NIXL engine id, and decode
keeps the dead agent it knew). Then the program restarts that decode replica, as the runbook does by
hand: Ray's Jobs API on the dashboard (with Ray's token) runs a driver on the head that kills the
replica's actor with `no_restart`, and Serve's controller starts a new one, which handshakes afresh.

At most once per window: a decode replica that started within the window (a restart of ours, a
person's, a scale-up) holds any other restart back. Ray's own counter of replica starts
(`serve_deployment_replica_starts`, one series per replica from its first start) is that memory, so a
CronJob pod keeps no state. Every decision is a log line; a restart is also a Kubernetes Event on the
RayService.

What it reads is scoped to the stack's own Ray pods (their namespace and the stack's PodMonitors' `job`
label), and every name it puts into the driver is checked against Serve's own forms: a series another
pod exports into a shared Prometheus cannot pick what is killed.

Environment: PROMETHEUS_URL, DASHBOARD_URL, RAY_AUTH_TOKEN_FILE, NAMESPACE (the serving namespace and
the Event's), RAYSERVICE, APPLICATION, JOBS (the PodMonitors' `job` values, a regex), WINDOW_SECONDS.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import ssl
import sys
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

FAILING_WINDOW = "5m"
MIN_FAILURES = 3
"""Failed reads into one decode replica over 5 minutes, with none completed: not a blip."""
WINDOW_SECONDS = 1800
DECODE = re.compile(r"Decode:[A-Za-z0-9_.-]+")
"""Serve deployment names of Ray Serve LLM's decode side (`Decode:<model id, sanitized>`)."""
IDENTIFIER = re.compile(r"[A-Za-z0-9_.-]+")
"""A Serve application name or replica id (Ray 2.58: ReplicaID.unique_id, a short random string)."""
SERVE_NAMESPACE = "serve"
"""The Ray namespace of Serve's actors (ray/serve/_private/constants.py SERVE_NAMESPACE)."""


@dataclass(frozen=True)
class Replica:
    """A decode replica as Prometheus sees it over the last 5 minutes."""

    cluster: str
    application: str
    deployment: str
    replica: str
    failed: float
    done: float

    @property
    def actor_name(self) -> str:
        """Serve's name for the replica's actor (ray/serve/_private/common.py ReplicaID.to_full_id_str)."""
        return f"SERVE_REPLICA::{self.application}#{self.deployment}#{self.replica}"


@dataclass(frozen=True)
class Observation:
    replicas: tuple[Replica, ...]
    prefill_started: frozenset[str]
    """Ray clusters where a prefill replica started within the window."""
    decode_started: frozenset[str]
    """Ray clusters where a decode replica started within the window."""


@dataclass(frozen=True)
class Decision:
    restart: Replica | None
    reason: str


def decide(observation: Observation, application: str) -> Decision:
    """The decode replica to restart, at most one, and why (or why none)."""
    failing = sorted(
        (
            r
            for r in observation.replicas
            if r.failed >= MIN_FAILURES
            and r.done == 0
            and r.application == application
            and DECODE.fullmatch(r.deployment)
            and IDENTIFIER.fullmatch(r.replica)
        ),
        key=lambda r: (-r.failed, r.cluster, r.replica),
    )
    if not failing:
        return Decision(None, "no decode replica whose KV transfers all failed over the last 5 minutes")
    reasons = []
    for replica in failing:
        who = f"{replica.deployment} replica {replica.replica} ({replica.cluster})"
        if replica.cluster not in observation.prefill_started:
            reasons.append(
                f"{who}: {replica.failed:.0f} transfers failed, none completed, but no prefill replica "
                "restarted within the window: not a stale agent, left to NixlTransfersKeepFailing"
            )
        elif replica.cluster in observation.decode_started:
            reasons.append(
                f"{who}: stale-agent signature, but a decode replica of {replica.cluster} started within "
                "the window: at most one restart per window"
            )
        else:
            return Decision(
                replica,
                f"{who}: {replica.failed:.0f} KV transfers failed over 5 minutes, none completed, and a "
                "prefill replica restarted within the window (a stale NIXL agent, vllm#49238): restarting it",
            )
    return Decision(None, "; ".join(reasons))


def _string(value: str) -> str:
    return json.dumps(value)  # a PromQL double-quoted string is JSON's


def queries(namespace: str, jobs: str, window_seconds: int) -> dict[str, str]:
    """The PromQL the program asks: per decode replica, failed and completed reads over 5 minutes (with
    the replica's Serve labels from Serve's request counter, the same process's); the Ray clusters whose
    prefill or decode replicas started within the window. A counter through Ray appears at its first
    increment, so a series that exists now and did not 5 minutes (or the window) ago counts as its
    whole value."""
    scope = f"namespace={_string(namespace)}, job=~{_string(jobs)}"
    by = "ray_io_cluster, WorkerId"
    serve = (
        f"max by ({by}, application, deployment, replica) "
        f'(ray_serve_deployment_request_counter_total{{{scope}, deployment=~"Decode:.*"}} * 0 + 1)'
    )

    def grew(series: str, window: str, group: str) -> str:
        return (
            f"sum by ({group}) (increase({series}[{window}])) > 0 or "
            f"sum by ({group}) ({series} unless {series} offset {window}) > 0"
        )

    def per_replica(series: str) -> str:
        # Per series, before the sum: a series born within the window (a replica's first failure, as
        # Ray exports a counter from its first increment) counts whole, where `increase()` would drop
        # what its first sample holds (all of it, if one export carried every failure).
        counted = f"{series}{{{scope}}}"
        return (
            f"(sum by ({by}) (({counted} unless {counted} offset {FAILING_WINDOW}) "
            f"or increase({counted}[{FAILING_WINDOW}]))) "
            f"* on ({by}) group_left (application, deployment, replica) {serve}"
        )

    def started(side: str) -> str:
        series = f'ray_serve_deployment_replica_starts_total{{{scope}, deployment=~"{side}:.*"}}'
        return grew(series, f"{window_seconds}s", "ray_io_cluster")

    return {
        "failed": per_replica("ray_vllm_nixl_num_failed_transfers_total"),
        "done": per_replica("ray_vllm_nixl_xfer_time_seconds_count"),
        "prefill_started": started("Prefill"),
        "decode_started": started("Decode"),
    }


Ask = Callable[[str], list[dict[str, Any]]]


def observe(ask: Ask, namespace: str, jobs: str, window_seconds: int) -> Observation:
    q = queries(namespace, jobs, window_seconds)
    done: dict[tuple[str, str], float] = {}
    for row in ask(q["done"]):
        labels = row["metric"]
        done[(labels.get("ray_io_cluster", ""), labels.get("replica", ""))] = float(row["value"][1])
    replicas = []
    for row in ask(q["failed"]):
        labels = row["metric"]
        key = (labels.get("ray_io_cluster", ""), labels.get("replica", ""))
        replicas.append(
            Replica(
                cluster=key[0],
                application=labels.get("application", ""),
                deployment=labels.get("deployment", ""),
                replica=key[1],
                failed=float(row["value"][1]),
                done=done.get(key, 0.0),
            )
        )

    def clusters(query: str) -> frozenset[str]:
        return frozenset(row["metric"].get("ray_io_cluster", "") for row in ask(query))

    return Observation(tuple(replicas), clusters(q["prefill_started"]), clusters(q["decode_started"]))


def restart_entrypoint(replica: Replica) -> str:
    """The driver Ray's Jobs API runs on the head: kill the replica's actor for good (Serve's controller
    replaces it; `no_restart` so Ray does not restart the same actor with its stale state)."""
    name = replica.actor_name
    if not (DECODE.fullmatch(replica.deployment) and IDENTIFIER.fullmatch(replica.replica)):
        raise ValueError(f"refusing to build a driver for {name!r}")
    code = (
        "import ray; ray.init(address='auto'); "
        f"ray.kill(ray.get_actor({name!r}, namespace={SERVE_NAMESPACE!r}), no_restart=True); "
        f"print('killed', {name!r})"
    )
    return f'python -c "{code}"'


def prometheus_asker(url: str) -> Ask:
    def ask(query: str) -> list[dict[str, Any]]:
        address = f"{url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': query})}"
        with urllib.request.urlopen(address, timeout=20) as response:
            return json.load(response)["data"]["result"]

    return ask


def submit(dashboard: str, token: str | None, entrypoint: str) -> str:
    """Ray's Jobs API (`POST /api/jobs/`, Ray 2.58 dashboard/modules/job/job_head.py): the submission id."""
    body = json.dumps({"entrypoint": entrypoint}).encode()
    headers = {"Content-Type": "application/json", **({"Authorization": f"Bearer {token}"} if token else {})}
    request = urllib.request.Request(f"{dashboard.rstrip('/')}/api/jobs/", body, headers, method="POST")
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.load(response).get("submission_id", "?")


SERVICE_ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"


def post_event(
    namespace: str, rayservice: str, message: str, api: str = "https://kubernetes.default.svc"
) -> None:
    """A Kubernetes Event on the RayService (`kubectl describe rayservice` and `kubectl get events`
    show it), with the service account's token: the one right it has, `create` on events."""
    with open(f"{SERVICE_ACCOUNT}/token") as handle:
        token = handle.read().strip()
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{rayservice}-decode-heal-", "namespace": namespace},
        "involvedObject": {
            "apiVersion": "ray.io/v1",
            "kind": "RayService",
            "name": rayservice,
            "namespace": namespace,
        },
        "reason": "DecodeRestarted",
        "message": message[:1000],
        "type": "Warning",
        "source": {"component": "decode-heal"},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
    request = urllib.request.Request(
        f"{api}/api/v1/namespaces/{namespace}/events",
        json.dumps(event).encode(),
        {"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
        method="POST",
    )
    context = ssl.create_default_context(cafile=f"{SERVICE_ACCOUNT}/ca.crt")
    with urllib.request.urlopen(request, timeout=20, context=context):
        pass


def run(
    env: dict[str, str],
    ask: Ask,
    restart: Callable[[str], str],
    event: Callable[[str], None],
    say: Callable[[str], None] = print,
) -> int:
    window = int(env.get("WINDOW_SECONDS", WINDOW_SECONDS))
    decision = decide(observe(ask, env["NAMESPACE"], env["JOBS"], window), env["APPLICATION"])
    if decision.restart is None:
        say(f"decode-heal: no restart: {decision.reason}")
        return 0
    submission = restart(restart_entrypoint(decision.restart))
    message = f"{decision.reason} (Ray job {submission})"
    say(f"decode-heal: {message}")
    event(message)
    return 0


def main() -> int:
    env = dict(os.environ)
    token_file = env.get("RAY_AUTH_TOKEN_FILE")
    token = open(token_file).read().strip() if token_file else None  # noqa: SIM115
    return run(
        env,
        prometheus_asker(env["PROMETHEUS_URL"]),
        lambda entrypoint: submit(env["DASHBOARD_URL"], token, entrypoint),
        lambda message: post_event(env["NAMESPACE"], env["RAYSERVICE"], message),
    )


if __name__ == "__main__":
    sys.exit(main())
