"""The docs stay true: the configuration reference is what the models generate, the versions the design
notes name are the pinned ones, every relative link and anchor resolves, and the README's test command
is what CI runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from config import versions
from config.reference import reference
from tests.fakes.pulumi import ROOT, StackRun

DOCS = sorted([ROOT / "README.md", *(ROOT / "docs").glob("*.md")])
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's heading slugs: lower case, punctuation dropped, spaces to hyphens."""
    headings = re.findall(r"^#+ (.+)$", page.read_text(), flags=re.MULTILINE)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def test_configuration_reference_is_generated_from_the_models():
    regenerate = ".venv/bin/python -m config.reference > docs/configuration.md"
    assert (ROOT / "docs" / "configuration.md").read_text() == reference(), f"out of date: run `{regenerate}`"


def test_design_notes_name_the_pinned_versions():
    design = (ROOT / "docs" / "design.md").read_text()
    for version in (
        versions.KUBERNETES_VERSION,
        versions.KUBERAY_CHART_VERSION,
        versions.NVIDIA_DEVICE_PLUGIN_CHART_VERSION,
        versions.EFA_DEVICE_PLUGIN_CHART_VERSION,
        versions.RAY_VERSION,
        versions.RAY_LLM_IMAGE_TAG,
    ):
        assert version in design, version


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_relative_links_and_anchors_resolve(page: Path):
    for target in LINK.findall(page.read_text()):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.is_file(), f"{page.name}: link to missing {target}"
        if anchor:
            assert anchor in anchors(linked), f"{page.name}: no heading for #{anchor} in {linked.name}"


def test_readme_is_an_entry_page_and_its_test_command_is_what_ci_runs():
    readme = (ROOT / "README.md").read_text()
    assert len(readme.splitlines()) <= 120, "the README is one or two screens; details go to docs/"
    assert "bash .ci/run" in readme
    assert "python -m pytest" in (ROOT / ".ci" / "run").read_text()


def commands(pattern: str) -> set[str]:
    """Every match of `pattern` (one group) in the README and docs/."""
    return {m for page in DOCS for m in re.findall(pattern, page.read_text())}


def test_every_stack_output_the_docs_name_exists(dev_stack: StackRun):
    named = commands(r"pulumi stack output (\w+)")
    assert named and named <= set(dev_stack.exports), named - set(dev_stack.exports)


def test_every_make_target_the_docs_name_exists():
    targets = set(re.findall(r"^([a-z-]+):", (ROOT / "Makefile").read_text(), flags=re.MULTILINE))
    named = commands(r"`make (\w+)")
    assert named and named <= targets, named - targets


def test_ops_runs_from_the_project_venv_with_real_commands():
    from ops.cli import build_parser

    typed = commands(r"([^\s`]*python) -m ops (\w+)")
    assert typed
    subcommands = set(build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    for python, command in typed:
        assert python == ".venv/bin/python", f"`{python} -m ops {command}`: use the project's .venv"
        assert command in subcommands, command


def test_state_backend_is_declared_where_every_pulumi_command_reads_it():
    project = yaml.safe_load((ROOT / "Pulumi.yaml").read_text())
    assert project["backend"] == {"url": "file://~"}  # the project file's schema allows only `url`
    assert "PULUMI_BACKEND_URL" not in (ROOT / "Makefile").read_text()
    assert "upsert: true" not in (ROOT / ".github" / "workflows" / "preview.yml").read_text()


def test_the_outputs_table_lists_every_output_the_stack_exports(dev_stack: StackRun):
    section = (ROOT / "docs" / "operations.md").read_text().split("## Outputs", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\| `(\w+)` \|", section, re.M))
    assert listed == set(dev_stack.exports), (
        set(dev_stack.exports) - listed,
        listed - set(dev_stack.exports),
    )


def test_the_kv_path_the_docs_state_is_the_one_the_stacks_render():
    """README's picture and design.md's KV path table say what planning/kv_path.py decides, for dev (g6
    and the hybrid default model) and for a P-series stack."""
    from planning import plan_stack
    from planning.kv_path import MECHANISM_NAMES
    from tests.fakes.pulumi import stack_settings

    dev = plan_stack(stack_settings("dev"), stack="dev")
    p5 = plan_stack(
        stack_settings("dev", gpuNodes={"instanceType": "p5.48xlarge"}, model={"tensorParallelSize": 8}),
        stack="dev",
    )
    (picture,) = [line for line in (ROOT / "README.md").read_text().splitlines() if "KV cache: NIXL" in line]
    assert f"NIXL {'+'.join(dev.kv_path.backends)} over EFA" in picture
    assert "emulated reads on g6" in picture and dev.kv_path.mechanism == "emulated"
    assert "GPUDirect RDMA on p5" in picture and p5.kv_path.mechanism == "gpudirect"
    design = (ROOT / "docs" / "design.md").read_text()
    (row,) = [line for line in design.splitlines() if line.startswith("| none (g5, g6, g6e) | hybrid")]
    assert f"LIBFABRIC, GPU | {MECHANISM_NAMES[dev.kv_path.mechanism]} |" in row
    assert dev.kv_floor.gbytes_s is not None and row.endswith(f"{dev.kv_floor.gbytes_s:.2f} |")
    assert dev.kv_crossing.summary().endswith(
        design.split("prompt's KV (32 KiB a token")[1].split("crosses in ")[1].split(",")[0]
    )


def test_the_alerts_table_lists_every_alert_the_stack_renders():
    from manifests.observability import alert_rules
    from tests.fakes.pulumi import stack_settings

    section = (
        (ROOT / "docs" / "operations.md").read_text().split("## Observability", 1)[1].split("\n## ", 1)[0]
    )
    table = section.split("| alert | fires when | severity |", 1)[1].split("\n\n", 1)[0]
    listed = dict(re.findall(r"^\| `(\w+)` \| .* \| (\w+) \|$", table, re.M))
    rendered = {
        r["alert"]: r["labels"]["severity"] for g in alert_rules(stack_settings("dev")) for r in g["rules"]
    }
    assert listed == rendered
