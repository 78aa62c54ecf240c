"""An LLM served with prefill/decode disaggregation on Amazon EKS, in dependency order:

    config ──► cost (Price List API) ──► VPC (private subnets, NAT) ──► EKS cluster + system node group
                                                   │                          ──► Kubernetes provider
                                                   ├──► GPU node group (EFA, one zone) ──► device plugins ─┐
                                                   │      └──► Cluster Autoscaler (when it may resize)     │
                                                   ├──► KubeRay operator (system nodes) ───────────────────┤
                                                   ├──► AWS Load Balancer Controller ──┐                   │
                                                   │                                   │                   │
                                                   │    Endpoint: NLB ─► Envoy Gateway ─► RayService ◄─────┘
                                                   │    (API keys)  ◄──────────────────┘  (prefill and decode
                                                   │                                       workers, NIXL/EFA)
                                                   └──► Observability: EBS CSI, Prometheus, Grafana, dcgm,
                                                        monitors, alerts, dashboards (scrape all of the above)

Everything that can be wrong with the configuration fails in `load_settings` (the stack file) or in
`planning` (what the hardware and AWS can carry), before the first resource is registered. What the
plan needs from AWS is read first: which zones offer the GPU type, what this stack recorded on its VPC
when it was first deployed, and who created its cluster.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pulumi
import pulumi_aws as aws
from pulumi.runtime import config as runtime_config

from components.cluster import Cluster
from components.cluster_autoscaler import ClusterAutoscaler
from components.cost import CostEstimate
from components.device_plugins import DevicePlugins
from components.endpoint import Endpoint
from components.gpu_node_group import GpuNodeGroup
from components.kuberay import KubeRayOperator
from components.load_balancer_controller import LoadBalancerController
from components.model_cache import ModelCache
from components.network import Network
from components.observability import Observability
from components.rayservice import RayService
from config import PROJECT, ConfigError, Settings, load_settings
from manifests.cluster_autoscaler import cluster_autoscaler_chart, node_group_tags
from manifests.endpoint import build_endpoint
from manifests.load_balancer import load_balancer_controller
from manifests.model_cache import COPY_SERVICE_ACCOUNT, RAY_SERVICE_ACCOUNT
from manifests.observability import build_observability
from manifests.pod_identity import cluster_arn
from manifests.rayservice import build_serving
from manifests.serving_network import serving_policies
from planning import plan_stack
from planning.access import partition_of, plan_access
from planning.catalog import Ec2InstanceType
from planning.cost import PRICE_CACHE, PriceCache, cost_report, price_queries
from planning.keys import key_choices, plan_key_changes
from planning.names import copied_names, stack_files_beside
from planning.system_pods import cluster_autoscaling
from planning.upgrades import cluster_change_notice
from planning.zones import TAG_STACK, StackRecord, plan_zones


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


def described_by_ec2(settings: Settings) -> dict[str, Ec2InstanceType]:
    """EC2's own description of the GPU and system types (DescribeInstanceTypes)."""
    keys = {
        settings.gpu_nodes.instance_type: f"{PROJECT}:gpuNodes.instanceType",
        settings.system_nodes.instance_type: f"{PROJECT}:systemNodes.instanceType",
    }
    described = {}
    for name, key in keys.items():
        try:
            answer = aws.ec2.get_instance_type(instance_type=name, region=settings.region)
        except Exception as error:  # a failed invoke raises a bare Exception carrying AWS's message
            raise ConfigError(
                [f"{key}: EC2 in {settings.region} does not describe {name!r}: {error}"]
            ) from None
        gpus = list(answer.gpuses or [])
        described[name] = Ec2InstanceType(
            name=name,
            vcpus=answer.default_vcpus,
            memory_mib=answer.memory_size,
            gpus=sum(g.count for g in gpus),
            gpu_name=gpus[0].name if gpus else "",
            gpu_memory_mib=gpus[0].memory_size if gpus else 0,
            efa_max_interfaces=answer.efa_maximum_interfaces if answer.efa_supported else 0,
            instance_storage_gb=answer.total_instance_storage or 0,
            network_gbps=sum(card.baseline_bandwidth for card in answer.network_cards or []),
        )
    return described


def stack_record(stack_id: str, region: str) -> StackRecord | None:
    """What this stack recorded on its VPC when it was first deployed (None before that)."""
    found = aws.ec2.get_vpcs(
        filters=[aws.ec2.GetVpcsFilterArgs(name=f"tag:{TAG_STACK}", values=[stack_id])], region=region
    ).ids
    if len(found) > 1:
        raise ConfigError(
            [f"VPCs {sorted(found)} all carry {TAG_STACK}={stack_id}; remove the tag from all but one"]
        )
    return StackRecord.from_tags(aws.ec2.get_vpc(id=found[0], region=region).tags) if found else None


