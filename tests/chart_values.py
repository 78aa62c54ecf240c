"""Every Helm values key the stack sets, checked against the chart's own values.yaml at the pinned version.

The charts' values.yaml files cannot be committed here (they come from the charts' repositories, and no
package registry this project installs from carries them). What is committed instead is an index per
chart version, `tests/schemas/charts/<chart>-<version>.yaml`: every key path the stack sets, as that
chart's values.yaml declares it (its kind and line), with the file's source. `record` writes the index
from the real file, mechanically; the tests then check what every stack file hands Helm against it:

    python -m tests.chart_values record kube-prometheus-stack /tmp/values.yaml \\
        --source "prometheus-community/helm-charts tag kube-prometheus-stack-88.5.3, charts/.../values.yaml"

(`helm show values <repo>/<chart> --version <v> > /tmp/values.yaml` gives the file.) A chart bump with no
index for the new version, a key the chart does not declare, or a key set where the chart has a plain
value, fails the suite.

The rule for what needs no entry of its own, decided from the chart's file, never by hand: below a
key whose default is an empty map or null (free-form: `nodeSelector: {}`, `podAnnotations: {}`,
`resources: {}`), below a list, anything goes; a key the chart documents as free-form while giving it
defaults (Grafana's `grafana.ini`, rendered section by section) is `free` in the index with the reason
read in the templates (`TEMPLATE_FACTS`).
A subchart's keys (kube-prometheus-stack's `grafana.*`) are checked against the subchart's own index.
"""

from __future__ import annotations

import argparse
import datetime
import functools
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from config.base import load_yaml

INDEX = Path(__file__).resolve().parent / "schemas" / "charts"

TEMPLATE_FACTS: dict[str, dict[str, tuple[str, str]]] = {
    "grafana": {
        "grafana.ini": ("free", "templates/_config.tpl ranges over every section of grafana.ini"),
        "fullnameOverride": ("value", "read by templates/_helpers.tpl (grafana.fullname), not declared"),
    },
    "cluster-autoscaler": {
        "extraArgs": ("free", "templates/deployment.yaml ranges over extraArgs, one --key=value each"),
    },
    "kube-prometheus-stack": {
        "prometheus.prometheusSpec.arbitraryFSAccessThroughSMs": (
            "free",
            "templates/prometheus/prometheus.yaml renders it whole (toYaml): the CRD's {deny: bool}",
        ),
    },
}
"""What a chart's templates do that its values.yaml does not say, as read in the templates at the
pinned version: a map with defaults rendered whole (free-form), or a key read but not declared. The
only hand-kept part of the check; `record` copies each fact and its reason into the index."""

SUBCHARTS: dict[str, tuple[str, ...]] = {
    "kube-prometheus-stack": ("grafana", "kube-state-metrics", "prometheus-node-exporter"),
}
"""Values under these keys go to the subchart of that name (the parent's Chart.yaml `dependencies`)."""


def chart_name(chart: str) -> str:
    """`oci://docker.io/envoyproxy/gateway-helm` -> `gateway-helm`."""
    return chart.rsplit("/", 1)[-1]


