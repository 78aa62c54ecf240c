"""How a change to the Ray cluster rolls out: the one place that decides it.

A change to `rayClusterConfig` makes KubeRay start a second Ray cluster by default (`NewCluster`) and
switch over once it serves; with exactly as many GPU nodes as workers that cluster never schedules
and the upgrade waits forever. So unless the nodes can host two clusters (twice the GPU workers, and
a second head on the system nodes), the RayService gets `upgradeStrategy: None` (KubeRay never starts
a second cluster) and Pulumi replaces it on any `rayClusterConfig` change, deleting the old one first:
downtime while the model reloads, but never a wait for GPUs that do not exist. A change to
serveConfigV2 alone stays an in-place update, which KubeRay applies to the running cluster.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from config import PROJECT, Settings
from config.base import quantity_value
from planning.capacity import system_node_free
from planning.catalog import InstanceType
from planning.system_pods import system_pods_total

GPU_NODE_UPDATE = {"maxUnavailable": 1, "updateStrategy": "MINIMAL"}
"""How EKS rolls the GPU node group (a Kubernetes version bump, a new AMI or launch template): MINIMAL
terminates a node before launching its replacement, one at a time, so an update never needs a GPU
instance beyond the group's size, which capacity-constrained types often do not have (DEFAULT surges
new nodes into the placement group first). The EKS NodegroupUpdateConfig API, in aws.eks.NodeGroup's
wire names."""

RAY_CLUSTER_CONFIG_PATH = "spec.rayClusterConfig"
"""The RayService field whose change means a new Ray cluster."""


@dataclass(frozen=True)
class UpgradePlan:
    zero_downtime: bool
    """True: KubeRay's NewCluster upgrade. False: Pulumi deletes and recreates the RayService."""

    @property
    def kuberay_strategy(self) -> Literal["NewCluster", "None"]:
        """The RayService's `spec.upgradeStrategy.type`."""
        return "NewCluster" if self.zero_downtime else "None"

    @property
    def replace_on_changes(self) -> list[str]:
        """Pulumi `replaceOnChanges` of the RayService (with `deleteBeforeReplace` when non-empty)."""
        return [] if self.zero_downtime else [RAY_CLUSTER_CONFIG_PATH]


def system_nodes_host_two_heads(settings: Settings, system: InstanceType | None) -> bool:
    """Whether the system nodes hold a second head beside the first and the stack's own pods: two
    heads' requests and those pods within what the nodes offer, each head within one node. An unknown
    system type is assumed to hold it only on two or more nodes."""
    nodes = settings.system_nodes.desired_size
    if system is None:
        return nodes >= 2
    head = settings.serving.head
    cpu_node, memory_node = system_node_free(system)
    cpu_pods, memory_pods = system_pods_total(settings)
    cpu, memory = quantity_value(head.cpu_request), quantity_value(head.memory_request)
    if nodes == 1:
        return 2 * cpu + cpu_pods <= cpu_node and 2 * memory + memory_pods <= memory_node
    return (
        cpu <= cpu_node
        and memory <= memory_node
        and 2 * cpu + cpu_pods <= cpu_node * nodes
        and 2 * memory + memory_pods <= memory_node * nodes
    )


def plan_upgrades(
    settings: Settings, system: InstanceType | None, gpu_worker_capacity: int, gpu_workers: int
) -> UpgradePlan:
    """`gpu_worker_capacity`: worker pods the GPU nodes host; `gpu_workers`: pods one cluster needs.
    Raises ValueError when `newCluster` is asked for without room for a second cluster."""
    spare = gpu_worker_capacity >= 2 * gpu_workers and system_nodes_host_two_heads(settings, system)
    strategy = settings.serving.upgrade_strategy
    if strategy == "newCluster" and not spare:
        raise ValueError(
            f"{PROJECT}:serving.upgradeStrategy: newCluster starts a second Ray cluster (head and "
            f"{gpu_workers} GPU workers) during upgrades: it needs gpuNodes.maxSize to "
            f"host {2 * gpu_workers} workers (it hosts {gpu_worker_capacity}) and room for a second head "
            f"(systemNodes.desiredSize 2, or a larger systemNodes.instanceType); use recreate or "
            "auto, or add nodes"
        )
    return UpgradePlan(zero_downtime=strategy == "newCluster" or (strategy == "auto" and spare))


RESTART_MINUTES = "3-5"
"""Workers restart on their nodes, the image and the weights are on the node's disk already, and vLLM
loads the weights (page cache) and starts on both sides."""
IMAGE_PULL_MINUTES = "10-20"
"""A new ~15 GiB image on every node (over NAT)."""


def cluster_change_notice(
    upgrade: UpgradePlan, before: tuple[str | None, str | None], after: tuple[str, str]
) -> str | None:
    """What preview says when this update changes the Ray cluster: (fingerprint, image) as the last
    deployment left them, and as this one makes them. None for the first deployment and for no change."""
    (old_cluster, old_image), (new_cluster, new_image) = before, after
    if old_cluster is None or old_cluster == new_cluster:
        return None
    if upgrade.zero_downtime:
        return (
            "this update changes the Ray cluster: KubeRay starts a second cluster and switches over once it "
            "serves; no downtime, and `up` waits for the switch"
        )
    pull = f", plus about {IMAGE_PULL_MINUTES} for the new image" if old_image != new_image else ""
    return (
        "this update changes the Ray cluster: Pulumi deletes and recreates the RayService, so serving "
        f"stops for about {RESTART_MINUTES} minutes{pull} (docs/design.md#upgrades)"
    )


def mode_change_notice(
    upgrade: UpgradePlan,
    before: tuple[str | None, str | None],
    after: tuple[str, str],
    replicas: int,
    drain_seconds: int,
) -> str | None:
    """What preview says when this update switches `serving.mode`: (cluster fingerprint, mode) as the
    last deployment left them (a deployment from before the mode existed exported no mode: it was
    disaggregated), and as this one makes them. None for the first deployment and for no switch.

    Both modes run the same GPU workers, so a switch alone leaves `rayClusterConfig` as it is and
    KubeRay applies the new serve config to the running cluster; Serve then replaces the application's
    deployments, and the new replicas wait for the GPUs the old ones free."""
    (old_cluster, old_mode), (new_cluster, new_mode) = before, after
    if old_cluster is None:
        return None
    old_mode = old_mode or "disaggregated"
    if old_mode == new_mode:
        return None
    switch = f"this update switches serving.mode from {old_mode} to {new_mode}"
    if old_cluster != new_cluster:
        how = "with a new Ray cluster" if upgrade.zero_downtime else "with the RayService recreated"
        return f"{switch}, {how}: the Ray cluster changes too (see the notice on it)"
    new = (
        f"{replicas} aggregated replicas"
        if new_mode == "aggregated"
        else "the prefill and decode deployments"
    )
    return (
        f"{switch} on the same Ray cluster, in place: KubeRay applies the new serve config, Serve stops "
        f"the old deployments (each replica first finishes what it holds, up to {drain_seconds} s: "
        f"autoscaling.gracefulShutdownSeconds) and starts {new} on the GPUs they free, so the model does "
        f"not answer for about {RESTART_MINUTES} minutes while they load (docs/operations.md, "
        '"Disaggregated or aggregated?")'
    )
