"""What every stack file hands Helm: each release's chart, version and values, under the mocks."""

from __future__ import annotations

import functools
from typing import Any

from tests.chart_values import SUBCHARTS, chart_name, leaves
from tests.fakes.pulumi import STACKS, run_stack

RELEASE = "kubernetes:helm.sh/v3:Release"


@functools.cache
def releases() -> list[tuple[str, str, str, dict[str, Any]]]:
    """(stack, chart, version, values) of every Helm release of every stack file."""
    found = []
    for stack in STACKS:
        for release in run_stack(stack=stack).of_type(RELEASE):
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
