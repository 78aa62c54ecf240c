"""Cluster Autoscaler as data: its chart's values and its IAM policy.

It scales the GPU node group between `gpuNodes.minSize` and `maxSize` (auto-discovery by the tags EKS
puts on a managed node group's Auto Scaling group), on the system nodes, with its own EKS Pod Identity
role. Scale from zero: labels, taints and `nvidia.com/gpu` it learns from `eks:DescribeNodegroup` and its
instance table, `vpc.amazonaws.com/efa` only from the node group tag `EFA_TEMPLATE_TAG`, which the GPU
node group carries (read in cluster-autoscaler 1.35's AWS provider).
"""

from __future__ import annotations

from typing import Any

from config import Settings, versions
from manifests.charts import HelmChart
from planning.nodes import EFA_RESOURCE, SYSTEM_NODE_LABELS
from planning.system_pods import CLUSTER_AUTOSCALER

NAMESPACE = "kube-system"
SERVICE_ACCOUNT = "cluster-autoscaler"
EFA_TEMPLATE_TAG = f"k8s.io/cluster-autoscaler/node-template/resources/{EFA_RESOURCE}"


def cluster_autoscaler_chart(settings: Settings, *, cluster_name: str) -> HelmChart:
    requests = CLUSTER_AUTOSCALER
    return HelmChart(
        chart="cluster-autoscaler",
        version=versions.CLUSTER_AUTOSCALER_CHART_VERSION,
        repo=versions.CLUSTER_AUTOSCALER_CHART_REPO,
        namespace=NAMESPACE,
        values={
            "cloudProvider": "aws",
            "awsRegion": settings.region,
            "autoDiscovery": {"clusterName": cluster_name},
            "rbac": {"serviceAccount": {"create": True, "name": SERVICE_ACCOUNT}},
            "nodeSelector": dict(SYSTEM_NODE_LABELS),
            "resources": {
                "requests": {"cpu": requests.cpu, "memory": requests.memory},
                "limits": {"memory": "600Mi"},
            },
            "extraArgs": {
                # One GPU node group in one zone: nothing to balance; the least idle capacity wins.
                "expander": "least-waste",
                "balance-similar-node-groups": "false",
                "scale-down-unneeded-time": f"{settings.autoscaling.gpu_node_idle_minutes}m",
                "scale-down-delay-after-add": "10m",
                # Pods with local storage (the workers' /dev/shm emptyDir) may go with their node.
                "skip-nodes-with-local-storage": "false",
            },
        },
    )


def node_group_tags(efa_interfaces: int) -> dict[str, str]:
    """What Cluster Autoscaler cannot learn elsewhere about a GPU node it has not started yet."""
    return {EFA_TEMPLATE_TAG: str(efa_interfaces)}


def cluster_autoscaler_policy(partition: str, cluster_name: str) -> dict[str, Any]:
    """Read the groups and instance types; change only the size of groups tagged for this cluster
    (the AWS provider's README, minimal policy)."""
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
                "Condition": {
                    "StringEquals": {f"aws:ResourceTag/k8s.io/cluster-autoscaler/{cluster_name}": "owned"}
                },
            },
        ],
    }
