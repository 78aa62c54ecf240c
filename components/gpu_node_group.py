"""The EFA-enabled GPU node group, pinned to one availability zone.

pulumi-eks builds the EFA plumbing itself (`enable_efa_support`): a cluster placement group in
`placement_group_availability_zone`, a launch template with one EFA interface per network card (in
the EKS cluster security group, which allows all traffic to and from itself, as EFA requires), the
subnets filtered to that zone, and an error for types without EFA. We use it rather than a hand-made
launch template: it is the same template we would write, maintained upstream.

The zone is pinned because EFA traffic does not cross availability zones.
"""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks

from config.cluster import GPU_NODE_LABELS, GPU_TAINT_KEY, GpuNodesConfig


@dataclass(frozen=True)
class GpuNodeGroupArgs:
    config: GpuNodesConfig
    cluster: eks.Cluster
    node_role: aws.iam.Role
    zone: str
    """The one availability zone of the group (offers the instance type; see config/placement.py)."""
    subnet_id: pulumi.Input[str]
    """The private subnet in that zone."""
    node_role_policies: list[aws.iam.RolePolicyAttachment]
    """The node role's attachments: nodes cannot join before they exist."""


class GpuNodeGroup(pulumi.ComponentResource):
    node_group: eks.ManagedNodeGroup
    """The managed node group (AL2023 NVIDIA AMI, EFA, placement group)."""
    availability_zone: str
    """The one zone the GPU nodes run in."""

    def __init__(self, name: str, args: GpuNodeGroupArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("ray-llm-eks:gpu_node_group:GpuNodeGroup", name, None, opts)
        config = args.config
        self.availability_zone = args.zone
        self.node_group = eks.ManagedNodeGroup(
            f"{name}-nodes",
            cluster=args.cluster,
            node_role=args.node_role,
            subnet_ids=[args.subnet_id],
            instance_types=[config.instance_type],
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                min_size=config.min_size, desired_size=config.desired_size, max_size=config.max_size
            ),
            labels=dict(GPU_NODE_LABELS),
            taints=[aws.eks.NodeGroupTaintArgs(key=GPU_TAINT_KEY, value="true", effect="NO_SCHEDULE")]
            if config.taint
            else None,
            disk_size=config.disk_size_gib,
            operating_system=eks.OperatingSystem.AL2023,
            gpu=True,  # with AL2023: the AL2023_x86_64_NVIDIA AMI (driver and container toolkit)
            enable_efa_support=True,
            placement_group_availability_zone=args.zone,
            enable_imd_sv2=True,
            opts=pulumi.ResourceOptions(parent=self, depends_on=args.node_role_policies),
        )
        self.register_outputs({"availabilityZone": args.zone})
