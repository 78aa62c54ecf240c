"""The resource graph of every stack file under the mocks, as canonical JSON, to prove a refactor changed
nothing: every resource's type, name, parent, provider, inputs, dependencies and options.

    .venv/bin/python -m tests.graph write /tmp/before.json    # on the commit before the refactor
    .venv/bin/python -m tests.graph check /tmp/before.json    # after it: exit 1 and the differences

Dependencies are compared as sets (independent resources register in any order); everything else as is.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import MISSING, asdict, fields
from pathlib import Path
from typing import Any

from tests.fakes.pulumi import STACKS, Registration, Secret, run_stack

DEFAULTS = {f.name: f.default for f in fields(Registration) if f.default is not MISSING}
"""What a field a graph written before it existed counts as (a file from an older commit)."""


def _plain(value: Any) -> Any:
    if isinstance(value, Secret):
        return {"secret": _plain(value.value)}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in sorted(value.items())}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def graph(stack: str) -> dict[str, Any]:
    run = run_stack(stack=stack)
    resources = {}
    for reg in run.registrations:
        entry = _plain(asdict(reg))
        entry["dependencies"] = sorted(set(entry["dependencies"]))
        entry["property_dependencies"] = {
            k: sorted(set(v)) for k, v in entry["property_dependencies"].items()
        }
        resources[reg.urn] = entry
    return {
        "resources": dict(sorted(resources.items())),
        "exports": _plain(run.exports),
        "warnings": sorted(run.warnings),
    }


def graphs() -> dict[str, Any]:
    return {stack: graph(stack) for stack in STACKS}


def differences(before: dict[str, Any], after: dict[str, Any]) -> list[str]:
    found = []
    for stack in sorted(set(before) | set(after)):
        old, new = before.get(stack), after.get(stack)
        if old is None or new is None:
            found.append(f"{stack}: stack file {'added' if old is None else 'removed'}")
            continue
        for urn in sorted(set(old["resources"]) | set(new["resources"])):
            a, b = old["resources"].get(urn), new["resources"].get(urn)
            if a is None or b is None:
                found.append(f"{stack}: {urn} {'added' if a is None else 'removed'}")
                continue
            a, b = {**DEFAULTS, **a}, {**DEFAULTS, **b}
            if a == b:
                continue
            changed = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
            found.append(f"{stack}: {urn} differs in {', '.join(changed)}")
        for part in ("exports", "warnings"):
            if old[part] != new[part]:
                found.append(f"{stack}: {part} differ")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=["write", "check"])
    parser.add_argument("path", type=Path)
    args = parser.parse_args()
    now = graphs()
    if args.command == "write":
        args.path.write_text(json.dumps(now, indent=1, sort_keys=True, default=str))
        count = sum(len(g["resources"]) for g in now.values())
        print(f"wrote {args.path}: {count} resources in {len(now)} stack files")
        return
    found = differences(json.loads(args.path.read_text()), json.loads(json.dumps(now, default=str)))
    for line in found:
        print(line)
    print("no change" if not found else f"{len(found)} differences")
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
