"""What the two node groups carry and the pods select: labels, the GPU taint, and the extended
resources the device plugins advertise. The node groups set them, the charts and the RayService
select them, and `ops status` reads them back, all from here."""

from __future__ import annotations

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

GPU_TAINT_KEY = "nvidia.com/gpu"
"""Taint `nvidia.com/gpu=true:NoSchedule` keeps pods that do not tolerate it off the GPU nodes."""

GPU_RESOURCE = "nvidia.com/gpu"
"""Advertised by the NVIDIA device plugin: one per GPU."""
EFA_RESOURCE = "vpc.amazonaws.com/efa"
"""Advertised by the EFA device plugin: one per EFA interface."""

AUTOSCALER_STACK_TAG_PREFIX = "ray-llm-eks/cluster-autoscaler/"
"""On a team's cluster the stack's GPU Auto Scaling group carries `<prefix><stack>=owned`: its Cluster
Autoscaler discovers, resizes and terminates only groups with that tag (manifests/cluster_autoscaler.py)."""
