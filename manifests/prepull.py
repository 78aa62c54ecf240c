"""Start pulling the Ray LLM image the moment a GPU node joins.

The image is ~15 GiB. Without this, a GPU node starts pulling it only when a Ray worker is scheduled
there, after the device plugins, the KubeRay operator, the model copy and the RayService. This
DaemonSet runs on every GPU node (tolerating its taint) with the same image doing nothing, so the pull
overlaps all of that, and the image stays referenced (kubelet's image GC keeps it) for worker restarts.
pulumi-kubernetes does not wait for it (skipAwait): a slow pull must not fail an `up`.
"""

from __future__ import annotations

from typing import Any

from config import Settings
from manifests.k8s import locked_container, unprivileged_pod
from planning import Plan
from planning.nodes import placement

NAME = "ray-image-prepull"


def prepull_daemon_set(settings: Settings, plan: Plan) -> dict[str, Any]:
    labels = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/part-of": settings.serving.name}
    where = placement(settings)
    tolerations = [where.gpu_toleration] if where.gpu_tainted else []
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {
            "name": NAME,
            "namespace": settings.serving.namespace,
            "labels": labels,
            "annotations": {"pulumi.com/skipAwait": "true"},
        },
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": where.gpu_selector,
                    "tolerations": tolerations,
                    "containers": [
                        {
                            "name": "hold",
                            "image": plan.image,
                            "command": ["sleep", "infinity"],
                            "resources": {
                                "requests": {"cpu": "1m", "memory": "8Mi"},
                                "limits": {"cpu": "10m", "memory": "32Mi"},
                            },
                            "securityContext": locked_container().model_dump(
                                mode="json", by_alias=True, exclude_none=True
                            ),
                        }
                    ],
                    # `sleep` needs nothing: no root, no API token.
                    "securityContext": unprivileged_pod().model_dump(
                        mode="json", by_alias=True, exclude_none=True
                    ),
                    "automountServiceAccountToken": False,
                    "terminationGracePeriodSeconds": 0,
                },
            },
        },
    }
