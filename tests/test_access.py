"""Many people and a CI role share a stack: every listed admin, and a read-only viewer, gets an EKS
access entry whoever runs `pulumi up`; the cluster's creator, whom EKS made admin with an entry of its
own, gets none from us (a second one fails), at creation and on every later run by anyone else."""

from __future__ import annotations

from typing import Any

import pytest

from config import ConfigError, load_settings
from planning.access import ADMIN_POLICY, VIEWER_POLICY, partition_of, plan_access, principal_key
from tests.fakes.pulumi import AwsState, StackRun, deployed, run_stack, stack_file_config

P = "ray-llm-eks"
CLUSTER = "eks:index:Cluster"
DEPLOYER = "arn:aws:iam::123456789012:role/deployer"
"""The role behind the harness's caller, `assumed-role/deployer/ci-session`."""
TEAMMATE = "arn:aws:iam::123456789012:role/platform-alice"
TEAMMATE_SESSION = "arn:aws:sts::123456789012:assumed-role/platform-alice/alice"
CI = "arn:aws:iam::123456789012:role/github-preview"
CI_SESSION = "arn:aws:sts::123456789012:assumed-role/github-preview/run-42"


def principals(run: StackRun) -> dict[str, str]:
    """principal ARN -> the one access policy its entry carries."""
    entries = run.one(CLUSTER).inputs.get("accessEntries") or {}
    found = {}
    for entry in entries.values():
        (policy,) = entry["accessPolicies"].values()
        assert policy["accessScope"] == {"type": "cluster"}
        found[entry["principalArn"]] = policy["policyArn"].rsplit("/", 1)[-1]
    return found


ACCESS = {"cluster": {"adminPrincipalArns": [DEPLOYER, TEAMMATE], "viewerPrincipalArns": [CI]}}


def test_creator_listed_as_admin_gets_no_second_entry_at_creation():
    run = run_stack(overrides=ACCESS)
    assert principals(run) == {TEAMMATE: ADMIN_POLICY, CI: VIEWER_POLICY}


@pytest.mark.parametrize("caller", [TEAMMATE_SESSION, CI_SESSION], ids=["teammate", "ci-viewer"])
def test_anyone_listed_can_run_up_on_the_existing_stack_and_nothing_changes(caller: str):
    created = run_stack(overrides=ACCESS)
    state = deployed(created)
    later = run_stack(overrides=ACCESS, aws=AwsState(state.vpc_tags, state.clusters, caller_arn=caller))
    assert principals(later) == principals(created)
    assert later.one("aws:ec2/vpc:Vpc").inputs["tags"] == created.one("aws:ec2/vpc:Vpc").inputs["tags"]


def test_a_retry_by_someone_else_before_the_cluster_exists_makes_them_the_creator():
    """The VPC (and its record) may exist from a failed first `up`; the cluster does not yet."""
    first = run_stack(overrides=ACCESS)
    state = deployed(first)
    retry = run_stack(
        overrides=ACCESS, aws=AwsState(state.vpc_tags, clusters=[], caller_arn=TEAMMATE_SESSION)
    )
    assert principals(retry) == {DEPLOYER: ADMIN_POLICY, CI: VIEWER_POLICY}


def test_a_viewer_reads_no_secret_and_only_a_refresher_reads_them():
    """A preview reads no Secret (pulumi-kubernetes reads a Helm release only on refresh), so a
    pull request's role gets the view policy; the drift check's `--refresh` reads every object back."""
    drift = "arn:aws:iam::123456789012:role/ray-llm-eks-ci-drift-dev"
    run = run_stack(overrides={"cluster": {"viewerPrincipalArns": [CI], "refreshPrincipalArns": [drift]}})
    assert principals(run) == {CI: "AmazonEKSViewPolicy", drift: "AmazonEKSAdminViewPolicy"}
    assert all(not e.get("kubernetesGroups") for e in run.one(CLUSTER).inputs["accessEntries"].values())


def test_entries_are_keyed_by_principal_so_removing_one_touches_no_other():
    both = run_stack(overrides={"cluster": {"adminPrincipalArns": [TEAMMATE, CI]}})
    one = run_stack(overrides={"cluster": {"adminPrincipalArns": [CI]}})
    keys_both = {k: v["principalArn"] for k, v in both.one(CLUSTER).inputs["accessEntries"].items()}
    keys_one = {k: v["principalArn"] for k, v in one.one(CLUSTER).inputs["accessEntries"].items()}
    assert keys_one.items() <= keys_both.items()


def _settings(**cluster: Any):
    config = stack_file_config("dev")
    config[f"{P}:cluster"] = {**config[f"{P}:cluster"], **cluster}
    return load_settings(config)


def test_a_principal_in_both_lists_is_refused_naming_both_keys():
    with pytest.raises(
        ConfigError, match=r"viewerPrincipalArns: .* are also in ray-llm-eks:cluster\.adminPrincipalArns"
    ):
        plan_access(_settings(adminPrincipalArns=[CI], viewerPrincipalArns=[CI]), DEPLOYER)


@pytest.mark.parametrize(
    ("lists", "says"),
    [
        (
            {"viewerPrincipalArns": [CI], "refreshPrincipalArns": [CI]},
            r"refreshPrincipalArns: .*:cluster\.viewerPrincipalArns",
        ),
        (
            {"adminPrincipalArns": [CI], "refreshPrincipalArns": [CI]},
            r"refreshPrincipalArns: .*:cluster\.adminPrincipalArns",
        ),
    ],
)
def test_a_principal_in_two_of_the_three_lists_is_refused(lists: dict[str, list[str]], says: str):
    with pytest.raises(ConfigError, match=says):
        plan_access(_settings(**lists), DEPLOYER)


def test_a_role_is_the_same_with_or_without_its_path():
    assert principal_key("arn:aws:iam::123456789012:role/team/deployer") == principal_key(DEPLOYER)
    assert principal_key("arn:aws:iam::999999999999:role/deployer") != principal_key(DEPLOYER)
    assert principal_key("arn:aws:iam::123456789012:user/deployer") != principal_key(DEPLOYER)
    access = plan_access(
        _settings(adminPrincipalArns=["arn:aws:iam::123456789012:role/team/deployer"]), DEPLOYER
    )
    assert access.entries == () and access.notes


@pytest.mark.parametrize(
    ("region", "partition"),
    [
        ("sa-east-1", "aws"),
        ("cn-north-1", "aws-cn"),
        ("cn-northwest-1", "aws-cn"),
        ("us-gov-west-1", "aws-us-gov"),
    ],
)
def test_partition_of_region(region: str, partition: str):
    assert partition_of(region) == partition
