"""Shared fixtures. Pulumi state is reset per run by tests.harness.run_stack."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.harness import StackRun, run_stack


@pytest.fixture(scope="session")
def dev_stack() -> StackRun:
    """The dev stack file, run once: most tests only read what it registered."""
    return run_stack()
