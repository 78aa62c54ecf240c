"""Apply NetworkPolicies generated in manifests/traffic.py (a helper, not a component of its own:
each component applies the policies of the namespace it owns, right after the namespace)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pulumi
import pulumi_kubernetes as k8s


def network_policies(
    name: str, policies: Sequence[dict[str, Any]], opts: pulumi.ResourceOptions
) -> list[k8s.networking.v1.NetworkPolicy]:
    return [
        k8s.networking.v1.NetworkPolicy(
            f"{name}-{policy['metadata']['name']}",
            metadata=policy["metadata"],
            spec=policy["spec"],
            opts=opts,
        )
        for policy in policies
    ]
