"""The EKS control plane, its CPU system node group, and the Kubernetes provider every Kubernetes
object of the stack goes through.

- Access: EKS access entries (authentication mode API). EKS makes whoever creates the cluster an
  admin; the listed admins and viewers get entries as planning/access.py decides.
- Add-ons: vpc-cni and kube-proxy are EKS managed add-ons that pulumi-eks creates with the cluster.
  Without a default node group pulumi-eks creates no coredns add-on (EKS bootstraps a self-managed
  coredns), so the managed coredns add-on is created here, after the system nodes exist: created
  before any node can schedule it, it stays DEGRADED until it times out (pulumi/pulumi-eks#1525).
- Security: Kubernetes secrets encrypted with KMS, control-plane logs on (in a log group the stack
  owns, with retention), IMDSv2 required on nodes,
  nodes only in private subnets, a node role with only the three policies a node needs.
"""

from __future__ import annotations

from collections.abc import Sequence

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks
import pulumi_kubernetes as k8s

from config.cluster import ClusterConfig, SystemNodesConfig
from planning.access import AccessEntry, partition_of
from planning.nodes import SYSTEM_NODE_LABELS

NODE_POLICIES = (
    "AmazonEKSWorkerNodePolicy",  # kubelet: describe the cluster and EC2
    "AmazonEKS_CNI_Policy",  # vpc-cni (aws-node) assigns pod IPs from the node's ENIs
    "AmazonEC2ContainerRegistryReadOnly",  # pull the Ray LLM DLC and add-on images from ECR
)


