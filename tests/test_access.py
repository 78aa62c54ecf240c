"""Many people and a CI role share a stack: every listed admin, and a read-only viewer, gets an EKS
access entry whoever runs `pulumi up`; the cluster's creator, whom EKS made admin with an entry of its
own, gets none from us (a second one fails), at creation and on every later run by anyone else."""

from __future__ import annotations

from typing import Any

import pytest

from config import ConfigError, load_settings
from planning.access import (
    ADMIN_POLICY,
    REFRESH_POLICY,
    VIEWER_POLICY,
    partition_of,
    plan_access,
    principal_key,
)
from planning.where import Where
from tests.fakes.pulumi import AwsState, StackRun, run_stack, stack_file_config, stack_settings, where_of

P = "ray-llm-eks"
CLUSTER = "eks:index:Cluster"
DEPLOYER = "arn:aws:iam::123456789012:role/deployer"
"""The role behind the harness's caller, `assumed-role/deployer/ci-session`."""
TEAMMATE = "arn:aws:iam::123456789012:role/platform-alice"
TEAMMATE_SESSION = "arn:aws:sts::123456789012:assumed-role/platform-alice/alice"
CI = "arn:aws:iam::123456789012:role/github-preview"
CI_SESSION = "arn:aws:sts::123456789012:assumed-role/github-preview/run-42"
DRIFT = "arn:aws:iam::123456789012:role/ray-llm-eks-ci-drift-dev"
STACK_ID = f"{P}/dev"


def principals(run: StackRun) -> dict[str, str]:
    """principal ARN -> the one access policy its entry carries."""
    entries = run.one(CLUSTER).inputs.get("accessEntries") or {}
    found = {}
    for entry in entries.values():
        (policy,) = entry["accessPolicies"].values()
        assert policy["accessScope"] == {"type": "cluster"}
        found[entry["principalArn"]] = policy["policyArn"].rsplit("/", 1)[-1]
    return found


def planned(aws: AwsState, **cluster: Any) -> Where:
    """Who gets an entry, and the record the stack keeps on its VPC, as the program's read step decides
    them for the dev stack file with `cluster` keys in `aws`'s account (world/reads.py `where_it_serves`,
    as __main__.read calls it), with no stack run. The caller's ARN reaches the program only there
    (__main__.read: everything else takes the caller's account), and `test_the_program_registers_what_
    was_planned` holds the run's entries and VPC tags to it."""
    settings = stack_settings("dev", cluster=cluster)
    return where_of(settings, aws.world(settings.region))


def planned_principals(where: Where) -> dict[str, str]:
    return {e.principal_arn: e.policy for e in where.access.entries}


def deployed_by(where: Where, caller: str, cluster: bool = True) -> AwsState:
    """The account after an `up` that planned `where`: the VPC with the record the program tags it with
    (its Network writes `where.record.tags`), the cluster if it was made; `caller` runs Pulumi next."""
    from planning import plan_stack

    clusters = [plan_stack(stack_settings("dev"), stack="dev").cluster_name] if cluster else []
    return AwsState(where.record.tags(STACK_ID), clusters, caller_arn=caller)


ACCESS = {
    "adminPrincipalArns": [DEPLOYER, TEAMMATE],
    "viewerPrincipalArns": [CI],
    "refreshPrincipalArns": [DRIFT],
}
"""All three lists at once: each list's principals get their own policy, the lists may not share a
principal (refused below), and the creator is skipped in whichever list; so one run holds all three."""


@pytest.fixture(scope="module")
def listed() -> StackRun:
    """The dev stack's first `up` by the deployer, with every list filled: the one run of this module."""
    return run_stack(overrides={"cluster": ACCESS})


def test_creator_listed_as_admin_gets_no_second_entry_at_creation(listed: StackRun):
    assert principals(listed) == {TEAMMATE: ADMIN_POLICY, CI: VIEWER_POLICY, DRIFT: REFRESH_POLICY}


def test_the_program_registers_what_was_planned(listed: StackRun):
    """The cluster's entries, keyed by AccessEntry.key, and the VPC's record, as where_it_serves planned
    them: what lets the questions below be asked of the plan."""
    where = planned(AwsState(), **ACCESS)
    entries = listed.one(CLUSTER).inputs["accessEntries"]
    assert {k: v["principalArn"] for k, v in entries.items()} == {
        e.key: e.principal_arn for e in where.access.entries
    }
    assert principals(listed) == planned_principals(where)
    assert listed.one("aws:ec2/vpc:Vpc").inputs["tags"].items() >= where.record.tags(STACK_ID).items()


@pytest.mark.parametrize("caller", [TEAMMATE_SESSION, CI_SESSION], ids=["teammate", "ci-viewer"])
def test_anyone_listed_can_run_up_on_the_existing_stack_and_nothing_changes(caller: str):
    created = planned(AwsState(), **ACCESS)
    later = planned(deployed_by(created, caller), **ACCESS)
    assert planned_principals(later) == planned_principals(created)
    assert later.record.tags(STACK_ID) == created.record.tags(STACK_ID)  # the VPC's tags


def test_a_retry_by_someone_else_before_the_cluster_exists_makes_them_the_creator():
    """The VPC (and its record) may exist from a failed first `up`; the cluster does not yet."""
    first = planned(AwsState(), **ACCESS)
    retry = planned(deployed_by(first, TEAMMATE_SESSION, cluster=False), **ACCESS)
    assert planned_principals(retry) == {DEPLOYER: ADMIN_POLICY, CI: VIEWER_POLICY, DRIFT: REFRESH_POLICY}


def test_a_viewer_reads_no_secret_and_only_a_refresher_reads_them(listed: StackRun):
    """A preview reads no Secret (pulumi-kubernetes reads a Helm release only on refresh), so a
    pull request's role gets the view policy; the drift check's `--refresh` reads every object back."""
    found = principals(listed)
    assert (found[CI], found[DRIFT]) == ("AmazonEKSViewPolicy", "AmazonEKSAdminViewPolicy")
    assert all(not e.get("kubernetesGroups") for e in listed.one(CLUSTER).inputs["accessEntries"].values())


def test_entries_are_keyed_by_principal_so_removing_one_touches_no_other():
    """Asked of plan_access; the run's map is keyed by AccessEntry.key (test_the_program_registers_...)."""
    both = plan_access(_settings(adminPrincipalArns=[TEAMMATE, CI]), DEPLOYER).entries
    one = plan_access(_settings(adminPrincipalArns=[CI]), DEPLOYER).entries
    keys_both = {e.key: e.principal_arn for e in both}
    keys_one = {e.key: e.principal_arn for e in one}
    assert keys_one and keys_one.items() <= keys_both.items()


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
