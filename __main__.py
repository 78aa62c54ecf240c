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

On a cluster a team already runs (`cluster.existingClusterName`) the VPC and cluster are read, not built:
the stack's own system and GPU node groups join it, and each add-on above is installed only where the
cluster lacks it (`addons.*`; `team_cluster` below, planning/existing_cluster.py, planning/addons.py).

Everything that can be wrong with the configuration fails in `load_settings` (the stack file) or in
`planning` (what the hardware and AWS can carry), before the first resource is registered. What the
plan needs from AWS is read first: which zones offer the GPU type, what this stack recorded on its VPC
when it was first deployed, and who created its cluster.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pulumi
import pulumi_aws as aws
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
from components.rayservice import RayService
from config import PROJECT, ConfigError, Settings, load_settings
from manifests.charts import efa_device_plugin, kuberay_operator, nvidia_device_plugin
from manifests.cluster_autoscaler import cluster_autoscaler_chart, node_group_tags
from manifests.endpoint import build_endpoint, envoy_gateway_chart
from manifests.load_balancer import load_balancer_controller
from manifests.model_cache import COPY_SERVICE_ACCOUNT, RAY_SERVICE_ACCOUNT
from manifests.observability import (
    build_observability,
    dcgm_exporter_chart,
    kube_prometheus_stack_chart,
    scraper,
)
from manifests.pod_identity import cluster_arn
from manifests.rayservice import build_serving
from manifests.serving_network import serving_policies
from planning import Plan, plan_stack
from planning.access import AccessPlan, partition_of, plan_access
from planning.addons import ENVOY_GATEWAY_CONFIG, Inventory, inventory_from_api, plan_addons
from planning.catalog import Ec2InstanceType
from planning.context import ClusterContext
from planning.context import existing_cluster as existing_context
from planning.cost import PRICE_CACHE, PriceCache, cost_report, price_queries
from planning.existing_cluster import (
    POD_IDENTITY_AGENT,
    ClusterDescription,
    ExistingPlan,
    Subnet,
    plan_existing,
)
from planning.keys import key_choices, plan_key_changes
from planning.names import copied_names, stack_files_beside
from planning.reservation import KEY as RESERVATION_KEY
from planning.reservation import (
    ON_DEMAND,
    CapacityPlan,
    Reservation,
    capacity_change_warnings,
    plan_capacity,
    reservation_ids,
    reservations_from_api,
)
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
            network_cards=answer.maximum_network_cards or 0,
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


