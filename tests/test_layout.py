"""Each folder holds one kind of thing and imports only what the layout allows (docs/design.md, Layout):
config imports nothing of ours, planning only config, manifests config and planning, ops everything
but the Pulumi components; components hold only ComponentResources."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.fakes.pulumi import ROOT

ALLOWED = {
    "jobs": set(),  # programs that run inside the cluster (in their own images): nothing of ours
    "policy": set(),  # the policy pack runs from its own virtualenv: nothing of ours
    "config": {"config"},
    "planning": {"config", "planning"},
    "manifests": {"config", "planning", "manifests"},
    "ops": {"config", "planning", "manifests", "ops"},
    "components": {"config", "planning", "manifests", "components"},
}
OURS = set(ALLOWED) | {"jobs", "policy"}


def imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names & OURS


@pytest.mark.parametrize("folder", sorted(ALLOWED))
def test_folders_import_only_what_the_layout_allows(folder: str):
    for path in sorted((ROOT / folder).glob("*.py")):
        wrong = imported_packages(path) - ALLOWED[folder]
        assert not wrong, f"{path.relative_to(ROOT)} imports {sorted(wrong)}"


def test_components_hold_only_component_resources_with_keyword_only_arguments():
    for path in sorted((ROOT / "components").glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if not isinstance(node, ast.ClassDef):
                continue
            bases = {ast.unparse(b) for b in node.bases}
            assert bases == {"pulumi.ComponentResource"}, f"{path.name}: {node.name} is not a component"
            init = next(n for n in node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
            positional = [a.arg for a in init.args.args]
            assert positional == ["self", "name"], f"{node.name}: positional arguments {positional[2:]}"
