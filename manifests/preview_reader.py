"""What a viewer of a team's cluster needs beyond `AmazonEKSViewPolicy` for `pulumi preview`: the lists
world/kubernetes.py makes there (planning/access.py `PREVIEW_READS`), and nothing else. No Secret: a
preview reads none (docs/design.md, "Who reads what")."""

from __future__ import annotations

from typing import Any

from planning.access import PREVIEW_READS


def preview_reader_rbac(group: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A ClusterRole that lists and gets `PREVIEW_READS`, and its binding to `group`, both named as the
    group (which is the stack's own: planning/access.py `preview_reader_group`)."""
    name = group
    groups: dict[str, list[str]] = {}
    for api_group, resource in PREVIEW_READS:
        groups.setdefault(api_group, []).append(resource)
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name},
        "rules": [
            {"apiGroups": [api_group], "resources": sorted(resources), "verbs": ["get", "list"]}
            for api_group, resources in sorted(groups.items())
        ],
    }
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}],
    }
    return role, binding
