"""Names a stack would create that another stack file of the project also computes.

Copying a stack file keeps its `cluster.name`: in the same region the copy's cluster collides with the
original's (EKS names are unique per region and account), and two stacks on one team's cluster in one
namespace would share every object there. The default names carry what makes a stack its own: the
cluster `<project>-<stack>`, the model cache bucket a hash of stack, cluster and namespace
(planning/model_cache.py), so they never meet. Warned at plan and preview, not refused: the other file
may be the same stack in another account. `modelCache.bucket` names a bucket the stack reads and writes
but never creates, so two stacks may share one: they are not compared.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from config import PROJECT, ConfigError, Settings, load_settings
from config.base import load_yaml
from planning.model_cache import ACCOUNT_PLACEHOLDER, plan_model_cache
from planning.plan import default_cluster_name


def cluster_scoped_name(settings: Settings, base: str) -> str:
    """The name of a cluster-scoped object the stack creates (its StorageClass, its GatewayClass):
    `base` on its own cluster; on a team's, the project and the serving namespace before it, so it
    never meets the team's `gp3` or `envoy`, nor another stack's (two stacks in one cluster serve from
    two namespaces)."""
    if not settings.cluster.existing_cluster_name:
        return base
    return f"{PROJECT}-{settings.serving.namespace}-{base}"


def stack_files_beside(project_dir: Path, stack: str) -> dict[str, dict[str, Any]]:
    """The `config:` of every other Pulumi.<stack>.yaml in the project directory (unreadable ones are
    left out: this is a warning, never a reason to fail)."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(project_dir.glob("Pulumi.*.yaml")):
        other = path.name.removeprefix("Pulumi.").removesuffix(".yaml")
        if other == stack:
            continue
        try:
            config = (load_yaml(path.read_text()) or {}).get("config")
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(config, dict):
            found[other] = config
    return found


@dataclass(frozen=True)
class StackNames:
    """What a stack file's stack names in its account: each must be its own."""

    cluster: tuple[str, str]
    """(region, cluster name) of the cluster it creates; its namespace on a team's cluster."""
    bucket: str | None
    """The model cache bucket it creates on a first `up` (None when it creates none)."""
    existing: bool


def stack_names(stack: str, settings: Settings, account_id: str = ACCOUNT_PLACEHOLDER) -> StackNames:
    """The names the stack file computes, as its first `up` in `account_id` would."""
    existing = settings.cluster.existing_cluster_name
    cluster = existing or settings.cluster.name or default_cluster_name(stack)
    where = f"{cluster}/{settings.serving.namespace}" if existing else cluster
    cache = plan_model_cache(settings, stack, cluster, account_id)
    bucket = cache.bucket if cache and cache.owned else None
    return StackNames((settings.region, where), bucket, bool(existing))


def name_clashes(stack: str, settings: Settings, others: Mapping[str, Settings]) -> list[str]:
    """One warning per name this stack computes that another stack file computes too."""
    mine = stack_names(stack, settings)
    warnings = []
    for other, other_settings in sorted(others.items()):
        theirs = stack_names(other, other_settings)
        if theirs.cluster == mine.cluster and theirs.existing == mine.existing:
            region, where = mine.cluster
            if mine.existing:
                warnings.append(
                    f"{PROJECT}:serving.namespace: {where} in {region} is also Pulumi.{other}.yaml's: two "
                    "stacks on one team's cluster would share every object of one namespace. Give this "
                    "stack a serving.namespace of its own"
                )
            else:
                warnings.append(
                    f"{PROJECT}:cluster.name {where} is also Pulumi.{other}.yaml's cluster in {region}: in "
                    "one account the two stacks would fight over one EKS cluster. Give this stack a name "
                    f"of its own, or remove cluster.name for {default_cluster_name(stack)}"
                )
        if mine.bucket and theirs.bucket == mine.bucket:
            warnings.append(
                f"the model cache bucket {mine.bucket} is also Pulumi.{other}.yaml's: bucket names are "
                "global, so the second stack to create it fails; set modelCache.bucket"
            )
    return warnings


def copied_names(stack: str, settings: Settings, others: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """`name_clashes` with the other stack files' `config:` (one the loader refuses is left out: its
    own run says why)."""
    loaded = {}
    for other, config in others.items():
        try:
            loaded[other] = load_settings(dict(config))
        except (ConfigError, ValueError, TypeError, KeyError):
            continue
    return name_clashes(stack, settings, loaded)
