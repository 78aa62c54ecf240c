"""The Pulumi program: an LLM served with prefill/decode disaggregation on Amazon EKS, in dependency order:

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
from components.cost import CostEstimate
from components.endpoint import Endpoint
from components.existing_cluster import ExistingCluster
from components.gpu_node_group import GpuNodeGroup, SideGpuNodeGroups
from components.observability import Observability
from components.pod_identity import PodRoles
from components.rayservice import RayService
from config import PROJECT, load_settings
from config.sides import Side, split
from manifests.addons import own_namespaces
from manifests.endpoint.gateway import EndpointManifests
from manifests.observability.monitors import scraper
from manifests.pod_identity import cluster_arn
from manifests.rayservice import ServingManifests
from manifests.traffic import Stack
from planning import plan_stack
from planning.access import partition_of
from planning.cost import PriceCache, cost_report, price_cache_path, price_queries
from planning.model_cache import with_bucket
from planning.names import copied_names
from planning.nodes import placement
from planning.reservation import CapacityPlan, on_reservation
from planning.side_reservation import on_side_reservations
from planning.upgrades import cluster_change_notice, mode_change_notice
from program.steps import (
    Reading,
    add_cluster,
    add_endpoint,
    add_gpu_nodes,
    add_kuberay,
    add_observability,
    add_ray_service,
)
from world import World, provider_identity
from world.reads import instance_types, reserved, reserved_by_side, where_it_serves

PROJECT_DIR = Path(__file__).parent


def stack_config() -> dict[str, Any]:
    """Every config value of the stack, keyed `namespace:key`, as the Pulumi engine hands it over."""
    return {**runtime_config.get_config_env(), **runtime_config.CONFIG.get()}


def warn(message: str | None) -> None:
    if message:
        pulumi.log.warn(message)


def read(world: World | None) -> Reading:
    """config ──► reads ──► planning: everything the resources need, refused here if it cannot work."""
    stack = pulumi.get_stack()
    config = stack_config()
    settings = load_settings(config)
    identity = provider_identity(
        config, settings.region, team_cluster=bool(settings.cluster.existing_cluster_name)
    )
    if world is None:
        from world.aws import AwsWorld

        world = AwsWorld(identity, PROJECT_DIR)
    capacity: CapacityPlan | None = None
    side_capacity: dict[Side, CapacityPlan] = {}
    if split(settings):  # a side on gpuNodes' group runs on its reservation as a side
        by_side = reserved_by_side(settings, world)
        settings, side_capacity = on_side_reservations(settings, by_side, world.now())
    else:
        settings, capacity = on_reservation(settings, reserved(settings, world), world.now())
    capacities = [capacity] if capacity else list(side_capacity.values())
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
    for message in (*plan.summaries(), *where.infos, *(n for c in capacities for n in c.notes)):
        pulumi.log.info(message)
    copies = copied_names(stack, settings, world.stack_files(stack))
    for message in (*plan.warnings, *where.warnings, *(w for c in capacities for w in c.warnings), *copies):
        pulumi.log.warn(message)
    # Who may hand the stack's Pod Identity roles to pods: this account's EKS, for this cluster.
    partition = partition_of(settings.region)
    trust = (caller.account_id, cluster_arn(partition, settings.region, caller.account_id, plan.cluster_name))
    # The nodes' labels and taints and what the stack's pods select and tolerate (stack-specific on a
    # team's cluster: planning/nodes.py).
    where_pods = placement(settings)
    traffic = Stack(settings, plan.cluster_context, plan.kv_path)
    return Reading(
        stack,
        stack_id,
        settings,
        identity,
        caller,
        capacity,
        plan,
        where,
        where_pods,
        trust,
        partition,
        traffic,
        side_capacity,
    )


def warn_of_changes(reading: Reading, fingerprint: str) -> None:
    """What `up` would stop or replace, against the last deployment's outputs (planning/upgrades.py)."""
    plan, stack = reading.plan, reading.stack
    previous = pulumi.StackReference(f"{pulumi.get_organization() or 'organization'}/{PROJECT}/{stack}")
    pulumi.Output.all(previous.get_output("rayClusterFingerprint"), previous.get_output("rayImage")).apply(
        lambda before: warn(
            cluster_change_notice(plan.upgrade, (before[0], before[1]), (fingerprint, plan.image))
        )
    )
    mode = reading.settings.serving.mode
    pulumi.Output.all(previous.get_output("rayClusterFingerprint"), previous.get_output("servingMode")).apply(
        lambda before: warn(
            mode_change_notice(
                plan.upgrade,
                (before[0], before[1]),
                (fingerprint, mode),
                plan.gpu_workers,
                reading.settings.autoscaling.graceful_shutdown_seconds,
            )
        )
    )


