"""The CI roles through an IAM policy simulator (issue 47): trust, managed and inline policies together, as
AWS evaluates them, against the S3 requests Pulumi's DIY backend really makes (.github/iam/
pulumi-diy-requests.json, read in the CLI's source). tests/iam_simulator.py runs the simulator."""

from __future__ import annotations

import re

import pytest
import yaml

from tests import iam_simulator as sim
from tests.iam_simulator import BUCKET, OIDC, REGION, Request

ACCOUNT = sim.ACCOUNT
READ_ROLES = [e for e in sim.environments() if e.startswith(("preview-", "drift-"))]
DEPLOY_ROLES = [e for e in sim.environments() if e in sim.STACKS]


def _denied(decision: str) -> bool:
    return decision in ("ExplicitlyDenied", "ImplicitlyDenied")


def _refused(cases: list[tuple[str, Request]], want_allowed: bool) -> list[str]:
    decisions = sim.decide(cases)
    return [
        f"{environment}: {request} -> {decision}"
        for (environment, request), decision in zip(cases, decisions, strict=True)
        if (decision == "Allowed") != want_allowed
    ]


# --- the data: what Pulumi asks S3 for, at the CLI the workflows install ------------------------------


def test_the_requests_were_read_for_the_cli_the_workflows_install():
    """Moving the CLI pin means reading pkg/backend/diy again at the new tag and updating the data."""
    action = yaml.safe_load((sim.ROOT / ".github" / "actions" / "setup-stack" / "action.yml").read_text())
    pin = action["inputs"]["pulumi-version"]["default"]
    data = sim.pulumi_requests_data()
    assert data["cli_pin"] == pin, (
        f".github/actions/setup-stack installs Pulumi {pin}, but .github/iam/pulumi-diy-requests.json lists "
        f"the S3 requests of {data['cli_pin']}: read pkg/backend/diy (and gocloud.dev's s3blob at the "
        "version its go.mod pins) at the new tag, update the list and its file:line, then the policies until "
        "tests/test_ci_roles_simulated.py passes"
    )


def test_every_step_cites_a_line_of_the_backend_and_no_request_names_a_version():
    data = sim.pulumi_requests_data()
    for step in data["steps"].values():
        for call in step:
            assert re.fullmatch(r"pkg/backend/diy/\w+\.go:\d+", call["at"]), call
            assert call["call"] in data["gocloud"]["calls"], call
    for call in data["gocloud"]["calls"].values():
        assert call["version_id"] is False and re.match(r"blob/s3blob/s3blob\.go:\d+", call["at"]), call
    for command in data["commands"].values():
        assert set(command["steps"]) <= set(data["steps"]), command
    assert set(data["commands"]) == {"preview", "preview --refresh", "up", "refresh", "destroy"}
    every_key = {call["key"] for step in data["steps"].values() for call in step}
    for needed in ("meta.yaml", ".json.bak", ".pulumi-tags", "/history/", "/backups/", "/locks/"):
        assert any(needed in key for key in every_key), needed


# --- each role can do its job ------------------------------------------------------------------------


@pytest.mark.parametrize("environment", sim.environments())
def test_each_role_reads_its_own_stacks_tags_key(environment: str):
    """Since v3.211 every preview, up and refresh loads <stack>.pulumi-tags (stack_tags.go:55) and fails
    on any answer but NotFound: S3 answers NotFound only to a caller allowed GetObject on the key."""
    assert _refused(_tags_key(environment), want_allowed=True) == []


@pytest.mark.parametrize("environment", sim.environments())
def test_each_role_is_allowed_every_request_its_jobs_make_for_its_own_stack(environment: str):
    cases = _own_jobs(environment)
    assert len(cases) >= 5
    assert _refused(cases, want_allowed=True) == []


