"""The stack's resources, one function per box of __main__.py's diagram, in its order: each takes what
the program read and planned (`Reading`) and the resources it stands on, and returns what later steps need.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pulumi

from components.cluster import Cluster
from components.cluster_autoscaler import ClusterAutoscaler
from components.device_plugins import DevicePlugins
from components.endpoint import Endpoint
from components.existing_cluster import ExistingCluster
from components.gpu_node_group import GpuNodeGroup, SideGpuNodeGroups
from components.kuberay import KubeRayOperator
from components.load_balancer_controller import LoadBalancerController
from components.model_cache import ModelCache
from components.network import Network
from components.observability import Observability
from components.pod_identity import PodRoles
from components.rayservice import RayService
from config import Settings
from config.sides import Side, gpu_instance_types, side_nodes
from manifests.cluster_autoscaler import cluster_autoscaler_chart, node_group_tags, stack_tag
from manifests.endpoint.gateway import EndpointManifests, build_endpoint
from manifests.load_balancer import load_balancer_controller
from manifests.model_cache import COPY_SERVICE_ACCOUNT, RAY_SERVICE_ACCOUNT
from manifests.observability.build import build_observability
from manifests.observability.kv_path import KvPathFigures
from manifests.rayservice import ServingManifests, build_serving
from manifests.traffic import GATEWAY_NS, KUBERAY_NS, MONITORING, NODE_AGENTS, SERVING, Stack, policies
from planning import Plan
from planning.nodes import Placement
from planning.reservation import CapacityPlan
from planning.system_pods import cluster_autoscaling
from planning.where import Where
from world import Caller, Identity


@dataclass(frozen=True)
class Reading:
    """What the steps below build from: the stack file's settings, the world's answers and the plan."""

    stack: str
    stack_id: str
    settings: Settings
    identity: Identity
    caller: Caller
    capacity: CapacityPlan | None
    plan: Plan
    where: Where
    placement: Placement
    trust: tuple[str, str]
    partition: str
    traffic: Stack
    """Who talks to whom in this stack (manifests/traffic.py): each owned namespace's policies."""
    side_capacity: Mapping[Side, CapacityPlan] = field(default_factory=dict)
    """Where each side has GPU nodes of its own: the reservation each reserved side runs on
    (planning/side_reservation.py); `capacity` is the shared group's."""

    @property
    def block(self) -> CapacityPlan | None:
        """The Capacity Block the GPU nodes run on, if any (the sides run on one block at most)."""
        found = [self.capacity] if self.capacity else list(self.side_capacity.values())
        return next((c for c in found if c.block), None)


def add_cluster(reading: Reading) -> tuple[Cluster | ExistingCluster, pulumi.Input[str], pulumi.Input[str]]:
    """VPC ──► EKS cluster + system node group ──► Kubernetes provider, or a team's cluster read: the
    cluster, its VPC and the GPU nodes' subnet."""
    settings, where = reading.settings, reading.where
    if where.existing:
        cluster = ExistingCluster(
            "cluster",
            plan=where.existing,
            config=settings.cluster,
            access_entries=where.access.entries,
            system_nodes=settings.system_nodes,
            placement=reading.placement,
            cni_uses_node_role=where.existing.cluster.cni_uses_node_role,
            stack_id=reading.stack_id,
            region=settings.region,
            account_id=reading.caller.account_id,
            get_token=reading.identity.get_token(where.existing.cluster.name),
        )
        return cluster, where.existing.cluster.vpc_id, where.existing.gpu_subnet.id
    network = Network(
        "network",
        config=settings.network,
        zones=where.cluster_zones,
        cluster_name=reading.plan.cluster_name,
        record=where.record.tags(reading.stack_id),
        region=settings.region,
        account_id=reading.caller.account_id,
    )
    own = Cluster(
        "cluster",
        config=settings.cluster,
        cluster_name=reading.plan.cluster_name,
        access_entries=where.access.entries,
        system_nodes=settings.system_nodes,
        region=settings.region,
        account_id=reading.caller.account_id,
        vpc_id=network.vpc_id,
        private_subnet_ids=network.private_subnet_ids,
    )
    return own, network.vpc_id, network.private_subnet_by_zone[where.gpu_zone]


