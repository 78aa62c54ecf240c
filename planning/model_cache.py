"""Where the model's weights come from: the stack's regional S3 copy of a Hugging Face model, an S3
prefix the user keeps, or (cache off) Hugging Face itself.

The copy lives at `s3://<bucket>/<prefix>/<org>/<name>/<revision>/` with a `hash` file naming the
snapshot, the layout Ray Serve LLM downloads from before vLLM starts. A new source or revision is a new
prefix and a new copy; nothing is overwritten in place.
"""

from __future__ import annotations

from dataclasses import dataclass

from config import Settings

ACCOUNT_PLACEHOLDER = "<account-id>"
"""Offline (`ops render`) the account is unknown; the stack names it at preview and up."""


@dataclass(frozen=True)
class ModelCachePlan:
    bucket: str
    prefix: str
    """Key prefix of this model's files, without a trailing slash."""
    owned: bool
    """The stack creates the bucket (else it exists: `modelCache.bucket` or the source's)."""
    copy_from: str | None
    """Hugging Face repo the stack copies into the prefix; None when the source is already in S3."""
    revision: str

    @property
    def uri(self) -> str:
        return f"s3://{self.bucket}/{self.prefix}"


def default_bucket(cluster_name: str, account_id: str, region: str) -> str:
    """Unique per account and region (S3 names are global), and per cluster."""
    return f"{cluster_name.lower()[:24].rstrip('-')}-models-{account_id}-{region}"


def plan_model_cache(settings: Settings, cluster_name: str, account_id: str | None) -> ModelCachePlan | None:
    model, cache = settings.model, settings.model_cache
    if model.source.startswith("s3://"):
        bucket, _, prefix = model.source.removeprefix("s3://").partition("/")
        return ModelCachePlan(bucket, prefix.strip("/"), owned=False, copy_from=None, revision=model.revision)
    if not cache.enabled:
        return None
    bucket = cache.bucket or default_bucket(cluster_name, account_id or ACCOUNT_PLACEHOLDER, settings.region)
    return ModelCachePlan(
        bucket=bucket,
        prefix=f"{cache.prefix}/{model.source}/{model.revision}",
        owned=cache.bucket is None,
        copy_from=model.source,
        revision=model.revision,
    )
