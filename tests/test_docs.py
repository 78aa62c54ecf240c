"""The README's configuration reference covers every key the config models accept, so a new key
cannot ship undocumented, and the versions it names are the pinned ones."""

from __future__ import annotations

from pydantic import BaseModel

from config import versions
from config.settings import Settings
from tests.harness import ROOT

README = (ROOT / "README.md").read_text()


def leaf_keys(model: type[BaseModel], prefix: str = "") -> list[str]:
    keys = []
    for name, field in model.model_fields.items():
        key = field.alias or name
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            keys += leaf_keys(field.annotation, f"{prefix}{key}.")
        else:
            keys.append(prefix + key)
    return keys


def test_every_config_key_is_in_the_readme():
    for name, field in Settings.model_fields.items():
        if name == "region":
            continue
        section = field.alias or name
        assert f"`ray-llm-eks:{section}`" in README, section
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel):
            part = README.split(f"#### `ray-llm-eks:{section}`", 1)[1].split("####", 1)[0]
            for key in leaf_keys(field.annotation):
                assert f"| `{key}` |" in part, f"{section}.{key} is not documented"


def test_readme_names_the_pinned_versions():
    for version in (
        versions.KUBERNETES_VERSION,
        versions.KUBERAY_CHART_VERSION,
        versions.NVIDIA_DEVICE_PLUGIN_CHART_VERSION,
        versions.EFA_DEVICE_PLUGIN_CHART_VERSION,
        versions.RAY_VERSION,
        versions.RAY_LLM_IMAGE_TAG,
    ):
        assert version in README, version


def test_readme_test_command_is_what_ci_runs():
    assert "bash .ci/run" in README
    assert "python -m pytest" in (ROOT / ".ci" / "run").read_text()
