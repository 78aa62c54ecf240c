"""The EFA-enabled GPU node group, pinned to one availability zone.

pulumi-eks builds the EFA plumbing itself (`enable_efa_support`): a cluster placement group in
`placement_group_availability_zone`, a launch template with one EFA interface per network card (in
the EKS cluster security group, which allows all traffic to and from itself, as EFA requires), the
subnets filtered to that zone, and an error for types without EFA. We use it rather than a hand-made
launch template: it is the same template we would write, maintained upstream.

The zone is pinned because EFA traffic does not cross availability zones.

On an existing cluster (`cluster.existingClusterName`) pulumi-eks has no cluster to attach to, so the
group is built from `pulumi_aws` as pulumi-eks would build it (components/managed_nodes.py), in the
subnet planning/existing_cluster.py chose, with a security group of the stack's own that lets EFA
traffic flow to and from itself; that group's tags keep the stack's record (planning/zones.py). On a
capacity reservation (`gpuNodes.capacityReservation`) too, on either cluster: pulumi-eks's template has
no place for the reservation (planning/reservation.py says what EKS requires of it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pulumi
import pulumi_aws as aws
import pulumi_eks as eks

from components.cluster import Cluster
from components.existing_cluster import ExistingCluster
from components.managed_nodes import managed_node_group, node_group_taints
from config.cluster import GpuNodesConfig
from config.sides import Side
from manifests.cluster_autoscaler import OWNED
from planning.nodes import Placement
from planning.reservation import CapacityPlan
from planning.side_reservation import shared_placement_group
from planning.upgrades import GPU_NODE_UPDATE

GPU_AMI = "AL2023_x86_64_NVIDIA"
"""EKS's AL2023 AMI with NVIDIA's driver and container toolkit (what pulumi-eks picks for `gpu=True`)."""


def auto_scaling_group(resources: Sequence[aws.eks.outputs.NodeGroupResource] | None) -> str:
    """The name of the Auto Scaling group EKS made for a managed node group (its `resources`)."""
    groups = [g.name for r in resources or () for g in r.autoscaling_groups or () if g.name]
    return groups[0] if groups else ""


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
    node_group: eks.ManagedNodeGroup | aws.eks.NodeGroup
    """The managed node group (AL2023 NVIDIA AMI, EFA, placement group)."""
    availability_zone: str
    """The one zone the GPU nodes run in."""

    def __init__(
        self,
        name: str,
        *,
        config: GpuNodesConfig,
        placement: Placement,
        cluster: Cluster | ExistingCluster,
        zone: str,
        subnet_id: pulumi.Input[str],
        autoscaled: bool,
        tags: dict[str, str],
        network_cards: int = 1,
        record: Mapping[str, str] | None = None,
        capacity: CapacityPlan | None = None,
        autoscaler_tag: str | None = None,
        labels: Mapping[str, str] | None = None,
        placement_group: pulumi.Input[str] | None = None,
        security_groups: list[pulumi.Input[str]] | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ):
        """`zone`: the one availability zone of the group (it offers the instance type, see
        planning/zones.py); `subnet_id`: the private subnet in that zone; `autoscaled`: Cluster
        Autoscaler sizes the group, so Pulumi ignores its desired size; `tags`: the node group's
        (what Cluster Autoscaler reads for scale from zero). On an existing cluster: `network_cards`,
        the GPU type's (an EFA interface each), and `record`, the tags its EFA security group keeps.
        `capacity`: the reservation the nodes launch into (planning/reservation.py), whose zone `zone` is.
        `autoscaler_tag`: on a team's cluster, the tag its Auto Scaling group gets so the stack's Cluster
        Autoscaler finds and may resize it alone (manifests/cluster_autoscaler.py); EKS passes no node
        group tag on to the group. `placement`: the labels and taint the nodes carry (planning/nodes.py).
        `labels`: the nodes' labels where not `placement`'s GPU labels (a side's own group).
        `placement_group`: a cluster placement group shared with the other side's group, so the KV path
        stays on one spine; the group is then built from `pulumi_aws` (pulumi-eks makes a placement
        group of its own per group). `security_groups`: on a team's cluster, the EFA security groups
        shared with the other side's group (`efa_security_groups`), rather than a group of its own."""
        super().__init__("ray-llm-eks:gpu_node_group:GpuNodeGroup", name, None, opts)
        self.availability_zone = zone
        self.labels = dict(labels) if labels is not None else placement.gpu_labels
        self.shared_placement_group = placement_group
        if isinstance(cluster, ExistingCluster) or capacity or placement_group is not None:
            # On an existing cluster pulumi-eks has no cluster to attach to; on a reservation its EFA
            # template takes no reservation target, market type or instance type (and always adds a
            # placement group of its own). So the group is built from pulumi_aws, its EFA interfaces in
            # the EKS cluster security group as pulumi-eks puts them (and the stack's own EFA group on a
            # team's cluster).
            self.node_group = self._group(
                name,
                config,
                placement,
                cluster,
                subnet_id=subnet_id,
                autoscaled=autoscaled,
                tags=tags,
                network_cards=network_cards,
                security_groups=security_groups
                if security_groups is not None
                else efa_security_groups(name, cluster, record or {}, self),
                capacity=capacity,
            )
            if autoscaler_tag:
                aws.autoscaling.Tag(
                    f"{name}-autoscaler-tag",
                    autoscaling_group_name=self.node_group.resources.apply(auto_scaling_group),
                    tag=aws.autoscaling.TagTagArgs(
                        key=autoscaler_tag, value=OWNED, propagate_at_launch=False
                    ),
                    opts=pulumi.ResourceOptions(parent=self),
                )
            self.register_outputs({"availabilityZone": zone})
            return
        self.node_group = eks.ManagedNodeGroup(
            f"{name}-nodes",
            cluster=cluster.eks_cluster,
            node_role=cluster.node_role,
            subnet_ids=[subnet_id],
            instance_types=[config.instance_type],
            scaling_config=aws.eks.NodeGroupScalingConfigArgs(
                min_size=config.min_size, desired_size=config.desired_size, max_size=config.max_size
            ),
            labels=self.labels,
            taints=node_group_taints(placement.gpu_taints),
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

    def _group(
        self,
        name: str,
        config: GpuNodesConfig,
        placement: Placement,
        cluster: Cluster | ExistingCluster,
        *,
        subnet_id: pulumi.Input[str],
        autoscaled: bool,
        tags: dict[str, str],
        network_cards: int,
        security_groups: list[pulumi.Input[str]],
        capacity: CapacityPlan | None,
    ) -> aws.eks.NodeGroup:
        """The group from `pulumi_aws` (components/managed_nodes.py): EFA on every network card in
        `security_groups`, in a cluster placement group of the stack's own, or on a reservation in its
        placement group (none for a Capacity Block, or a reservation made outside one)."""
        child = pulumi.ResourceOptions(parent=self)
        placement_group = (
            capacity.placement_group
            if capacity
            else self.shared_placement_group
            if self.shared_placement_group is not None
            else aws.ec2.PlacementGroup(f"{name}-placement", strategy="cluster", opts=child).name
        )
        return managed_node_group(
            f"{name}-nodes",
            cluster_name=cluster.cluster_name,
            kubernetes_version=cluster.kubernetes_version,
            node_role_arn=cluster.node_role.arn,
            subnet_ids=[subnet_id],
            instance_type=config.instance_type,
            sizes=(config.min_size, config.desired_size, config.max_size),
            labels=self.labels,
            taints=node_group_taints(placement.gpu_taints),
            disk_size_gib=config.disk_size_gib,
            volume_key_arn=cluster.volume_key_arn,
            ami_type=GPU_AMI,
            efa_network_cards=max(network_cards, 1),
            efa_security_groups=security_groups,
            placement_group=placement_group,
            update_config=GPU_NODE_UPDATE,
            ignore_scaling_changes=autoscaled,
            tags=tags,
            capacity=capacity,
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(depends_on=cluster.node_dependencies)
            ),
        )


def efa_security_groups(
    name: str, cluster: Cluster | ExistingCluster, record: Mapping[str, str], parent: pulumi.Resource
) -> list[pulumi.Input[str]]:
    """The EKS cluster security group; on a team's cluster, whose group may not let EFA traffic
    through, beside a group of the stack's own that allows all to and from itself (its tags keep
    the stack's record)."""
    if isinstance(cluster, Cluster):
        return [cluster.eks_cluster.cluster_security_group_id]
    read = cluster.plan.cluster
    efa_group = aws.ec2.SecurityGroup(
        f"{name}-efa",
        vpc_id=read.vpc_id,
        description="EFA between the ray-llm-eks GPU nodes: all traffic to and from itself",
        ingress=[aws.ec2.SecurityGroupIngressArgs(protocol="-1", from_port=0, to_port=0, self=True)],
        egress=[aws.ec2.SecurityGroupEgressArgs(protocol="-1", from_port=0, to_port=0, self=True)],
        tags=dict(record),
        opts=pulumi.ResourceOptions(parent=parent),
    )
    return [read.security_group_id, efa_group.id]


class SideGpuNodeGroups(pulumi.ComponentResource):
    """Where each side has GPU nodes of its own (`prefillNodes`, `decodeNodes`): one cluster placement
    group in the GPU zone and an EFA GPU node group per side in it, each labelled with its side
    (planning/nodes.py `GPU_SIDE_LABEL`), so the two sides' nodes are one EFA network, as one group's are."""

    groups: dict[str, GpuNodeGroup]
    """The side's node group, by side."""
    availability_zone: str

    def __init__(
        self,
        name: str,
        *,
        sides: Sequence[tuple[Side, GpuNodesConfig, int]],
        placement: Placement,
        cluster: Cluster | ExistingCluster,
        zone: str,
        subnet_id: pulumi.Input[str],
        autoscaled: bool,
        tags: Mapping[str, Mapping[str, str]],
        capacity: Mapping[Side, CapacityPlan] | None = None,
        record: Mapping[str, str] | None = None,
        autoscaler_tag: str | None = None,
        opts: pulumi.ResourceOptions | None = None,
    ):
        """`sides`: (side, its nodes' config, its type's network cards) for prefill and decode; `tags`:
        each side's node group tags (what Cluster Autoscaler reads for scale from zero); `capacity`: the
        reservation of each side that runs on one (planning/side_reservation.py). With one, both sides
        launch into the reservation's placement group (an On-Demand side too), not one of the stack's:
        the reservation serves launches into its own group only; on one reservation made in no group
        (a Capacity Block) both sides run on it, in none. On a team's cluster: `record`, the tags of the
        one EFA security group both groups share (a group each would admit only its own nodes, and EFA
        between the sides would be dropped), and `autoscaler_tag`, each group's Auto Scaling group's
        tag for the stack's Cluster Autoscaler (`GpuNodeGroup`)."""
        super().__init__("ray-llm-eks:gpu_node_group:SideGpuNodeGroups", name, None, opts)
        self.availability_zone = zone
        child = pulumi.ResourceOptions(parent=self)
        reserved = dict(capacity or {})
        shared: pulumi.Input[str] | None = (
            shared_placement_group(reserved)
            if reserved
            else aws.ec2.PlacementGroup(f"{name}-placement", strategy="cluster", opts=child).name
        )
        team = isinstance(cluster, ExistingCluster)
        shared_security = efa_security_groups(name, cluster, record or {}, self) if team else None
        self.groups = {
            side: GpuNodeGroup(
                f"{name}-{side}",
                config=config,
                placement=placement,
                cluster=cluster,
                zone=zone,
                subnet_id=subnet_id,
                autoscaled=autoscaled,
                tags=dict(tags.get(side, {})),
                network_cards=cards,
                labels=placement.side_labels(side),
                placement_group=shared,
                capacity=reserved.get(side),
                security_groups=shared_security,
                autoscaler_tag=autoscaler_tag,
                opts=child,
            )
            for side, config, cards in sides
        }
        self.register_outputs({"availabilityZone": zone, "placementGroup": shared})

    @property
    def node_groups(self) -> list[eks.ManagedNodeGroup | aws.eks.NodeGroup]:
        return [group.node_group for group in self.groups.values()]