def export_outputs(
    reading: Reading,
    cluster: Cluster | ExistingCluster,
    vpc_id: pulumi.Input[str],
    gpu_nodes: GpuNodeGroup | SideGpuNodeGroups,
    serving: ServingManifests,
    ray_service: RayService,
    endpoint: tuple[EndpointManifests | None, Endpoint | None],
    observability: Observability | None,
) -> None:
    """The stack's outputs (docs/operations.md names each)."""
    settings = reading.settings
    pulumi.export("kubeconfig", cluster.kubeconfig)
    pulumi.export("clusterName", cluster.cluster_name)
    pulumi.export("clusterZones", list(reading.where.cluster_zones))
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
    namespace = settings.serving.namespace
    pulumi.export(
        "portForwardCommand", f"kubectl port-forward -n {namespace} svc/{serving.service_name} 8000:8000"
    )
    pulumi.export("openaiBaseUrl", "http://127.0.0.1:8000/v1")
    manifests, front = endpoint
    if front and manifests:
        pulumi.export("endpointUrl", front.url)
        pulumi.export("loadBalancerHostname", front.load_balancer_hostname)
        service = manifests.load_balancer.to_dict()["metadata"]
        pulumi.export("loadBalancerService", f"{service['namespace']}/{service['name']}")
        pulumi.export("apiKeys", front.api_keys)
    if observability:
        pulumi.export("prometheusService", scraper(reading.plan.cluster_context).ref)
    if observability and observability.grafana_admin_password is not None:
        pulumi.export("grafanaAdminPassword", observability.grafana_admin_password)
    pulumi.export("modelId", settings.model.id)
    pulumi.export("rayClusterFingerprint", serving.rayservice.cluster_fingerprint())
    pulumi.export("rayImage", reading.plan.image)
    pulumi.export("servingMode", settings.serving.mode)


def estimate_cost(reading: Reading) -> None:
    """cost (Price List API)."""
    CostEstimate(
        "cost",
        queries=price_queries(reading.settings),
        region=reading.settings.region,
        cache=PriceCache(price_cache_path(PROJECT_DIR)),
        build_report=lambda prices: cost_report(
            reading.settings,
            prices,
            len(reading.where.cluster_zones),
            reading.capacity,
            side_capacity=reading.side_capacity,
        ),
    )


def main(world: World | None = None) -> None:
    """The stack, read from `world` (the real one, asked as the AWS provider's identity, by default),
    built in the diagram's order."""
    reading = read(world)
    estimate_cost(reading)
    cluster, vpc_id, gpu_subnet = add_cluster(reading)
    # The Pod Identity agent, where the stack installs it: what pods with AWS roles wait for.
    agent = [cluster.pod_identity_agent] if cluster.pod_identity_agent else []
    roles = PodRoles(cluster.cluster_name, reading.trust, reading.partition)
    gpu_nodes = add_gpu_nodes(reading, cluster, gpu_subnet, roles, agent)
    kuberay = add_kuberay(reading, cluster)
    serving, ray_service = add_ray_service(reading, cluster, roles, agent, kuberay, gpu_nodes)
    endpoint = add_endpoint(reading, cluster, roles, agent, vpc_id, ray_service)
    observability = add_observability(reading, cluster, roles, agent, gpu_nodes, kuberay, ray_service)
    warn_of_changes(reading, serving.rayservice.cluster_fingerprint())
    export_outputs(reading, cluster, vpc_id, gpu_nodes, serving, ray_service, endpoint, observability)


if __name__ == "__main__":
    main()
