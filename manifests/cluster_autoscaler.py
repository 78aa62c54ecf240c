"""Cluster Autoscaler as data: its chart's values and its IAM policy.

It scales the GPU node group between `gpuNodes.minSize` and `maxSize`, on the system nodes, with its own
EKS Pod Identity role. On the stack's own cluster it discovers the groups by the tags EKS puts on every
managed node group's Auto Scaling group. On a team's cluster those tags are on the team's groups too, so
it discovers only the groups that also carry the stack's own tag (`stack_tag`, which the stack puts on
its GPU group's Auto Scaling group: EKS does not pass node group tags on), may resize and terminate
only in groups with that tag, and keeps its local-storage protection for the team's pods
(cluster-autoscaler ANDs the tags of `--node-group-auto-discovery=asg:tag=...`: aws_manager.go,
auto_scaling_groups.go at 1.35.0). Scale from zero: labels, taints and `nvidia.com/gpu` it learns from
`eks:DescribeNodegroup` and its instance table, `vpc.amazonaws.com/efa` only from the node group tag
`EFA_TEMPLATE_TAG`, which the GPU node group carries (read in cluster-autoscaler 1.35's AWS provider).
"""

from __future__ import annotations

from typing import Any

from config import Settings, versions
from manifests.charts import HelmChart
from planning.nodes import AUTOSCALER_STACK_TAG_PREFIX, EFA_RESOURCE, placement
from planning.system_pods import CLUSTER_AUTOSCALER

NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "cluster-autoscaler"
EFA_TEMPLATE_TAG = f"k8s.io/cluster-autoscaler/node-template/resources/{EFA_RESOURCE}"
OWNED = "owned"


def stack_tag(stack: str) -> str:
    """The Auto Scaling group tag that marks a GPU group as this stack's on a team's cluster."""
    return f"{AUTOSCALER_STACK_TAG_PREFIX}{stack}"


def discovery_tags(cluster_name: str, stack: str | None) -> list[str]:
    """What the Auto Scaling groups it manages carry: EKS's two tags, and on a team's cluster the stack's."""
    tags = ["k8s.io/cluster-autoscaler/enabled", f"k8s.io/cluster-autoscaler/{cluster_name}"]
    return [*tags, stack_tag(stack)] if stack else tags


def cluster_autoscaler_chart(settings: Settings, *, cluster_name: str, stack: str) -> HelmChart:
    """`stack`: the stack's name, which tags its GPU group on a team's cluster."""
    requests = CLUSTER_AUTOSCALER
    team = bool(settings.cluster.existing_cluster_name)
    extra_args = {
        # One GPU node group in one zone: nothing to balance; the least idle capacity wins.
        "expander": "least-waste",
        "balance-similar-node-groups": "false",
        "scale-down-unneeded-time": f"{settings.autoscaling.gpu_node_idle_minutes}m",
        "scale-down-delay-after-add": "10m",
    }
    if not team:
        # Pods with local storage (the workers' /dev/shm emptyDir) may go with their node. On a team's
        # cluster the default (true) stays: no pod with local data is evicted to shrink a group.
        extra_args["skip-nodes-with-local-storage"] = "false"
    return HelmChart(
        chart="cluster-autoscaler",
        version=versions.CLUSTER_AUTOSCALER_CHART_VERSION,
        repo=versions.CLUSTER_AUTOSCALER_CHART_REPO,
        namespace=NAMESPACE,
        values={
            "cloudProvider": "aws",
            "awsRegion": settings.region,
            # The chart's default tags are EKS's two; on a team's cluster the stack's is added (ANDed).
            "autoDiscovery": {"clusterName": cluster_name}
            | ({"tags": discovery_tags(cluster_name, stack)} if team else {}),
            "rbac": {"serviceAccount": {"create": True, "name": SERVICE_ACCOUNT}},
            **placement(settings).on_system_nodes(),
            "resources": {
                "requests": {"cpu": requests.cpu, "memory": requests.memory},
                "limits": {"memory": "600Mi"},
            },
            "extraArgs": extra_args,
        },
    )


def node_group_tags(efa_interfaces: int) -> dict[str, str]:
    """What Cluster Autoscaler cannot learn elsewhere about a GPU node it has not started yet."""
    return {EFA_TEMPLATE_TAG: str(efa_interfaces)}


def cluster_autoscaler_policy(partition: str, cluster_name: str, stack: str | None = None) -> dict[str, Any]:
    """Read the groups and instance types; change only the size of groups tagged for this cluster
    (the AWS provider's README, minimal policy), or with `stack` (a team's cluster) of groups that carry
    the stack's own tag."""
    tag = stack_tag(stack) if stack else f"k8s.io/cluster-autoscaler/{cluster_name}"
    return {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Action": [
                    "autoscaling:DescribeAutoScalingGroups",
                    "autoscaling:DescribeAutoScalingInstances",
                    "autoscaling:DescribeLaunchConfigurations",
                    "autoscaling:DescribeScalingActivities",
                    "autoscaling:DescribeTags",
                    "ec2:DescribeImages",
                    "ec2:DescribeInstanceTypes",
                    "ec2:DescribeLaunchTemplateVersions",
                    "ec2:GetInstanceTypesFromInstanceRequirements",
                    "eks:DescribeNodegroup",
                ],
                "Resource": "*",
            },
            {
                "Effect": "Allow",
                "Action": [
                    "autoscaling:SetDesiredCapacity",
                    "autoscaling:TerminateInstanceInAutoScalingGroup",
                ],
                "Resource": f"arn:{partition}:autoscaling:*:*:autoScalingGroup:*:autoScalingGroupName/*",
                "Condition": {"StringEquals": {f"aws:ResourceTag/{tag}": OWNED}},
            },
        ],
    }