def leaves(values: Any, prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    """Each key path we set and its value; a list is a value (its items are not keys)."""
    if isinstance(values, dict) and values:
        for key, value in values.items():
            yield from leaves(value, (*prefix, str(key)))
    else:
        yield prefix, values


def kind_of(node: yaml.Node | None) -> str:
    if node is None or (isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"):
        return "free"
    if isinstance(node, yaml.MappingNode):
        return "map" if node.value else "free"
    if isinstance(node, yaml.SequenceNode):
        return "list"
    return "value"


def _child(node: yaml.Node | None, key: str) -> yaml.Node | bool | None:
    """The value node under `key`, or False when the mapping has no such key."""
    if not isinstance(node, yaml.MappingNode):
        return False
    for k, v in node.value:
        if k.value == key:
            return v
    return False


def resolve(root: yaml.Node, path: tuple[str, ...], chart: str) -> tuple[tuple[str, ...], str, int] | str:
    """Where the chart's values.yaml declares `path`: (the declared path, its kind, its line), the
    declared path being `path` itself or the free-form key or list above it; or what is wrong."""
    node: yaml.Node | None = root
    facts = TEMPLATE_FACTS.get(chart, {})
    for depth, key in enumerate(path):
        child = _child(node, key)
        here = path[: depth + 1]
        fact = facts.get(".".join(here))
        if child is False and fact is None:
            return f"{'.'.join(here)} is not a key of {chart}'s values.yaml"
        line = child.start_mark.line + 1 if isinstance(child, yaml.Node) else 0
        kind = fact[0] if fact else kind_of(child if isinstance(child, yaml.Node) else None)
        if kind in ("free", "list") or depth == len(path) - 1:
            return here, kind, line
        if kind == "value":
            below = path[depth + 1]
            return f"{'.'.join(here)} is a plain value in {chart}'s values.yaml, not a map with {below!r}"
        node = child if isinstance(child, yaml.Node) else None
    raise AssertionError("unreachable")


def record(
    chart: str, version: str, values_yaml: str, ours: list[tuple[str, ...]], source: str
) -> dict[str, Any]:
    """The index of `ours` in the chart's values.yaml; exits naming every key the file does not declare.
    A key under a subchart's name that the parent does not declare is left to the subchart's index."""
    root = yaml.compose(values_yaml)
    assert root is not None
    paths: dict[tuple[str, ...], dict[str, Any]] = {}
    problems = []
    for path in ours:
        found = resolve(root, path, chart)
        if isinstance(found, str):
            if path[0] not in SUBCHARTS.get(chart, ()):
                problems.append(found)
            continue
        declared, kind, line = found
        entry: dict[str, Any] = {"path": list(declared), "kind": kind, "line": line}
        fact = TEMPLATE_FACTS.get(chart, {}).get(".".join(declared))
        if fact:
            entry["why"] = fact[1]
        paths[declared] = entry
    if problems:
        raise SystemExit("\n".join(problems))
    return {
        "chart": chart,
        "version": version,
        "source": source,
        "checked": datetime.date.today().isoformat(),
        "paths": [paths[path] for path in sorted(paths)],
    }


@functools.cache
def index(chart: str, version: str) -> dict[str, Any] | None:
    """A chart version's index, its entries keyed by path (a tuple: keys may hold dots, `grafana.ini`)."""
    path = INDEX / f"{chart}-{version}.yaml"
    if not path.exists():
        return None
    known = load_yaml(path.read_text())
    return {**known, "paths": {tuple(entry["path"]): entry for entry in known["paths"]}}


def _missing(chart: str, version: str) -> str:
    return (
        f"{chart} {version}: no index tests/schemas/charts/{chart}-{version}.yaml; record the keys against "
        "that version's values.yaml (python -m tests.chart_values record, see its docstring)"
    )


def errors(chart: str, version: str, values: dict[str, Any]) -> list[str]:
    """What in `values` the chart at `version` (or the subchart a key goes to) does not declare."""
    chart = chart_name(chart)
    known = index(chart, version)
    if known is None:
        return [_missing(chart, version)]
    problems: list[str] = []
    for path, _ in leaves(values):
        found = _declared(known, path)
        if found is None and path[0] in SUBCHARTS.get(chart, ()):
            sub_version = (known.get("subcharts") or {}).get(path[0])
            sub = index(path[0], sub_version) if sub_version else None
            if sub is None:
                problems.append(_missing(path[0], sub_version or "(no version in the parent's index)"))
                continue
            found = _declared(sub, path[1:])
        if found is None:
            problems.append(
                f"{chart} {version}: values key {'.'.join(path)} is not in the chart's values.yaml "
                f"(tests/schemas/charts/{chart}-{version}.yaml)"
            )
        elif found[0]["kind"] == "value" and not found[1]:
            problems.append(
                f"{chart} {version}: values key {'.'.join(found[0]['path'])} is a plain value in the chart, "
                f"given a map ({'.'.join(path)})"
            )
    return problems


def _declared(known: dict[str, Any], path: tuple[str, ...]) -> tuple[dict[str, Any], bool] | None:
    """The index entry that covers `path` and whether it is `path`'s own: else a free-form key, a list
    or a plain value above it (a plain value with keys below it is the caller's error)."""
    for depth in range(1, len(path) + 1):
        entry = known["paths"].get(path[:depth])
        if entry is not None and (entry["kind"] != "map" or depth == len(path)):
            return entry, depth == len(path)
    return None


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True)
    rec = sub.add_parser("record", help="write a chart version's index from its real values.yaml")
    rec.add_argument("chart")
    rec.add_argument("values_yaml", type=Path)
    rec.add_argument("--source", required=True, help="where the file came from (repository, tag, path)")
    rec.add_argument("--version", help="default: the version the stack pins")
    rec.add_argument("--subchart", action="append", default=[], metavar="NAME=VERSION")
    args = parser.parse_args()

    from tests.helm_releases import pinned_versions, values_by_chart

    version = args.version or pinned_versions()[args.chart]
    ours = values_by_chart(args.chart)
    found = record(args.chart, version, args.values_yaml.read_text(), ours, args.source)
    if args.subchart:
        found["subcharts"] = dict(s.split("=", 1) for s in args.subchart)
    target = INDEX / f"{args.chart}-{version}.yaml"
    target.parent.mkdir(parents=True, exist_ok=True)
    header = (
        f"# The values keys ray-llm-eks sets in {args.chart} {version}, as the chart's values.yaml declares\n"
        "# them (kind, line). Written by `python -m tests.chart_values record`; do not edit by hand.\n"
    )
    target.write_text(header + yaml.safe_dump(found, sort_keys=False))
    print(f"wrote {target.relative_to(INDEX.parents[1])}: {len(found['paths'])} paths")


if __name__ == "__main__":
    main()
