"""What every node of the stack boots with, and managed node groups on a cluster the stack did not
create: the Pulumi plumbing the cluster components share (not a component of its own).

On the stack's own cluster pulumi-eks builds the node groups (`eks.ManagedNodeGroup`, EFA included),
and `components/cluster.py` completes its launch template with `ROOT_VOLUME` and `INSTANCE_METADATA`.
pulumi-eks attaches node groups only to a cluster it holds (its `Cluster`, or a `CoreData` of resources
it can read back), so on an existing cluster the stack builds the same thing from `pulumi_aws` itself
(`managed_node_group`): a launch template with the same hardening and, for EFA, what pulumi-eks v4.3.0
writes (nodes/nodegroup.ts `createMNGCustomLaunchTemplate`, nodes/instances.ts `getEfaNetworkInterfaces`):
one cluster placement group, and one interface per network card, card 0 `efa` at device 0, every other
`efa-only` at device 1, deleted with the instance. Unlike pulumi-eks, the interfaces carry a security
group of the stack's own beside the cluster's: EFA needs all traffic to and from its group allowed (the
EC2 user guide, "EFA limitations"), which the stack's group guarantees without touching the team's. EKS
adds the cluster security group itself only when a template names none ("Customize managed nodes with
launch templates"), so it is listed too. The AMI is EKS's own for the node group's `amiType` (no image or
user data in the template), as pulumi-eks's with `gpu=True` on AL2023.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pulumi
import pulumi_aws as aws

from planning.reservation import BLOCK, CapacityPlan

ROOT_DEVICE = "/dev/xvda"
"""The root device of EKS's AL2023 AMIs (pulumi-eks nodes/nodegroup.ts)."""


def root_volume(key_arn: pulumi.Input[str]) -> dict[str, Any]:
    """Every node's root volume: gp3, encrypted with the stack's EBS key."""
    return {"encrypted": "true", "kmsKeyId": key_arn, "volumeType": "gp3"}


INSTANCE_METADATA = {"httpTokens": "required", "httpPutResponseHopLimit": 1}
"""IMDSv2 only, one hop: only the node itself (and hostNetwork pods) reach IMDS, never a pod behind the
CNI, whatever namespace or network policy it has (pulumi-eks hard-codes 2)."""


ONLY_RESERVED = "capacity-reservations-only"
"""EC2's CapacityReservationPreference that never falls back to On-Demand."""


def reservation_target(capacity: CapacityPlan) -> aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs:
    """Launch into the reservation, by its ID or its resource group's ARN, and only there:
    `capacity-reservations-only` ("If capacity isn't available, the instance will fail to launch",
    botocore's LaunchTemplateCapacityReservationSpecificationRequest), the one preference EC2 accepts
    beside a target. Without it, instances that target a group run On-Demand when the group has no
    matching capacity left (EC2 user guide, capacity reservation groups). A Capacity Block's template
    names the block alone, as EKS documents it (its market type already confines it)."""
    target = (
        aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
            capacity_reservation_resource_group_arn=capacity.reference
        )
        if capacity.group
        else aws.ec2.LaunchTemplateCapacityReservationSpecificationCapacityReservationTargetArgs(
            capacity_reservation_id=capacity.reference
        )
    )
    return aws.ec2.LaunchTemplateCapacityReservationSpecificationArgs(
        capacity_reservation_preference=None if capacity.block else ONLY_RESERVED,
        capacity_reservation_target=target,
    )


def node_group_taints(taints: Sequence[Mapping[str, str]]) -> list[aws.eks.NodeGroupTaintArgs] | None:
    """A node group's taints as EKS spells them (`NoSchedule` is `NO_SCHEDULE`); None for none."""
    effects = {
        "NoSchedule": "NO_SCHEDULE",
        "NoExecute": "NO_EXECUTE",
        "PreferNoSchedule": "PREFER_NO_SCHEDULE",
    }
    return [
        aws.eks.NodeGroupTaintArgs(key=t["key"], value=t["value"], effect=effects[t["effect"]])
        for t in taints
    ] or None


