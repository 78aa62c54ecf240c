"""The delivery workflows (issue 17), read as data: what CI can be trusted with, whatever the linters'
versions know. actionlint and zizmor run on them in .ci/run as well."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fakes.pulumi import ROOT, STACKS
from tests.workflow_files import load

EXAMPLE = ".example"
"""A stack file named `Pulumi.<name>.example.yaml` is an example: tested under the mocks like every stack
file, deployed nowhere (docs/operations.md, 'Adding an environment')."""


def _tracked_stacks() -> list[str]:
    """The stack files in git CI deploys: every committed one but the examples. A stack file you have
    not committed (your own, or one you are trying) is left out here until you commit it; without git,
    every file counts."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--", "Pulumi.*.yaml"], cwd=ROOT, capture_output=True, text=True, check=True
        ).stdout.split()
    except (OSError, subprocess.CalledProcessError):
        return [stack for stack in STACKS if not stack.endswith(EXAMPLE)]
    tracked = {name.removeprefix("Pulumi.").removesuffix(".yaml") for name in listed}
    return [stack for stack in STACKS if stack in tracked and not stack.endswith(EXAMPLE)]


DELIVERED = _tracked_stacks()
ADD_A_DEPLOY_JOB = (
    "Pulumi.{stack}.yaml is committed, so CI must deploy it: copy the `dev` job in "
    ".github/workflows/deploy.yml as `{stack}` (environment, concurrency group, stack input) and add "
    "{stack} to the stack matrix in .github/workflows/drift.yml; docs/operations.md, 'Adding an environment'"
)

GITHUB = ROOT / ".github"
WORKFLOWS = sorted((GITHUB / "workflows").glob("*.yml"))
ACTIONS = sorted((GITHUB / "actions").glob("*/action.yml"))
PINNED = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40} # v\d+\.\d+\.\d+$")


def steps(document: dict[str, Any]) -> list[dict[str, Any]]:
    if "runs" in document:
        return document["runs"]["steps"]
    return [s for job in document["jobs"].values() for s in job.get("steps", [])]


def uses_lines(path: Path) -> list[str]:
    return [m.group(1).strip() for m in re.finditer(r"^\s*-?\s*uses:\s*(.+)$", path.read_text(), re.M)]


def workflow(name: str) -> dict[str, Any]:
    return load(GITHUB / "workflows" / f"{name}.yml")


def test_the_four_workflows_exist():
    assert [p.stem for p in WORKFLOWS] == ["deploy", "drift", "preview", "test"]


@pytest.mark.parametrize("path", WORKFLOWS + ACTIONS, ids=lambda p: str(p.relative_to(GITHUB)))
def test_every_third_party_action_is_pinned_to_a_commit_with_its_version(path: Path):
    for ref in uses_lines(path):
        if ref.startswith("./"):
            continue
        assert PINNED.match(ref), f"{path.name}: {ref!r} is not pinned to a full commit SHA with '# vX.Y.Z'"


@pytest.mark.parametrize("path", WORKFLOWS + ACTIONS, ids=lambda p: str(p.relative_to(GITHUB)))
def test_every_checkout_leaves_no_credentials_behind(path: Path):
    for step in steps(load(path)):
        if str(step.get("uses", "")).startswith("actions/checkout@"):
            assert step.get("with", {}).get("persist-credentials") is False, path.name


def test_one_version_of_each_action_everywhere():
    pins: dict[str, set[str]] = {}
    for path in WORKFLOWS + ACTIONS:
        for ref in uses_lines(path):
            if not ref.startswith("./"):
                pins.setdefault(ref.split("@")[0], set()).add(ref)
    assert all(len(refs) == 1 for refs in pins.values()), pins


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_no_token_permission_unless_a_job_asks_for_it(path: Path):
    document = load(path)
    assert document["permissions"] == {}, f"{path.name}: the workflow grants permissions to every job"
    for name, job in document["jobs"].items():
        assert "permissions" in job, f"{path.name}: job {name} does not say what it needs"
        assert "write-all" not in str(job["permissions"]), name
        granted = {k for k, v in job["permissions"].items() if v == "write"}
        assert granted <= {"id-token", "pull-requests"}, f"{path.name}: {name} writes {granted}"


def test_only_the_preview_comments_and_only_cloud_jobs_get_an_oidc_token():
    for path in WORKFLOWS:
        for name, job in load(path)["jobs"].items():
            writes = {k for k, v in job["permissions"].items() if v == "write"}
            assert ("pull-requests" in writes) == (path.stem == "preview"), (path.name, name)
            assert ("id-token" in writes) == (path.stem != "test"), (path.name, name)


