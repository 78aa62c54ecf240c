"""The offline world: what `ops plan` and the tests read instead of AWS and a team's cluster.

It answers as `World` (world/reads.py) from values, never from the network: a mocked AWS account
(123456789012) whose region offers each GPU type in its zones a, b and c (DEFAULT_OFFERINGS names the
exceptions the tests rely on), EC2's real DescribeInstanceTypes figures (world/instance-types.json;
planning/catalog.py's for a type not in it), the stack's record if it was deployed, and, for a stack
that names them, a team's cluster (`TeamCluster`: what a platform team commonly runs, the one
Pulumi.byo.example.yaml names) and an active On-Demand Capacity Reservation that fits the stack file.
Its clock stands at NOW, so a reservation's dates, and so every run's graph, are fixed.

`OfflineWorld.for_stack` builds the world a stack file plans against (`ops plan`); tests build their
own by changing fields.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, Self

from config import Settings
from config.sides import all_side_nodes, gpu_zone_setting, split
from planning.addons import Inventory, inventory_from_api
from planning.catalog import Ec2InstanceType
from planning.existing_cluster import ClusterDescription
from planning.existing_cluster import Subnet as SubnetRead
from planning.reservation import Reservation, reservations_from_api
from planning.zones import TAG_STACK, StackRecord
from world.reads import Caller, UnreadableError, record_of

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
"""The offline world's clock."""
ACCOUNT_ID = "123456789012"
CALLER_ARN = f"arn:aws:sts::{ACCOUNT_ID}:assumed-role/deployer/ci-session"
"""Who runs `pulumi up` in the offline world (STS GetCallerIdentity)."""
INSTANCE_TYPES: dict[str, dict[str, Any]] = json.loads(
    (Path(__file__).parent / "instance-types.json").read_text()
)
"""DescribeInstanceTypes' real answers, in the invoke's wire names (world/instance-types.md)."""
DEFAULT_OFFERINGS = {
    "sa-east-1": {
        "g6.8xlarge": ["sa-east-1a", "sa-east-1b"],
        "g6e.8xlarge": ["sa-east-1a", "sa-east-1b"],
        "g6e.12xlarge": ["sa-east-1a", "sa-east-1b"],
    },
    "us-east-1": {
        "g6.8xlarge": ["us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d"],
        "p5.48xlarge": ["us-east-1a", "us-east-1b"],
    },
}
"""Zones that offer each instance type, per region (sa-east-1c lacks g6.8xlarge); with `any_region`,
a region not named here offers every type in its zones a, b and c."""

TEAM_CLUSTER = "platform-prod"
TEAM_VPC = "vpc-0a1b2c3d4e5f60718"
TEAM_REGION = "us-east-1"
CLUSTER_SG = "sg-0c1a5t3r5ecur1ty"
CERTIFICATE_AUTHORITY = "LS0tLS1CRUdJTg=="


@dataclass(frozen=True)
class Subnet:
    id: str
    zone: str
    cidr: str
    public: bool
    in_cluster: bool


DEFAULT_SUBNETS = (
    Subnet("subnet-0aa0000000000000a", "us-east-1a", "10.20.0.0/19", public=False, in_cluster=True),
    Subnet("subnet-0bb0000000000000b", "us-east-1b", "10.20.32.0/19", public=False, in_cluster=True),
    Subnet("subnet-0cc0000000000000c", "us-east-1c", "10.20.64.0/19", public=False, in_cluster=True),
    Subnet("subnet-0dd0000000000000d", "us-east-1d", "10.20.96.0/19", public=False, in_cluster=False),
    Subnet("subnet-0ea0000000000000a", "us-east-1a", "10.20.192.0/22", public=True, in_cluster=False),
    Subnet("subnet-0eb0000000000000b", "us-east-1b", "10.20.196.0/22", public=True, in_cluster=False),
    Subnet("subnet-0ec0000000000000c", "us-east-1c", "10.20.200.0/22", public=True, in_cluster=False),
)


def workload(kind: str, namespace: str, name: str, app: str, image: str, **extra: Any) -> dict[str, Any]:
    release = extra.pop("release", None)
    annotations = {"meta.helm.sh/release-name": release, "meta.helm.sh/release-namespace": namespace}
    return {
        "apiVersion": "apps/v1",
        "kind": kind,
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/name": app, "app.kubernetes.io/managed-by": "Helm"},
            **({"annotations": annotations} if release else {}),
        },
        "spec": {
            "template": {
                "metadata": {"labels": {"app.kubernetes.io/name": app, **extra.pop("pod_labels", {})}},
                "spec": {"containers": [{"name": app, "image": image}], **extra},
            }
        },
    }