def existing_cluster(name: str, region: str) -> ClusterDescription:
    """A team's EKS cluster as EKS and EC2 describe it: its VPC's ranges, every subnet of the VPC with its
    zone and whether its route table (its own, else the VPC's main one: DescribeRouteTables' subnet filter
    matches explicit associations only) sends traffic to an internet gateway, and the EKS add-ons the
    stack cares about."""
    key = f"{PROJECT}:cluster.existingClusterName"
    try:
        found = aws.eks.get_cluster(name=name, region=region)
    except Exception as error:  # a failed invoke raises a bare Exception carrying AWS's message
        raise ConfigError(
            [f"{key}: EKS in {region} has no cluster {name!r} this identity may read: {error}"]
        ) from None
    vpc_config = found.vpc_config
    vpc = aws.ec2.get_vpc(id=vpc_config.vpc_id, region=region)
    cidrs = [a.cidr_block for a in vpc.cidr_block_associations or [] if a.state == "associated"]
    tables = [
        aws.ec2.get_route_table(route_table_id=table, region=region)
        for table in aws.ec2.get_route_tables(vpc_id=vpc_config.vpc_id, region=region).ids
    ]
    main_table = next((t for t in tables if any(a.main for a in t.associations or [])), None)
    explicit = {a.subnet_id: t for t in tables for a in t.associations or [] if a.subnet_id}

    def public(subnet_id: str) -> bool:
        table = explicit.get(subnet_id, main_table)
        return bool(table) and any((r.gateway_id or "").startswith("igw-") for r in table.routes or [])

    subnets = []
    filters = [aws.ec2.GetSubnetsFilterArgs(name="vpc-id", values=[vpc_config.vpc_id])]
    for subnet_id in sorted(aws.ec2.get_subnets(filters=filters, region=region).ids):
        subnet = aws.ec2.get_subnet(id=subnet_id, region=region)
        subnets.append(
            Subnet(
                id=subnet_id,
                zone=subnet.availability_zone,
                cidr=subnet.cidr_block,
                private=not public(subnet_id),
                in_cluster=subnet_id in vpc_config.subnet_ids,
                available_ips=subnet.available_ip_address_count,
            )
        )
    addons: dict[str, str] = {}
    with_roles = set()
    for addon in (POD_IDENTITY_AGENT, "vpc-cni", "aws-ebs-csi-driver"):
        try:
            answer = aws.eks.get_addon(addon_name=addon, cluster_name=name, region=region)
        except Exception:  # EKS answers ResourceNotFoundException for an add-on the cluster lacks
            continue
        addons[addon] = answer.configuration_values or ""
        if answer.service_account_role_arn or answer.pod_identity_associations:
            with_roles.add(addon)
    return ClusterDescription(
        name=name,
        arn=found.arn,
        version=found.version,
        endpoint=found.endpoint,
        certificate_authority=found.certificate_authorities[0].data,
        vpc_id=vpc_config.vpc_id,
        vpc_cidrs=tuple(dict.fromkeys(cidrs or [vpc.cidr_block])),
        subnets=tuple(subnets),
        security_group_id=vpc_config.cluster_security_group_id,
        oidc_issuer=found.identities[0].oidcs[0].issuer if found.identities else "",
        authentication_mode=found.access_configs[0].authentication_mode
        if found.access_configs
        else "CONFIG_MAP",
        addons=addons,
        addon_roles=frozenset(with_roles),
        status=found.status,
    )


def capacity_reservations(reference: str, region: str, profile: str | None = None) -> list[Reservation]:
    """The reservation `gpuNodes.capacityReservation` names, or a resource group's, as EC2 describes them.
    Through the AWS CLI (a prerequisite already): pulumi-aws has a data source for Capacity Blocks but
    none for On-Demand Capacity Reservations, and one reader serves both. `profile`: the stack's
    `aws:profile`, so the CLI asks as the provider does."""
    import subprocess

    def ask(*command: str) -> dict[str, Any]:
        argv = ["aws", *(["--profile", profile] if profile else []), "--region", region, *command]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        except (OSError, subprocess.SubprocessError) as error:
            raise ConfigError(
                [f"{RESERVATION_KEY}: cannot run the AWS CLI to read {reference}: {error}"]
            ) from None
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()
            reason = said[-1] if said else f"exit {done.returncode}"
            raise ConfigError([f"{RESERVATION_KEY}: EC2 in {region} does not describe {reference}: {reason}"])
        return json.loads(done.stdout or "{}")

    ids = [reference]
    if reference.startswith("arn:"):
        ids = reservation_ids(
            ask("resource-groups", "list-group-resources", "--group", reference, "--output", "json")
        )
        if not ids:
            return []
    return reservations_from_api(
        ask("ec2", "describe-capacity-reservations", "--capacity-reservation-ids", *ids, "--output", "json")
    )


def now() -> datetime:
    return datetime.now(UTC)


def reserved_capacity(settings: Settings) -> tuple[Settings, CapacityPlan | None]:
    """The reservation the GPU nodes run on, read and planned (planning/reservation.py), and the settings
    with the GPU zone pinned to its zone; the settings as they are without one."""
    reference = settings.gpu_nodes.capacity_reservation
    if not reference:
        return settings, None
    profile = stack_config().get("aws:profile")
    found = capacity_reservations(reference, settings.region, str(profile) if profile else None)
    capacity = plan_capacity(settings, found, now())
    gpu = settings.gpu_nodes.model_copy(update={"availability_zone": capacity.zone})
    return settings.model_copy(update={"gpu_nodes": gpu}), capacity