@pytest.mark.parametrize("environment", DEPLOY_ROLES)
def test_state_write_json_alone_grants_the_deploy_everything_it_asks_of_the_state(environment: str):
    """The deploy role's own permissions are the person's choice and may grant no S3: the shipped state
    policy must allow every request `up`, `refresh` and `destroy` make for the stack by itself."""
    assert _refused(_own_jobs_alone(environment), want_allowed=True) == []


def test_the_read_only_roles_write_nothing_not_even_a_lock():
    """A preview (with or without --refresh) never locks (backend.go:1197, apply.go:277): it needs no
    write."""
    assert _refused(_read_roles_writes(), want_allowed=False) == []


# --- no role reaches another stack's state -----------------------------------------------------------


@pytest.mark.parametrize("environment", sim.environments())
def test_no_role_reads_another_stacks_state_by_any_object_action(environment: str):
    """GetObject, GetObjectVersion (ListObjectVersions then ?versionId= on a versioned bucket),
    GetObjectAttributes, torrents, replication reads, and every other action AWS authorizes on an object."""
    content_reads = {
        "s3:GetObject",
        "s3:GetObjectVersion",
        "s3:GetObjectAttributes",
        "s3:GetObjectVersionAttributes",
        "s3:GetObjectTorrent",
        "s3:GetObjectVersionTorrent",
        "s3:GetObjectVersionForReplication",
    }
    assert content_reads <= set(sim.s3_object_actions())
    assert _refused(_other_objects(environment), want_allowed=False) == []


@pytest.mark.parametrize("environment", sim.environments())
def test_no_role_lists_the_state_buckets_versions(environment: str):
    """Pulumi never asks for a version (pulumi-diy-requests.json: no VersionId anywhere)."""
    assert _refused(_versions(environment), want_allowed=False) == []


@pytest.mark.parametrize("environment", DEPLOY_ROLES)
def test_the_deploy_role_cannot_write_or_delete_another_stacks_state(environment: str):
    """Issue 53, behaviour 4: with every AWS permission (AdministratorAccess), state-write.json's Deny
    still keeps PutObject and DeleteObject off the other stack's checkpoint, backups, history and lock."""
    others, own = _deploy_writes(environment)
    assert _refused(others, want_allowed=False) == []
    assert _refused(own, want_allowed=True) == []


# --- the pull request's role reads no data -----------------------------------------------------------

ELSEWHERE = f"{REGION}:{ACCOUNT}"
EKS = f"arn:aws:eks:{ELSEWHERE}"
KEY = f"arn:aws:kms:{ELSEWHERE}:key/0f0e0d0c-0b0a-4090-8070-605040302010"
DATA_READS = [
    Request("ssm:GetParameter", f"arn:aws:ssm:{ELSEWHERE}:parameter/app/db-password"),
    Request("ssm:GetParameters", f"arn:aws:ssm:{ELSEWHERE}:parameter/app/db-password"),
    Request("ssm:GetParametersByPath", f"arn:aws:ssm:{ELSEWHERE}:parameter/app"),
    Request("ssm:GetParameterHistory", f"arn:aws:ssm:{ELSEWHERE}:parameter/app/db-password"),
    Request("secretsmanager:GetSecretValue", f"arn:aws:secretsmanager:{ELSEWHERE}:secret:db-AbCdEf"),
    Request("secretsmanager:BatchGetSecretValue", "*"),
    Request("s3:GetObject", "arn:aws:s3:::team-data/customers.csv"),
    Request("s3:GetObjectVersion", "arn:aws:s3:::team-data/customers.csv"),
    Request("lambda:GetFunction", f"arn:aws:lambda:{ELSEWHERE}:function:billing"),
    Request("lambda:GetFunctionConfiguration", f"arn:aws:lambda:{ELSEWHERE}:function:billing"),
    Request("lambda:ListFunctions", "*"),
    Request("lambda:GetLayerVersion", f"arn:aws:lambda:{ELSEWHERE}:layer:deps:3"),
    Request("dynamodb:GetItem", f"arn:aws:dynamodb:{ELSEWHERE}:table/orders"),
    Request("dynamodb:Query", f"arn:aws:dynamodb:{ELSEWHERE}:table/orders"),
    Request("dynamodb:Scan", f"arn:aws:dynamodb:{ELSEWHERE}:table/orders"),
    Request("dynamodb:BatchGetItem", f"arn:aws:dynamodb:{ELSEWHERE}:table/orders"),
    Request("sqs:ReceiveMessage", f"arn:aws:sqs:{ELSEWHERE}:jobs"),
    Request("logs:GetLogEvents", f"arn:aws:logs:{ELSEWHERE}:log-group:app:log-stream:one"),
    Request("logs:FilterLogEvents", f"arn:aws:logs:{ELSEWHERE}:log-group:app"),
    Request("logs:StartQuery", f"arn:aws:logs:{ELSEWHERE}:log-group:app"),
    Request("logs:StartLiveTail", f"arn:aws:logs:{ELSEWHERE}:log-group:app"),
    Request("kms:Decrypt", KEY, key_policy="default"),
    Request("kms:Decrypt", KEY, (("kms:ResourceAliases", ("alias/team-data",)),), key_policy="default"),
    Request("ec2:GetPasswordData", f"arn:aws:ec2:{ELSEWHERE}:instance/i-0123456789abcdef0"),
]

