"""A program from jobs/ run as a Kubernetes Job that `pulumi up` awaits: the ConfigMap carrying the
program (and its data), and the Job running it once, on the system nodes, with its result as the
pod's termination message (pulumi-kubernetes puts that in the error of a failed update).

Both are named by a hash of what the Job acts on, so the Job runs again exactly when that changes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from manifests.k8s import (
    ConfigMapVolumeSource,
    Container,
    EmptyDirVolumeSource,
    EnvVar,
    K8sModel,
    NamespacedManifest,
    ObjectMeta,
    PodMetadata,
    PodSpec,
    PodTemplate,
    ResourceRequirements,
    Volume,
    VolumeMount,
    locked_container,
    tolerations_of,
    unprivileged_pod,
)
from planning.nodes import Placement

JOBS = Path(__file__).resolve().parent.parent / "jobs"
MOUNT = "/program"
SCRATCH = "/tmp"
"""An emptyDir: the only place a program job writes (besides the volumes it is given)."""


class JobSpec(K8sModel):
    backoff_limit: int = Field(ge=0)
    active_deadline_seconds: int = Field(gt=0)
    template: PodTemplate


class JobManifest(NamespacedManifest):
    api_version: Literal["batch/v1"] = "batch/v1"
    kind: Literal["Job"] = "Job"
    spec: JobSpec


@dataclass(frozen=True)
class ProgramJob:
    config_map: dict[str, Any]
    job: JobManifest


def short_hash(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:10]


def program_job(
    *,
    name: str,
    namespace: str,
    program: str,
    data: dict[str, str],
    image: str,
    env: list[EnvVar],
    timeout_seconds: int,
    resources: ResourceRequirements,
    labels: dict[str, str],
    placement: Placement,
    service_account: str | None = None,
    volumes: list[Volume] | None = None,
    mounts: list[VolumeMount] | None = None,
    automount_token: bool = False,
) -> ProgramJob:
    """`program`: a file in jobs/, run with python3 from the image (nothing is installed at run time);
    `data`: more files beside it (/program/<key>); `placement`: the system nodes it runs on;
    `automount_token`: the service account's token, for a program that calls the Kubernetes API."""
    command = ["python3", f"{MOUNT}/{program}"]
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {program: (JOBS / program).read_text(), **data},
    }
    container = Container(
        name="run",
        image=image,
        command=command,
        env=[
            *env,
            # As nobody, with a read-only root: home and caches live in the scratch space.
            EnvVar(name="HOME", value=SCRATCH),
            EnvVar(name="PYTHONDONTWRITEBYTECODE", value="1"),
        ],
        resources=resources,
        volume_mounts=[
            VolumeMount(name="program", mount_path=MOUNT),
            VolumeMount(name="scratch", mount_path=SCRATCH),
            *(mounts or []),
        ],
        security_context=locked_container(),
        # the program writes its verdict there; if it dies first, its last output stands in
        termination_message_policy="FallbackToLogsOnError",
    )
    job = JobManifest(
        metadata=ObjectMeta(
            name=name,
            namespace=namespace,
            labels=labels,
            annotations={
                "pulumi.com/timeoutSeconds": str(timeout_seconds + 60),
                # a Job that failed runs again on the next `up` instead of failing it unchanged
                "pulumi.com/replaceUnready": "true",
            },
        ),
        spec=JobSpec(
            backoff_limit=0,
            active_deadline_seconds=timeout_seconds,
            template=PodTemplate(
                # The pod's own labels too: what network policies and `kubectl logs -l` select.
                metadata=PodMetadata(labels=labels),
                spec=PodSpec(
                    containers=[container],
                    node_selector=placement.system_selector,
                    tolerations=tolerations_of(placement.system_tolerations),
                    restart_policy="Never",
                    service_account_name=service_account,
                    # Only a program that talks to the Kubernetes API gets a token (EKS Pod Identity
                    # projects its own).
                    automount_service_account_token=automount_token,
                    security_context=unprivileged_pod(),
                    volumes=[
                        Volume(name="program", config_map=ConfigMapVolumeSource(name=name)),
                        Volume(name="scratch", empty_dir=EmptyDirVolumeSource()),
                        *(volumes or []),
                    ],
                ),
            ),
        ),
    )
    return ProgramJob(config_map=config_map, job=job)