def cluster_creator(record: StackRecord | None, cluster_name: str, region: str, caller_arn: str) -> str:
    """Who created the cluster: the record's once the cluster exists, else whoever runs Pulumi now
    (an assumed role's session names its role)."""
    if record and record.creator and cluster_name in aws.eks.get_clusters(region=region).names:
        return record.creator
    return aws.iam.get_session_context(arn=caller_arn).issuer_arn


def price_cache() -> PriceCache:
    """The Price List API's answers, kept a day beside the project (`ops status` reads them too)."""
    return PriceCache(Path(os.environ.get("RAY_LLM_EKS_PRICE_CACHE") or Path(__file__).parent / PRICE_CACHE))


def warn(message: str | None) -> None:
    if message:
        pulumi.log.warn(message)


def main() -> None:
    stack = pulumi.get_stack()
    settings = load_settings(stack_config())
    caller = aws.get_caller_identity()
    plan = plan_stack(settings, stack=stack, ec2=described_by_ec2(settings), account_id=caller.account_id)
    stack_id = f"{PROJECT}/{stack}"
    record = stack_record(stack_id, settings.region)
    zones = plan_zones(settings, zones_offering(settings.gpu_nodes.instance_type, settings.region), record)
    key_warnings = plan_key_changes(settings, record)
    creator = cluster_creator(record, plan.cluster_name, settings.region, caller.arn)
    access = plan_access(settings, creator)
    for message in (
        plan.hardware_summary(),
        plan.fit.summary(),
        plan.kv_path.summary(),
        plan.kv_floor.summary(),
        *access.notes,
    ):
        pulumi.log.info(message)
    copies = copied_names(stack, settings, stack_files_beside(Path(__file__).parent, stack))
    for message in (*plan.warnings, *zones.warnings, *key_warnings, *copies):
        pulumi.log.warn(message)

    # Who may hand the stack's Pod Identity roles to pods: this account's EKS, for this cluster.
    trust = (
        caller.account_id,
        cluster_arn(partition_of(settings.region), settings.region, caller.account_id, plan.cluster_name),
    )

    CostEstimate(
        "cost",
        queries=price_queries(settings),
        region=settings.region,
        cache=price_cache(),
        build_report=lambda prices: cost_report(settings, prices, len(zones.cluster_zones)),
    )

    network = Network(
        "network",
        config=settings.network,
        zones=zones.cluster_zones,
        cluster_name=plan.cluster_name,
        record=StackRecord(zones.cluster_zones, zones.gpu_zone, creator, *key_choices(settings)).tags(
            stack_id
        ),
        region=settings.region,
        account_id=caller.account_id,
    )
    cluster = Cluster(
        "cluster",
        config=settings.cluster,
        cluster_name=plan.cluster_name,
        access_entries=access.entries,
        system_nodes=settings.system_nodes,
        region=settings.region,
        account_id=caller.account_id,
        vpc_id=network.vpc_id,
        private_subnet_ids=network.private_subnet_ids,
    )
    autoscaled = cluster_autoscaling(settings)
    gpu_nodes = GpuNodeGroup(
        "gpu",
        config=settings.gpu_nodes,
        cluster=cluster,
        zone=zones.gpu_zone,
        subnet_id=network.private_subnet_by_zone[zones.gpu_zone],
        autoscaled=autoscaled,
        tags=node_group_tags(plan.gpu.efa_interfaces) if autoscaled else {},
    )
    if autoscaled:
        ClusterAutoscaler(
            "cluster-autoscaler",
            chart=cluster_autoscaler_chart(settings, cluster_name=plan.cluster_name),
            cluster_name=cluster.cluster_name,
            plain_cluster_name=plan.cluster_name,
            pod_identity_trust=trust,
            partition=partition_of(settings.region),
            provider=cluster.provider,
            after=[cluster.system_node_group, cluster.pod_identity_agent, gpu_nodes.node_group],
        )
    device_plugins = DevicePlugins(
        "device-plugins",
        provider=cluster.provider,
        instance_type=settings.gpu_nodes.instance_type,
        gpu_nodes=[gpu_nodes.node_group],
    )
    kuberay = KubeRayOperator(
        "kuberay",
        config=settings.kuberay,
        provider=cluster.provider,
        system_nodes=[cluster.system_node_group],
    )
    model_cache = (
        ModelCache(
            "model-cache",
            plan=plan.model_cache,
            force_destroy=settings.model_cache.force_destroy,
            cluster_name=cluster.cluster_name,
            pod_identity_trust=trust,
            namespace=settings.serving.namespace,
            readers=RAY_SERVICE_ACCOUNT,
            writers=COPY_SERVICE_ACCOUNT,
            partition=partition_of(settings.region),
        )
        if plan.model_cache
        else None
    )
    serving = build_serving(settings, plan)
    # Pods get their roles' credentials from the agent: the copy Job and the Ray pods wait for both.
    pod_identity = [cluster.pod_identity_agent, *model_cache.access] if model_cache else []
    ray_service = RayService(
        "ray-llm",
        manifests=serving,
        upgrade=plan.upgrade,
        provider=cluster.provider,
        depends_on=[
            kuberay.crds,
            kuberay.release,
            gpu_nodes.node_group,
            *device_plugins.releases,
            *pod_identity,
        ],
        copy_after=[cluster.system_node_group, *pod_identity],
        network_policies=serving_policies(settings, plan.kv_path),
        parked=settings.autoscaling.parked,
    )

    endpoint_manifests = build_endpoint(settings)
    endpoint = None
    if endpoint_manifests:
        load_balancer = LoadBalancerController(
            "load-balancer-controller",
            chart=load_balancer_controller(settings, cluster_name=plan.cluster_name),
            cluster_name=cluster.cluster_name,
            pod_identity_trust=trust,
            vpc_id=network.vpc_id,
            region=settings.region,
            partition=partition_of(settings.region),
            account_id=caller.account_id,
            provider=cluster.provider,
            after=[cluster.system_node_group, cluster.pod_identity_agent],
        )
        endpoint = Endpoint(
            "endpoint",
            manifests=endpoint_manifests,
            rotations={client: c.rotation for client, c in settings.endpoint.clients.items()},
            given_keys=settings.api_keys,
            hostname=settings.endpoint.hostname,
            tls=settings.endpoint.tls,
            serving_namespace=ray_service.namespace,
            provider=cluster.provider,
            system_nodes=[cluster.system_node_group],
            load_balancer_ready=load_balancer.ready,
        )

    observability = (
        Observability(
            "observability",
            manifests=build_observability(settings),
            cluster_name=cluster.cluster_name,
            pod_identity_trust=trust,
            kubernetes_version=settings.cluster.kubernetes_version,
            partition=partition_of(settings.region),
            provider=cluster.provider,
            system_nodes=[cluster.system_node_group],
            gpu_nodes=[gpu_nodes.node_group],
            pod_identity_agent=cluster.pod_identity_agent,
            volume_key_arn=cluster.volume_key_arn,
            serving_namespace=ray_service.namespace,
            kuberay=[kuberay.release],
        )
        if settings.observability.enabled
        else None
    )

    fingerprint = serving.rayservice.cluster_fingerprint()
    previous = pulumi.StackReference(f"{pulumi.get_organization() or 'organization'}/{PROJECT}/{stack}")
    pulumi.Output.all(previous.get_output("rayClusterFingerprint"), previous.get_output("rayImage")).apply(
        lambda before: warn(
            cluster_change_notice(plan.upgrade, (before[0], before[1]), (fingerprint, plan.image))
        )
    )

    namespace = settings.serving.namespace
    pulumi.export("kubeconfig", cluster.kubeconfig)
    pulumi.export("clusterName", cluster.cluster_name)
    pulumi.export("clusterZones", list(zones.cluster_zones))
    pulumi.export("gpuAvailabilityZone", gpu_nodes.availability_zone)
    pulumi.export("vpcId", network.vpc_id)
    pulumi.export("secretsKeyArn", cluster.secrets_key_arn)
    pulumi.export("volumeKeyArn", cluster.volume_key_arn)
    pulumi.export("namespace", ray_service.namespace)
    pulumi.export("serviceName", ray_service.service_name)
    pulumi.export(
        "portForwardCommand", f"kubectl port-forward -n {namespace} svc/{serving.service_name} 8000:8000"
    )
    pulumi.export("openaiBaseUrl", "http://127.0.0.1:8000/v1")
    if endpoint:
        pulumi.export("endpointUrl", endpoint.url)
        pulumi.export("loadBalancerHostname", endpoint.load_balancer_hostname)
        pulumi.export("apiKeys", endpoint.api_keys)
    if observability:
        pulumi.export("grafanaAdminPassword", observability.grafana_admin_password)
    pulumi.export("modelId", settings.model.id)
    pulumi.export("rayClusterFingerprint", fingerprint)
    pulumi.export("rayImage", plan.image)


if __name__ == "__main__":
    main()
