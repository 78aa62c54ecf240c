"""The `addons` section: for each add-on the stack would install, install it or use the one a cluster
already runs (`cluster.existingClusterName`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from config.base import StrictModel

Choice = Literal["auto", "install", "existing"]

_CHOICE = (
    "`auto` (default): install it unless the existing cluster already runs one, which preview looks "
    "for and reports; `install`: the stack's, refused where one already runs; `existing`: the cluster's "
    "own, refused where none is found. The stack's own cluster has none, so there `auto` installs and "
    "`existing` is refused."
)


class AddonsConfig(StrictModel):
    """Each add-on the stack installs, as a choice; what preview found and decided is in its log."""

    nvidia_device_plugin: Choice = Field(
        "auto", description=f"NVIDIA's device plugin (`nvidia.com/gpu` on the GPU nodes). {_CHOICE}"
    )
    efa_device_plugin: Choice = Field(
        "auto",
        description="AWS's EFA device plugin (`vpc.amazonaws.com/efa`); an existing one must tolerate the "
        f"GPU nodes' taint (`gpuNodes.taint`). {_CHOICE}",
    )
    kuberay: Choice = Field(
        "auto",
        description="The KubeRay operator; an existing one must be at least the version the stack pins "
        f"(its RayService uses that version's fields). {_CHOICE}",
    )
    load_balancer_controller: Choice = Field(
        "auto", description=f"The AWS Load Balancer Controller, which makes the endpoint's NLB. {_CHOICE}"
    )
    envoy_gateway: Choice = Field(
        "auto",
        description="Envoy Gateway (the endpoint's API keys and timeouts); with an existing one the stack "
        f"uses its GatewayClass and runs its proxies where that controller does. {_CHOICE}",
    )
    prometheus: Choice = Field(
        "auto",
        description="kube-prometheus-stack (Prometheus, Grafana, Alertmanager, node-exporter). With an "
        "existing Prometheus (prometheus-operator's) the stack ships only its monitors, alert rules and "
        f"dashboards, labelled for that Prometheus's selectors. {_CHOICE}",
    )
    dcgm_exporter: Choice = Field("auto", description=f"NVIDIA's dcgm-exporter (GPU metrics). {_CHOICE}")
    cluster_autoscaler: Choice = Field(
        "auto",
        description="Cluster Autoscaler; an existing one finds the stack's GPU node group by its "
        f"auto-discovery tags, which the group carries either way. {_CHOICE}",
    )
