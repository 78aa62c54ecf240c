"""An EKS cluster a team already runs (`cluster.existingClusterName`), as the stack joins it: the
Kubernetes provider built from what preview read, the stack's node role and EBS key, its own system node
group, access entries for the principals the stack file lists, and the Pod Identity agent where the stack
may add it.

Nothing here creates, changes or adopts anything of the team's: the cluster, its VPC, subnets, security
groups, node groups and add-ons are read, never registered, so no `up` or `destroy` of the stack can
change or delete them (tests/test_existing_cluster.py proves it on the graph). What the stack adds is
its own and goes with it: the node groups, their role, template and security group, the access entries
it made (tagged as the stack's), and the Pod Identity agent add-on, created with `preserve` so its
removal leaves the agent running on the team's cluster.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

import pulumi
import pulumi_aws as aws
import pulumi_kubernetes as k8s

from components.cluster import NODE_POLICIES, VPC_CNI_POLICY, volume_key_policy
from components.managed_nodes import managed_node_group, node_group_taints
from config.cluster import ClusterConfig, SystemNodesConfig
from manifests.preview_reader import preview_reader_rbac
from planning.access import AccessEntry, partition_of
from planning.existing_cluster import POD_IDENTITY_AGENT, ExistingPlan
from planning.nodes import Placement
from planning.zones import TAG_STACK

SYSTEM_AMI = "AL2023_x86_64_STANDARD"


def kubeconfig(plan: ExistingPlan, get_token: Sequence[str]) -> str:
    """A kubeconfig of the cluster that authenticates with `aws eks get-token` (`get_token`: its
    arguments, which ask as the AWS provider does: world/identity.py), as pulumi-eks writes its own (no
    credentials in it)."""
    cluster = plan.cluster
    return json.dumps(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {
                    "name": cluster.name,
                    "cluster": {
                        "server": cluster.endpoint,
                        "certificate-authority-data": cluster.certificate_authority,
                    },
                }
            ],
            "contexts": [{"name": "aws", "context": {"cluster": cluster.name, "user": "aws"}}],
            "current-context": "aws",
            "users": [
                {
                    "name": "aws",
                    "user": {
                        "exec": {
                            "apiVersion": "client.authentication.k8s.io/v1beta1",
                            "command": "aws",
                            "args": list(get_token),
                        }
                    },
                }
            ],
        }
    )


class ExistingCluster(pulumi.ComponentResource):
    cluster_name: pulumi.Output[str]
    """The team's cluster's name."""
    kubeconfig: pulumi.Output[str]
    """Kubeconfig (JSON) that authenticates with `aws eks get-token`; a Pulumi secret."""
    provider: k8s.Provider
    """Kubernetes provider built from the kubeconfig; every Kubernetes object uses it."""
    node_role: aws.iam.Role
    """IAM role of the stack's nodes (system and GPU)."""
    kubernetes_version: str
    """The team's control plane's Kubernetes minor, as read."""
    node_dependencies: list[pulumi.Resource]
    """What the stack's node groups wait for: the node role's policies."""
    system_node_group: aws.eks.NodeGroup
    """The stack's CPU node group (`Placement.system_labels`, tainted): its controllers, the Ray head."""
    pod_identity_agent: aws.eks.Addon | None
    """The agent add-on where the stack added it; None where the cluster had it already."""
    volume_key_arn: pulumi.Output[str]
    """KMS key of the stack's EBS volumes (the given one, or the stack's own, retained)."""
    secrets_key_arn: None = None
    """Kubernetes secrets are the team's cluster's to encrypt."""
    plan: ExistingPlan
    """The cluster as read, and where the stack's node groups go."""

    def __init__(
        self,
        name: str,
        *,
        plan: ExistingPlan,
        config: ClusterConfig,
        access_entries: Sequence[AccessEntry],
        system_nodes: SystemNodesConfig,
        placement: Placement,
        cni_uses_node_role: bool,
        stack_id: str,
        region: str,
        account_id: str,
        get_token: Sequence[str],
        opts: pulumi.ResourceOptions | None = None,
    ):
        """`plan`: the cluster as read and where the stack's nodes go; `cni_uses_node_role`: the
        cluster's VPC CNI has no role of its own, so aws-node on the stack's nodes borrows theirs;
        `get_token`: the `aws eks get-token` arguments of its kubeconfig, as the provider's identity."""
        super().__init__("ray-llm-eks:existing_cluster:ExistingCluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        partition = partition_of(region)
        self.plan = plan
        cluster = plan.cluster
        self.kubernetes_version = cluster.version
        self.cluster_name = pulumi.Output.from_input(cluster.name)
        ours = {TAG_STACK: stack_id}

        self.volume_key_arn = (
            pulumi.Output.from_input(config.volume_kms_key_arn)
            if config.volume_kms_key_arn
            else aws.kms.Key(
                f"{name}-volumes",
                description=f"EBS volumes of the ray-llm-eks nodes in EKS cluster {cluster.name}",
                enable_key_rotation=True,
                deletion_window_in_days=7,
                policy=volume_key_policy(account_id, region, partition),
                opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(retain_on_delete=True)),
            ).arn
        )

        self._node_role(name, cluster.name, partition, cni_uses_node_role, child)

        self.system_node_group = managed_node_group(
            f"{name}-system",
            cluster_name=cluster.name,
            kubernetes_version=cluster.version,
            node_role_arn=self.node_role.arn,
            subnet_ids=[s.id for s in plan.system_subnets],
            instance_type=system_nodes.instance_type,
            sizes=(system_nodes.min_size, system_nodes.desired_size, system_nodes.max_size),
            labels=placement.system_labels,
            taints=node_group_taints(placement.system_taints),
            disk_size_gib=system_nodes.disk_size_gib,
            volume_key_arn=self.volume_key_arn,
            ami_type=SYSTEM_AMI,
            tags=ours,
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=self.node_dependencies)
            ),
        )

        self.pod_identity_agent = (
            aws.eks.Addon(
                f"{name}-pod-identity",
                cluster_name=cluster.name,
                addon_name=POD_IDENTITY_AGENT,
                addon_version=aws.eks.get_addon_version_output(
                    addon_name=POD_IDENTITY_AGENT, kubernetes_version=cluster.version, most_recent=True
                ).version,
                # Removing the stack must not take the agent from the team's other workloads.
                preserve=True,
                tags=ours,
                opts=pulumi.ResourceOptions.merge(
                    child, pulumi.ResourceOptions(depends_on=[self.system_node_group])
                ),
            )
            if plan.install_pod_identity_agent
            else None
        )

        self._access(name, cluster.name, access_entries, partition, ours, child)

        self.kubeconfig = pulumi.Output.secret(kubeconfig(plan, get_token))
        self.provider = k8s.Provider(f"{name}-k8s", kubeconfig=self.kubeconfig, opts=child)
        self._preview_readers(name, access_entries)
        self.register_outputs({"clusterName": self.cluster_name, "kubeconfig": self.kubeconfig})

    def _node_role(
        self,
        name: str,
        cluster_name: str,
        partition: str,
        cni_uses_node_role: bool,
        child: pulumi.ResourceOptions,
    ) -> None:
        """The stack's nodes' role and its policies (the VPC CNI's too, where aws-node borrows it)."""
        self.node_role = aws.iam.Role(
            f"{name}-node",
            assume_role_policy=json.dumps(
                {
                    "Version": "2012-10-17",
                    "Statement": [
                        {
                            "Effect": "Allow",
                            "Principal": {"Service": "ec2.amazonaws.com"},
                            "Action": "sts:AssumeRole",
                        }
                    ],
                }
            ),
            description=f"ray-llm-eks nodes in EKS cluster {cluster_name}",
            opts=child,
        )
        policies = [*NODE_POLICIES, *([VPC_CNI_POLICY] if cni_uses_node_role else [])]
        self.node_dependencies = [
            aws.iam.RolePolicyAttachment(
                f"{name}-node-{policy}",
                role=self.node_role.name,
                policy_arn=f"arn:{partition}:iam::aws:policy/{policy}",
                opts=child,
            )
            for policy in policies
        ]

    def _access(
        self,
        name: str,
        cluster_name: str,
        access_entries: Sequence[AccessEntry],
        partition: str,
        ours: dict[str, str],
        child: pulumi.ResourceOptions,
    ) -> None:
        """An access entry and its policy association for each principal the stack file lists."""
        for entry in access_entries:
            created = aws.eks.AccessEntry(
                f"{name}-access-{entry.key}",
                cluster_name=cluster_name,
                principal_arn=entry.principal_arn,
                kubernetes_groups=list(entry.kubernetes_groups) or None,
                tags=ours,
                opts=child,
            )
            aws.eks.AccessPolicyAssociation(
                f"{name}-access-{entry.key}",
                cluster_name=cluster_name,
                principal_arn=created.principal_arn,
                policy_arn=f"arn:{partition}:eks::aws:cluster-access-policy/{entry.policy}",
                access_scope=aws.eks.AccessPolicyAssociationAccessScopeArgs(type="cluster"),
                opts=child,
            )

    def _preview_readers(self, name: str, access_entries: Sequence[AccessEntry]) -> None:
        """The stack's own RBAC group for the viewers' previews, on the cluster."""
        # What the viewers' previews list here beyond AmazonEKSViewPolicy; the group is the stack's own.
        on_cluster = pulumi.ResourceOptions(parent=self, provider=self.provider)
        for group in sorted({g for entry in access_entries for g in entry.kubernetes_groups}):
            role, binding = preview_reader_rbac(group)
            k8s.rbac.v1.ClusterRole(
                f"{name}-{group}", metadata=role["metadata"], rules=role["rules"], opts=on_cluster
            )
            k8s.rbac.v1.ClusterRoleBinding(
                f"{name}-{group}",
                metadata=binding["metadata"],
                role_ref=binding["roleRef"],
                subjects=binding["subjects"],
                opts=on_cluster,
            )
