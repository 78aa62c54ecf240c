"""`pulumi up` returns only when the new serve config is the one RUNNING: the readiness Job's program
(jobs/serve_ready.py) against a fake Ray dashboard whose answers Ray 2.58's own schema accepts, and the
Job under mocks: replaced when, and only when, serveConfigV2 changes, after the RayService, on the
system nodes, valid as a Kubernetes Job."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import kubernetes_validate
import pytest
import yaml

from jobs.serve_ready import verdict, wait
from manifests.rayservice import build_serving
from planning import plan_stack
from tests.fakes.pulumi import ROOT, StackRun, run_stack, stack_settings
from world.offline import ACCOUNT_ID

JOB = "kubernetes:batch/v1:Job"
CONFIG_MAP = "kubernetes:core/v1:ConfigMap"
RAYSERVICE = "kubernetes:ray.io/v1:RayService"


def expected_apps(run: StackRun) -> list[dict[str, Any]]:
    return yaml.safe_load(run.one(RAYSERVICE).inputs["spec"]["serveConfigV2"])["applications"]


def dashboard(app: dict[str, Any], status: str, message: str = "") -> dict[str, Any]:
    """GET /api/serve/applications/ as Ray 2.58 answers it, for one application running `app`."""
    deployed = {**app, "logging_config": {"encoding": "TEXT"}}  # Ray adds the global logging config
    return {
        "proxy_location": "EveryNode",
        "proxies": {},
        "applications": {
            app["name"]: {
                "name": app["name"],
                "route_prefix": app["route_prefix"],
                "docs_path": None,
                "external_scaler_enabled": False,
                "status": status,
                "message": message,
                "last_deployed_time_s": 1760000000.0,
                "deployed_app_config": deployed,
                "source": "declarative",
                "deployments": {},
            }
        },
    }


@pytest.fixture(scope="module")
def app(dev_stack: StackRun) -> dict[str, Any]:
    (only,) = expected_apps(dev_stack)
    return only


@pytest.fixture(scope="module")
def old_app(app: dict[str, Any]) -> dict[str, Any]:
    old = copy.deepcopy(app)
    old["args"]["decode_config"]["engine_kwargs"]["max_model_len"] = 2048
    return old


def test_the_fake_dashboard_answers_as_ray_does(app):
    from ray.serve.schema import ServeInstanceDetails

    for status in ("DEPLOYING", "RUNNING", "DEPLOY_FAILED"):
        ServeInstanceDetails.model_validate(dashboard(app, status))


class TestVerdict:
    def test_our_config_running_is_done(self, app):
        assert verdict([app], dashboard(app, "RUNNING"))[0] == "ok"

    def test_the_previous_config_running_is_not_done(self, app, old_app):
        """What KubeRay's status shows right after a serve config change: the old app, RUNNING."""
        state, message = verdict([app], dashboard(old_app, "RUNNING"))
        assert (state, message) == ("waiting", "qwen: still running the previous config (RUNNING)")

    def test_our_config_deploying_is_not_done(self, app):
        assert verdict([app], dashboard(app, "DEPLOYING")) == ("waiting", "qwen: DEPLOYING")

    def test_our_config_failing_fails_with_rays_message(self, app):
        answer = dashboard(app, "DEPLOY_FAILED", "Deploying app 'qwen' failed: CUDA out of memory")
        answer["applications"]["qwen"]["deployments"] = {"Prefill": {"message": "replica died"}}
        state, message = verdict([app], answer)
        assert state == "failed"
        assert (
            message
            == "qwen DEPLOY_FAILED: Deploying app 'qwen' failed: CUDA out of memory | Prefill: replica died"
        )

    def test_the_previous_config_failing_is_not_our_failure(self, app, old_app):
        assert verdict([app], dashboard(old_app, "DEPLOY_FAILED"))[0] == "waiting"


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_waits_through_deploying_until_running(app, old_app):
    answers = iter([dashboard(old_app, "RUNNING"), dashboard(app, "DEPLOYING"), dashboard(app, "RUNNING")])
    clock, said = FakeClock(), []
    ok, _ = wait([app], lambda: next(answers), 600, 10, clock, clock.sleep, said.append)
    assert ok and clock.now == 20
    assert said == ["qwen: still running the previous config (RUNNING)", "qwen: DEPLOYING"]


def test_gives_up_at_the_deadline_saying_what_it_last_saw(app, old_app):
    clock = FakeClock()
    ok, message = wait(
        [app], lambda: dashboard(old_app, "RUNNING"), 60, 10, clock, clock.sleep, lambda _: None
    )
    assert not ok
    assert message == (
        "not serving the new config after 60 s; last seen: qwen: still running the previous config (RUNNING)"
    )