DEFAULT_DEPLOYMENTS = (
    workload(
        "Deployment",
        "kube-system",
        "aws-load-balancer-controller",
        "aws-load-balancer-controller",
        "public.ecr.aws/eks/aws-load-balancer-controller:v2.13.3",
        release="aws-load-balancer-controller",
    ),
    workload(
        "Deployment",
        "monitoring",
        "kube-prometheus-stack-operator",
        "kube-prometheus-stack-prometheus-operator",
        "quay.io/prometheus-operator/prometheus-operator:v0.86.0",
        release="kube-prometheus-stack",
    ),
    workload(
        "Deployment",
        "kube-system",
        "cluster-autoscaler-aws-cluster-autoscaler",
        "aws-cluster-autoscaler",
        "registry.k8s.io/autoscaling/cluster-autoscaler:v1.34.1",
        release="cluster-autoscaler",
    ),
    workload("Deployment", "kube-system", "coredns", "coredns", "coredns:v1.11.4"),
)
DEFAULT_PROMETHEUSES = (
    {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "Prometheus",
        "metadata": {
            "name": "kube-prometheus-stack-prometheus",
            "namespace": "monitoring",
            "annotations": {
                "meta.helm.sh/release-name": "kube-prometheus-stack",
                "meta.helm.sh/release-namespace": "monitoring",
            },
        },
        "spec": {
            # What kube-prometheus-stack renders by default (*SelectorNilUsesHelmValues: true).
            "podMonitorSelector": {"matchLabels": {"release": "kube-prometheus-stack"}},
            "serviceMonitorSelector": {"matchLabels": {"release": "kube-prometheus-stack"}},
            "ruleSelector": {"matchLabels": {"release": "kube-prometheus-stack"}},
            "podMonitorNamespaceSelector": {},
        },
    },
)
DEFAULT_CRDS = (
    "prometheuses.monitoring.coreos.com",
    "podmonitors.monitoring.coreos.com",
    "servicemonitors.monitoring.coreos.com",
    "prometheusrules.monitoring.coreos.com",
    "targetgroupbindings.elbv2.k8s.aws",
)