class Cluster(pulumi.ComponentResource):
    eks_cluster: eks.Cluster
    """The pulumi-eks cluster; node groups attach to it."""
    cluster_name: pulumi.Output[str]
    """EKS cluster name, available once the cluster exists."""
    kubeconfig: pulumi.Output[str]
    """Kubeconfig (JSON) that authenticates with `aws eks get-token`; a Pulumi secret."""
    node_role: aws.iam.Role
    """IAM role of every node (system and GPU)."""
    node_role_policies: list[aws.iam.RolePolicyAttachment]
    """The role's policy attachments; a node group must wait for them or its nodes cannot join."""
    system_node_group: eks.ManagedNodeGroup
    """The CPU node group labelled role=system."""
    provider: k8s.Provider
    """Kubernetes provider built from the kubeconfig; every Kubernetes object uses it."""
    oidc_provider_arn: pulumi.Output[str]
    """IAM OIDC provider of the cluster, for IAM roles for service accounts."""
    pod_identity_agent: aws.eks.Addon
    """EKS Pod Identity's agent; Pod Identity associations are used through it."""

    def __init__(
        self,
        name: str,
        *,
        config: ClusterConfig,
        cluster_name: str,
        access_entries: Sequence[AccessEntry],
        system_nodes: SystemNodesConfig,
        region: str,
        vpc_id: pulumi.Input[str],
        private_subnet_ids: pulumi.Input[list[str]],
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("ray-llm-eks:cluster:Cluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        partition = partition_of(region)

        key_arn: pulumi.Input[str]
        if config.secrets_kms_key_arn:
            key_arn = config.secrets_kms_key_arn
        else:
            key = aws.kms.Key(
                f"{name}-secrets",
                description=f"Envelope encryption of Kubernetes secrets in EKS cluster {cluster_name}",
                enable_key_rotation=True,
                deletion_window_in_days=7,
                opts=child,
            )
            key_arn = key.arn

        self.node_role = aws.iam.Role(
            f"{name}-node",
            assume_role_policy=aws.iam.get_policy_document_output(
                statements=[
                    aws.iam.GetPolicyDocumentStatementArgs(
                        actions=["sts:AssumeRole"],
                        principals=[
                            aws.iam.GetPolicyDocumentStatementPrincipalArgs(
                                type="Service", identifiers=["ec2.amazonaws.com"]
                            )
                        ],
                    )
                ]
            ).json,
            description=f"Nodes of EKS cluster {cluster_name}",
            opts=child,
        )
        self.node_role_policies = attachments = [
            aws.iam.RolePolicyAttachment(
                f"{name}-node-{policy}",
                role=self.node_role.name,
                policy_arn=f"arn:{partition}:iam::aws:policy/{policy}",
                opts=child,
            )
            for policy in NODE_POLICIES
        ]

        # EKS writes control-plane logs to this group and would create it without retention, and
        # outside Pulumi, so that it outlived `pulumi destroy`.
        log_groups = (
            [
                aws.cloudwatch.LogGroup(
                    f"{name}-logs",
                    name=f"/aws/eks/{cluster_name}/cluster",
                    retention_in_days=config.log_retention_days,
                    opts=child,
                )
            ]
            if config.log_types
            else []
        )

        self.eks_cluster = eks.Cluster(
            f"{name}-eks",
            name=cluster_name,
            version=config.kubernetes_version,
            vpc_id=vpc_id,
            # Control-plane ENIs and every node go to private subnets; load balancers find the
            # public subnets by their kubernetes.io/role/elb tag.
            private_subnet_ids=private_subnet_ids,
            skip_default_node_group=True,
            create_oidc_provider=True,
            authentication_mode=eks.AuthenticationMode.API,
            access_entries={
                entry.key: eks.AccessEntryArgs(
                    principal_arn=entry.principal_arn,
                    access_policies={
                        entry.policy: eks.AccessPolicyAssociationArgs(
                            policy_arn=f"arn:{partition}:eks::aws:cluster-access-policy/{entry.policy}",
                            access_scope=aws.eks.AccessPolicyAssociationAccessScopeArgs(type="cluster"),
                        )
                    },
                )
                for entry in access_entries
            }
            or None,
            endpoint_private_access=True,
            endpoint_public_access=config.endpoint_public_access,
            public_access_cidrs=[str(c) for c in config.public_access_cidrs]
            if config.endpoint_public_access
            else None,
            encryption_config_key_arn=key_arn,
            enabled_cluster_log_types=list(config.log_types),
            # Without a default node group pulumi-eks creates no coredns add-on anyway; say so, since
            # ours follows the system nodes (below).
            coredns_addon_options=eks.CoreDnsAddonOptionsArgs(enabled=False),
            tags={"Name": cluster_name},
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=log_groups)),
        )
        # Known before the cluster exists, but carrying the dependency on it: what is created with the
        # name (Pod Identity associations) must wait for the cluster.
        self.cluster_name = self.eks_cluster.urn.apply(lambda _: cluster_name)

        system = system_nodes
        self.system_node_group = eks.ManagedNodeGroup(
            f"{name}-system",
            cluster=self.eks_cluster,
            node_role=self.node_role,
            subnet_ids=private_subnet_ids,
            instance_types=[system.instance_type],
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                min_size=system.min_size, desired_size=system.desired_size, max_size=system.max_size
            ),
            labels=dict(SYSTEM_NODE_LABELS),
            disk_size=system.disk_size_gib,
            operating_system=eks.OperatingSystem.AL2023,
            enable_imd_sv2=True,
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=attachments)),
        )

        aws.eks.Addon(
            f"{name}-coredns",
            cluster_name=cluster_name,
            addon_name="coredns",
            # The newest coredns for this Kubernetes version, as pulumi-eks resolves its own add-ons:
            # bumping kubernetesVersion updates it after the control plane and the system nodes.
            addon_version=aws.eks.get_addon_version_output(
                addon_name="coredns", kubernetes_version=config.kubernetes_version, most_recent=True
            ).version,
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE",
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=[self.eks_cluster, self.system_node_group])
            ),
        )

        # EKS Pod Identity: the agent DaemonSet that hands pods their roles' credentials (it needs nodes).
        self.pod_identity_agent = aws.eks.Addon(
            f"{name}-pod-identity",
            cluster_name=cluster_name,
            addon_name="eks-pod-identity-agent",
            addon_version=aws.eks.get_addon_version_output(
                addon_name="eks-pod-identity-agent",
                kubernetes_version=config.kubernetes_version,
                most_recent=True,
            ).version,
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=[self.eks_cluster, self.system_node_group])
            ),
        )

        # pulumi-eks does not mark the kubeconfig secret (it holds no credentials, only an
        # `aws eks get-token` call); we do, so it never shows in logs or plain state.
        self.kubeconfig = pulumi.Output.secret(self.eks_cluster.kubeconfig_json)
        self.provider = k8s.Provider(f"{name}-k8s", kubeconfig=self.kubeconfig, opts=child)
        self.oidc_provider_arn = self.eks_cluster.oidc_provider_arn

        self.register_outputs(
            {
                "clusterName": self.cluster_name,
                "kubeconfig": self.kubeconfig,
                "oidcProviderArn": self.oidc_provider_arn,
            }
        )
