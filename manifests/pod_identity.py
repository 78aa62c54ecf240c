"""The trust policy of every EKS Pod Identity role, as data: only EKS's Pod Identity service, for this
account and this cluster, and only for the one namespace and service account the role is for.

EKS "Pod Identity" role trust (docs.aws.amazon.com/eks/latest/userguide/pod-id-role.html): the agent
assumes the role with `sts:AssumeRole` and `sts:TagSession`, the source account and the cluster's ARN
in `aws:SourceAccount` / `aws:SourceArn`, and session tags naming the cluster, namespace and service
account (`eks-cluster-name`, `kubernetes-namespace`, `kubernetes-service-account`). Without these
conditions any association in the account could hand the role to any pod.
"""

from __future__ import annotations

import json

POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"


def cluster_arn(partition: str, region: str, account_id: str, cluster_name: str) -> str:
    return f"arn:{partition}:eks:{region}:{account_id}:cluster/{cluster_name}"


def trust_policy(*, account_id: str, cluster: str, namespace: str, service_account: str) -> str:
    """`cluster`: the EKS cluster's ARN."""
    cluster_name = cluster.rsplit("/", 1)[-1]
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Effect": "Allow",
                    "Principal": {"Service": POD_IDENTITY_PRINCIPAL},
                    "Action": ["sts:AssumeRole", "sts:TagSession"],
                    "Condition": {
                        "StringEquals": {
                            "aws:SourceAccount": account_id,
                            "aws:RequestTag/eks-cluster-name": cluster_name,
                            "aws:RequestTag/kubernetes-namespace": namespace,
                            "aws:RequestTag/kubernetes-service-account": service_account,
                        },
                        "ArnEquals": {"aws:SourceArn": cluster},
                    },
                }
            ],
        }
    )
