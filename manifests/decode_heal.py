"""`serving.selfHeal`: the CronJob that restarts a decode replica holding a stale NIXL agent
(jobs/decode_heal.py), with the least it needs.

- Every minute, one pod at a time (`concurrencyPolicy: Forbid`), on the system nodes, as nobody with a
  read-only root, in the serving image the head already runs (by digest with `serving.imageDigest`).
- It reads the stack's Prometheus and writes to Ray's dashboard (the Jobs API) with Ray's token, mounted
  read-only from its Secret as the readiness Job does; manifests/traffic.py declares both flows.
- Its ServiceAccount may `create` Events in the serving namespace and nothing else (a Role, not a
  ClusterRole): no read of any Secret, no pod, no RayService. Its token is mounted for that one call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from config import Settings
from manifests.jobs import ProgramJob, program_job
from manifests.k8s import EnvVar, ResourceRequirements, SecretVolumeSource, Volume, VolumeMount
from manifests.observability.monitors import monitor_metadata, scraper
from manifests.ray_auth import RAY_AUTH_KEY, RAY_AUTH_SECRET
from manifests.readiness import DASHBOARD_PORT, TOKEN_MOUNT
from planning.context import ClusterContext
from planning.nodes import placement

COMPONENT = "decode-heal"
SCHEDULE = "* * * * *"
RUN_SECONDS = 50
"""A run's deadline, under the schedule's minute."""
WINDOW_SECONDS = 30 * 60
"""At most one restart per window, and a prefill restart counts within it (jobs/decode_heal.py)."""
MONITORS = ("ray-head-monitor", "ray-workers-monitor")
"""The stack's PodMonitors (manifests/observability/monitors.py), whose `job` label scopes the queries."""


@dataclass(frozen=True)
class DecodeHeal:
    config_map: dict[str, Any]
    cron_job: dict[str, Any]
    service_account: dict[str, Any]
    role: dict[str, Any]
    role_binding: dict[str, Any]

    def objects(self) -> list[dict[str, Any]]:
        """In the order they must exist."""
        return [self.service_account, self.role, self.role_binding, self.config_map, self.cron_job]


def labels(settings: Settings) -> dict[str, str]:
    return {"app.kubernetes.io/name": settings.serving.name, "app.kubernetes.io/component": COMPONENT}


def _program(settings: Settings, context: ClusterContext, serving_image: str) -> ProgramJob:
    serving = settings.serving
    monitors_at = monitor_metadata(MONITORS[0], serving.namespace, context)["namespace"]
    return program_job(
        name=f"{serving.name[:40]}-{COMPONENT}",
        namespace=serving.namespace,
        program="decode_heal.py",
        data={},
        image=serving_image,
        placement=placement(settings),
        env=[
            EnvVar(name="PROMETHEUS_URL", value=scraper(context).url),
            EnvVar(
                name="DASHBOARD_URL",
                value=f"http://{serving.name}-head-svc.{serving.namespace}.svc:{DASHBOARD_PORT}",
            ),
            EnvVar(name="RAY_AUTH_TOKEN_FILE", value=f"{TOKEN_MOUNT}/{RAY_AUTH_KEY}"),
            EnvVar(name="NAMESPACE", value=serving.namespace),
            EnvVar(name="RAYSERVICE", value=serving.name),
            EnvVar(name="APPLICATION", value=serving.application_name),
            EnvVar(name="JOBS", value="|".join(f"{monitors_at}/{m}" for m in MONITORS)),
            EnvVar(name="WINDOW_SECONDS", value=str(WINDOW_SECONDS)),
        ],
        timeout_seconds=RUN_SECONDS,
        resources=ResourceRequirements(
            requests={"cpu": "20m", "memory": "64Mi"}, limits={"cpu": "200m", "memory": "128Mi"}
        ),
        labels=labels(settings),
        service_account=COMPONENT,
        automount_token=True,
        volumes=[Volume(name="ray-auth", secret=SecretVolumeSource(secret_name=RAY_AUTH_SECRET))],
        mounts=[VolumeMount(name="ray-auth", mount_path=TOKEN_MOUNT, read_only=True)],
    )


def decode_heal(settings: Settings, context: ClusterContext, serving_image: str) -> DecodeHeal | None:
    """None unless `serving.selfHeal` (which needs disaggregation and the metrics: config/settings.py)."""
    serving = settings.serving
    if not serving.self_heal:
        return None
    program = _program(settings, context, serving_image)
    job = program.job.to_dict()
    namespace = serving.namespace
    rbac = "rbac.authorization.k8s.io"
    return DecodeHeal(
        config_map=program.config_map,
        cron_job={
            "apiVersion": "batch/v1",
            "kind": "CronJob",
            "metadata": {"name": job["metadata"]["name"], "namespace": namespace, "labels": labels(settings)},
            "spec": {
                "schedule": SCHEDULE,
                "concurrencyPolicy": "Forbid",
                "startingDeadlineSeconds": 60,
                "successfulJobsHistoryLimit": 1,
                "failedJobsHistoryLimit": 3,
                "jobTemplate": {"metadata": {"labels": labels(settings)}, "spec": job["spec"]},
            },
        },
        service_account={
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": COMPONENT, "namespace": namespace, "labels": labels(settings)},
        },
        role={
            "apiVersion": f"{rbac}/v1",
            "kind": "Role",
            "metadata": {"name": COMPONENT, "namespace": namespace, "labels": labels(settings)},
            "rules": [{"apiGroups": [""], "resources": ["events"], "verbs": ["create"]}],
        },
        role_binding={
            "apiVersion": f"{rbac}/v1",
            "kind": "RoleBinding",
            "metadata": {"name": COMPONENT, "namespace": namespace, "labels": labels(settings)},
            "roleRef": {"apiGroup": rbac, "kind": "Role", "name": COMPONENT},
            "subjects": [{"kind": "ServiceAccount", "name": COMPONENT, "namespace": namespace}],
        },
    )
