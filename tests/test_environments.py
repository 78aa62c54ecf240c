"""Environments share an account: a new stack file with nothing but a region deploys beside dev in the
same account and region, sharing no physical name with it; an explicit name still wins.

Which name a stack's cluster gets is the plan's (`Plan.cluster_name`): the dev stack file (which names
its cluster) and a region-only stack file's runs hold the program to naming the cluster, its export and
its log group by it; other names are read from the plan, with no run each."""

from __future__ import annotations

from config import load_settings
from planning import plan_stack
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


def cluster_name(config: dict, stack: str) -> str:
    """The name the program gives the stack's cluster (its `clusterName` export and log group)."""
    return plan_stack(load_settings(config), stack=stack).cluster_name


def test_an_explicit_cluster_name_wins(dev_stack: StackRun):
    # dev's stack file names its cluster: the export and the log group follow the name, not the stack
    assert dev_stack.exports["clusterName"] == "ray-llm-multinode"
    logs = dev_stack.one("aws:cloudwatch/logGroup:LogGroup").inputs["name"]
    assert logs == "/aws/eks/ray-llm-multinode/cluster"
    assert cluster_name(minimal_config("sa-east-1", cluster={"name": "team-a"}), "staging") == "team-a"


def test_stack_names_that_eks_would_refuse_are_made_valid():
    assert cluster_name(MINIMAL, "feature_x.2") == "ray-llm-eks-feature-x-2"