def existing_record(stack_id: str, region: str) -> StackRecord | None:
    """What an existing-cluster stack recorded on its own EFA security group (None before its first up)."""
    found = aws.ec2.get_security_groups(
        filters=[aws.ec2.GetSecurityGroupsFilterArgs(name=f"tag:{TAG_STACK}", values=[stack_id])],
        region=region,
    ).ids
    if len(found) > 1:
        raise ConfigError(
            [
                f"security groups {sorted(found)} all carry {TAG_STACK}={stack_id}; remove the tag from all "
                "but one"
            ]
        )
    return (
        StackRecord.from_tags(aws.ec2.get_security_group(id=found[0], region=region).tags) if found else None
    )


def access_entries_of(cluster_name: str, settings: Settings, region: str, stack_id: str) -> list[str]:
    """The listed principals that have an access entry on the cluster the stack did not make."""
    teams = []
    for arn in (*settings.cluster.admin_principal_arns, *settings.cluster.viewer_principal_arns):
        try:
            entry = aws.eks.get_access_entry(cluster_name=cluster_name, principal_arn=arn, region=region)
        except Exception:  # ResourceNotFoundException: no entry yet
            continue
        if (entry.tags or {}).get(TAG_STACK) != stack_id:
            teams.append(arn)
    return teams


def own_namespaces(settings: Settings, cluster_name: str) -> dict[str, str]:
    """Where the stack's own of each add-on runs (its chart's namespace), by `addons` key."""
    charts = {
        "nvidiaDevicePlugin": nvidia_device_plugin(),
        "efaDevicePlugin": efa_device_plugin(settings.gpu_nodes.instance_type),
        "kuberay": kuberay_operator(settings.kuberay),
        "loadBalancerController": load_balancer_controller(settings, cluster_name=cluster_name),
        "envoyGateway": envoy_gateway_chart(),
        "prometheus": kube_prometheus_stack_chart(settings),
        "dcgmExporter": dcgm_exporter_chart(),
        "clusterAutoscaler": cluster_autoscaler_chart(settings, cluster_name=cluster_name),
    }
    return {key: chart.namespace for key, chart in charts.items()}


def cluster_inventory(cluster: ClusterDescription, region: str) -> Inventory | str:
    """What runs in a team's cluster, from its Kubernetes API (CRDs by name, Deployments, DaemonSets,
    prometheus-operator's Prometheus objects, GatewayClasses, Envoy Gateway's configuration, the
    namespaces' labels), with the token `aws eks get-token` gives whoever runs Pulumi; why not, as a
    string, when it cannot be read (no AWS CLI, no access entry)."""
    import base64
    import subprocess
    import tempfile

    try:
        done = subprocess.run(
            [
                "aws",
                "--region",
                region,
                "eks",
                "get-token",
                "--cluster-name",
                cluster.name,
                "--output",
                "json",
            ],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        )
        token = json.loads(done.stdout)["status"]["token"]
    except (OSError, subprocess.SubprocessError, ValueError, KeyError) as error:
        return f"`aws eks get-token` failed: {getattr(error, 'stderr', None) or error}".strip()
    from kubernetes import client

    with tempfile.NamedTemporaryFile(suffix=".pem") as authority:
        authority.write(base64.b64decode(cluster.certificate_authority))
        authority.flush()
        configuration = client.Configuration()
        configuration.host = cluster.endpoint
        configuration.ssl_ca_cert = authority.name  # pyright: ignore[reportAttributeAccessIssue]
        api = client.ApiClient(configuration)
        headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}

        def listing(
            path: str, metadata_only: bool = False, query: list[tuple[str, str]] | None = None
        ) -> dict[str, Any]:
            accept = (
                "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1" if metadata_only else None
            )
            response = api.call_api(
                path,
                "GET",
                query_params=query or [],
                header_params={**headers, **({"Accept": accept} if accept else {})},
                auth_settings=[],
                _preload_content=False,
                _return_http_data_only=True,
                _request_timeout=30,
            )
            return json.loads(cast(Any, response).data)

        try:
            crds = listing("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", metadata_only=True)
            names = {c["metadata"]["name"] for c in crds.get("items") or []}
            return inventory_from_api(
                crds,
                listing("/apis/apps/v1/deployments"),
                listing("/apis/apps/v1/daemonsets"),
                listing("/apis/monitoring.coreos.com/v1/prometheuses")
                if "prometheuses.monitoring.coreos.com" in names
                else None,
                listing("/apis/gateway.networking.k8s.io/v1/gatewayclasses")
                if "gatewayclasses.gateway.networking.k8s.io" in names
                else None,
                listing(
                    "/api/v1/configmaps",
                    query=[("fieldSelector", f"metadata.name={ENVOY_GATEWAY_CONFIG[0]}")],
                ),
                listing("/api/v1/namespaces", metadata_only=True),
            )
        except Exception as error:  # the client's ApiException, urllib3's and TLS errors alike
            status = getattr(error, "status", None)
            return f"the API server answered {status}" if status else f"cannot reach the API server: {error}"