@dataclass(frozen=True)
class TeamCluster:
    """One team cluster: its EKS, EC2 and Kubernetes facts. The default is what a platform team commonly
    runs: Kubernetes 1.34 in a VPC with a secondary range for pods, three private subnets the cluster
    was created with (a NAT route each), three public ones, one more private subnet outside the
    cluster's own, the VPC CNI with its own role and network policies on, the Pod Identity agent, and in
    the cluster the AWS Load Balancer Controller, kube-prometheus-stack (its Prometheus selecting
    monitors labelled `release: kube-prometheus-stack`) and Cluster Autoscaler."""

    name: str = TEAM_CLUSTER
    region: str = TEAM_REGION
    version: str = "1.34"
    status: str = "ACTIVE"
    authentication_mode: str = "API_AND_CONFIG_MAP"
    vpc_id: str = TEAM_VPC
    vpc_cidrs: tuple[str, ...] = ("10.20.0.0/16", "100.64.0.0/16")
    subnets: tuple[Subnet, ...] = DEFAULT_SUBNETS
    addons: dict[str, dict[str, Any]] = field(
        default_factory=lambda: {
            "vpc-cni": {
                "configurationValues": json.dumps({"enableNetworkPolicy": "true"}),
                "serviceAccountRoleArn": "arn:aws:iam::123456789012:role/platform-prod-vpc-cni",
            },
            "eks-pod-identity-agent": {},
        }
    )
    """EKS add-on name -> what GetAddon answers beyond its name."""
    access_entries: dict[str, dict[str, str]] = field(default_factory=dict)
    """principal ARN -> the entry's tags."""
    deployments: tuple[dict[str, Any], ...] = DEFAULT_DEPLOYMENTS
    daemonsets: tuple[dict[str, Any], ...] = ()
    prometheuses: tuple[dict[str, Any], ...] = DEFAULT_PROMETHEUSES
    gateway_classes: tuple[dict[str, Any], ...] = ()
    gateway_configs: tuple[dict[str, Any], ...] = ()
    """ConfigMaps named envoy-gateway-config (Envoy Gateway's own configuration)."""
    namespaces: dict[str, dict[str, str]] = field(
        default_factory=lambda: {n: {} for n in ("default", "kube-system", "monitoring", "ray-system")}
    )
    """namespace -> its labels beyond `kubernetes.io/metadata.name`, which the API server sets."""
    crds: tuple[str, ...] = DEFAULT_CRDS
    readable: bool = True
    """False: the Kubernetes API refuses whoever runs Pulumi (no access entry)."""

    @classmethod
    def named(cls, name: str, region: str) -> Self:
        """The default team cluster under another name, in `region`, its subnets in the region's zones a
        to d (what a stack file naming any cluster runs against offline)."""
        subnets = tuple(replace(s, zone=f"{region}{s.zone[-1]}") for s in DEFAULT_SUBNETS)
        return cls(name=name, region=region, subnets=subnets)

    @property
    def arn(self) -> str:
        return f"arn:aws:eks:{self.region}:123456789012:cluster/{self.name}"

    @property
    def endpoint(self) -> str:
        return f"https://{self.name.upper()}0123456789ABCDEF.gr7.{self.region}.eks.amazonaws.com"

    @property
    def oidc_issuer(self) -> str:
        return f"https://oidc.eks.example/id/{self.name}"

    def description(self) -> ClusterDescription:
        """The cluster as EKS and EC2 describe it (planning's type)."""
        with_roles = frozenset(
            name
            for name, given in self.addons.items()
            if given.get("serviceAccountRoleArn") or given.get("podIdentityAssociations")
        )
        return ClusterDescription(
            name=self.name,
            arn=self.arn,
            version=self.version,
            endpoint=self.endpoint,
            certificate_authority=CERTIFICATE_AUTHORITY,
            vpc_id=self.vpc_id,
            vpc_cidrs=self.vpc_cidrs,
            subnets=tuple(
                SubnetRead(s.id, s.zone, s.cidr, not s.public, s.in_cluster, 8000) for s in self.subnets
            ),
            security_group_id=CLUSTER_SG,
            oidc_issuer=self.oidc_issuer,
            authentication_mode=self.authentication_mode,
            addons={name: given.get("configurationValues", "") for name, given in self.addons.items()},
            addon_roles=with_roles,
            status=self.status,
        )

    def api_lists(self) -> dict[str, Any]:
        """What its Kubernetes API lists, as world/kubernetes.py asks."""
        return {
            "crds": {"items": [{"metadata": {"name": name}} for name in self.crds]},
            "deployments": {"items": list(self.deployments)},
            "daemonsets": {"items": list(self.daemonsets)},
            "prometheuses": {"items": list(self.prometheuses)}
            if "prometheuses.monitoring.coreos.com" in self.crds
            else None,
            "gateway_classes": {"items": list(self.gateway_classes)}
            if "gatewayclasses.gateway.networking.k8s.io" in self.crds
            else None,
            "gateway_configs": {"items": list(self.gateway_configs)},
            "namespaces": {
                "items": [
                    {"metadata": {"name": name, "labels": {"kubernetes.io/metadata.name": name, **labels}}}
                    for name, labels in self.namespaces.items()
                ]
            },
        }

    def inventory(self) -> Inventory | str:
        """What the program reads from its Kubernetes API (planning/addons.py parses the lists)."""
        if not self.readable:
            return "the API server answered 401"
        lists = self.api_lists()
        return inventory_from_api(
            lists["crds"],
            lists["deployments"],
            lists["daemonsets"],
            lists["prometheuses"],
            lists["gateway_classes"],
            lists["gateway_configs"],
            lists["namespaces"],
        )