@pytest.fixture
def fake_dashboard(app) -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """A Ray dashboard on loopback; the test sets the answers it gives, one per GET (the last repeats)."""
    answers: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            assert self.path == "/api/serve/applications/?api_type=declarative"
            # Ray 2.58's token middleware (_private/authentication/http_token_authentication.py)
            auth = self.headers.get("Authorization")
            if auth != f"Bearer {TOKEN}":
                self.send_response(401 if not auth else 403)
                self.end_headers()
                self.wfile.write(b"Unauthorized: Missing authentication token")
                return
            body = json.dumps(answers.pop(0) if len(answers) > 1 else answers[0]).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", answers
    finally:
        server.shutdown()


TOKEN = "k8s-secret-token"


def run_program(
    url: str, expected: list[dict[str, Any]], tmp_path, token: str = TOKEN
) -> subprocess.CompletedProcess[str]:
    """jobs/serve_ready.py as the Job runs it: a fresh interpreter, configured by its environment."""
    path = tmp_path / "expected.json"
    path.write_text(json.dumps(expected))
    token_file = tmp_path / "auth_token"
    token_file.write_text(token + "\n")
    env = {
        **os.environ,
        "RAY_AUTH_TOKEN_FILE": str(token_file),
        "DASHBOARD_URL": url,
        "EXPECTED": str(path),
        "DEADLINE_SECONDS": "5",
        "POLL_SECONDS": "0.05",
    }
    return subprocess.run(
        [sys.executable, str(ROOT / "jobs" / "serve_ready.py")],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_program_exits_0_once_the_new_config_runs(fake_dashboard, app, old_app, tmp_path):
    url, answers = fake_dashboard
    answers += [dashboard(old_app, "RUNNING"), dashboard(app, "DEPLOYING"), dashboard(app, "RUNNING")]
    result = run_program(url, [app], tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.splitlines()[-1] == "every application runs the new config"


def test_the_program_exits_1_with_rays_message_when_the_new_config_fails(fake_dashboard, app, tmp_path):
    url, answers = fake_dashboard
    answers += [dashboard(app, "DEPLOYING"), dashboard(app, "DEPLOY_FAILED", "max_model_len 200000 > 4096")]
    result = run_program(url, [app], tmp_path)
    assert result.returncode == 1
    assert result.stdout.splitlines()[-1] == "qwen DEPLOY_FAILED: max_model_len 200000 > 4096"


def test_a_refused_token_fails_at_once_and_names_the_secret(fake_dashboard, app, tmp_path):
    url, answers = fake_dashboard
    answers += [dashboard(app, "RUNNING")]
    result = run_program(url, [app], tmp_path, token="stale")
    assert result.returncode == 1
    assert "refused the token (403)" in result.stdout and "authOptions.secretName" in result.stdout


class TestTheJob:
    def names(self, run: StackRun) -> tuple[str, str]:
        return (
            run.one(JOB, "ray-llm-ready-check").inputs["metadata"]["name"],
            run.one(CONFIG_MAP, "ray-llm-ready-check").inputs["metadata"]["name"],
        )

    @pytest.mark.parametrize(
        ("overrides", "replaced"),
        [
            ({"model": {"maxModelLen": 2048}}, True),  # serve config
            ({"model": {"decodeReplicas": 2}, "gpuNodes": {"desiredSize": 3, "maxSize": 3}}, True),
            ({"serving": {"head": {"cpuRequest": "1.5"}}}, False),  # Ray cluster only
            ({"serving": {"imageDigest": "sha256:" + "ab" * 32}}, False),
            ({"serving": {"readyTimeoutMinutes": 60}}, False),
        ],
    )
    def test_replaced_when_and_only_when_the_serve_config_changes(self, overrides, replaced):
        """From the manifests the program applies, planned for the mocked account (the program
        registers the Job and its ConfigMap under these names: the test below): a new metadata.name
        is a replacement."""

        def built(**sections: dict[str, Any]) -> tuple[list[dict[str, Any]], tuple[str, str]]:
            settings = stack_settings("dev", **sections)
            serving = build_serving(settings, plan_stack(settings, stack="dev", account_id=ACCOUNT_ID))
            check = serving.ready_check
            names = (check.job.to_dict()["metadata"]["name"], check.config_map["metadata"]["name"])
            return yaml.safe_load(serving.rayservice.spec.serve_config_v2)["applications"], names

        (apps, names), (changed_apps, changed_names) = built(), built(**overrides)
        assert (changed_apps != apps) == replaced
        assert (changed_names != names) == replaced

    def test_the_program_registers_the_job_under_the_manifests_names(self, dev_stack):
        settings = stack_settings("dev")
        serving = build_serving(settings, plan_stack(settings, stack="dev", account_id=ACCOUNT_ID))
        check = serving.ready_check
        assert self.names(dev_stack) == (
            check.job.to_dict()["metadata"]["name"],
            check.config_map["metadata"]["name"],
        )

    def test_runs_after_the_rayservice_on_the_system_nodes(self, dev_stack):
        job = dev_stack.one(JOB, "ray-llm-ready-check")
        assert dev_stack.one(RAYSERVICE).urn in job.dependencies
        assert dev_stack.one(CONFIG_MAP, "ray-llm-ready-check").urn in job.dependencies
        pod = job.inputs["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"role": "system"}
        assert job.inputs["spec"]["backoffLimit"] == 0
        (container,) = pod["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["DASHBOARD_URL"] == "http://ray-llm-head-svc.inference.svc:8265"
        # Ray's token as a file from its Secret, never in the environment
        assert env["RAY_AUTH_TOKEN_FILE"] == "/ray-auth/auth_token"
        assert {"name": "ray-auth", "mountPath": "/ray-auth", "readOnly": True} in container["volumeMounts"]
        assert {"name": "ray-auth", "secret": {"secretName": "ray-auth-token"}} in pod["volumes"]
        assert not any("valueFrom" in e for e in container["env"])
        assert int(env["DEADLINE_SECONDS"]) < job.inputs["spec"]["activeDeadlineSeconds"]
        assert int(job.inputs["metadata"]["annotations"]["pulumi.com/timeoutSeconds"]) > int(
            job.inputs["spec"]["activeDeadlineSeconds"]
        )

    def test_a_failure_reaches_pulumi_up_and_is_retried_on_the_next(self, dev_stack):
        """pulumi-kubernetes puts a failed Job's pods' termination messages in the `up` error; the
        program writes Ray's message there, and falls back to its output if it dies first."""
        job = dev_stack.one(JOB, "ray-llm-ready-check").inputs
        (container,) = job["spec"]["template"]["spec"]["containers"]
        assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"
        assert "podFailurePolicy" not in job["spec"]  # its Failed reason is not one pulumi-kubernetes reports
        assert job["metadata"]["annotations"]["pulumi.com/replaceUnready"] == "true"

    def test_the_config_map_carries_the_program_and_the_expected_config(self, dev_stack):
        data = dev_stack.one(CONFIG_MAP, "ray-llm-ready-check").inputs["data"]
        assert data["serve_ready.py"] == (ROOT / "jobs" / "serve_ready.py").read_text()
        assert json.loads(data["expected.json"]) == expected_apps(dev_stack)

    def test_the_job_is_a_valid_kubernetes_job(self, dev_stack):
        job = {
            k: dev_stack.one(JOB, "ray-llm-ready-check").inputs[k]
            for k in ("apiVersion", "kind", "metadata", "spec")
        }
        kubernetes_validate.validate(job, "1.35", strict=True)

    def test_zero_downtime_upgrades_wait_for_the_switch_too(self, dev_stack):
        recreate = json.loads(
            dev_stack.one(RAYSERVICE).inputs["metadata"]["annotations"]["pulumi.com/waitFor"]
        )
        assert "condition=UpgradeInProgress=False" not in recreate
        spare = run_stack(
            overrides={"gpuNodes": {"desiredSize": 4, "maxSize": 4}, "systemNodes": {"desiredSize": 2}}
        )
        zero = json.loads(spare.one(RAYSERVICE).inputs["metadata"]["annotations"]["pulumi.com/waitFor"])
        assert "condition=UpgradeInProgress=False" in zero


def test_a_serve_only_change_replaces_the_check_and_nothing_else(dev_stack):
    """Every other resource keeps its name and inputs, but the RayService's serveConfigV2 (an in-place
    update: replaceOnChanges covers rayClusterConfig only)."""
    changed = run_stack(overrides={"model": {"maxModelLen": 2048}})

    def state(run: StackRun) -> dict[tuple[str, str], Any]:
        found = {}
        for reg in run.registrations:
            inputs = copy.deepcopy(reg.inputs)
            if reg.type == RAYSERVICE:
                inputs["spec"].pop("serveConfigV2")
            found[(reg.type, reg.name)] = inputs
        return found

    before, after = state(dev_stack), state(changed)
    differing = {key for key in before if before[key] != after.get(key)}
    assert differing == {(CONFIG_MAP, "ray-llm-ready-check"), (JOB, "ray-llm-ready-check")}
    assert dev_stack.one(RAYSERVICE).replace_on_changes == ["spec.rayClusterConfig"]
    assert (
        changed.one(RAYSERVICE).inputs["spec"]["serveConfigV2"]
        != dev_stack.one(RAYSERVICE).inputs["spec"]["serveConfigV2"]
    )


def test_the_check_runs_the_serving_image_not_a_public_tag(dev_stack):
    """Issue 39: the Job mounts Ray's token, which opens the Jobs API; it runs the image the head runs
    (by digest with serving.imageDigest), not a mutable public tag."""
    jobs = [
        r for r in dev_stack.of_type("kubernetes:batch/v1:Job") if "-ready-" in r.inputs["metadata"]["name"]
    ]
    (job,) = jobs
    (container,) = job.inputs["spec"]["template"]["spec"]["containers"]
    head = dev_stack.one("kubernetes:ray.io/v1:RayService").inputs["spec"]["rayClusterConfig"][
        "headGroupSpec"
    ]
    assert container["image"] == head["template"]["spec"]["containers"][0]["image"]
    assert "python:" not in container["image"]
