"""An IAM role that EKS Pod Identity hands to one service account: the role, its policy (inline, or AWS
managed policies attached) and the association, the Pulumi plumbing every AWS-using workload of the stack
shares. No static keys: the Pod Identity agent gives the pods short-lived
credentials of the role.

What the workload does with AWS needs all of it at once, at both ends of its life: a pod started before
its policy exists is denied, and a controller whose policy goes first at `destroy` cannot delete what it
made (the load balancer controller's NLB and security groups then stay in the VPC). So the helper returns
one `PodIdentity` component, and whatever must wait for the workload's AWS access, or outlive it,
depends on it: on the role, every policy and attachment, and the association at once.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import pulumi
import pulumi_aws as aws

from manifests.pod_identity import trust_policy


@dataclass(frozen=True)
class PodRoles:
    """What every component whose pods get AWS roles takes: the cluster whose associations hand the
    roles out (its name output, so they wait for it), who may assume them (`trust`: account and cluster
    ARN, manifests/pod_identity.py), and the partition their policies' ARNs are in."""

    cluster_name: pulumi.Input[str]
    trust: tuple[str, str]
    partition: str


class PodIdentity(pulumi.ComponentResource):
    """The role with its inline `policy` and/or `managed_policy_arns`, and the association (none when
    `cluster_name` is None: an EKS add-on then associates the role itself). `trust`: (account, cluster
    ARN) the role may be assumed for (manifests/pod_identity.py). Depend on the component: that covers
    every part of it."""

    role: aws.iam.Role

    def __init__(
        self,
        name: str,
        *,
        cluster_name: pulumi.Input[str] | None,
        trust: tuple[str, str],
        namespace: str,
        service_account: str,
        description: str,
        policy: pulumi.Input[str] | None = None,
        managed_policy_arns: Sequence[str] = (),
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("ray-llm-eks:pod_identity:PodIdentity", name, None, opts)
        # Its parts were the workload's component's children before this component existed.
        before = [pulumi.Alias(parent=opts.parent)] if opts and opts.parent else []
        child = pulumi.ResourceOptions(parent=self, aliases=before)
        account_id, cluster = trust
        self.role = aws.iam.Role(
            name,
            assume_role_policy=trust_policy(
                account_id=account_id, cluster=cluster, namespace=namespace, service_account=service_account
            ),
            description=description,
            opts=child,
        )
        if policy is not None:
            aws.iam.RolePolicy(name, role=self.role.name, policy=policy, opts=child)
        for i, arn in enumerate(managed_policy_arns):
            attachment = name if len(managed_policy_arns) == 1 else f"{name}-{i}"
            aws.iam.RolePolicyAttachment(attachment, role=self.role.name, policy_arn=arn, opts=child)
        if cluster_name is not None:
            aws.eks.PodIdentityAssociation(
                name,
                cluster_name=cluster_name,
                namespace=namespace,
                service_account=service_account,
                role_arn=self.role.arn,
                opts=child,
            )
        self.register_outputs({"roleArn": self.role.arn})