PREVIEW_READS = [
    Request("sts:GetCallerIdentity", "*", why="the provider's credentials check; the EKS token"),
    Request("eks:DescribeCluster", f"arn:aws:eks:{ELSEWHERE}:cluster/ray-llm-multinode"),
    Request("eks:DescribeAddonVersions", "*", why="aws.eks.get_addon_version"),
    Request("ec2:DescribeInstanceTypes", "*", why="aws.ec2.get_instance_type"),
    Request("pricing:GetProducts", "*", why="aws.pricing.get_product"),
    Request("resource-groups:ListGroupResources", f"arn:aws:resource-groups:{ELSEWHERE}:group/gpu-capacity"),
    Request(
        "ssm:GetParameter",
        f"arn:aws:ssm:{REGION}::parameter/aws/service/eks/optimized-ami/1.35/amazon-linux-2023/x86_64/nvidia/"
        "recommended/image_id",
        why="AWS's public parameters (EKS AMIs) stay readable",
        unsafe=True,
    ),
    # what `preview --refresh` reads of each resource type the stack creates
    Request("ec2:DescribeVpcs", "*"),
    Request("ec2:DescribeSubnets", "*"),
    Request("ec2:DescribeRouteTables", "*"),
    Request("ec2:DescribeSecurityGroups", "*"),
    Request("ec2:DescribeNatGateways", "*"),
    Request("ec2:DescribeAddresses", "*"),
    Request("ec2:DescribeInternetGateways", "*"),
    Request("ec2:DescribeLaunchTemplateVersions", "*"),
    Request("ec2:DescribePlacementGroups", "*"),
    Request("ec2:DescribeVpcEndpoints", "*"),
    Request("ec2:DescribeFlowLogs", "*"),
    Request("iam:GetRole", f"arn:aws:iam::{ACCOUNT}:role/ray-llm-multinode-gpu"),
    Request("iam:ListRolePolicies", f"arn:aws:iam::{ACCOUNT}:role/ray-llm-multinode-gpu"),
    Request("iam:GetRolePolicy", f"arn:aws:iam::{ACCOUNT}:role/ray-llm-multinode-gpu"),
    Request("iam:ListAttachedRolePolicies", f"arn:aws:iam::{ACCOUNT}:role/ray-llm-multinode-gpu"),
    Request("eks:DescribeNodegroup", f"arn:aws:eks:{ELSEWHERE}:nodegroup/ray-llm-multinode/gpu/0a1b"),
    Request("eks:DescribeAddon", f"arn:aws:eks:{ELSEWHERE}:addon/ray-llm-multinode/vpc-cni/0a1b"),
    Request("eks:DescribeAccessEntry", f"{EKS}:access-entry/ray-llm-multinode/role/{ACCOUNT}/ci/0a1b"),
    Request("kms:DescribeKey", KEY, key_policy="default"),
    Request("kms:GetKeyPolicy", KEY, key_policy="default"),
    Request("kms:GetKeyRotationStatus", KEY, key_policy="default"),
    Request("logs:DescribeLogGroups", "*"),
    Request("s3:GetBucketPolicy", "arn:aws:s3:::ray-llm-multinode-logs"),
    Request("s3:GetEncryptionConfiguration", "arn:aws:s3:::ray-llm-multinode-logs"),
    Request("s3:GetBucketPublicAccessBlock", "arn:aws:s3:::ray-llm-multinode-logs"),
    Request("s3:GetBucketOwnershipControls", "arn:aws:s3:::ray-llm-multinode-logs"),
    Request("s3:GetBucketObjectLockConfiguration", "arn:aws:s3:::ray-llm-multinode-logs"),
    Request("s3:ListBucket", "arn:aws:s3:::ray-llm-multinode-logs", why="key names, never contents"),
    Request("autoscaling:DescribeTags", "*"),
]


