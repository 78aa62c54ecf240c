"""The EFA-enabled GPU node group, pinned to one availability zone.

pulumi-eks builds the EFA plumbing itself (`enable_efa_support`): a cluster placement group in
`placement_group_availability_zone`, a launch template with one EFA interface per network card (in
the EKS cluster security group, which allows all traffic to and from itself, as EFA requires), the
subnets filtered to that zone, and an error for types without EFA. We use it rather than a hand-made
launch template: it is the same template we would write, maintained upstream.

The zone is pinned because EFA traffic does not cross availability zones.
"""

from __future__ import annotations

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks

from components.cluster import Cluster
from config.cluster import GpuNodesConfig
from planning.nodes import GPU_NODE_LABELS, GPU_TAINT_KEY
from planning.upgrades import GPU_NODE_UPDATE


def no_surge(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
    """pulumi-eks's ManagedNodeGroup takes no update config (pulumi/pulumi-eks#1147), so this
    transform sets it on the `aws.eks.NodeGroup` the component creates (transforms reach the children
    of packaged components)."""
    if args.type_ != "aws:eks/nodeGroup:NodeGroup":
        return None
    return pulumi.ResourceTransformResult(
        props={**args.props, "updateConfig": dict(GPU_NODE_UPDATE)}, opts=args.opts
    )


class GpuNodeGroup(pulumi.ComponentResource):
    node_group: eks.ManagedNodeGroup
    """The managed node group (AL2023 NVIDIA AMI, EFA, placement group)."""
    availability_zone: str
    """The one zone the GPU nodes run in."""

    def __init__(
        self,
        name: str,
        *,
        config: GpuNodesConfig,
        cluster: Cluster,
        zone: str,
        subnet_id: pulumi.Input[str],
        autoscaled: bool,
        tags: dict[str, str],
        opts: pulumi.ResourceOptions | None = None,
    ):
        """`zone`: the one availability zone of the group (it offers the instance type, see
        planning/zones.py); `subnet_id`: the private subnet in that zone; `autoscaled`: Cluster
        Autoscaler sizes the group, so Pulumi ignores its desired size; `tags`: the node group's
        (what Cluster Autoscaler reads for scale from zero)."""
        super().__init__("ray-llm-eks:gpu_node_group:GpuNodeGroup", name, None, opts)
        self.availability_zone = zone
        self.node_group = eks.ManagedNodeGroup(
            f"{name}-nodes",
            cluster=cluster.eks_cluster,
            node_role=cluster.node_role,
            subnet_ids=[subnet_id],
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
            placement_group_availability_zone=zone,
            enable_imd_sv2=True,
            # Cluster Autoscaler changes the desired size: an `up` must not set it back.
            ignore_scaling_changes=True if autoscaled else None,
            tags=tags or None,
            # Nodes cannot join before the node role has its policies and the VPC CNI its role.
            opts=pulumi.ResourceOptions(
                parent=self,
                depends_on=cluster.node_dependencies,
                transforms=[no_surge, cluster.root_volume_transform],
            ),
        )
        self.register_outputs({"availabilityZone": zone})
