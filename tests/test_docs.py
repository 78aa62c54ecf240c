"""The docs stay true: the configuration reference is what the models generate, the versions the design
notes name are the pinned ones, every relative link and anchor resolves, and the README's test command
is what CI runs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from config import versions
from config.reference import reference
from tests.fakes.pulumi import ROOT

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
    assert len(readme.splitlines()) <= 100, "the README is one or two screens; details go to docs/"
    assert "bash .ci/run" in readme
    assert "python -m pytest" in (ROOT / ".ci" / "run").read_text()
