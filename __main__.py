"""An LLM served with prefill/decode disaggregation on Amazon EKS, in dependency order:

    config ──► reads (world/: AWS and a team's cluster, as the AWS provider's identity) ──► planning
       ──► cost (Price List API) ──► VPC (private subnets, NAT) ──► EKS cluster + system node group
                                                   │                          ──► Kubernetes provider
                                                   ├──► GPU node group (EFA, one zone) ────────────────────┐
                                                   │      ├──► device plugins (GPU pods pend until they    │
                                                   │      │    advertise GPUs and EFA: no edge to Ray)     │
                                                   │      └──► Cluster Autoscaler (when it may resize)     │
                                                   ├──► KubeRay operator (system nodes) ───────────────────┤
                                                   ├──► AWS Load Balancer Controller ──┐                   │
                                                   │                                   │                   │
                                                   │    Endpoint: NLB ─► Envoy Gateway ─► RayService ◄─────┘
                                                   │    (API keys)  ◄──────────────────┘  (prefill and decode
                                                   │                                       workers, NIXL/EFA)
                                                   └──► Observability: EBS CSI, Prometheus, Grafana, dcgm,
                                                        monitors, alerts, dashboards (scrape all of the above)

On a team's cluster (`cluster.existingClusterName`) the VPC and cluster are read, not built: the stack's
own node groups join it, and each add-on above is installed only where the cluster lacks it (`addons.*`).

This file only composes. What the plan needs is read first, through one interface (`World`: world/),
as the AWS provider's identity; `load_settings` (the stack file) and planning/ (what the hardware and
AWS can carry, where the stack serves) refuse what cannot work before the first resource; manifests/
renders the Kubernetes objects and components/ holds the resources.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import pulumi
from pulumi.runtime import config as runtime_config

from components.cluster import Cluster
from components.cluster_autoscaler import ClusterAutoscaler
from components.cost import CostEstimate
from components.device_plugins import DevicePlugins
from components.endpoint import Endpoint
from components.existing_cluster import ExistingCluster
from components.gpu_node_group import GpuNodeGroup
from components.kuberay import KubeRayOperator
from components.load_balancer_controller import LoadBalancerController
from components.model_cache import ModelCache
from components.network import Network
from components.observability import Observability
from components.pod_identity import PodRoles
from components.rayservice import RayService
from config import PROJECT, load_settings
from manifests.addons import own_namespaces
from manifests.cluster_autoscaler import cluster_autoscaler_chart, node_group_tags, stack_tag
from manifests.endpoint import build_endpoint
from manifests.load_balancer import load_balancer_controller
from manifests.model_cache import COPY_SERVICE_ACCOUNT, RAY_SERVICE_ACCOUNT
from manifests.observability import build_observability, scraper
from manifests.pod_identity import cluster_arn
from manifests.rayservice import build_serving
from manifests.traffic import GATEWAY_NS, KUBERAY_NS, MONITORING, NODE_AGENTS, SERVING, Stack, policies
from planning import plan_stack
from planning.access import partition_of
from planning.cost import PriceCache, cost_report, price_cache_path, price_queries
from planning.model_cache import with_bucket
from planning.names import copied_names
from planning.nodes import placement
from planning.reservation import on_reservation
from planning.system_pods import cluster_autoscaling
from planning.upgrades import cluster_change_notice, mode_change_notice
from world import World, provider_identity
from world.reads import instance_types, reserved, where_it_serves

PROJECT_DIR = Path(__file__).parent


def stack_config() -> dict[str, Any]:
    """Every config value of the stack, keyed `namespace:key`, as the Pulumi engine hands it over."""
    return {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}


def warn(message: str | None) -> None:
    if message:
        pulumi.log.warn(message)


def main(world: World | None = None) -> None:
    """The stack, read from `world` (the real one, asked as the AWS provider's identity, by default)."""
    stack = pulumi.get_stack()
    config = stack_config()
    settings = load_settings(config)
    identity = provider_identity(
        config, settings.region, team_cluster=bool(settings.cluster.existing_cluster_name)
    )
    if world is None:
        from world.aws import AwsWorld

        world = AwsWorld(identity, PROJECT_DIR)
    settings, capacity = on_reservation(settings, reserved(settings, world), world.now())
    caller = world.caller()
    plan = plan_stack(
        settings, stack=stack, ec2=instance_types(settings, world), account_id=caller.account_id
    )
    stack_id = f"{PROJECT}/{stack}"
    where = where_it_serves(
        settings, plan, stack_id, world, caller, own_namespaces(settings, plan.cluster_name)
    )
    if where.existing:
        plan = replace(plan, context=where.context)
    # The bucket's name as the stack's record keeps it (planning/model_cache.py): never renamed.
    plan = replace(plan, model_cache=with_bucket(plan.model_cache, where.record.model_bucket))
    addons = where.context.addons
    # The nodes' labels and taints and what the stack's pods select and tolerate (stack-specific on a
    # team's cluster: planning/nodes.py).
    where_pods = placement(settings)
    for message in (*plan.summaries(), *where.infos, *(capacity.notes if capacity else ())):
        pulumi.log.info(message)
    copies = copied_names(stack, settings, world.stack_files(stack))
    for message in (*plan.warnings, *where.warnings, *(capacity.warnings if capacity else ()), *copies):
        pulumi.log.warn(message)

    # Who may hand the stack's Pod Identity roles to pods: this account's EKS, for this cluster.
    partition = partition_of(settings.region)
    trust = (caller.account_id, cluster_arn(partition, settings.region, caller.account_id, plan.cluster_name))

    CostEstimate(
        "cost",
        queries=price_queries(settings),
        region=settings.region,
        cache=PriceCache(price_cache_path(PROJECT_DIR)),
        build_report=lambda prices: cost_report(settings, prices, len(where.cluster_zones), capacity),
    )

    cluster: Cluster | ExistingCluster
    if where.existing:
        cluster = ExistingCluster(
            "cluster",
            plan=where.existing,
            config=settings.cluster,
            access_entries=where.access.entries,
            system_nodes=settings.system_nodes,
            placement=where_pods,
            cni_uses_node_role=where.existing.cluster.cni_uses_node_role,
            stack_id=stack_id,
            region=settings.region,
            account_id=caller.account_id,
            get_token=identity.get_token(where.existing.cluster.name),
        )
        vpc_id: pulumi.Input[str] = where.existing.cluster.vpc_id
        gpu_subnet: pulumi.Input[str] = where.existing.gpu_subnet.id
    else:
        network = Network(
            "network",
            config=settings.network,
            zones=where.cluster_zones,
            cluster_name=plan.cluster_name,
            record=where.record.tags(stack_id),
            region=settings.region,
            account_id=caller.account_id,
        )
        cluster = Cluster(
            "cluster",
            config=settings.cluster,
            cluster_name=plan.cluster_name,
            access_entries=where.access.entries,
            system_nodes=settings.system_nodes,
            region=settings.region,
            account_id=caller.account_id,
            vpc_id=network.vpc_id,
            private_subnet_ids=network.private_subnet_ids,
        )
        vpc_id = network.vpc_id
        gpu_subnet = network.private_subnet_by_zone[where.gpu_zone]
    # The Pod Identity agent, where the stack installs it: what pods with AWS roles wait for.
    agent = [cluster.pod_identity_agent] if cluster.pod_identity_agent else []
    roles = PodRoles(cluster.cluster_name, trust, partition)
    autoscaled = cluster_autoscaling(settings)
    # On a team's cluster the stack's Cluster Autoscaler manages only the group with the stack's tag.
    team_stack = stack if settings.cluster.existing_cluster_name else None
    gpu_nodes = GpuNodeGroup(
        "gpu",
        config=settings.gpu_nodes,
        placement=where_pods,
        cluster=cluster,
        zone=where.gpu_zone,
        subnet_id=gpu_subnet,
        autoscaled=autoscaled,
        tags=node_group_tags(plan.gpu.efa_interfaces) if autoscaled else {},
        network_cards=plan.gpu.network_cards or plan.gpu.efa_interfaces,
        record=where.record.tags(stack_id),
        capacity=capacity,
        autoscaler_tag=stack_tag(team_stack) if team_stack and autoscaled else None,
    )
    if autoscaled and addons.installs("clusterAutoscaler"):
        ClusterAutoscaler(
            "cluster-autoscaler",
            chart=cluster_autoscaler_chart(settings, cluster_name=plan.cluster_name, stack=stack),
            roles=roles,
            plain_cluster_name=plan.cluster_name,
            team_stack=team_stack,
            provider=cluster.provider,
            after=[cluster.system_node_group, *agent, gpu_nodes.node_group],
        )
    # The RayService does not wait for the device plugins: its GPU pods pend until the plugins advertise
    # GPUs and EFA, and the readiness Job (manifests/readiness.py) waits for the model to serve.
    DevicePlugins(
        "device-plugins",
        provider=cluster.provider,
        instance_type=settings.gpu_nodes.instance_type,
        placement=where_pods,
        gpu_nodes=[gpu_nodes.node_group],
        nvidia=addons.installs("nvidiaDevicePlugin"),
        efa=addons.installs("efaDevicePlugin"),
    )
    traffic = Stack(settings, plan.cluster, plan.kv_path)
    kuberay = (
        KubeRayOperator(
            "kuberay",
            config=settings.kuberay,
            provider=cluster.provider,
            system_nodes=[cluster.system_node_group],
            placement=where_pods,
            network_policies=policies(KUBERAY_NS, traffic),
        )
        if addons.installs("kuberay")
        else None
    )
    model_cache = (
        ModelCache(
            "model-cache",
            plan=plan.model_cache,
            force_destroy=settings.model_cache.force_destroy,
            roles=roles,
            namespace=settings.serving.namespace,
            readers=RAY_SERVICE_ACCOUNT,
            writers=COPY_SERVICE_ACCOUNT,
        )
        if plan.model_cache
        else None
    )
    serving = build_serving(settings, plan)
    # Pods get their roles' credentials from the agent: the copy Job and the Ray pods wait for both.
    pod_identity = [*agent, *model_cache.access] if model_cache else []
    ray_service = RayService(
        "ray-llm",
        manifests=serving,
        upgrade=plan.upgrade,
        provider=cluster.provider,
        depends_on=[
            *([kuberay.crds, kuberay.release] if kuberay else []),
            gpu_nodes.node_group,
            *pod_identity,
        ],
        copy_after=[cluster.system_node_group, *pod_identity],
        network_policies=policies(SERVING, traffic),
        parked=settings.autoscaling.parked,
    )

    endpoint_manifests = build_endpoint(settings, plan.cluster)
    endpoint = None
    if endpoint_manifests:
        load_balancer = (
            LoadBalancerController(
                "load-balancer-controller",
                chart=load_balancer_controller(settings, cluster_name=plan.cluster_name),
                roles=roles,
                vpc_id=vpc_id,
                region=settings.region,
                account_id=caller.account_id,
                provider=cluster.provider,
                after=[cluster.system_node_group, *agent],
            )
            if addons.installs("loadBalancerController")
            else None
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
            placement=where_pods,
            load_balancer_ready=load_balancer.ready if load_balancer else [],
            network_policies=policies(GATEWAY_NS, traffic) if endpoint_manifests.gateway_namespace else [],
        )

    observability = (
        Observability(
            "observability",
            manifests=build_observability(settings, plan.cluster, capacity),
            roles=roles,
            kubernetes_version=plan.cluster.kubernetes_version,
            provider=cluster.provider,
            system_nodes=[cluster.system_node_group],
            gpu_nodes=[gpu_nodes.node_group],
            pod_identity_agent=agent,
            # A team's EBS CSI driver may not be allowed the stack's key: the account's default key then.
            volume_key_arn=cluster.volume_key_arn if where.installs_ebs_csi else None,
            ebs_csi_driver=where.installs_ebs_csi,
            serving_namespace=ray_service.namespace,
            kuberay=[kuberay.release] if kuberay else [],
            team_cluster=where.existing is not None,
            network_policies=policies(MONITORING, traffic),
            node_agents_policies=policies(NODE_AGENTS, traffic),
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
    mode = settings.serving.mode
    pulumi.Output.all(previous.get_output("rayClusterFingerprint"), previous.get_output("servingMode")).apply(
        lambda before: warn(
            mode_change_notice(
                plan.upgrade,
                (before[0], before[1]),
                (fingerprint, mode),
                plan.gpu_workers,
                settings.autoscaling.graceful_shutdown_seconds,
            )
        )
    )

    namespace = settings.serving.namespace
    pulumi.export("kubeconfig", cluster.kubeconfig)
    pulumi.export("clusterName", cluster.cluster_name)
    pulumi.export("clusterZones", list(where.cluster_zones))
    pulumi.export("gpuAvailabilityZone", gpu_nodes.availability_zone)
    pulumi.export("vpcId", vpc_id)
    if cluster.secrets_key_arn is not None:
        pulumi.export("secretsKeyArn", cluster.secrets_key_arn)
    pulumi.export("volumeKeyArn", cluster.volume_key_arn)
    # The keys the stack made, not one the stack file names: destroy keeps them, `make destroy` prints them.
    made = [
        arn
        for arn, named in (
            (cluster.secrets_key_arn, settings.cluster.secrets_kms_key_arn),
            (cluster.volume_key_arn, settings.cluster.volume_kms_key_arn),
        )
        if arn is not None and not named
    ]
    pulumi.export("keptKeyArns", made)
    pulumi.export("namespace", ray_service.namespace)
    pulumi.export("serviceName", ray_service.service_name)
    pulumi.export(
        "portForwardCommand", f"kubectl port-forward -n {namespace} svc/{serving.service_name} 8000:8000"
    )
    pulumi.export("openaiBaseUrl", "http://127.0.0.1:8000/v1")
    if endpoint and endpoint_manifests:
        pulumi.export("endpointUrl", endpoint.url)
        pulumi.export("loadBalancerHostname", endpoint.load_balancer_hostname)
        service = endpoint_manifests.load_balancer.to_dict()["metadata"]
        pulumi.export("loadBalancerService", f"{service['namespace']}/{service['name']}")
        pulumi.export("apiKeys", endpoint.api_keys)
    if observability:
        pulumi.export("prometheusService", scraper(plan.cluster).ref)
    if observability and observability.grafana_admin_password is not None:
        pulumi.export("grafanaAdminPassword", observability.grafana_admin_password)
    pulumi.export("modelId", settings.model.id)
    pulumi.export("rayClusterFingerprint", fingerprint)
    pulumi.export("rayImage", plan.image)
    pulumi.export("servingMode", mode)


if __name__ == "__main__":
    main()