def add_gpu_nodes(
    reading: Reading,
    cluster: Cluster | ExistingCluster,
    gpu_subnet: pulumi.Input[str],
    roles: PodRoles,
    agent: list,
) -> GpuNodeGroup | SideGpuNodeGroups:
    """GPU node group (EFA, one zone), or one per side (`prefillNodes`, `decodeNodes`) in one placement
    group ──► device plugins, and the Cluster Autoscaler when it may resize."""
    settings, plan = reading.settings, reading.plan
    autoscaled = cluster_autoscaling(settings)
    # On a team's cluster the stack's Cluster Autoscaler manages only the group with the stack's tag.
    team_stack = reading.stack if settings.cluster.existing_cluster_name else None
    gpu_nodes: GpuNodeGroup | SideGpuNodeGroups
    if plan.split:
        gpu_nodes = SideGpuNodeGroups(
            "gpu",
            sides=[
                (
                    side.side,
                    side_nodes(settings, side.side).config,
                    side.gpu.network_cards or side.gpu.efa_interfaces,
                )
                for side in plan.sides
            ],
            placement=reading.placement,
            cluster=cluster,
            zone=reading.where.gpu_zone,
            subnet_id=gpu_subnet,
            autoscaled=autoscaled,
            capacity=reading.side_capacity,
            record=reading.where.record.tags(reading.stack_id),
            autoscaler_tag=stack_tag(team_stack) if team_stack and autoscaled else None,
            tags={
                side.side: node_group_tags(side.gpu.efa_interfaces) if autoscaled else {}
                for side in plan.sides
            },
        )
        node_groups = gpu_nodes.node_groups
    else:
        gpu_nodes = GpuNodeGroup(
            "gpu",
            config=settings.gpu_nodes,
            placement=reading.placement,
            cluster=cluster,
            zone=reading.where.gpu_zone,
            subnet_id=gpu_subnet,
            autoscaled=autoscaled,
            tags=node_group_tags(plan.gpu.efa_interfaces) if autoscaled else {},
            network_cards=plan.gpu.network_cards or plan.gpu.efa_interfaces,
            record=reading.where.record.tags(reading.stack_id),
            capacity=reading.capacity,
            autoscaler_tag=stack_tag(team_stack) if team_stack and autoscaled else None,
        )
        node_groups = [gpu_nodes.node_group]
    if autoscaled and reading.where.context.addons.installs("clusterAutoscaler"):
        ClusterAutoscaler(
            "cluster-autoscaler",
            chart=cluster_autoscaler_chart(settings, cluster_name=plan.cluster_name, stack=reading.stack),
            roles=roles,
            plain_cluster_name=plan.cluster_name,
            team_stack=team_stack,
            provider=cluster.provider,
            after=[cluster.system_node_group, *agent, *node_groups],
        )
    # The RayService does not wait for the device plugins: its GPU pods pend until the plugins advertise
    # GPUs and EFA, and the readiness Job (manifests/readiness.py) waits for the model to serve.
    DevicePlugins(
        "device-plugins",
        provider=cluster.provider,
        instance_type=gpu_instance_types(settings),
        placement=reading.placement,
        gpu_nodes=node_groups,
        nvidia=reading.where.context.addons.installs("nvidiaDevicePlugin"),
        efa=reading.where.context.addons.installs("efaDevicePlugin"),
    )
    return gpu_nodes


def gpu_node_groups(gpu_nodes: GpuNodeGroup | SideGpuNodeGroups) -> list[pulumi.Resource]:
    """The GPU node group, or each side's."""
    if isinstance(gpu_nodes, SideGpuNodeGroups):
        return list(gpu_nodes.node_groups)
    return [gpu_nodes.node_group]


def add_kuberay(reading: Reading, cluster: Cluster | ExistingCluster) -> KubeRayOperator | None:
    """KubeRay operator (system nodes), unless a team's cluster runs one."""
    if not reading.where.context.addons.installs("kuberay"):
        return None
    return KubeRayOperator(
        "kuberay",
        config=reading.settings.kuberay,
        provider=cluster.provider,
        system_nodes=[cluster.system_node_group],
        placement=reading.placement,
        network_policies=policies(KUBERAY_NS, reading.traffic),
    )


