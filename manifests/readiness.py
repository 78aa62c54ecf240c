"""The check `pulumi up` waits on after a serve config change: a Job that asks the Ray dashboard
whether the applications running are this config and RUNNING (jobs/serve_ready.py), and the ConfigMap
that carries the program and the expected config.

Both are named by the hash of serveConfigV2: a new serve config is a new Job (Jobs are immutable, and
pulumi-kubernetes awaits a Job until it completes, failing the update when it fails), and nothing else
(a Ray cluster change, a new image) touches it. The check runs in a small pinned Python image on the
system nodes, not in the Ray image, so an image change does not replace it either.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import Field

from config import Settings, versions
from manifests.k8s import (
    Capabilities,
    ConfigMapVolumeSource,
    Container,
    EnvVar,
    K8sModel,
    ObjectMeta,
    PodSpec,
    PodTemplate,
    ResourceRequirements,
    SecurityContext,
    Volume,
    VolumeMount,
)
from planning.nodes import SYSTEM_NODE_LABELS

PROGRAM = Path(__file__).resolve().parent.parent / "jobs" / "serve_ready.py"
MOUNT = "/check"
DASHBOARD_PORT = 8265


class JobSpec(K8sModel):
    backoff_limit: int = Field(ge=0)
    active_deadline_seconds: int = Field(gt=0)
    template: PodTemplate


class JobManifest(K8sModel):
    api_version: Literal["batch/v1"] = "batch/v1"
    kind: Literal["Job"] = "Job"
    metadata: ObjectMeta
    spec: JobSpec

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


@dataclass(frozen=True)
class ServeReadyCheck:
    config_map: dict[str, Any]
    job: JobManifest


def serve_ready_check(settings: Settings, serve_config_v2: str) -> ServeReadyCheck:
    serving = settings.serving
    digest = hashlib.sha256(serve_config_v2.encode()).hexdigest()[:10]
    name = f"{serving.name[:40]}-ready-{digest}"
    timeout = serving.ready_timeout_minutes * 60
    expected = yaml.safe_load(serve_config_v2)["applications"]
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": serving.namespace},
        "data": {
            "serve_ready.py": PROGRAM.read_text(),
            "expected.json": json.dumps(expected, sort_keys=True),
        },
    }
    container = Container(
        name="check",
        image=serving.readiness_check_image or versions.READINESS_CHECK_IMAGE,
        command=["python3", f"{MOUNT}/serve_ready.py"],
        env=[
            EnvVar(
                name="DASHBOARD_URL",
                value=f"http://{serving.name}-head-svc.{serving.namespace}.svc:{DASHBOARD_PORT}",
            ),
            EnvVar(name="EXPECTED", value=f"{MOUNT}/expected.json"),
            # a little below the Job's deadline, so the check says what it saw before it is stopped
            EnvVar(name="DEADLINE_SECONDS", value=str(timeout - 30)),
        ],
        resources=ResourceRequirements(
            requests={"cpu": "50m", "memory": "64Mi"}, limits={"cpu": "200m", "memory": "128Mi"}
        ),
        volume_mounts=[VolumeMount(name="check", mount_path=MOUNT)],
        security_context=SecurityContext(
            allow_privilege_escalation=False, capabilities=Capabilities(drop=["ALL"])
        ),
        termination_message_policy="FallbackToLogsOnError",
    )
    job = JobManifest(
        metadata=ObjectMeta(
            name=name,
            namespace=serving.namespace,
            labels={
                "app.kubernetes.io/name": serving.name,
                "app.kubernetes.io/component": "serve-ready-check",
            },
            annotations={
                "pulumi.com/timeoutSeconds": str(timeout + 60),
                # a check that failed runs again on the next `up` instead of failing it unchanged
                "pulumi.com/replaceUnready": "true",
            },
        ),
        spec=JobSpec(
            backoff_limit=0,
            active_deadline_seconds=timeout,
            template=PodTemplate(
                spec=PodSpec(
                    containers=[container],
                    node_selector=dict(SYSTEM_NODE_LABELS),
                    restart_policy="Never",
                    volumes=[Volume(name="check", config_map=ConfigMapVolumeSource(name=name))],
                )
            ),
        ),
    )
    return ServeReadyCheck(config_map=config_map, job=job)