@pytest.mark.parametrize("environment", READ_ROLES)
def test_the_read_only_roles_are_denied_data_plane_reads(environment: str):
    assert _refused(_data_reads(environment), want_allowed=False) == []


@pytest.mark.parametrize("environment", READ_ROLES)
def test_the_read_only_roles_decrypt_with_their_stacks_secrets_key_only(environment: str):
    """A KMS secrets provider (docs/operations.md, "State") keeps a preview working: the stack's own key,
    by its alias, whose key policy grants the role; no other key, the other stack's included."""
    own, others = _decrypts(environment)
    assert _refused(own, want_allowed=True) == []
    assert _refused(others, want_allowed=False) == []


@pytest.mark.parametrize("environment", READ_ROLES)
def test_the_read_only_roles_keep_every_read_a_preview_and_a_refresh_of_this_stack_make(environment: str):
    assert _refused(_preview_reads(environment), want_allowed=True) == []


# --- trust: each role's own GitHub environment, and nothing else --------------------------------------


def _assume(environment: str, subject: str, audience: str = "sts.amazonaws.com") -> tuple[str, Request]:
    context = ((f"{OIDC}:sub", subject), (f"{OIDC}:aud", audience))
    return environment, Request("sts:AssumeRoleWithWebIdentity", sim.role_arn(environment), context)


@pytest.mark.parametrize("environment", sim.environments())
def test_each_role_is_assumed_by_its_own_environments_token_only(environment: str):
    own, others = _trust(environment)
    assert _refused(own, want_allowed=True) == []
    assert _refused(others, want_allowed=False) == []


# --- the requests each test decides: all of them go to the simulator in one batch --------------------


def _tags_key(environment: str) -> list[tuple[str, Request]]:
    stack, _ = sim.role_of(environment)
    key = f".pulumi/stacks/ray-llm-eks/{stack}.pulumi-tags"
    return [(environment, Request("s3:GetObject", sim.object_arn(key)))]


def _own_jobs(environment: str) -> list[tuple[str, Request]]:
    return [(environment, request) for request in sim.job_requests(environment)]


def _own_jobs_alone(environment: str) -> list[tuple[str, Request]]:
    return [(environment + sim.ALONE, request) for request in sim.job_requests(environment)]


def _read_roles_writes() -> list[tuple[str, Request]]:
    cases = []
    for environment in READ_ROLES:
        stack, _ = sim.role_of(environment)
        for key in (
            f".pulumi/stacks/ray-llm-eks/{stack}.json",
            f".pulumi/locks/organization/ray-llm-eks/{stack}/{sim.LOCK_ID}.json",
            ".pulumi/meta.yaml",
        ):
            for action in ("s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion"):
                cases.append((environment, Request(action, sim.object_arn(key))))
    return cases