def ebs_csi_is_ours(where: Where) -> bool:
    """Whether the stack installs the EBS CSI driver (for Prometheus's volume): always on its own cluster;
    on a team's, unless it runs the add-on."""
    return where.existing is None or "aws-ebs-csi-driver" not in where.existing.cluster.addons


def service_ref(manifest: dict[str, Any]) -> str:
    return f"{manifest['metadata']['namespace']}/{manifest['metadata']['name']}"


def price_cache() -> PriceCache:
    """The Price List API's answers, kept a day beside the project (`ops status` reads them too)."""
    return PriceCache(Path(os.environ.get("RAY_LLM_EKS_PRICE_CACHE") or Path(__file__).parent / PRICE_CACHE))


def warn(message: str | None) -> None:
    if message:
        pulumi.log.warn(message)


@dataclass(frozen=True)
class Where:
    """Where the stack serves, as decided before any resource: its own VPC and cluster, or a team's."""

    context: ClusterContext
    gpu_zone: str
    cluster_zones: tuple[str, ...]
    """The zones of the cluster's (system) subnets."""
    record: StackRecord
    """What the stack keeps on its VPC (its own) or its EFA security group (an existing cluster's)."""
    access: AccessPlan
    existing: ExistingPlan | None = None
    infos: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def own_cluster(settings: Settings, plan: Plan, stack_id: str, caller_arn: str) -> Where:
    """The VPC and cluster the stack creates: zones and record from the stack's VPC (planning/zones.py)."""
    record = stack_record(stack_id, settings.region)
    zones = plan_zones(settings, zones_offering(settings.gpu_nodes.instance_type, settings.region), record)
    key_warnings = plan_key_changes(settings, record)
    creator = cluster_creator(record, plan.cluster_name, settings.region, caller_arn)
    access = plan_access(settings, creator)
    kept = StackRecord(
        zones.cluster_zones,
        zones.gpu_zone,
        creator,
        *key_choices(settings),
        gpu_capacity=settings.gpu_nodes.capacity_reservation or ON_DEMAND,
    )
    return Where(
        context=plan.cluster,
        gpu_zone=zones.gpu_zone,
        cluster_zones=zones.cluster_zones,
        record=kept,
        access=access,
        infos=access.notes,
        warnings=(*zones.warnings, *key_warnings, *capacity_change(settings, record)),
    )


