"""The serving layer's side of the model cache: the service accounts EKS Pod Identity gives AWS
access to, and the Job that copies a Hugging Face model into the stack's S3 prefix (jobs/model_copy.py).

The copy Job is named by the model's source, revision and destination, so it runs again exactly when
they change. It runs in the serving image (the Ray LLM DLC, already on the system nodes for the Ray head),
which carries what it needs: huggingface_hub (vLLM's dependency) and boto3 (Ray Serve LLM's S3 loader).
Nothing is installed at run time, so no package index is trusted by a pod that holds S3 write
credentials and the Hugging Face token.
"""

from __future__ import annotations

from config import Settings
from manifests.jobs import ProgramJob, program_job, short_hash
from manifests.k8s import (
    EmptyDirVolumeSource,
    EnvVar,
    EnvVarSource,
    ResourceRequirements,
    SecretKeySelector,
    Volume,
    VolumeMount,
)
from planning import Plan
from planning.nodes import placement

RAY_SERVICE_ACCOUNT = "ray-llm"
"""The Ray head and workers: read access to the model's prefix."""
COPY_SERVICE_ACCOUNT = "model-copy"
"""The copy Job: write access to the model's prefix."""
COPY_TIMEOUT_SECONDS = 2 * 60 * 60
WORKDIR = "/work"


def service_accounts(settings: Settings) -> list[dict[str, object]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": name, "namespace": settings.serving.namespace},
        }
        for name in (RAY_SERVICE_ACCOUNT, COPY_SERVICE_ACCOUNT)
    ]


def model_copy_job(
    settings: Settings, plan: Plan, hf_token_secret: tuple[str, str] | None
) -> ProgramJob | None:
    """None when there is nothing to copy (the source is already in S3, or the cache is off)."""
    cache = plan.model_cache
    if cache is None or cache.copy_from is None:
        return None
    serving = settings.serving
    copy_key = short_hash(cache.copy_from, cache.revision, cache.prefix, settings.model_cache.bucket or "")
    env = [
        EnvVar(name="SOURCE", value=cache.copy_from),
        EnvVar(name="REVISION", value=cache.revision),
        EnvVar(name="BUCKET", value=cache.bucket),
        EnvVar(name="PREFIX", value=cache.prefix),
        EnvVar(name="WORKDIR", value=WORKDIR),
    ]
    if hf_token_secret:
        secret, key = hf_token_secret
        env.append(
            EnvVar(
                name="HF_TOKEN",
                value_from=EnvVarSource(secret_key_ref=SecretKeySelector(name=secret, key=key)),
            )
        )
    return program_job(
        # by what it copies and where, but not by the account in the stack's own bucket name, which
        # `ops render` cannot know and which never changes for a stack
        name=f"{serving.name[:40]}-copy-{copy_key}",
        namespace=serving.namespace,
        program="model_copy.py",
        data={},
        image=plan.image,
        env=env,
        timeout_seconds=COPY_TIMEOUT_SECONDS,
        resources=ResourceRequirements(
            requests={"cpu": "500m", "memory": "2Gi"}, limits={"cpu": "2", "memory": "4Gi"}
        ),
        labels={"app.kubernetes.io/name": serving.name, "app.kubernetes.io/component": "model-copy"},
        placement=placement(settings),
        service_account=COPY_SERVICE_ACCOUNT,
        # the snapshot on the node's disk while it is uploaded (the Ray head's node, ~2x the checkpoint free)
        volumes=[Volume(name="work", empty_dir=EmptyDirVolumeSource())],
        mounts=[VolumeMount(name="work", mount_path=WORKDIR)],
    )
