"""The EKS control plane, its CPU system node group, and the Kubernetes provider every Kubernetes
object of the stack goes through.

- Access: EKS access entries (authentication mode API). EKS makes whoever creates the cluster an
  admin; the listed admins and viewers get entries as planning/access.py decides.
- Add-ons: kube-proxy is the EKS managed add-on pulumi-eks creates with the cluster. The vpc-cni
  add-on is ours (below), not pulumi-eks's, so that it can have its own role. Without a default node
  group pulumi-eks creates no coredns add-on (EKS bootstraps a self-managed coredns), so the managed
  coredns add-on is created here, after the system nodes exist: created before any node can schedule
  it, it stays DEGRADED until it times out (pulumi/pulumi-eks#1525).
- The VPC CNI (aws-node) gets its EC2 permissions from its own role through IRSA, not from the node
  role, which pods could borrow: pulumi-eks hard-codes the IMDS hop limit at 2. IRSA, not Pod
  Identity: it is the way AWS documents for this add-on, and aws-node gets its credentials from STS
  itself, before any other DaemonSet (the Pod Identity agent) runs on a new node. IRSA's trust names
  the cluster's OIDC provider, which pulumi-eks creates inside its Cluster: its own vpc-cni add-on
  could not take that role without a cycle, so `use_default_vpc_cni` leaves the add-on to us. The
  add-on turns on network policy enforcement, which the stack's NetworkPolicies need.
- Security: Kubernetes secrets encrypted with KMS, control-plane logs on (in a log group the stack
  owns, with retention), IMDSv2 required on nodes, nodes only in private subnets, their root volumes
  encrypted with a KMS key, a node role with only what the kubelet and image pulls need, none of
  pulumi-eks's default security groups (managed node groups use the EKS cluster security group).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks
import pulumi_kubernetes as k8s

from components.managed_nodes import INSTANCE_METADATA, root_volume
from config.cluster import ClusterConfig, SystemNodesConfig
from planning.access import AccessEntry, partition_of
from planning.nodes import SYSTEM_NODE_LABELS

NODE_POLICIES = (
    "AmazonEKSWorkerNodePolicy",  # kubelet: describe the cluster and EC2
    "AmazonEC2ContainerRegistryReadOnly",  # pull the Ray LLM DLC and add-on images from ECR
)
"""No AmazonEKS_CNI_Policy: the VPC CNI has its own role (VPC_CNI_POLICY)."""

VPC_CNI_POLICY = "AmazonEKS_CNI_Policy"
"""What aws-node needs to attach ENIs and assign pod IPs (AWS's managed policy for the add-on)."""
VPC_CNI_SERVICE_ACCOUNT = ("kube-system", "aws-node")
VPC_CNI_CONFIGURATION = {"enableNetworkPolicy": "true"}
"""The add-on's network policy agent enforces NetworkPolicies (off by default; add-on >= v1.14)."""


def volume_key_policy(account_id: str, region: str, partition: str) -> str:
    """The EBS volume key's policy: the account administers it through IAM, and EC2 may use it for any
    principal of this account, as the AWS-managed `aws/ebs` key allows. That covers the Auto Scaling
    service-linked role that launches the nodes (it may not exist yet in a new account, so it cannot be
    named) and the EBS CSI driver creating Prometheus's volume."""
    return json.dumps(
        {
            "Version": "2012-10-17",
            "Statement": [
                {
                    "Sid": "AccountAdministers",
                    "Effect": "Allow",
                    "Principal": {"AWS": f"arn:{partition}:iam::{account_id}:root"},
                    "Action": "kms:*",
                    "Resource": "*",
                },
                {
                    "Sid": "EbsOfThisAccount",
                    "Effect": "Allow",
                    "Principal": {"AWS": "*"},
                    "Action": [
                        "kms:Encrypt",
                        "kms:Decrypt",
                        "kms:ReEncrypt*",
                        "kms:GenerateDataKey*",
                        "kms:CreateGrant",
                        "kms:DescribeKey",
                    ],
                    "Resource": "*",
                    "Condition": {
                        "StringEquals": {
                            "kms:CallerAccount": account_id,
                            "kms:ViaService": f"ec2.{region}.amazonaws.com",
                        }
                    },
                },
            ],
        }
    )


def encrypted_root_volume(
    key_arn: pulumi.Input[str],
) -> Callable[[pulumi.ResourceTransformArgs], pulumi.ResourceTransformResult | None]:
    """pulumi-eks builds a managed node group's launch template itself (IMDSv2, EFA) with only the root
    volume's size (nodes/nodegroup.ts: `ebs: {volumeSize}` on /dev/xvda); it takes no encryption
    option, and a launch template of our own is refused together with EFA. So this transform completes
    the root volume of the template it creates: gp3, encrypted with the stack's key; and sets its
    instance metadata hop limit to 1."""

    def transform(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
        if args.type_ != "aws:ec2/launchTemplate:LaunchTemplate":
            return None

        def complete(given: list[dict[str, Any]] | None) -> list[dict[str, Any]]:
            return [{**m, "ebs": {**m.get("ebs", {}), **root_volume(key_arn)}} for m in given or []]

        given = args.props.get("blockDeviceMappings")
        # A list as pulumi-eks builds it (the disk size is plain); an Output is completed when known.
        mappings = (
            complete(given) if isinstance(given, list) else pulumi.Output.from_input(given).apply(complete)
        )
        given_metadata = args.props.get("metadataOptions")
        metadata = {**(given_metadata if isinstance(given_metadata, dict) else {}), **INSTANCE_METADATA}
        return pulumi.ResourceTransformResult(
            props={**args.props, "blockDeviceMappings": mappings, "metadataOptions": metadata}, opts=args.opts
        )

    return transform


class Cluster(pulumi.ComponentResource):
    eks_cluster: eks.Cluster
    """The pulumi-eks cluster; node groups attach to it."""
    cluster_name: pulumi.Output[str]
    """EKS cluster name, available once the cluster exists."""
    kubeconfig: pulumi.Output[str]
    """Kubeconfig (JSON) that authenticates with `aws eks get-token`; a Pulumi secret."""
    node_role: aws.iam.Role
    """IAM role of every node (system and GPU)."""
    kubernetes_version: str
    """The control plane's Kubernetes minor (`cluster.kubernetesVersion`)."""
    system_node_group: eks.ManagedNodeGroup
    """The CPU node group labelled role=system."""
    provider: k8s.Provider
    """Kubernetes provider built from the kubeconfig; every Kubernetes object uses it."""
    oidc_provider_arn: pulumi.Output[str]
    """IAM OIDC provider of the cluster, for IAM roles for service accounts."""
    pod_identity_agent: aws.eks.Addon
    """EKS Pod Identity's agent; Pod Identity associations are used through it."""
    vpc_cni: aws.eks.Addon
    """The VPC CNI add-on (aws-node, with network policy enforcement)."""
    node_dependencies: list[pulumi.Resource]
    """What a node group must wait for, or its nodes cannot join or get pod networking: the node role's
    policies and the VPC CNI with its own role."""
    secrets_key_arn: pulumi.Output[str]
    """The KMS key that encrypts Kubernetes secrets (the stack's own, retained, or the given one)."""
    volume_key_arn: pulumi.Output[str]
    """KMS key of every EBS volume of the stack."""
    root_volume_transform: Callable[[pulumi.ResourceTransformArgs], pulumi.ResourceTransformResult | None]
    """Give a node group this transform: its nodes' root volumes are encrypted with the key."""

    def __init__(
        self,
        name: str,
        *,
        config: ClusterConfig,
        cluster_name: str,
        access_entries: Sequence[AccessEntry],
        system_nodes: SystemNodesConfig,
        region: str,
        account_id: str,
        vpc_id: pulumi.Input[str],
        private_subnet_ids: pulumi.Input[list[str]],
        opts: pulumi.ResourceOptions | None = None,
    ):
        super().__init__("ray-llm-eks:cluster:Cluster", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        partition = partition_of(region)

        self._keys(name, config, cluster_name, account_id, region, partition, child)
        attachments = self._node_role(name, cluster_name, partition, child)
        self._control_plane(
            name, config, cluster_name, access_entries, vpc_id, private_subnet_ids, partition, child
        )
        # Known before the cluster exists, but carrying the dependency on it: what is created with the
        # name (Pod Identity associations) must wait for the cluster.
        self.cluster_name = self.eks_cluster.urn.apply(lambda _: cluster_name)

        self.vpc_cni = self._vpc_cni(name, cluster_name, config.kubernetes_version, partition, child)
        self.node_dependencies = [*attachments, self.vpc_cni]

        self._system_nodes(name, system_nodes, cluster_name, private_subnet_ids, child)

        # pulumi-eks does not mark the kubeconfig secret (it holds no credentials, only an
        # `aws eks get-token` call); we do, so it never shows in logs or plain state.
        self.kubeconfig = pulumi.Output.secret(self.eks_cluster.kubeconfig_json)
        self.provider = k8s.Provider(f"{name}-k8s", kubeconfig=self.kubeconfig, opts=child)
        self.oidc_provider_arn = self.eks_cluster.oidc_provider_arn

        self.register_outputs(
            {
                "volumeKeyArn": self.volume_key_arn,
                "clusterName": self.cluster_name,
                "kubeconfig": self.kubeconfig,
                "oidcProviderArn": self.oidc_provider_arn,
            }
        )

    def _keys(
        self,
        name: str,
        config: ClusterConfig,
        cluster_name: str,
        account_id: str,
        region: str,
        partition: str,
        child: pulumi.ResourceOptions,
    ) -> None:
        """The secrets key and the volumes key (the stack's own, or the given ones)."""
        # The stack's keys are retained: neither a key setting's change nor `destroy` may schedule the
        # deletion of a key EKS, a node's volume or Prometheus's kept volume still uses (planning/keys.py).
        kept = pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(retain_on_delete=True))

        def key(
            suffix: str, given: str | None, description: str, policy: str | None = None
        ) -> pulumi.Output[str]:
            """The given key's ARN, or the stack's own key (rotated, retained)."""
            if given:
                return pulumi.Output.from_input(given)
            return aws.kms.Key(
                f"{name}-{suffix}",
                description=description,
                enable_key_rotation=True,
                deletion_window_in_days=7,
                policy=policy,
                opts=kept,
            ).arn

        self.secrets_key_arn = key(
            "secrets",
            config.secrets_kms_key_arn,
            f"Envelope encryption of Kubernetes secrets in EKS cluster {cluster_name}",
        )

        self.volume_key_arn = key(
            "volumes",
            config.volume_kms_key_arn,
            f"EBS volumes of EKS cluster {cluster_name} (node root volumes, Prometheus)",
            volume_key_policy(account_id, region, partition),
        )
        self.root_volume_transform = encrypted_root_volume(self.volume_key_arn)

    def _node_role(
        self, name: str, cluster_name: str, partition: str, child: pulumi.ResourceOptions
    ) -> list[aws.iam.RolePolicyAttachment]:
        """The nodes' role and its managed policies (the attachments a node group waits for)."""
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
        attachments = [
            aws.iam.RolePolicyAttachment(
                f"{name}-node-{policy}",
                role=self.node_role.name,
                policy_arn=f"arn:{partition}:iam::aws:policy/{policy}",
                opts=child,
            )
            for policy in NODE_POLICIES
        ]

        return attachments

    def _control_plane(
        self,
        name: str,
        config: ClusterConfig,
        cluster_name: str,
        access_entries: Sequence[AccessEntry],
        vpc_id: pulumi.Input[str],
        private_subnet_ids: pulumi.Input[list[str]],
        partition: str,
        child: pulumi.ResourceOptions,
    ) -> None:
        """The EKS cluster (pulumi-eks) and the log group its control plane writes to."""
        # EKS writes control-plane logs to this group and would create it without retention, and
        # outside Pulumi, so that it outlived `pulumi destroy`.
        log_groups = (
            [
                aws.cloudwatch.LogGroup(
                    f"{name}-logs",
                    name=f"/aws/eks/{cluster_name}/cluster",
                    retention_in_days=config.log_retention_days,
                    opts=pulumi.ResourceOptions.merge(
                        child, pulumi.ResourceOptions(retain_on_delete=config.keep_logs_on_destroy or None)
                    ),
                )
            ]
            if config.log_types
            else []
        )

        self.kubernetes_version = config.kubernetes_version
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
            public_access_cidrs=[str(c) for c in config.public_access_cidrs or []] or None,
            encryption_config_key_arn=self.secrets_key_arn,
            enabled_cluster_log_types=list(config.log_types),
            # Without a default node group pulumi-eks creates no coredns add-on anyway; say so, since
            # ours follows the system nodes (below).
            coredns_addon_options=eks.CoreDnsAddonOptionsArgs(enabled=False),
            # Ours, with its own role (below).
            use_default_vpc_cni=True,
            # Managed node groups use the EKS cluster security group: pulumi-eks's node security group
            # and cluster security group would only be created, never used.
            skip_default_security_groups=True,
            # On the cluster only: `tags` would rename every child pulumi-eks tags (roles, add-ons).
            cluster_tags={"Name": cluster_name},
            opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=log_groups)),
        )

    def _system_nodes(
        self,
        name: str,
        system: SystemNodesConfig,
        cluster_name: str,
        private_subnet_ids: pulumi.Input[list[str]],
        child: pulumi.ResourceOptions,
    ) -> None:
        """The system node group, and the add-ons that run on it: coredns and the Pod Identity agent."""
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
            opts=pulumi.ResourceOptions.merge(
                child,
                pulumi.ResourceOptions(
                    depends_on=self.node_dependencies, transforms=[self.root_volume_transform]
                ),
            ),
        )

        aws.eks.Addon(
            f"{name}-coredns",
            cluster_name=cluster_name,
            addon_name="coredns",
            # The newest coredns for this Kubernetes version, as pulumi-eks resolves its own add-ons:
            # bumping kubernetesVersion updates it after the control plane and the system nodes.
            addon_version=aws.eks.get_addon_version_output(
                addon_name="coredns", kubernetes_version=self.kubernetes_version, most_recent=True
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
                kubernetes_version=self.kubernetes_version,
                most_recent=True,
            ).version,
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=[self.eks_cluster, self.system_node_group])
            ),
        )

    def _vpc_cni(
        self,
        name: str,
        cluster_name: str,
        kubernetes_version: str,
        partition: str,
        child: pulumi.ResourceOptions,
    ) -> aws.eks.Addon:
        """The VPC CNI add-on and its IRSA role, before any node group: nodes get pod networking from
        aws-node, which must have its permissions from the first node on."""
        namespace, account = VPC_CNI_SERVICE_ACCOUNT
        issuer = self.eks_cluster.oidc_issuer
        role = aws.iam.Role(
            f"{name}-vpc-cni",
            assume_role_policy=pulumi.Output.all(self.eks_cluster.oidc_provider_arn, issuer).apply(
                lambda args: json.dumps(
                    {
                        "Version": "2012-10-17",
                        "Statement": [
                            {
                                "Effect": "Allow",
                                "Principal": {"Federated": args[0]},
                                "Action": "sts:AssumeRoleWithWebIdentity",
                                "Condition": {
                                    "StringEquals": {
                                        f"{args[1]}:sub": f"system:serviceaccount:{namespace}:{account}",
                                        f"{args[1]}:aud": "sts.amazonaws.com",
                                    }
                                },
                            }
                        ],
                    }
                )
            ),
            description=f"VPC CNI ({namespace}/{account}) of EKS cluster {cluster_name}",
            opts=child,
        )
        attachment = aws.iam.RolePolicyAttachment(
            f"{name}-vpc-cni",
            role=role.name,
            policy_arn=f"arn:{partition}:iam::aws:policy/{VPC_CNI_POLICY}",
            opts=child,
        )
        return aws.eks.Addon(
            f"{name}-vpc-cni",
            cluster_name=self.cluster_name,
            addon_name="vpc-cni",
            addon_version=aws.eks.get_addon_version_output(
                addon_name="vpc-cni", kubernetes_version=kubernetes_version, most_recent=True
            ).version,
            service_account_role_arn=role.arn,
            configuration_values=json.dumps(VPC_CNI_CONFIGURATION),
            # EKS bootstraps a self-managed aws-node with every cluster; the add-on takes it over.
            resolve_conflicts_on_create="OVERWRITE",
            resolve_conflicts_on_update="OVERWRITE",
            # Deleting the add-on must never take pod networking from running nodes.
            preserve=True,
            opts=pulumi.ResourceOptions.merge(
                child,
                pulumi.ResourceOptions(
                    depends_on=[attachment],
                    # Stacks deployed before this change have pulumi-eks's add-on (the same EKS
                    # add-on): this one takes its state over, an update instead of a second create.
                    aliases=[
                        pulumi.Alias(
                            name=f"{name}-eks-vpc-cni",
                            parent=pulumi.resource.create_urn(
                                f"{name}-eks-vpc-cni", "eks:index:VpcCniAddon", parent=self.eks_cluster
                            ),
                        )
                    ],
                ),
            ),
        )