def _other_objects(environment: str) -> list[tuple[str, Request]]:
    """Every object action on three of the keys; reads and writes of contents on all of them."""
    stack, _ = sim.role_of(environment)
    keys = sim.other_stacks_keys(stack)
    every = [(key, action) for key in keys[:1] + keys[-3:-1] for action in sim.s3_object_actions()]
    contents = [(key, action) for key in keys for action in CONTENTS]
    pairs = dict.fromkeys(every + contents)
    return [(environment, Request(action, sim.object_arn(key))) for key, action in pairs]


CONTENTS = (
    "s3:GetObject",
    "s3:GetObjectVersion",
    "s3:GetObjectAttributes",
    "s3:PutObject",
    "s3:DeleteObject",
    "s3:DeleteObjectVersion",
)


def _versions(environment: str) -> list[tuple[str, Request]]:
    return [(environment, Request("s3:ListBucketVersions", f"arn:aws:s3:::{BUCKET}"))]


def _deploy_writes(environment: str) -> tuple[list[tuple[str, Request]], list[tuple[str, Request]]]:
    stack, _ = sim.role_of(environment)
    others = [
        (environment, Request(action, sim.object_arn(key)))
        for key in sim.other_stacks_keys(stack)
        for action in ("s3:PutObject", "s3:DeleteObject", "s3:DeleteObjectVersion", "s3:GetObject")
    ]
    own = sim.object_arn(f".pulumi/stacks/ray-llm-eks/{stack}.json")
    return others, [(environment, Request(a, own)) for a in ("s3:PutObject", "s3:DeleteObject")]


def _data_reads(environment: str) -> list[tuple[str, Request]]:
    return [(environment, request) for request in DATA_READS]


def _decrypts(environment: str) -> tuple[list[tuple[str, Request]], list[tuple[str, Request]]]:
    stack, _ = sim.role_of(environment)
    other = next(s for s in sim.STACKS if s != stack)

    def decrypt(*aliases: str) -> tuple[str, Request]:
        context = (("kms:ResourceAliases", aliases),)
        return environment, Request("kms:Decrypt", KEY, context, key_policy="grants the role")

    own = [
        decrypt(f"alias/ray-llm-eks-secrets-{stack}"),
        decrypt("alias/x", f"alias/ray-llm-eks-secrets-{stack}"),
    ]
    others = [decrypt(f"alias/ray-llm-eks-secrets-{other}"), decrypt("alias/ray-llm-eks-secrets"), decrypt()]
    return own, others


def _preview_reads(environment: str) -> list[tuple[str, Request]]:
    return [(environment, request) for request in PREVIEW_READS]


def _trust(environment: str) -> tuple[list[tuple[str, Request]], list[tuple[str, Request]]]:
    own = "repo:octo/ray-llm-eks:environment:"
    others = [_assume(environment, own + e) for e in sim.environments() if e != environment]
    others += [
        _assume(environment, "repo:octo/ray-llm-eks:pull_request"),
        _assume(environment, "repo:octo/ray-llm-eks:ref:refs/heads/main"),
        _assume(environment, f"repo:someone/fork:environment:{environment}"),
        _assume(environment, own + environment, audience="https://github.com/octo"),
    ]
    return [_assume(environment, own + environment)], others


@pytest.fixture(scope="module", autouse=True)
def _decide_every_request_at_once():
    """One Node.js process for the module's thousands of requests (a second each would add up)."""
    cases = _read_roles_writes()
    for environment in sim.environments():
        cases += _tags_key(environment) + _own_jobs(environment) + _other_objects(environment)
        own, others = _trust(environment)
        cases += _versions(environment) + own + others
        if environment in DEPLOY_ROLES:
            others, own = _deploy_writes(environment)
            cases += others + own + _own_jobs_alone(environment)
        else:
            own, others = _decrypts(environment)
            cases += _data_reads(environment) + _preview_reads(environment) + own + others
    sim.decide(cases)
