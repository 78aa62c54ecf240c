"""What every stack file hands Helm: each release's chart, version and values, under the mocks."""

from __future__ import annotations

import functools
from typing import Any

from tests.chart_values import SUBCHARTS, chart_name, leaves
from tests.fakes.pulumi import EXISTING_CLUSTER_STACKS, STACKS, AwsState, run_stack

RELEASE = "kubernetes:helm.sh/v3:Release"


OWN_ADDONS = "+own-addons"
"""Suffix of an existing-cluster stack run against a team cluster that runs none of the add-ons (no Load
Balancer Controller, Prometheus or Cluster Autoscaler, none of their CRDs), so the stack installs each of
its own with the team-cluster values (the default mocked team runs those three)."""


@functools.cache
def releases() -> list[tuple[str, str, str, dict[str, Any]]]:
    """(stack, chart, version, values) of every Helm release of every stack file, and of each
    existing-cluster stack file where the stack installs every add-on of its own."""
    runs = [(stack, run_stack(stack=stack)) for stack in STACKS]
    for stack in EXISTING_CLUSTER_STACKS:
        runs.append(
            (stack + OWN_ADDONS, run_stack(stack=stack, aws=AwsState.for_stack(stack).without_team_addons()))
        )
    found = []
    for stack, run in runs:
        for release in run.of_type(RELEASE):
            chart = chart_name(release.inputs["chart"])
            found.append((stack, chart, release.inputs["version"], release.inputs.get("values") or {}))
    return sorted(found, key=lambda r: r[:3])


def pinned_versions() -> dict[str, str]:
    return {chart: version for _, chart, version, _ in releases()}


def values_by_chart(chart: str) -> list[tuple[str, ...]]:
    """Every key path any stack sets in `chart`; for a subchart, those under its key in the parent."""
    paths: set[tuple[str, ...]] = set()
    for _, name, _, values in releases():
        if name == chart:
            paths.update(path for path, _ in leaves(values))
        elif chart in SUBCHARTS.get(name, ()):
            paths.update(path[1:] for path, _ in leaves(values) if path[0] == chart and len(path) > 1)
    return sorted(paths)
