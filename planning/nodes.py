"""What the two node groups carry and the pods select: labels, the GPU taint, and the extended
resources the device plugins advertise. The node groups set them, the charts and the RayService
select them, and `ops status` reads them back, all from here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from config import PROJECT, Settings
from config.sides import side_nodes

SYSTEM_NODE_LABELS = {"role": "system"}
"""Labels of the CPU system nodes; the KubeRay operator and the Ray head select them."""

GPU_NODE_LABELS = {
    "role": "gpu-worker",
    # The NVIDIA device plugin chart's default node affinity requires this label (or NFD's PCI labels).
    "nvidia.com/gpu.present": "true",
}
"""Labels of the GPU nodes; the Ray workers and the device plugins select `role`."""

GPU_NODE_SELECTOR = {"role": GPU_NODE_LABELS["role"]}
"""What the Ray workers and the device plugins select (the seed's `role=gpu-worker`)."""

GPU_SIDE_LABEL = "ray-llm-eks/side"
"""Where each side has a GPU node group of its own (`prefillNodes`, `decodeNodes`): the label its nodes
carry (`prefill`, `decode`) and its worker group selects."""

GPU_TAINT_KEY = "nvidia.com/gpu"
"""Taint `nvidia.com/gpu=true:NoSchedule` keeps pods that do not tolerate it off the GPU nodes."""


@dataclass(frozen=True)
class Placement:
    """Where the stack's nodes and pods meet: the labels and taints its two node groups carry, and what
    its pods select and tolerate. On its own cluster, `role` and the NVIDIA taint (the constants above).
    On a team's cluster (`stack_key` set), its nodes carry `<stack_key>=system` / `<stack_key>=gpu` as
    labels and as `NoSchedule` taints beside `role`, and its pods select and tolerate those alone: no team
    pod lands on them (a team GPU job tolerates `nvidia.com/gpu`, not the stack's key), and no team node
    labelled `role=system` draws the stack's controllers."""

    stack_key: str | None = None
    """`ray-llm-eks/<serving namespace>` on a team's cluster (unique there, as the stack's StorageClass
    name is: planning/names.py); None on the stack's own."""
    gpu_tainted: bool = True
    """`gpuNodes.taint`."""

    @property
    def system_labels(self) -> dict[str, str]:
        """What the system node group carries."""
        if self.stack_key is None:
            return dict(SYSTEM_NODE_LABELS)
        return {**SYSTEM_NODE_LABELS, self.stack_key: "system"}

    @property
    def system_selector(self) -> dict[str, str]:
        """What pods on the system nodes select."""
        if self.stack_key is None:
            return dict(SYSTEM_NODE_LABELS)
        return {self.stack_key: "system"}

    @property
    def system_taints(self) -> list[dict[str, str]]:
        """The system nodes' taints (`key`, `value`, `effect` as a pod spec writes it): none on the
        stack's own cluster, where every system pod belongs to the stack."""
        if self.stack_key is None:
            return []
        return [{"key": self.stack_key, "value": "system", "effect": "NoSchedule"}]

    @property
    def system_tolerations(self) -> list[dict[str, str]]:
        """What pods on the system nodes tolerate: their taints, exactly."""
        return [{**taint, "operator": "Equal"} for taint in self.system_taints]

    def on_system_nodes(self) -> dict[str, Any]:
        """A chart's or pod spec's `nodeSelector` and, where the system nodes are tainted, `tolerations`
        (none written on the stack's own cluster)."""
        tolerations = self.system_tolerations
        return {"nodeSelector": self.system_selector, **({"tolerations": tolerations} if tolerations else {})}

    @property
    def gpu_labels(self) -> dict[str, str]:
        """What the GPU node group carries."""
        if self.stack_key is None:
            return dict(GPU_NODE_LABELS)
        return {**GPU_NODE_LABELS, self.stack_key: "gpu"}

    @property
    def gpu_selector(self) -> dict[str, str]:
        """What the Ray workers, the device plugins and DCGM select."""
        if self.stack_key is None:
            return dict(GPU_NODE_SELECTOR)
        return {self.stack_key: "gpu"}

    def side_labels(self, side: str) -> dict[str, str]:
        """What a side's own GPU node group carries: the GPU labels and the side's."""
        return {**self.gpu_labels, GPU_SIDE_LABEL: side}

    def side_selector(self, side: str) -> dict[str, str]:
        """What a side's own worker group selects: the GPU nodes of its side."""
        return {**self.gpu_selector, GPU_SIDE_LABEL: side}

    @property
    def gpu_taint(self) -> dict[str, str]:
        """The GPU nodes' taint, when `gpuNodes.taint` (`gpu_taints`)."""
        if self.stack_key is None:
            return {"key": GPU_TAINT_KEY, "value": "true", "effect": "NoSchedule"}
        return {"key": self.stack_key, "value": "gpu", "effect": "NoSchedule"}

    @property
    def gpu_taints(self) -> list[dict[str, str]]:
        return [self.gpu_taint] if self.gpu_tainted else []

    @property
    def gpu_toleration(self) -> dict[str, Any]:
        """Tolerates the GPU taint: any value of `nvidia.com/gpu` on the stack's own cluster (as
        before), the stack's key and value exactly on a team's."""
        if self.stack_key is None:
            return {"key": GPU_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}
        return {**self.gpu_taint, "operator": "Equal"}


def placement(settings: Settings) -> Placement:
    """The stack's placement: stack-specific on a team's cluster (`cluster.existingClusterName`)."""
    existing = bool(settings.cluster.existing_cluster_name)
    return Placement(
        stack_key=f"{PROJECT}/{settings.serving.namespace}" if existing else None,
        # The sides' own sections agree on it (config/settings.py).
        gpu_tainted=side_nodes(settings, "prefill").config.taint,
    )


GPU_RESOURCE = "nvidia.com/gpu"
"""Advertised by the NVIDIA device plugin: one per GPU."""
EFA_RESOURCE = "vpc.amazonaws.com/efa"
"""Advertised by the EFA device plugin: one per EFA interface."""

AUTOSCALER_STACK_TAG_PREFIX = "ray-llm-eks/cluster-autoscaler/"
"""On a team's cluster the stack's GPU Auto Scaling group carries `<prefix><stack>=owned`: its Cluster
Autoscaler discovers, resizes and terminates only groups with that tag (manifests/cluster_autoscaler.py)."""