def add_ray_service(
    reading: Reading,
    cluster: Cluster | ExistingCluster,
    roles: PodRoles,
    agent: list,
    kuberay: KubeRayOperator | None,
    gpu_nodes: GpuNodeGroup | SideGpuNodeGroups,
) -> tuple[ServingManifests, RayService]:
    """The model cache and the RayService (prefill and decode workers, NIXL/EFA)."""
    settings, plan = reading.settings, reading.plan
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
            *gpu_node_groups(gpu_nodes),
            *pod_identity,
        ],
        copy_after=[cluster.system_node_group, *pod_identity],
        network_policies=policies(SERVING, reading.traffic),
        parked=settings.autoscaling.parked,
    )
    return serving, ray_service


def add_endpoint(
    reading: Reading,
    cluster: Cluster | ExistingCluster,
    roles: PodRoles,
    agent: list,
    vpc_id: pulumi.Input[str],
    ray_service: RayService,
) -> tuple[EndpointManifests | None, Endpoint | None]:
    """AWS Load Balancer Controller ──► Endpoint: NLB ─► Envoy Gateway (API keys) ─► RayService."""
    settings = reading.settings
    manifests = build_endpoint(settings, reading.plan.cluster_context)
    if not manifests:
        return None, None
    load_balancer = (
        LoadBalancerController(
            "load-balancer-controller",
            chart=load_balancer_controller(settings, cluster_name=reading.plan.cluster_name),
            roles=roles,
            vpc_id=vpc_id,
            region=settings.region,
            account_id=reading.caller.account_id,
            provider=cluster.provider,
            after=[cluster.system_node_group, *agent],
        )
        if reading.where.context.addons.installs("loadBalancerController")
        else None
    )
    endpoint = Endpoint(
        "endpoint",
        manifests=manifests,
        rotations={client: c.rotation for client, c in settings.endpoint.clients.items()},
        given_keys=settings.api_keys,
        hostname=settings.endpoint.hostname,
        tls=settings.endpoint.tls,
        serving_namespace=ray_service.namespace,
        provider=cluster.provider,
        system_nodes=[cluster.system_node_group],
        placement=reading.placement,
        load_balancer_ready=load_balancer.ready if load_balancer else [],
        network_policies=policies(GATEWAY_NS, reading.traffic) if manifests.gateway_namespace else [],
    )
    return manifests, endpoint


def add_observability(
    reading: Reading,
    cluster: Cluster | ExistingCluster,
    roles: PodRoles,
    agent: list,
    gpu_nodes: GpuNodeGroup | SideGpuNodeGroups,
    kuberay: KubeRayOperator | None,
    ray_service: RayService,
) -> Observability | None:
    """Observability: EBS CSI, Prometheus, Grafana, dcgm, monitors, alerts, dashboards."""
    if not reading.settings.observability.enabled:
        return None
    return Observability(
        "observability",
        manifests=build_observability(
            reading.settings,
            reading.plan.cluster_context,
            reading.block,
            KvPathFigures.of(reading.plan),
        ),
        roles=roles,
        kubernetes_version=reading.plan.cluster_context.kubernetes_version,
        provider=cluster.provider,
        system_nodes=[cluster.system_node_group],
        gpu_nodes=gpu_node_groups(gpu_nodes),
        pod_identity_agent=agent,
        # A team's EBS CSI driver may not be allowed the stack's key: the account's default key then.
        volume_key_arn=cluster.volume_key_arn if reading.where.installs_ebs_csi else None,
        ebs_csi_driver=reading.where.installs_ebs_csi,
        serving_namespace=ray_service.namespace,
        kuberay=[kuberay.release] if kuberay else [],
        team_cluster=reading.where.existing is not None,
        network_policies=policies(MONITORING, reading.traffic),
        node_agents_policies=policies(NODE_AGENTS, reading.traffic),
    )