class TestPreview:
    def test_dev_only_in_its_own_environment_with_the_policy_pack_and_no_upsert(self):
        """Pull-request code never runs with prod's passphrase: prod is previewed from main (deploy.yml)."""
        job = workflow("preview")["jobs"]["preview"]
        assert job["strategy"]["matrix"]["stack"] == ["dev"]
        assert job["environment"] == "preview-${{ matrix.stack }}"
        (pulumi,) = [s for s in job["steps"] if str(s.get("uses", "")).startswith("pulumi/actions@")]
        assert pulumi["with"]["command"] == "preview"
        assert pulumi["with"]["policyPacks"] == "policy"
        assert "upsert" not in pulumi["with"]

    def test_skips_forks_and_uses_the_read_only_role(self):
        job = workflow("preview")["jobs"]["preview"]
        assert "head.repo.full_name == github.repository" in job["if"]
        assert "AWS_PREVIEW_ROLE_ARN" in str(job["steps"]) and "AWS_DEPLOY_ROLE_ARN" not in str(job["steps"])


class TestDeploy:
    def test_on_merge_to_main_dev_then_prod(self):
        document = workflow("deploy")
        assert document["on"]["push"] == {"branches": ["main"]}
        jobs = document["jobs"]
        assert list(jobs) == ["dev", "preview-prod", "prod"]
        assert jobs["preview-prod"]["needs"] == "dev" and jobs["prod"]["needs"] == "preview-prod"
        # A manual dispatch from a branch deploys nothing: every job runs for main only.
        assert all(job["if"] == "github.ref == 'refs/heads/main'" for job in jobs.values())

    def test_prods_reviewers_see_its_preview_run_with_the_read_only_role(self):
        job = workflow("deploy")["jobs"]["preview-prod"]
        assert job["environment"] == "preview-prod"
        assert "AWS_PREVIEW_ROLE_ARN" in str(job["steps"]) and "AWS_DEPLOY_ROLE_ARN" not in str(job["steps"])
        assert "pulumi preview --stack prod" in str(job["steps"]) and "GITHUB_STEP_SUMMARY" in str(
            job["steps"]
        )

    def test_each_stacks_drift_check_in_an_environment_of_its_own(self):
        assert workflow("drift")["jobs"]["drift"]["environment"] == "drift-${{ matrix.stack }}"

    @pytest.mark.parametrize("stack", DELIVERED)
    def test_each_stack_in_its_environment_one_update_at_a_time(self, stack: str):
        jobs = workflow("deploy")["jobs"]
        assert stack in jobs, ADD_A_DEPLOY_JOB.format(stack=stack)
        job = jobs[stack]
        assert job["environment"] == stack  # prod's required reviewers are its environment's
        assert job["concurrency"] == {"group": f"pulumi-{stack}", "cancel-in-progress": False}
        assert "AWS_DEPLOY_ROLE_ARN" in str(job["steps"])
        deploy = [s for s in job["steps"] if s.get("uses") == "./.github/actions/deploy-stack"]
        assert deploy and deploy[0]["with"]["stack"] == stack

    def test_up_with_the_policy_pack_then_a_summary_then_verify(self):
        action = load(GITHUB / "actions" / "deploy-stack" / "action.yml")
        up, summary, verify = action["runs"]["steps"]
        assert "pulumi up" in up["run"] and "--policy-pack policy" in up["run"] and "--yes" in up["run"]
        assert "set -o pipefail" in up["run"]  # a failed up fails the step, not only tee
        assert summary["if"] == "always()" and "GITHUB_STEP_SUMMARY" in summary["run"]
        assert "ops summary" in summary["run"] and "--show-secrets" not in summary["run"]
        assert "ops verify" in verify["run"] and "if" not in verify  # runs only after a good up


class TestDrift:
    def test_scheduled_refresh_preview_expecting_no_changes_per_stack(self):
        document = workflow("drift")
        assert document["on"]["schedule"] and "workflow_dispatch" in document["on"]
        job = document["jobs"]["drift"]
        matrix = job["strategy"]["matrix"]["stack"]
        for stack in DELIVERED:
            assert stack in matrix, ADD_A_DEPLOY_JOB.format(stack=stack)
        assert set(matrix) <= set(STACKS), "drift.yml's matrix names a stack with no stack file"
        (check,) = [s for s in job["steps"] if "run" in s]
        for flag in ("pulumi preview", "--refresh", "--expect-no-changes", "--diff", "--policy-pack policy"):
            assert flag in check["run"], flag
        assert "GITHUB_STEP_SUMMARY" in check["run"] and 'exit "$status"' in check["run"]

    def test_runs_from_main_only(self):
        """A dispatch from another branch would run that branch's program with prod's secrets (issue 39)."""
        assert workflow("drift")["jobs"]["drift"]["if"] == "github.ref == 'refs/heads/main'"

    def test_never_cancels_a_waiting_deploy(self):
        job = workflow("drift")["jobs"]["drift"]
        assert not job["concurrency"]["group"].startswith("pulumi-")
        assert "AWS_DRIFT_ROLE_ARN" in str(job["steps"])