def iso(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def reservation(
    id: str = "cr-0dc70000000000001",
    *,
    kind: str = "default",
    instance_type: str = "g6.8xlarge",
    zone: str = "us-east-1b",
    total: int = 2,
    available: int | None = None,
    state: str = "active",
    start: datetime = NOW - timedelta(days=1),
    end: datetime | None = None,
    placement_group: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One DescribeCapacityReservations item, field names as the AWS CLI prints them."""
    item: dict[str, Any] = {
        "CapacityReservationId": id,
        "OwnerId": ACCOUNT_ID,
        "CapacityReservationArn": f"arn:aws:ec2:{zone[:-1]}:{ACCOUNT_ID}:capacity-reservation/{id}",
        "InstanceType": instance_type,
        "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": zone,
        "Tenancy": "default",
        "TotalInstanceCount": total,
        "AvailableInstanceCount": total if available is None else available,
        "EbsOptimized": True,
        "State": state,
        "StartDate": iso(start),
        "EndDateType": "limited" if end else "unlimited",
        "InstanceMatchCriteria": "targeted",
        "CreateDate": iso(start - timedelta(days=2)),
        "ReservationType": kind,
        **({"EndDate": iso(end)} if end else {}),
        **(
            {"PlacementGroupArn": f"arn:aws:ec2:{zone[:-1]}:{ACCOUNT_ID}:placement-group/{placement_group}"}
            if placement_group
            else {}
        ),
    }
    return {**item, **extra}


def catalog_answer(name: str) -> dict[str, Any] | None:
    """EC2's answer synthesized from planning/catalog.py, for catalogued types instance-types.json
    lacks."""
    from planning.catalog import CATALOG

    spec = CATALOG.get(name)
    if spec is None:
        return None
    gpus = [
        {
            "name": spec.gpu_model,
            "manufacturer": "NVIDIA",
            "count": spec.gpus,
            "memorySize": round(spec.gpu_memory_gb * 1e9 / 2**20),
        }
    ]
    answer = {
        "id": name,
        "defaultVcpus": spec.vcpu,
        "memorySize": spec.memory_gib * 1024,
        "efaSupported": spec.has_efa,
    }
    answer["gpuses"] = gpus if spec.has_gpu else []
    if spec.has_efa:
        answer["efaMaximumInterfaces"] = spec.efa_interfaces
    return answer


def from_answer(name: str, answer: Mapping[str, Any]) -> Ec2InstanceType:
    """DescribeInstanceTypes' answer (wire names) as planning reads it: what world/aws.py makes of the
    invoke's result."""
    gpus = list(answer.get("gpuses") or [])
    return Ec2InstanceType(
        name=name,
        vcpus=answer["defaultVcpus"],
        memory_mib=answer["memorySize"],
        gpus=sum(g["count"] for g in gpus),
        gpu_name=gpus[0]["name"] if gpus else "",
        gpu_memory_mib=gpus[0]["memorySize"] if gpus else 0,
        efa_max_interfaces=(answer.get("efaMaximumInterfaces") or 0) if answer.get("efaSupported") else 0,
        instance_storage_gb=answer.get("totalInstanceStorage") or 0,
        network_gbps=sum(card["baselineBandwidth"] for card in answer.get("networkCards") or []),
        network_cards=answer.get("maximumNetworkCards") or 0,
    )


@dataclass
class OfflineWorld:
    """`World` answered from values: what exists in the offline AWS account before a run. Empty: a
    first `up`."""

    region: str = "us-east-1"
    offerings: Mapping[str, Mapping[str, Sequence[str]]] = field(default_factory=lambda: DEFAULT_OFFERINGS)
    any_region: bool = True
    """A region `offerings` does not name offers every type in its zones a, b and c."""
    vpc_tags: dict[str, str] | None = None
    """The stack's VPC's tags (its record), once it was deployed."""
    clusters: list[str] = field(default_factory=list)
    """The region's EKS clusters."""
    caller_arn: str = CALLER_ARN
    instance_types: dict[str, dict[str, Any]] = field(default_factory=lambda: dict(INSTANCE_TYPES))
    """What EC2 says about each instance type (DescribeInstanceTypes, wire names)."""
    team: TeamCluster | None = field(default_factory=TeamCluster)
    """A team's cluster in the region, for `cluster.existingClusterName`."""
    efa_group_tags: dict[str, str] | None = None
    """An existing-cluster stack's record, on its EFA security group (its tags after an `up`)."""
    reservations_held: tuple[dict[str, Any], ...] = ()
    """The account's capacity reservations, DescribeCapacityReservations' items."""
    resource_groups: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """Resource group ARN -> the IDs of the capacity reservations in it."""
    clock: datetime = NOW
    other_stacks: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """The `config:` of the project's other stack files."""

    @classmethod
    def for_stack(
        cls,
        settings: Settings,
        other_stacks: Mapping[str, Mapping[str, Any]],
        team_type: type[TeamCluster] = TeamCluster,
        reservation_kind: str = "default",
    ) -> OfflineWorld:
        """The world a stack file plans against offline (`ops plan`, and every test that runs a stack
        file): a team's cluster of the name it gives, in its region's zones; the reservation it names
        (each side's, where the sides have GPU nodes of their own), active, of its GPU type, maxSize of
        them, in its GPU zone (or the region's zone b), in a cluster placement group ("reserved"), no
        end date: an On-Demand Capacity Reservation (`reservation_kind` "default", EC2's name for it).
        Whether it is a Capacity Block only EC2 can say: with `reservation_kind` "capacity-block" it is
        one, active since yesterday for a week, in no placement group (`ops plan --reservation
        capacity-block`). `team_type`: the class the team's cluster is made of (the tests' answers
        EKS's invokes too)."""
        region = settings.region
        existing = settings.cluster.existing_cluster_name
        world = cls(
            region=region,
            team=team_type.named(existing, region) if existing else team_type(),
            other_stacks=other_stacks,
        )
        sections = [s.config for s in all_side_nodes(settings)] if split(settings) else [settings.gpu_nodes]
        named = {c.capacity_reservation: c for c in sections if c.capacity_reservation}
        if not named:
            return world
        zone = gpu_zone_setting(settings) or f"{region}b"
        block = reservation_kind == "capacity-block"
        held, groups = [], {}
        for number, (reference, gpu) in enumerate(named.items()):
            found = f"cr-{number:017d}" if reference.startswith("arn:") else reference
            held.append(
                reservation(
                    found,
                    kind=reservation_kind,
                    instance_type=gpu.instance_type,
                    zone=gpu.availability_zone or zone,
                    # Both sides on one reservation: room for both.
                    total=sum(c.max_size for c in sections if c.capacity_reservation == reference),
                    placement_group=None if block else "reserved",
                    **({"start": NOW - timedelta(days=1), "end": NOW + timedelta(days=6)} if block else {}),
                )
            )
            if reference.startswith("arn:"):
                groups[reference] = (found,)
        return replace(world, reservations_held=tuple(held), resource_groups=groups)

    def caller(self) -> Caller:
        return Caller(account_id=ACCOUNT_ID, arn=self.caller_arn)

    def now(self) -> datetime:
        return self.clock

    def zones_offering(self, instance_type: str) -> list[str]:
        if self.any_region and self.region not in self.offerings:
            return [f"{self.region}{letter}" for letter in "abc"]
        return list(self.offerings.get(self.region, {}).get(instance_type, []))

    def instance_type(self, name: str) -> Ec2InstanceType:
        answer = self.instance_types.get(name) or catalog_answer(name)
        if answer is None:
            raise UnreadableError(f"InvalidInstanceType: {name} does not exist")
        return from_answer(name, answer)

    def stack_record(self, stack_id: str) -> StackRecord | None:
        tags = self.vpc_tags or {}
        found = ["vpc-deployed"] if tags.get(TAG_STACK) == stack_id else []
        return record_of(found, "VPCs", stack_id, lambda _: tags)

    def cluster_names(self) -> list[str]:
        return list(self.clusters)

    def session_issuer(self, arn: str) -> str:
        _, partition, _, _, account, resource = arn.split(":", 5)
        if resource.startswith("assumed-role/"):
            return f"arn:{partition}:iam::{account}:role/{resource.split('/')[1]}"
        return arn

    def existing_cluster(self, name: str) -> ClusterDescription:
        if self.team is None or self.team.name != name:
            raise UnreadableError("ResourceNotFoundException: No cluster found")
        return self.team.description()

    def existing_record(self, stack_id: str) -> StackRecord | None:
        tags = self.efa_group_tags or {}
        found = ["sg-0ef0ef0ef0ef0ef00"] if tags.get(TAG_STACK) == stack_id else []
        return record_of(found, "security groups", stack_id, lambda _: tags)

    def access_entries(self, cluster_name: str, principals: Sequence[str], stack_id: str) -> list[str]:
        entries = self.team.access_entries if self.team and self.team.name == cluster_name else {}
        return [arn for arn in principals if arn in entries and entries[arn].get(TAG_STACK) != stack_id]

    def reservations(self, reference: str) -> list[Reservation]:
        ids = [reference]
        if reference.startswith("arn:"):
            if reference not in self.resource_groups:
                raise UnreadableError("NotFoundException")
            ids = list(self.resource_groups[reference])
            if not ids:
                return []
        by_id = {r["CapacityReservationId"]: r for r in self.reservations_held}
        missing = [i for i in ids if i not in by_id]
        if missing:
            raise UnreadableError(
                "An error occurred (InvalidCapacityReservationId.NotFound) when calling the "
                f"DescribeCapacityReservations operation: The capacity reservation ID '{missing[0]}' "
                "does not exist"
            )
        return reservations_from_api({"CapacityReservations": [by_id[i] for i in ids]})

    def inventory(self, cluster: ClusterDescription) -> Inventory | str:
        if self.team is None or self.team.name != cluster.name:
            return "no such cluster"
        return self.team.inventory()

    def stack_files(self, stack: str) -> Mapping[str, Mapping[str, Any]]:
        return {name: config for name, config in self.other_stacks.items() if name != stack}
