"""A team's own stack files pass the suite's stack checks (tests/stack_checks.py): a copy of
Pulumi.byo.example.yaml under another stack name, region and cluster name, and docs/operations.md's
reserved-capacity example with another reservation ID. Each runs against the world `ops plan` mocks for
it (the cluster and the reservation it names), never the project's own mocked cluster and IDs.

The directory is a git checkout in which only the first is committed: a stack file made with `pulumi
stack init` and `pulumi config set` is checked before anyone commits it (the suite once listed git's
files and skipped it, green). `tests.stack_checks` names what it checked, and a directory with no
stack file, or none at all, is an error (exit 2), never a pass with nothing checked."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests import stack_checks
from tests.fakes.capacity import docs_reservation_example
from tests.fakes.pulumi import PROJECT, ROOT, YOUR_ADDRESS

TEAM = {"stack": "team-a", "region": "eu-west-1", "cluster": "analytics-eks"}
RESERVED = {"stack": "reserved-b", "region": "us-east-1", "id": "cr-0fedcba9876543210"}


def write(root: Path, stack: str, config: dict[str, Any]) -> None:
    (root / f"Pulumi.{stack}.yaml").write_text(yaml.safe_dump({"config": config}, sort_keys=False))


@pytest.fixture(scope="module")
def checked(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    root = tmp_path_factory.mktemp("team-root")
    byo = yaml.safe_load((ROOT / "Pulumi.byo.example.yaml").read_text())["config"]
    byo["aws:region"] = TEAM["region"]
    byo[f"{PROJECT}:cluster"]["existingClusterName"] = TEAM["cluster"]
    write(root, TEAM["stack"], byo)
    example = docs_reservation_example()
    gpu = dict(example[f"{PROJECT}:gpuNodes"])
    assert str(gpu["capacityReservation"]).startswith("cr-") and gpu["capacityReservation"] != RESERVED["id"]
    example[f"{PROJECT}:gpuNodes"] = {**gpu, "capacityReservation": RESERVED["id"]}
    write(
        root,
        RESERVED["stack"],
        {
            "aws:region": RESERVED["region"],
            f"{PROJECT}:cluster": {"publicAccessCidrs": [YOUR_ADDRESS]},
            **example,
        },
    )
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com"]
    subprocess.run([*git, "init", "-q"], cwd=root, check=True)
    subprocess.run([*git, "add", f"Pulumi.{TEAM['stack']}.yaml"], cwd=root, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "team-a"], cwd=root, check=True)
    untracked = subprocess.run(
        ["git", "ls-files", "--others"], cwd=root, capture_output=True, text=True, check=True
    ).stdout.split()
    assert untracked == [f"Pulumi.{RESERVED['stack']}.yaml"]  # made, never committed
    modules = stack_checks.modules_with_checks(request.session)
    done = stack_checks.run(root, "-rA", *modules)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-2000:]
    return done.stdout


@pytest.mark.parametrize("name", [TEAM["stack"], RESERVED["stack"]])
def test_a_teams_stack_file_passes_every_stack_check(checked: str, name: str):
    passed = {
        line.split("::", 1)[0]
        for line in checked.splitlines()
        if line.startswith("PASSED") and f"[{name}" in line
    }
    # The checks of several modules ran on it, the program's run first among them.
    assert (
        f"PASSED tests/test_stack.py::TestStacksAndDeterminism::test_every_stack_file_runs[{name}]" in checked
    )
    assert len(passed) >= 10, passed


def test_the_scan_reads_them_too(checked: str):
    assert (
        "PASSED tests/test_security_scan.py::test_every_stack_file_is_scanned_with_the_ray_pods_as_pods"
        in checked
    )


@pytest.mark.parametrize("where", ["missing", "empty", "inside-the-clone"])
def test_a_directory_without_stack_files_is_an_error_not_a_pass(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], where: str
):
    root = {"missing": tmp_path / "nowhere", "empty": tmp_path, "inside-the-clone": ROOT / "docs"}[where]
    assert stack_checks.main([str(root)]) == 2
    assert "nothing checked" in capsys.readouterr().err


def test_it_names_the_stack_files_it_checks_and_counts_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    for stack in ("b", "a"):
        write(tmp_path, stack, {"aws:region": "us-east-1"})
    ran: list[Path] = []

    def run(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
        ran.append(root)
        return subprocess.CompletedProcess([], 1, "1 failed\n", "")

    monkeypatch.setattr(stack_checks, "run", run)
    assert stack_checks.main([str(tmp_path)]) == 1
    assert ran == [tmp_path.resolve()]
    out = capsys.readouterr().out
    assert f"checking 2 stack file(s) in {tmp_path.resolve()}: a, b" in out
    assert "2 stack file(s) checked, failed (pytest exit 1): a, b" in out
