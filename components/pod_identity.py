"""An IAM role that EKS Pod Identity hands to one service account: the role, its inline policy and the
association, the Pulumi plumbing every AWS-using workload of the stack shares (not a component of its
own). No static keys: the Pod Identity agent gives the pods short-lived credentials of the role."""

from __future__ import annotations

import json

import pulumi
import pulumi_aws as aws

POD_IDENTITY_TRUST = json.dumps(
    {
        "Version": "2012-10-17",
        "Statement": [
            {
                "Effect": "Allow",
                "Principal": {"Service": "pods.eks.amazonaws.com"},
                "Action": ["sts:AssumeRole", "sts:TagSession"],
            }
        ],
    }
)


def pod_identity_role(
    name: str,
    *,
    cluster_name: pulumi.Input[str],
    namespace: str,
    service_account: str,
    policy: pulumi.Input[str],
    description: str,
    opts: pulumi.ResourceOptions,
) -> aws.eks.PodIdentityAssociation:
    """The role (its only policy inline), and the association pods must wait for: a pod started before
    it gets no credentials from the agent."""
    role = aws.iam.Role(name, assume_role_policy=POD_IDENTITY_TRUST, description=description, opts=opts)
    aws.iam.RolePolicy(name, role=role.name, policy=policy, opts=opts)
    return aws.eks.PodIdentityAssociation(
        name,
        cluster_name=cluster_name,
        namespace=namespace,
        service_account=service_account,
        role_arn=role.arn,
        opts=opts,
    )