def test_the_setup_installs_the_cli_at_the_sdk_version_and_the_pack_its_own_venv():
    action = load(GITHUB / "actions" / "setup-stack" / "action.yml")
    sdk = re.search(r"^pulumi==(\S+)$", (ROOT / "requirements-dev.txt").read_text(), re.M)
    assert sdk and action["inputs"]["pulumi-version"]["default"] == sdk.group(1)
    venvs = next(s["run"] for s in action["runs"]["steps"] if "policy/venv" in s.get("run", ""))
    assert "--require-hashes -r policy/requirements.lock" in venvs
    policy_config = yaml.safe_load((ROOT / "policy" / "PulumiPolicy.yaml").read_text())
    assert policy_config["runtime"]["options"]["virtualenv"] == "venv"


def _locked(path: Path) -> dict[str, tuple[str, int]]:
    """package -> (version, number of hashes) of a pip-compile lock."""
    found, current = {}, None
    for line in path.read_text().splitlines():
        pin = re.match(r"^([A-Za-z0-9_.-]+)==(\S+)", line)
        if pin:
            current = pin[1].lower().replace("_", "-")
            found[current] = (pin[2], 0)
        elif current and "--hash=sha256:" in line:
            found[current] = (found[current][0], found[current][1] + 1)
    return found


def test_pip_itself_is_pinned():
    """Issue 39: no unpinned `pip install --upgrade pip` before the hash-checked install."""
    action = (GITHUB / "actions" / "setup-stack" / "action.yml").read_text()
    assert "--upgrade pip" not in action
    assert "pip" in _locked(ROOT / "requirements.lock")


def test_make_and_ci_install_the_deploys_lock():
    """Issue 39: `make up` runs the program from the same hash-locked set the deploy installs, and CI
    tests it (the tools go on top)."""
    makefile = (ROOT / "Makefile").read_text()
    recipe = makefile.split("$(VENV): ", 1)[1].split("\n\n", 1)[0]
    assert recipe.startswith("requirements.lock") and "--require-hashes -r requirements.lock" in recipe
    ci = (ROOT / ".ci" / "run").read_text()
    assert ci.index("--require-hashes -r requirements.lock") < ci.index("-r requirements-dev.txt")


def test_the_programs_lock_and_the_policy_packs_agree_on_protobuf():
    """The tests load the program and the policy pack in one venv; pulumi-policy pins protobuf ~=5.29,
    so a program lock at another protobuf could not be installed beside it."""
    assert (
        _locked(ROOT / "requirements.lock")["protobuf"]
        == _locked(ROOT / "policy" / "requirements.lock")["protobuf"]
    )


@pytest.mark.parametrize(
    ("lock", "wanted"),
    [("requirements.lock", "requirements.txt"), ("policy/requirements.lock", "policy/requirements.txt")],
)
def test_the_deploy_installs_hash_locked_pins_of_what_ci_tests(lock: str, wanted: str):
    from packaging.requirements import Requirement

    locked = _locked(ROOT / lock)
    assert locked and all(hashes > 0 for _, hashes in locked.values()), "a pin without its hash"
    assert (
        "extra-index-url" not in (ROOT / lock).read_text() and "find-links" not in (ROOT / lock).read_text()
    )
    tested = dict(
        re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", (ROOT / "requirements-dev.txt").read_text(), re.M)
    )
    for line in (ROOT / wanted).read_text().splitlines():
        line = line.split("#")[0].strip()
        if not line or line.startswith("-"):
            continue
        requirement = Requirement(line)
        name = requirement.name.lower().replace("_", "-")
        version, _ = locked[name]
        assert requirement.specifier.contains(version), (name, version, str(requirement.specifier))
        tested_version = next((v for n, v in tested.items() if n.lower().replace("_", "-") == name), None)
        if tested_version:
            assert version == tested_version, f"{lock} pins {name} {version}, CI tests {tested_version}"
    action = (GITHUB / "actions" / "setup-stack" / "action.yml").read_text()
    assert f"--require-hashes -r {lock}" in action