def managed_node_group(
    name: str,
    *,
    cluster_name: pulumi.Input[str],
    kubernetes_version: str,
    node_role_arn: pulumi.Input[str],
    subnet_ids: Sequence[pulumi.Input[str]],
    instance_type: str,
    sizes: tuple[int, int, int],
    labels: Mapping[str, str],
    taints: Sequence[aws.eks.NodeGroupTaintArgs] | None,
    disk_size_gib: int,
    volume_key_arn: pulumi.Input[str],
    ami_type: str,
    efa_network_cards: int = 0,
    efa_security_groups: Sequence[pulumi.Input[str]] = (),
    placement_group: pulumi.Input[str] | None = None,
    update_config: Mapping[str, Any] | None = None,
    ignore_scaling_changes: bool = False,
    tags: Mapping[str, str] | None = None,
    capacity: CapacityPlan | None = None,
    opts: pulumi.ResourceOptions,
) -> aws.eks.NodeGroup:
    """A launch template and the EKS managed node group that uses it, as children of `opts.parent`.
    `sizes`: (min, desired, max); `efa_network_cards`: with EFA, one interface per network card, each in
    `efa_security_groups`, the nodes in `placement_group`; `update_config`: in EKS's wire names
    (planning/upgrades.py GPU_NODE_UPDATE); `ignore_scaling_changes`: Cluster Autoscaler owns the
    desired size; `capacity`: the reservation the nodes launch into (planning/reservation.py): its
    target in the template, and for a Capacity Block what EKS requires of it (market type
    `capacity-block` and the instance type in the template, none on the group, capacity type
    CAPACITY_BLOCK)."""
    block = bool(capacity and capacity.block)
    ebs = {**root_volume(volume_key_arn), "volumeSize": disk_size_gib, "deleteOnTermination": "true"}
    template = aws.ec2.LaunchTemplate(
        f"{name}-template",
        block_device_mappings=[
            aws.ec2.LaunchTemplateBlockDeviceMappingArgs(
                device_name=ROOT_DEVICE,
                ebs=aws.ec2.LaunchTemplateBlockDeviceMappingEbsArgs(
                    encrypted=ebs["encrypted"],
                    kms_key_id=ebs["kmsKeyId"],
                    volume_type=ebs["volumeType"],
                    volume_size=ebs["volumeSize"],
                    delete_on_termination=ebs["deleteOnTermination"],
                ),
            )
        ],
        metadata_options=aws.ec2.LaunchTemplateMetadataOptionsArgs(
            http_tokens=INSTANCE_METADATA["httpTokens"],
            http_put_response_hop_limit=int(INSTANCE_METADATA["httpPutResponseHopLimit"]),
            http_endpoint="enabled",
        ),
        network_interfaces=[
            aws.ec2.LaunchTemplateNetworkInterfaceArgs(
                device_index=0 if card == 0 else 1,
                network_card_index=card,
                interface_type="efa" if card == 0 else "efa-only",
                delete_on_termination="true",
                security_groups=list(efa_security_groups),
            )
            for card in range(efa_network_cards)
        ]
        or None,
        placement=aws.ec2.LaunchTemplatePlacementArgs(group_name=placement_group)
        if placement_group
        else None,
        capacity_reservation_specification=reservation_target(capacity) if capacity else None,
        instance_market_options=aws.ec2.LaunchTemplateInstanceMarketOptionsArgs(market_type=BLOCK)
        if block
        else None,
        instance_type=instance_type if block else None,
        opts=opts,
    )
    minimum, desired, maximum = sizes
    return aws.eks.NodeGroup(
        name,
        cluster_name=cluster_name,
        version=kubernetes_version,
        node_role_arn=node_role_arn,
        subnet_ids=list(subnet_ids),
        instance_types=None if block else [instance_type],
        capacity_type=capacity.capacity_type if capacity else None,
        ami_type=ami_type,
        scaling_config=aws.eks.NodeGroupScalingConfigArgs(
            min_size=minimum, desired_size=desired, max_size=maximum
        ),
        labels=dict(labels),
        taints=list(taints) if taints else None,
        launch_template=aws.eks.NodeGroupLaunchTemplateArgs(
            id=template.id, version=template.latest_version.apply(str)
        ),
        update_config=aws.eks.NodeGroupUpdateConfigArgs(
            max_unavailable=update_config.get("maxUnavailable"),
            update_strategy=update_config.get("updateStrategy"),
        )
        if update_config
        else None,
        tags=dict(tags) if tags else None,
        opts=pulumi.ResourceOptions.merge(
            opts,
            pulumi.ResourceOptions(
                ignore_changes=["scalingConfig.desiredSize"] if ignore_scaling_changes else None
            ),
        ),
    )
