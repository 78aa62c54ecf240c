"""An LLM served with prefill/decode disaggregation on Amazon EKS, in dependency order:

    config ──► VPC (private subnets, NAT) ──► EKS cluster + system node group ──► Kubernetes provider
                                                   │
                                                   ├──► GPU node group (EFA, one zone) ──► device plugins ─┐
                                                   ├──► KubeRay operator (system nodes) ───────────────────┤
                                                   └──────────────────────────────────────► RayService ◄───┘
                                                         (prefill and decode workers, NIXL over EFA)

Everything that can be wrong with the configuration fails in `load_settings` and `choose_placement`,
before the first resource is registered.
"""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_aws as aws
from pulumi.runtime import config as runtime_config

from components.cluster import Cluster, ClusterArgs
from components.device_plugins import DevicePlugins, DevicePluginsArgs
from components.gpu_node_group import GpuNodeGroup, GpuNodeGroupArgs
from components.kuberay import KubeRayOperator, KubeRayOperatorArgs
from components.network import Network, NetworkArgs
from components.rayservice import RayService, RayServiceArgs
from components.rayservice_spec import placement_for, serve_service_name
from config import load_settings
from config.placement import check_admins, choose_placement


def stack_config() -> dict[str, Any]:
    """Every config value of the stack, keyed `namespace:key`, as the Pulumi engine hands it over."""
    return {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}


def zones_offering(instance_type: str, region: str) -> list[str]:
    offerings = aws.ec2.get_instance_type_offerings(
        filters=[aws.ec2.GetInstanceTypeOfferingsFilterArgs(name="instance-type", values=[instance_type])],
        location_type="availability-zone",
        region=region,
    )
    return list(offerings.locations)


def main() -> None:
    settings = load_settings(stack_config())
    placement = choose_placement(settings, zones_offering(settings.gpu_nodes.instance_type, settings.region))
    if settings.cluster.admin_principal_arns:
        check_admins(settings, aws.get_caller_identity().arn)
    pulumi.log.info(settings.fit.summary())

    network = Network(
        "network", NetworkArgs(settings.network, placement.cluster_zones, settings.cluster.name)
    )
    cluster = Cluster(
        "cluster",
        ClusterArgs(
            settings.cluster,
            settings.system_nodes,
            settings.region,
            network.vpc_id,
            network.private_subnet_ids,
        ),
    )
    gpu_nodes = GpuNodeGroup(
        "gpu",
        GpuNodeGroupArgs(
            settings.gpu_nodes,
            cluster.eks_cluster,
            cluster.node_role,
            placement.gpu_zone,
            network.private_subnet_by_zone[placement.gpu_zone],
            cluster.node_role_policies,
        ),
    )
    device_plugins = DevicePlugins(
        "device-plugins",
        DevicePluginsArgs(cluster.provider, settings.gpu_nodes.instance_type, [gpu_nodes.node_group]),
    )
    kuberay = KubeRayOperator(
        "kuberay", KubeRayOperatorArgs(settings.kuberay, cluster.provider, [cluster.system_node_group])
    )
    hf_token = pulumi.Config().get_secret("huggingFaceToken")
    ray_service = RayService(
        "ray-llm",
        RayServiceArgs(
            settings,
            placement_for(settings),
            cluster.provider,
            wait_for=[kuberay.release, gpu_nodes.node_group, *device_plugins.releases],
            hf_token=hf_token,
        ),
    )

    service = serve_service_name(settings.serving.name)
    port_forward = f"kubectl port-forward -n {settings.serving.namespace} svc/{service} 8000:8000"
    pulumi.export("kubeconfig", cluster.kubeconfig)
    pulumi.export("clusterName", cluster.cluster_name)
    pulumi.export("clusterZones", list(placement.cluster_zones))
    pulumi.export("gpuAvailabilityZone", gpu_nodes.availability_zone)
    pulumi.export("vpcId", network.vpc_id)
    pulumi.export("namespace", ray_service.namespace)
    pulumi.export("serviceName", ray_service.service_name)
    pulumi.export("portForwardCommand", port_forward)
    pulumi.export("openaiBaseUrl", "http://127.0.0.1:8000/v1")
    pulumi.export("modelId", settings.model.id)


if __name__ == "__main__":
    main()
