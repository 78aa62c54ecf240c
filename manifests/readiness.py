"""The check `pulumi up` waits on after a serve config change: a Job that asks the Ray dashboard
whether the applications running are this config and RUNNING (jobs/serve_ready.py), with Ray's
token (manifests/ray_auth.py).

It is named by the hash of serveConfigV2: a new serve config is a new Job (pulumi-kubernetes awaits a
Job until it completes, failing the update when it fails), and nothing else (a Ray cluster change, a
new image) touches it. It runs in a small pinned Python image, not the Ray image, so an image change
does not replace it either.
"""

from __future__ import annotations

import json

from config import Settings
from config.base import load_yaml
from manifests.jobs import ProgramJob, program_job, short_hash
from manifests.k8s import EnvVar, ResourceRequirements, SecretVolumeSource, Volume, VolumeMount
from manifests.ray_auth import RAY_AUTH_KEY, RAY_AUTH_SECRET
from planning.nodes import placement

DASHBOARD_PORT = 8265
TOKEN_MOUNT = "/ray-auth"


def serve_ready_check(settings: Settings, serve_config_v2: str, serving_image: str) -> ProgramJob:
    """`serving_image`: the Ray image the head runs (already on the system nodes; by digest with
    `serving.imageDigest`), whose Python runs the check: the Job holds Ray's token, which opens the Jobs
    API, so it runs no image of a mutable public tag (issue 39)."""
    serving = settings.serving
    timeout = serving.ready_timeout_minutes * 60
    name = f"{serving.name[:40]}-ready-{short_hash(serve_config_v2)}"
    expected = load_yaml(serve_config_v2)["applications"]
    return program_job(
        name=name,
        namespace=serving.namespace,
        program="serve_ready.py",
        data={"expected.json": json.dumps(expected, sort_keys=True)},
        image=serving.readiness_check_image or serving_image,
        placement=placement(settings),
        env=[
            EnvVar(
                name="DASHBOARD_URL",
                value=f"http://{serving.name}-head-svc.{serving.namespace}.svc:{DASHBOARD_PORT}",
            ),
            EnvVar(name="EXPECTED", value="/program/expected.json"),
            # The dashboard's API wants Ray's token (manifests/ray_auth.py), read from a file: a
            # Secret in the environment shows in `kubectl describe`-adjacent places and crash dumps.
            EnvVar(name="RAY_AUTH_TOKEN_FILE", value=f"{TOKEN_MOUNT}/{RAY_AUTH_KEY}"),
            # a little below the Job's deadline, so the check says what it saw before it is stopped
            EnvVar(name="DEADLINE_SECONDS", value=str(timeout - 30)),
        ],
        timeout_seconds=timeout,
        resources=ResourceRequirements(
            requests={"cpu": "50m", "memory": "64Mi"}, limits={"cpu": "200m", "memory": "128Mi"}
        ),
        labels={"app.kubernetes.io/name": serving.name, "app.kubernetes.io/component": "serve-ready-check"},
        volumes=[Volume(name="ray-auth", secret=SecretVolumeSource(secret_name=RAY_AUTH_SECRET))],
        mounts=[VolumeMount(name="ray-auth", mount_path=TOKEN_MOUNT, read_only=True)],
    )
