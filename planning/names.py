"""Names a stack would create that another stack file of the project already records.

Copying a stack file keeps its `cluster.name` and `modelCache.bucket`: in the same region the copy's
cluster collides with the original's (EKS names are unique per region and account), and bucket names
are global. Defaults carry the stack's own name (`<project>-<stack>`, and the bucket after the
cluster), so only names written out can collide. Warned at plan and preview, not refused: the other
file may be the same stack in another account.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from config import PROJECT, Settings
from config.base import load_yaml
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


def _section(config: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = config.get(f"{PROJECT}:{name}")
    return value if isinstance(value, Mapping) else {}


def copied_names(stack: str, settings: Settings, others: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """One warning per name this stack would create that another stack file also names."""
    warnings = []
    cluster = settings.cluster.name or default_cluster_name(stack)
    bucket = settings.model_cache.bucket
    for other, config in sorted(others.items()):
        other_cluster = _section(config, "cluster").get("name") or default_cluster_name(other)
        if other_cluster == cluster and config.get("aws:region") == settings.region:
            warnings.append(
                f"{PROJECT}:cluster.name {cluster} is also Pulumi.{other}.yaml's cluster in "
                f"{settings.region}: in one account the two stacks would fight over one EKS cluster (and "
                "its default model cache bucket). Give this stack a name of its own, or remove "
                f"cluster.name for {PROJECT}-{stack}"
            )
        if bucket and _section(config, "modelCache").get("bucket") == bucket:
            warnings.append(
                f"{PROJECT}:modelCache.bucket {bucket} is also Pulumi.{other}.yaml's: bucket names are "
                "global, so the second stack to create it fails; name another bucket or remove the key"
            )
    return warnings
