"""Shared fixtures, and a suite that reads nothing a preview or a person leaves in the work tree.

- Every `RAY_LLM_EKS_*` variable of the shell is dropped, and the price cache the program and `ops`
  keep (planning/cost.py, `.cache/prices.json` beside the project) points into a temporary directory:
  a preview's cached prices never reach a test. A test that wants a cache sets its own.
- The stack files are git's (tests/fakes/pulumi.py): one a person keeps beside them is not the suite's.
- The stack runs are kept in a temporary directory the xdist workers share (`RUN_CACHE_ENV`): each
  distinct run is made once per session, not once per worker.
Pulumi state is reset per run by ops/mocked_run.py.
"""

from __future__ import annotations

import gc
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from planning.cost import PRICE_CACHE_ENV
from tests import stack_checks
from tests.fakes.pulumi import RUN_CACHE_ENV, STACK_FILES, STACK_ROOT_ENV, StackRun, run_stack

# A stack run allocates a few hundred thousand short-lived objects and leaves the rest frozen
# (tests/fakes/pulumi.py): collecting the youngest generation every 700 allocations was a tenth of a run.
gc.set_threshold(100_000, 50, 100)

# The program's modules, and pytest's rewritten test modules, are compiled once and kept in the
# (git-ignored) __pycache__ folders, also where PYTHONDONTWRITEBYTECODE is set: compiling them again in
# every session and every xdist worker was a tenth of the suite's time. Each worker imports this file
# before it collects, so the setting reaches them all, and the stack checks' own pytest.
sys.dont_write_bytecode = False

SESSION_DIR: Path | None = None
if "PYTEST_XDIST_WORKER" not in os.environ:  # the controller (or a run without xdist): workers inherit
    for name in [n for n in os.environ if n.startswith("RAY_LLM_EKS_")]:
        del os.environ[name]
    SESSION_DIR = Path(tempfile.mkdtemp(prefix="ray-llm-eks-tests-"))
    (SESSION_DIR / "runs").mkdir()
    os.environ[PRICE_CACHE_ENV] = str(SESSION_DIR / "prices.json")
    os.environ[RUN_CACHE_ENV] = str(SESSION_DIR / "runs")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", f"{stack_checks.MARK}: checks every stack file in one test")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On another directory's stack files (tests/stack_checks.py), only the stack checks run."""
    if os.environ.get(STACK_ROOT_ENV):
        stack_checks.select(items, config, STACK_FILES)


def pytest_unconfigure(config: pytest.Config) -> None:
    if SESSION_DIR is not None:
        shutil.rmtree(SESSION_DIR, ignore_errors=True)


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


@pytest.fixture
def price_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Where the program and `ops` keep prices in this test (a preview's cache, as a test writes it)."""
    path = tmp_path / ".cache" / "prices.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv(PRICE_CACHE_ENV, str(path))
    return path
