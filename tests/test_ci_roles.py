"""CI's AWS roles (issue 39): one per GitHub environment, trusted by that environment's OIDC subject
alone, its state access limited to its own stack. The policies ship in .github/iam/ for users to
create the roles from; these tests hold them to the workflows that assume them."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tests import aws_iam, iam_simulator
from tests.fakes.pulumi import ROOT
from tests.workflow_files import load

IAM = ROOT / ".github" / "iam"
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
OIDC = "token.actions.githubusercontent.com"


def environments() -> dict[str, str]:
    """Every GitHub environment a workflow job runs in (matrices expanded) -> the role secret it uses."""
    found: dict[str, str] = {}
    for path in WORKFLOWS:
        for job in load(path)["jobs"].values():
            if "environment" not in job:
                continue
            stacks = job.get("strategy", {}).get("matrix", {}).get("stack", [None])
            (secret,) = set(re.findall(r"secrets\.(AWS_\w+_ROLE_ARN)", str(job)))
            for stack in stacks:
                name = job["environment"].replace("${{ matrix.stack }}", stack or "")
                assert "${{" not in name, name
                found[name] = secret
    return found


def trust(environment: str) -> dict[str, Any]:
    return json.loads((IAM / "trust" / f"{environment}.json").read_text())


def test_every_environment_a_workflow_runs_in_has_a_trust_policy_and_no_other():
    shipped = {p.stem for p in (IAM / "trust").glob("*.json")}
    wanted = set(environments())
    assert not wanted - shipped, (
        f"no trust policy for {sorted(wanted - shipped)}: copy .github/iam/trust/dev.json (or "
        "drift-dev.json) as <environment>.json with that environment's name in its subject, and create "
        "the role from it (docs/operations.md, 'Delivery')"
    )
    assert not shipped - wanted, f"{sorted(shipped - wanted)}: no workflow runs in these environments"


@pytest.mark.parametrize("environment", sorted(environments()))
def test_each_role_trusts_its_own_environments_subject_exactly(environment: str):
    """A job with `environment:` gets `repo:<o>/<r>:environment:<name>`; `:pull_request` or a branch
    subject would never match, and a wildcard would let another environment's job in."""
    (statement,) = trust(environment)["Statement"]
    assert statement["Effect"] == "Allow" and statement["Action"] == "sts:AssumeRoleWithWebIdentity"
    assert statement["Principal"] == {"Federated": f"arn:aws:iam::ACCOUNT_ID:oidc-provider/{OIDC}"}
    assert statement["Condition"] == {
        "StringEquals": {
            f"{OIDC}:aud": "sts.amazonaws.com",
            f"{OIDC}:sub": f"repo:OWNER/REPO:environment:{environment}",
        }
    }


def test_the_pull_request_preview_runs_on_dev_only_with_its_own_role():
    preview = load(ROOT / ".github" / "workflows" / "preview.yml")
    assert set(preview["on"]) == {"pull_request"}
    assert preview["jobs"]["preview"]["strategy"]["matrix"]["stack"] == ["dev"]
    roles = environments()
    assert roles["preview-dev"] == "AWS_PREVIEW_ROLE_ARN"
    assert roles["drift-dev"] == roles["drift-prod"] == "AWS_DRIFT_ROLE_ARN"
    assert roles["dev"] == roles["prod"] == "AWS_DEPLOY_ROLE_ARN"


def test_no_role_of_a_pull_request_is_listed_in_another_stacks_file():
    """The pull request's role has no access entry on prod's cluster (in the stack files as written,
    examples in comments included)."""
    for path in sorted(ROOT.glob("Pulumi.*.yaml")):
        if path.name != "Pulumi.dev.yaml":
            assert "ray-llm-eks-ci-preview-dev" not in path.read_text(), path.name


# What each role may and may not do with the state, and what the read-only roles may not read, is
# decided by an IAM policy simulator in tests/test_ci_roles_simulated.py (issue 47): hand-written checks
# of the statements agreed with the bugs the simulator found.


def policies() -> list[Path]:
    """The policy documents shipped in .github/iam/ (roles.json and pulumi-diy-requests.json are data)."""
    return sorted(p for p in IAM.rglob("*.json") if "Statement" in json.loads(p.read_text()))


def test_the_docs_table_names_every_shipped_policy():
    operations = (ROOT / "docs" / "operations.md").read_text()
    for path in (IAM / "trust").glob("*.json"):
        environment = path.stem
        if environment.startswith("drift-"):
            assert "`trust/drift-<stack>.json`" in operations
        elif environment in ("dev", "prod"):
            assert "`trust/<stack>.json`" in operations
        else:
            assert "`trust/preview-<stack>.json`" in operations, environment
    for name in ("state-read.json", "state-write.json", "no-data-reads.json"):
        assert f"`{name}`" in operations


def test_policy_files_are_json_without_leftover_placeholders_of_other_names():
    for path in [*policies(), IAM / "roles.json"]:
        text = path.read_text()
        json.loads(text)
        assert set(re.findall(r"\b[A-Z][A-Z_]{3,}\b", text)) <= {
            "ACCOUNT_ID",
            "OWNER",
            "REPO",
            "STATE_BUCKET",
            "STACK",
        }, path


@pytest.mark.parametrize("path", policies(), ids=lambda p: str(p.relative_to(IAM)))
def test_every_action_resource_and_condition_key_is_in_awss_published_data(path: Path):
    document = json.loads(
        path.read_text().replace("ACCOUNT_ID", "123456789012").replace("STATE_BUCKET", "state-bucket")
    )
    assert aws_iam.document_errors(document) == []


def test_roles_json_the_simulator_evaluates_has_every_environment_a_workflow_runs_in():
    assert iam_simulator.environments() == sorted(environments())


def test_the_docs_table_and_roles_json_attach_the_same_policies():
    """roles.json is what the simulator evaluates; docs/operations.md is what a person creates the roles
    from: each row names the role's managed and inline policies."""
    operations = (ROOT / "docs" / "operations.md").read_text()
    roles = json.loads((IAM / "roles.json").read_text())["roles"]
    for template, role in roles.items():
        row = next((line for line in operations.splitlines() if line.startswith(f"| `{role['name']}`")), None)
        assert row is not None, f"docs/operations.md has no row for {role['name']}"
        for arn in role["managed"]:
            assert aws_iam.managed_policy_errors(arn) == []
            assert f"`{arn.rsplit('/', 1)[-1]}`" in row, (template, arn)
        for name in role["inline"]:
            assert f"`{name}`" in row, (template, name)
        assert f"`{role['trust']}`" in row, template
