"""Where the model's weights come from: the stack's regional S3 copy of a Hugging Face model, an S3
prefix the user keeps, or (cache off) Hugging Face itself.

The copy lives at `s3://<bucket>/<prefix>/<org>/<name>/<revision>/` with a `hash` file naming the
snapshot, the layout Ray Serve LLM downloads from before vLLM starts. A new source or revision is a new
prefix and a new copy; nothing is overwritten in place.

The bucket the stack creates is named once, on its first `up`, and kept: S3 names are global and a
bucket cannot be renamed, so a new name would replace the bucket and its copy. The name is recorded
with the stack's zones (planning/zones.py, `StackRecord.model_bucket`) and read back on every later
run; a record written before the name was kept means the stack was deployed with `legacy_bucket`'s.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, replace

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


BUCKET_MAX = 63
"""S3's longest bucket name."""
RESERVED_PREFIXES = ("sthree-", "amzn-s3-demo-")
"""Beginnings S3 reserves that a cluster's name could have (`xn--` cannot survive the hyphens' fold)."""
KEY_LENGTH = 8
"""Hex characters of the hash of stack, cluster and namespace in a default bucket name."""


def bucket_key(stack: str, cluster_name: str, namespace: str) -> str:
    """What makes a stack's bucket its own, in `KEY_LENGTH` hex characters: its stack, its cluster and
    its serving namespace (two stacks on one team's cluster differ in stack and namespace)."""
    return hashlib.sha256(f"{stack}\n{cluster_name}\n{namespace}".encode()).hexdigest()[:KEY_LENGTH]


def default_bucket(stack: str, cluster_name: str, namespace: str, account_id: str, region: str) -> str:
    """`<cluster>-models-<key>-<account>-<region>`: the account and region make it unique among S3's
    global names, `bucket_key` among the stacks of one account and region (a cluster's name cut to fit
    could not: `analytics-team-a` and `analytics-team-b` once shared one). The cluster's name, lower
    case, hyphens for anything else, is cut so the whole stays within S3's 63 characters; no dots, so
    TLS's wildcard certificate covers virtual-hosted addresses."""
    tail = f"-models-{bucket_key(stack, cluster_name, namespace)}-{account_id}-{region}"
    readable = re.sub(r"-+", "-", re.sub(r"[^a-z0-9]", "-", cluster_name.lower())).strip("-") or "stack"
    if readable.startswith(RESERVED_PREFIXES):
        readable = f"m-{readable}"
    return f"{readable[: BUCKET_MAX - len(tail)].rstrip('-')}{tail}"


def legacy_bucket(cluster_name: str, account_id: str, region: str) -> str:
    """The name stacks deployed before the name was kept carry: the cluster's name cut to 24 characters,
    which two clusters could share. Kept for them, never chosen for a new stack."""
    return f"{cluster_name.lower()[:24].rstrip('-')}-models-{account_id}-{region}"


def kept_bucket(recorded: str | None, deployed: bool, fresh: str, legacy: str) -> str:
    """The default bucket's name for a stack: the one its record keeps; for a stack deployed before the
    name was kept (a record without it), the `legacy` name it was created with; else, on a first `up`,
    the `fresh` one."""
    if recorded:
        return recorded
    return legacy if deployed else fresh


def with_bucket(plan: ModelCachePlan | None, bucket: str | None) -> ModelCachePlan | None:
    """`plan` with the stack's kept default bucket (`bucket`), where the stack owns its bucket."""
    return replace(plan, bucket=bucket) if plan and plan.owned and bucket else plan


def plan_model_cache(
    settings: Settings, stack: str, cluster_name: str, account_id: str | None
) -> ModelCachePlan | None:
    """Where the weights come from, with the default bucket a first `up` names (`with_bucket` sets the
    name a deployed stack keeps)."""
    model, cache = settings.model, settings.model_cache
    if model.source.startswith("s3://"):
        bucket, _, prefix = model.source.removeprefix("s3://").partition("/")
        return ModelCachePlan(bucket, prefix.strip("/"), owned=False, copy_from=None, revision=model.revision)
    if not cache.enabled:
        return None
    bucket = cache.bucket or default_bucket(
        stack, cluster_name, settings.serving.namespace, account_id or ACCOUNT_PLACEHOLDER, settings.region
    )
    return ModelCachePlan(
        bucket=bucket,
        prefix=f"{cache.prefix}/{model.source}/{model.revision}",
        owned=cache.bucket is None,
        copy_from=model.source,
        revision=model.revision,
    )