def team_cluster(settings: Settings, stack_id: str) -> Where:
    """A team's cluster (`cluster.existingClusterName`): read, planned, and what runs in it
    (planning/existing_cluster.py, planning/addons.py)."""
    name = settings.cluster.existing_cluster_name
    assert name
    read = existing_cluster(name, settings.region)
    record = existing_record(stack_id, settings.region)
    existing = plan_existing(
        settings, read, zones_offering(settings.gpu_nodes.instance_type, settings.region), record
    )
    addons = plan_addons(
        settings,
        cluster_inventory(read, settings.region),
        ours=record.installed if record else (),
        own_namespaces=own_namespaces(settings, name),
    )
    entries = access_entries_of(read.name, settings, settings.region, stack_id)
    access = plan_access(settings, None, existing_entries=entries)
    _, volumes = key_choices(settings)
    kept = StackRecord(
        (existing.gpu_zone,),
        existing.gpu_zone,
        volume_key=volumes,
        gpu_subnet=existing.gpu_subnet.id,
        installed=tuple(sorted(addons.install)),
        gpu_capacity=settings.gpu_nodes.capacity_reservation or ON_DEMAND,
    )
    return Where(
        context=existing_context(settings, existing, addons),
        gpu_zone=existing.gpu_zone,
        cluster_zones=tuple(sorted({s.zone for s in existing.system_subnets})),
        record=kept,
        access=access,
        existing=existing,
        infos=(existing.summary(), *existing.notes, *addons.notes, *access.notes),
        warnings=(
            *existing.warnings,
            *addons.warnings,
            *plan_key_changes(settings, record),
            *capacity_change(settings, record),
        ),
    )


def capacity_change(settings: Settings, record: StackRecord | None) -> tuple[str, ...]:
    """Whether this up moves the GPU nodes on, off or between reservations (none on a first up)."""
    return capacity_change_warnings(settings, record.gpu_capacity) if record else ()


