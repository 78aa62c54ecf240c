"""Shared fixtures. Pulumi state is reset per run by tests.fakes.pulumi.run_stack."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.fakes.pulumi import StackRun, run_stack


@pytest.fixture(scope="session")
def dev_stack() -> StackRun:
    """The dev stack file, run once: most tests only read what it registered."""
    return run_stack()


@pytest.fixture
def kubeconfig(tmp_path: Path) -> Path:
    """A kubeconfig file for `--kubeconfig`; the fake Kubernetes API never reads it."""
    path = tmp_path / "kubeconfig.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "eks"}]}))
    return path
