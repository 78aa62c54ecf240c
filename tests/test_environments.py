"""Environments share an account: a new stack file with nothing but a region deploys beside dev in the
same account and region, sharing no physical name with it; an explicit name still wins."""

from __future__ import annotations

from tests.fakes.pulumi import StackRun, minimal_config, run_stack

MINIMAL = minimal_config("sa-east-1")


def physical_names(run: StackRun) -> set[str]:
    """Names AWS holds unique per account and region (`name` inputs of AWS and pulumi-eks resources),
    and the Name tags people find resources by in the console."""
    names = set()
    for reg in run.registrations:
        if reg.type.split(":")[0] in ("aws", "eks"):
            if isinstance(reg.inputs.get("name"), str):
                names.add(reg.inputs["name"])
            if isinstance(reg.inputs.get("tags"), dict) and "Name" in reg.inputs["tags"]:
                names.add(reg.inputs["tags"]["Name"])
    return names


def test_a_region_only_stack_file_shares_no_physical_name_with_dev(dev_stack: StackRun):
    staging = run_stack(config=MINIMAL, stack="staging")
    assert staging.exports["clusterName"] == "ray-llm-eks-staging"
    assert "/aws/eks/ray-llm-eks-staging/cluster" in physical_names(staging)
    assert physical_names(dev_stack) and not physical_names(staging) & physical_names(dev_stack)


def test_an_explicit_cluster_name_wins(dev_stack: StackRun):
    assert dev_stack.exports["clusterName"] == "ray-llm-multinode"
    run = run_stack(config=minimal_config("sa-east-1", cluster={"name": "team-a"}), stack="staging")
    assert run.exports["clusterName"] == "team-a"
    assert run.one("aws:cloudwatch/logGroup:LogGroup").inputs["name"] == "/aws/eks/team-a/cluster"


def test_stack_names_that_eks_would_refuse_are_made_valid():
    run = run_stack(config=MINIMAL, stack="feature_x.2")
    assert run.exports["clusterName"] == "ray-llm-eks-feature-x-2"
