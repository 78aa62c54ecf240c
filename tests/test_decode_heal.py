"""Decode heals itself after a stale NIXL agent (`serving.selfHeal`, issue 51): the decision as a pure
function, its queries evaluated by promtool on series shaped as Ray exports them, the run against fakes
of Prometheus, Ray's Jobs API and the Kubernetes API, and the CronJob with the least it needs. One stack
run with the key set (module-scoped); every stack file without it renders nothing new (tests.graph and
test_a_stack_without_it_renders_nothing_of_it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from config import ConfigError
from jobs import decode_heal as heal
from jobs.decode_heal import Decision, Observation, Replica, decide
from manifests.decode_heal import COMPONENT, SCHEDULE, decode_heal
from manifests.traffic import MONITORING, SERVING, Stack, policies
from ops.render import manifests
from tests.exported_metrics import EXPORTED
from tests.fakes.pulumi import STACKS, StackRun, plan_of, run_stack, stack_settings
from tests.promql import metric_names
from tests.validators import promtool_expressions

APP = "qwen"
DECODE = "Decode:qwen3_5-9b"


def replica(name: str = "d1abc", failed: float = 12, done: float = 0, **overrides: Any) -> Replica:
    fields: dict[str, Any] = {
        "cluster": "ray-llm-a",
        "application": APP,
        "deployment": DECODE,
        "replica": name,
        "failed": failed,
        "done": done,
    }
    return Replica(**{**fields, **overrides})


def observed(*replicas: Replica, prefill: tuple[str, ...] = ("ray-llm-a",), decode: tuple[str, ...] = ()):
    return Observation(tuple(replicas), frozenset(prefill), frozenset(decode))


class TestTheDecision:
    def test_the_stale_agent_signature_restarts_that_decode_replica(self):
        decision = decide(observed(replica()), APP)
        assert decision.restart == replica()
        assert "a stale NIXL agent" in decision.reason and "restarting it" in decision.reason

    @pytest.mark.parametrize(
        ("observation", "why"),
        [
            (observed(replica(done=1)), "no decode replica whose KV transfers all failed"),
            (observed(replica(failed=2)), "no decode replica whose KV transfers all failed"),
            (observed(replica(), prefill=()), "no prefill replica restarted within the window"),
            (observed(replica(), decode=("ray-llm-a",)), "at most one restart per window"),
            (observed(replica(application="other")), "no decode replica"),
            (observed(replica(deployment="Prefill:qwen3_5-9b")), "no decode replica"),
        ],
        ids=[
            "one-completed",
            "a-blip",
            "prefill-did-not-restart",
            "within-the-window",
            "other-app",
            "prefill",
        ],
    )
    def test_anything_else_restarts_nothing_and_says_why(self, observation: Observation, why: str):
        decision = decide(observation, APP)
        assert decision.restart is None and why in decision.reason

    def test_at_most_one_replica_per_run_the_most_failing_first(self):
        decision = decide(observed(replica("d1", failed=5), replica("d2", failed=40)), APP)
        assert decision.restart is not None and decision.restart.replica == "d2"

    def test_another_ray_clusters_prefill_restart_does_not_count(self):
        """A NewCluster upgrade's second Ray cluster: its prefill starting says nothing of this one's."""
        assert decide(observed(replica(), prefill=("ray-llm-b",)), APP).restart is None

    def test_a_forged_replica_name_never_reaches_the_driver(self):
        """Labels come from a Prometheus other pods may write into: a name that is not Serve's form is
        neither chosen nor turned into code."""
        forged = replica("x'); import os; os.system('rm -rf /'); ('")
        assert decide(observed(forged), APP).restart is None
        with pytest.raises(ValueError):
            heal.restart_entrypoint(forged)

    def test_the_driver_kills_the_replicas_actor_for_good(self):
        entrypoint = heal.restart_entrypoint(replica("d1abc"))
        assert entrypoint.startswith('python -c "') and entrypoint.endswith('"')
        code = entrypoint.removeprefix('python -c "').removesuffix('"')
        compile(code, "driver", "exec")
        assert "ray.get_actor('SERVE_REPLICA::qwen#Decode:qwen3_5-9b#d1abc', namespace='serve')" in code
        assert "no_restart=True" in code


class TestTheQueries:
    QUERIES = heal.queries("inference", "inference/ray-head-monitor|inference/ray-workers-monitor", 1800)

    def test_they_parse_and_read_only_exported_metrics(self):
        for query in self.QUERIES.values():
            names = metric_names(query)
            assert names and names <= EXPORTED, query

    def test_promtool_finds_the_signature_as_ray_exports_it(self, tmp_path: Path):
        """A decode replica whose reads all fail (its failure counter from 3 to 33, no completion), one
        whose failures all came in one export (a counter born within the 5 minutes counts whole), one
        that reads fine, a prefill replica that started 6 minutes in (a new series, as Ray exports a
        counter from its first increment), and a forged decode series from another namespace: the
        queries find the failing replica with its Serve labels, the prefill start, no decode start."""
        where = 'ray_io_cluster="ray-llm-a", namespace="inference"'
        workers = f'{where}, job="inference/ray-workers-monitor"'

        def serve(worker: str, deployment: str, replica_id: str, ns: str = "inference") -> dict[str, str]:
            labels = (
                f'ray_io_cluster="ray-llm-a", namespace="{ns}", job="{ns}/ray-workers-monitor", '
                f'WorkerId="{worker}", application="qwen", deployment="{deployment}", '
                f'replica="{replica_id}", route="/"'
            )
            return {"series": f"ray_serve_deployment_request_counter_total{{{labels}}}", "values": "1+1x60"}

        def starts(worker: str, deployment: str, replica_id: str, values: str) -> dict[str, str]:
            labels = (
                f'{workers}, WorkerId="{worker}", application="qwen", deployment="{deployment}", '
                f'replica="{replica_id}"'
            )
            return {"series": f"ray_serve_deployment_replica_starts_total{{{labels}}}", "values": values}

        series = [
            serve("w-stale", DECODE, "d1abc"),
            serve("w-fine", DECODE, "d2def"),
            serve("w-fresh", DECODE, "d3new"),
            # Its failure counter born at minute 12, one export carrying all 6: none lost to increase().
            {
                "series": f'ray_vllm_nixl_num_failed_transfers_total{{{workers}, WorkerId="w-fresh"}}',
                "values": " ".join(["_"] * 12 + ["6"] * 49),
            },
            serve("w-forged", DECODE, "evil", ns="team-b"),
            {
                "series": f'ray_vllm_nixl_num_failed_transfers_total{{{workers}, WorkerId="w-stale"}}',
                "values": "3+3x60",
            },
            {
                "series": 'ray_vllm_nixl_num_failed_transfers_total{ray_io_cluster="ray-llm-a", '
                'namespace="team-b", job="team-b/ray-workers-monitor", WorkerId="w-forged"}',
                "values": "3+3x60",
            },
            {
                "series": f'ray_vllm_nixl_xfer_time_seconds_count{{{workers}, WorkerId="w-fine"}}',
                "values": "10+10x60",
            },
            starts("w-stale", DECODE, "d1abc", "1x60"),
            # The old prefill replica's series ends when it dies at 5 minutes; its successor's appears.
            starts("w-p-old", "Prefill:qwen3_5-9b", "p0old", " ".join(["1"] * 5)),
            starts("w-p-new", "Prefill:qwen3_5-9b", "p1new", " ".join(["_"] * 6 + ["1"] * 55)),
        ]
        stale = (
            '{ray_io_cluster="ray-llm-a", WorkerId="w-stale", application="qwen", '
            f'deployment="{DECODE}", replica="d1abc"}}'
        )
        fine = stale.replace("w-stale", "w-fine").replace("d1abc", "d2def")
        fresh = stale.replace("w-stale", "w-fresh").replace("d1abc", "d3new")
        tests = [
            {
                "expr": self.QUERIES["failed"],
                "eval_time": "15m",
                "exp_samples": [{"labels": stale, "value": 15}, {"labels": fresh, "value": 6}],
            },
            {
                "expr": self.QUERIES["done"],
                "eval_time": "15m",
                "exp_samples": [{"labels": fine, "value": 50}],
            },
            {
                "expr": self.QUERIES["prefill_started"],
                "eval_time": "15m",
                "exp_samples": [{"labels": '{ray_io_cluster="ray-llm-a"}', "value": 1}],
            },
            # decode's only replica started at minute 0: within the window, so no restart now.
            {
                "expr": self.QUERIES["decode_started"],
                "eval_time": "15m",
                "exp_samples": [{"labels": '{ray_io_cluster="ray-llm-a"}', "value": 1}],
            },
            # 40 minutes on, the window has passed: no decode start within it.
            {"expr": self.QUERIES["decode_started"], "eval_time": "50m", "exp_samples": []},
        ]
        promtool_expressions(tmp_path, series, tests)


def test_a_run_restarts_once_logs_and_posts_an_event():
    """The program's run against fakes: Prometheus answers the signature; the Jobs API gets one driver;
    the Event and the log line say which replica and why."""
    labels = {"ray_io_cluster": "ray-llm-a", "application": APP, "deployment": DECODE, "replica": "d1abc"}
    q = heal.queries("inference", "jobs", 1800)
    answers = {
        q["failed"]: [{"metric": labels, "value": [0, "15"]}],
        q["done"]: [],
        q["prefill_started"]: [{"metric": {"ray_io_cluster": "ray-llm-a"}, "value": [0, "1"]}],
        q["decode_started"]: [],
    }
    submitted: list[str] = []
    events: list[str] = []
    said: list[str] = []
    env = {"NAMESPACE": "inference", "JOBS": "jobs", "APPLICATION": APP, "WINDOW_SECONDS": "1800"}

    def submit(entrypoint: str) -> str:
        submitted.append(entrypoint)
        return "raysubmit_1"

    assert heal.run(env, lambda query: answers[query], submit, events.append, said.append) == 0
    assert submitted == [heal.restart_entrypoint(replica("d1abc", failed=15))]
    assert events == [said[0].removeprefix("decode-heal: ")]
    assert "replica d1abc (ray-llm-a)" in said[0] and "(Ray job raysubmit_1)" in said[0]

    # A decode replica started since (the restart itself): the next minute's run does nothing.
    answers[q["decode_started"]] = [{"metric": {"ray_io_cluster": "ray-llm-a"}, "value": [0, "1"]}]
    assert heal.run(env, lambda query: answers[query], submit, events.append, said.append) == 0
    assert len(submitted) == 1 and len(events) == 1
    assert "at most one restart per window" in said[-1]


def test_selfheal_needs_disaggregation_and_the_metrics():
    with pytest.raises(
        ConfigError, match=r"serving\.selfHeal.*serving\.mode disaggregated \(now aggregated\)"
    ):
        stack_settings("dev", serving={"selfHeal": True, "mode": "aggregated"})
    with pytest.raises(ConfigError, match=r"serving\.selfHeal.*observability\.enabled true \(now false\)"):
        stack_settings("dev", serving={"selfHeal": True}, observability={"enabled": False})


@pytest.mark.parametrize("stack", STACKS)
def test_a_stack_without_it_renders_nothing_of_it(stack):
    settings = stack_settings(stack)
    assert not settings.serving.self_heal
    rendered = manifests(settings, plan_of(stack))
    assert not [o for o in rendered if o["metadata"].get("name", "").endswith(COMPONENT)]
    assert not [o for o in rendered if o["kind"] in ("CronJob", "Role", "RoleBinding")]


class TestTheCronJob:
    @pytest.fixture(scope="class")
    def objects(self) -> dict[str, dict[str, Any]]:
        settings = stack_settings("dev", serving={"selfHeal": True})
        plan = plan_of("dev", serving={"selfHeal": True})
        heal_ = decode_heal(settings, plan.cluster_context, plan.image)
        assert heal_ is not None
        return {o["kind"]: o for o in heal_.objects()}

    def test_its_one_right_is_to_create_events_in_the_serving_namespace(self, objects):
        assert objects["Role"]["rules"] == [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]
        assert objects["Role"]["metadata"]["namespace"] == "inference"
        assert objects["RoleBinding"]["subjects"] == [
            {"kind": "ServiceAccount", "name": COMPONENT, "namespace": "inference"}
        ]

    def test_it_runs_every_minute_one_at_a_time_locked_down(self, objects):
        cron = objects["CronJob"]["spec"]
        assert (cron["schedule"], cron["concurrencyPolicy"]) == (SCHEDULE, "Forbid")
        pod = cron["jobTemplate"]["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == COMPONENT and pod["automountServiceAccountToken"] is True
        (container,) = pod["containers"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
        assert pod["securityContext"]["runAsNonRoot"] is True
        env = {e["name"]: e["value"] for e in container["env"]}
        assert env["PROMETHEUS_URL"].startswith("http://") and env["DASHBOARD_URL"].endswith(":8265")
        assert env["JOBS"] == "inference/ray-head-monitor|inference/ray-workers-monitor"
        secret_volumes = [v for v in pod["volumes"] if "secret" in v]
        assert [v["secret"]["secretName"] for v in secret_volumes] == ["ray-auth-token"]
        assert "decode_heal.py" in objects["ConfigMap"]["data"]

    def test_its_flows_reach_the_dashboard_and_prometheus_only(self):
        settings = stack_settings("dev", serving={"selfHeal": True})
        plan = plan_of("dev", serving={"selfHeal": True})
        stack = Stack(settings, plan.cluster_context, plan.kv_path)
        heal_pods = {"app.kubernetes.io/component": COMPONENT}

        def ports_from_heal(namespace) -> list[int]:
            found = []
            for policy in policies(namespace, stack):
                for rule in policy["spec"].get("ingress", []):
                    if any(p.get("podSelector", {}).get("matchLabels") == heal_pods for p in rule["from"]):
                        found += [p["port"] for p in rule["ports"]]
            return found

        assert ports_from_heal(SERVING) == [8265]
        assert ports_from_heal(MONITORING) == [9090]
        without = Stack(stack_settings("dev"), plan.cluster_context, plan.kv_path)
        assert all(
            heal_pods
            not in [
                p.get("podSelector", {}).get("matchLabels")
                for r in pol["spec"].get("ingress", [])
                for p in r["from"]
            ]
            for ns in (SERVING, MONITORING)
            for pol in policies(ns, without)
        )


@pytest.fixture(scope="module")
def healing() -> StackRun:
    return run_stack(overrides={"serving": {"selfHeal": True}})


def test_the_program_applies_it_after_the_rayservice_through_the_clusters_provider(healing: StackRun):
    cron = healing.one("kubernetes:batch/v1:CronJob")
    rayservice = healing.one("kubernetes:ray.io/v1:RayService")
    assert rayservice.urn in cron.dependencies
    assert cron.inputs["spec"]["schedule"] == SCHEDULE
    role = healing.one("kubernetes:rbac.authorization.k8s.io/v1:Role")
    assert role.inputs["rules"] == [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}]
    for reg in (cron, role, healing.one("kubernetes:rbac.authorization.k8s.io/v1:RoleBinding")):
        assert reg.provider == rayservice.provider
        assert reg.parent == rayservice.parent


def test_the_decision_reads_the_stacks_own_queries_only():
    """Every query is scoped to the serving namespace and the stack's PodMonitors' jobs."""
    for query in heal.queries("inference", "inference/ray-head-monitor", 1800).values():
        assert query.count('namespace="inference"') >= 1, query
    assert Decision(None, "x").restart is None