def main() -> None:
    stack = pulumi.get_stack()
    settings, capacity = reserved_capacity(load_settings(stack_config()))
    caller = aws.get_caller_identity()
    plan = plan_stack(settings, stack=stack, ec2=described_by_ec2(settings), account_id=caller.account_id)
    stack_id = f"{PROJECT}/{stack}"
    if settings.cluster.existing_cluster_name:
        where = team_cluster(settings, stack_id)
        plan = replace(plan, context=where.context)
    else:
        where = own_cluster(settings, plan, stack_id, caller.arn)
    addons = where.context.addons
    for message in (
        plan.hardware_summary(),
        plan.fit.summary(),
        plan.kv_path.summary(),
        plan.kv_floor.summary(),
        plan.kv_crossing.summary(),
        *where.infos,
        *(capacity.notes if capacity else ()),
    ):
        pulumi.log.info(message)
    copies = copied_names(stack, settings, stack_files_beside(Path(__file__).parent, stack))
    for message in (*plan.warnings, *where.warnings, *(capacity.warnings if capacity else ()), *copies):
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
        build_report=lambda prices: cost_report(settings, prices, len(where.cluster_zones), capacity),
    )

    cluster: Cluster | ExistingCluster
    if where.existing:
        network = None
        cluster = ExistingCluster(
            "cluster",
            plan=where.existing,
            config=settings.cluster,
            access_entries=where.access.entries,
            system_nodes=settings.system_nodes,
            cni_uses_node_role=where.existing.cluster.cni_uses_node_role,
            stack_id=stack_id,
            region=settings.region,
            account_id=caller.account_id,
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
    autoscaled = cluster_autoscaling(settings)
    gpu_nodes = GpuNodeGroup(
        "gpu",
        config=settings.gpu_nodes,
        cluster=cluster,
        zone=where.gpu_zone,
        subnet_id=gpu_subnet,
        autoscaled=autoscaled,
        tags=node_group_tags(plan.gpu.efa_interfaces) if autoscaled else {},
        network_cards=plan.gpu.network_cards or plan.gpu.efa_interfaces,
        record=where.record.tags(stack_id),
        capacity=capacity,
    )
    if autoscaled and addons.installs("clusterAutoscaler"):
        ClusterAutoscaler(
            "cluster-autoscaler",
            chart=cluster_autoscaler_chart(settings, cluster_name=plan.cluster_name),
            cluster_name=cluster.cluster_name,
            plain_cluster_name=plan.cluster_name,
            pod_identity_trust=trust,
            partition=partition_of(settings.region),
            provider=cluster.provider,
            after=[cluster.system_node_group, *agent, gpu_nodes.node_group],
        )
    device_plugins = DevicePlugins(
        "device-plugins",
        provider=cluster.provider,
        instance_type=settings.gpu_nodes.instance_type,
        gpu_nodes=[gpu_nodes.node_group],
        nvidia=addons.installs("nvidiaDevicePlugin"),
        efa=addons.installs("efaDevicePlugin"),
    )
    scraper_peer = scraper(plan.cluster).peer()
    kuberay = (
        KubeRayOperator(
            "kuberay",
            config=settings.kuberay,
            provider=cluster.provider,
            system_nodes=[cluster.system_node_group],
            scraper=scraper_peer,
        )
        if addons.installs("kuberay")
        else None
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
    pod_identity = [*agent, *model_cache.access] if model_cache else []
    ray_service = RayService(
        "ray-llm",
        manifests=serving,
        upgrade=plan.upgrade,
        provider=cluster.provider,
        depends_on=[
            *([kuberay.crds, kuberay.release] if kuberay else []),
            gpu_nodes.node_group,
            *device_plugins.releases,
            *pod_identity,
        ],
        copy_after=[cluster.system_node_group, *pod_identity],
        network_policies=serving_policies(settings, plan.kv_path, plan.cluster),
        parked=settings.autoscaling.parked,
    )

    endpoint_manifests = build_endpoint(settings, plan.cluster)
    endpoint = None
    if endpoint_manifests:
        load_balancer = (
            LoadBalancerController(
                "load-balancer-controller",
                chart=load_balancer_controller(settings, cluster_name=plan.cluster_name),
                cluster_name=cluster.cluster_name,
                pod_identity_trust=trust,
                vpc_id=vpc_id,
                region=settings.region,
                partition=partition_of(settings.region),
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
            load_balancer_ready=load_balancer.ready if load_balancer else [],
        )

    observability = (
        Observability(
            "observability",
            manifests=build_observability(settings, plan.cluster, capacity),
            cluster_name=cluster.cluster_name,
            pod_identity_trust=trust,
            kubernetes_version=plan.cluster.kubernetes_version,
            partition=partition_of(settings.region),
            provider=cluster.provider,
            system_nodes=[cluster.system_node_group],
            gpu_nodes=[gpu_nodes.node_group],
            pod_identity_agent=agent,
            # A team's EBS CSI driver may not be allowed the stack's key: the account's default key then.
            volume_key_arn=cluster.volume_key_arn if ebs_csi_is_ours(where) else None,
            ebs_csi_driver=ebs_csi_is_ours(where),
            serving_namespace=ray_service.namespace,
            kuberay=[kuberay.release] if kuberay else [],
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
    pulumi.export("clusterZones", list(where.cluster_zones))
    pulumi.export("gpuAvailabilityZone", gpu_nodes.availability_zone)
    pulumi.export("vpcId", vpc_id)
    if cluster.secrets_key_arn is not None:
        pulumi.export("secretsKeyArn", cluster.secrets_key_arn)
    pulumi.export("volumeKeyArn", cluster.volume_key_arn)
    pulumi.export("namespace", ray_service.namespace)
    pulumi.export("serviceName", ray_service.service_name)
    pulumi.export(
        "portForwardCommand", f"kubectl port-forward -n {namespace} svc/{serving.service_name} 8000:8000"
    )
    pulumi.export("openaiBaseUrl", "http://127.0.0.1:8000/v1")
    if endpoint and endpoint_manifests:
        pulumi.export("endpointUrl", endpoint.url)
        pulumi.export("loadBalancerHostname", endpoint.load_balancer_hostname)
        pulumi.export("loadBalancerService", service_ref(endpoint_manifests.load_balancer.to_dict()))
        pulumi.export("apiKeys", endpoint.api_keys)
    if observability:
        pulumi.export("prometheusService", scraper(plan.cluster).ref)
    if observability and observability.grafana_admin_password is not None:
        pulumi.export("grafanaAdminPassword", observability.grafana_admin_password)
    pulumi.export("modelId", settings.model.id)
    pulumi.export("rayClusterFingerprint", fingerprint)
    pulumi.export("rayImage", plan.image)


if __name__ == "__main__":
    main()
