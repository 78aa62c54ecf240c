"""A team's EKS cluster in the mocked AWS account, for the stacks that serve on one
(`cluster.existingClusterName`): what EKS and EC2 answer about it, and what its Kubernetes API lists.

The default is what a platform team commonly runs, and what Pulumi.byo.example.yaml names: Kubernetes
1.34 in a VPC with a secondary range for pods, three private subnets the cluster was created with (a
NAT route each), three public ones (an internet gateway route, explicitly associated), one more private
subnet outside the cluster's own, the VPC CNI with its own role and network policies on, the Pod
Identity agent, and in the cluster the AWS Load Balancer Controller, kube-prometheus-stack (its
Prometheus selecting monitors labelled `release: kube-prometheus-stack`) and Cluster Autoscaler. Tests
change a field (`dataclasses.replace`) to make another team's cluster.

Each answer is in the invoke's wire names, completed by `wire` from the SDK's own result types so a
field the program does not read is still present, as AWS's answers always are.
"""

from __future__ import annotations

import inspect
import json
import re
from dataclasses import dataclass, field, replace
from typing import Any

TEAM_CLUSTER = "platform-prod"
TEAM_VPC = "vpc-0a1b2c3d4e5f60718"
TEAM_REGION = "us-east-1"
CLUSTER_SG = "sg-0c1a5t3r5ecur1ty"


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(p.title() for p in rest)


def wire(result_type: type, **given: Any) -> dict[str, Any]:
    """An answer in wire names: `given` (wire names), and every other field of the SDK's result type
    empty, as the type requires it present."""
    answer: dict[str, Any] = {}
    for name, parameter in inspect.signature(result_type.__init__).parameters.items():
        if name in ("self", "__self__") or parameter.kind in (
            parameter.VAR_KEYWORD,
            parameter.VAR_POSITIONAL,
        ):
            continue
        key = _camel(name)
        if key in given:
            answer[key] = given.pop(key)
            continue
        hint = str(parameter.annotation)
        if "bool" in hint:
            answer[key] = False
        elif "int" in hint or "float" in hint:
            answer[key] = 0
        elif "Sequence" in hint or "list" in hint:
            answer[key] = []
        elif "Mapping" in hint or "dict" in hint:
            answer[key] = {}
        else:
            answer[key] = ""
    answer.update(given)
    return answer


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


def _workload(kind: str, namespace: str, name: str, app: str, image: str, **extra: Any) -> dict[str, Any]:
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
    _workload(
        "Deployment",
        "kube-system",
        "aws-load-balancer-controller",
        "aws-load-balancer-controller",
        "public.ecr.aws/eks/aws-load-balancer-controller:v2.13.3",
        release="aws-load-balancer-controller",
    ),
    _workload(
        "Deployment",
        "monitoring",
        "kube-prometheus-stack-operator",
        "kube-prometheus-stack-prometheus-operator",
        "quay.io/prometheus-operator/prometheus-operator:v0.86.0",
        release="kube-prometheus-stack",
    ),
    _workload(
        "Deployment",
        "kube-system",
        "cluster-autoscaler-aws-cluster-autoscaler",
        "aws-cluster-autoscaler",
        "registry.k8s.io/autoscaling/cluster-autoscaler:v1.34.1",
        release="cluster-autoscaler",
    ),
    _workload("Deployment", "kube-system", "coredns", "coredns", "coredns:v1.11.4"),
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
    """One team cluster: its EKS, EC2 and Kubernetes facts."""

    name: str = TEAM_CLUSTER
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
    def named(cls, name: str, region: str) -> TeamCluster:
        """The default team cluster under another name, its subnets in `region`'s zones a to d (what
        `ops plan` runs a stack file naming any cluster against)."""
        subnets = tuple(replace(s, zone=f"{region}{s.zone[-1]}") for s in DEFAULT_SUBNETS)
        return cls(name=name, subnets=subnets)

    @property
    def arn(self) -> str:
        return f"arn:aws:eks:{TEAM_REGION}:123456789012:cluster/{self.name}"

    # --- EKS and EC2 -----------------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        from pulumi_aws.eks import outputs

        return {
            "id": self.name,
            "name": self.name,
            "arn": self.arn,
            "version": self.version,
            "status": self.status,
            "endpoint": f"https://{self.name.upper()}0123456789ABCDEF.gr7.{TEAM_REGION}.eks.amazonaws.com",
            "certificateAuthorities": [
                wire(outputs.GetClusterCertificateAuthorityResult, data="LS0tLS1CRUdJTg==")
            ],
            "accessConfigs": [
                wire(outputs.GetClusterAccessConfigResult, authenticationMode=self.authentication_mode)
            ],
            "identities": [
                wire(
                    outputs.GetClusterIdentityResult,
                    oidcs=[
                        wire(
                            outputs.GetClusterIdentityOidcResult,
                            issuer=f"https://oidc.eks.example/id/{self.name}",
                        )
                    ],
                )
            ],
            "vpcConfig": wire(
                outputs.GetClusterVpcConfigResult,
                clusterSecurityGroupId=CLUSTER_SG,
                endpointPrivateAccess=True,
                subnetIds=[s.id for s in self.subnets if s.in_cluster],
                vpcId=self.vpc_id,
            ),
            "roleArn": f"arn:aws:iam::123456789012:role/{self.name}-cluster",
        }

    def vpc(self) -> dict[str, Any]:
        from pulumi_aws.ec2 import outputs

        return {
            "id": self.vpc_id,
            "cidrBlock": self.vpc_cidrs[0],
            "cidrBlockAssociations": [
                wire(
                    outputs.GetVpcCidrBlockAssociationResult,
                    associationId=f"vpc-cidr-assoc-{i}",
                    cidrBlock=c,
                    state="associated",
                )
                for i, c in enumerate(self.vpc_cidrs)
            ],
            "tags": {"Name": f"{self.name}-vpc"},
        }

    def route_tables(self) -> dict[str, dict[str, Any]]:
        """rtb-main: the VPC's main table (NAT for the private subnets, which it serves by default);
        rtb-public: an internet gateway route, explicitly associated with the public subnets."""
        from pulumi_aws.ec2 import outputs

        def route(**given: Any) -> dict[str, Any]:
            return wire(outputs.GetRouteTableRouteResult, cidrBlock="0.0.0.0/0", **given)

        def association(**given: Any) -> dict[str, Any]:
            return wire(outputs.GetRouteTableAssociationResult, **given)

        return {
            "rtb-main": {
                "id": "rtb-main",
                "routeTableId": "rtb-main",
                "routes": [route(natGatewayId="nat-0123456789abcdef0")],
                "associations": [association(main=True, routeTableId="rtb-main")],
            },
            "rtb-public": {
                "id": "rtb-public",
                "routeTableId": "rtb-public",
                "routes": [route(gatewayId="igw-0123456789abcdef0")],
                "associations": [
                    association(subnetId=s.id, routeTableId="rtb-public") for s in self.subnets if s.public
                ],
            },
        }

    def subnet(self, subnet_id: str) -> dict[str, Any] | None:
        found = next((s for s in self.subnets if s.id == subnet_id), None)
        if found is None:
            return None
        return {
            "id": found.id,
            "availabilityZone": found.zone,
            "cidrBlock": found.cidr,
            "availableIpAddressCount": 8000,
            "vpcId": self.vpc_id,
            "mapPublicIpOnLaunch": found.public,
            "tags": {},
        }

    def addon(self, name: str) -> dict[str, Any] | None:
        if name not in self.addons:
            return None
        given = self.addons[name]
        return {
            "id": f"{self.name}:{name}",
            "addonName": name,
            "clusterName": self.name,
            "configurationValues": given.get("configurationValues", ""),
            "serviceAccountRoleArn": given.get("serviceAccountRoleArn", ""),
            "podIdentityAssociations": given.get("podIdentityAssociations", []),
        }

    # --- Kubernetes -------------------------------------------------------------------------------------

    def api_lists(self) -> dict[str, Any]:
        """What its API lists, as `cluster_inventory` asks."""
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


def description(team: TeamCluster) -> Any:
    """The cluster as `__main__.existing_cluster` reads it from these answers (planning's type)."""
    from planning.existing_cluster import ClusterDescription
    from planning.existing_cluster import Subnet as Read

    with_roles = frozenset(
        name
        for name, given in team.addons.items()
        if given.get("serviceAccountRoleArn") or given.get("podIdentityAssociations")
    )
    described = team.describe()
    return ClusterDescription(
        name=team.name,
        arn=team.arn,
        version=team.version,
        endpoint=described["endpoint"],
        certificate_authority=described["certificateAuthorities"][0]["data"],
        vpc_id=team.vpc_id,
        vpc_cidrs=team.vpc_cidrs,
        subnets=tuple(Read(s.id, s.zone, s.cidr, not s.public, s.in_cluster, 8000) for s in team.subnets),
        security_group_id=CLUSTER_SG,
        oidc_issuer=f"https://oidc.eks.example/id/{team.name}",
        authentication_mode=team.authentication_mode,
        addons={name: given.get("configurationValues", "") for name, given in team.addons.items()},
        addon_roles=with_roles,
        status=team.status,
    )


def team_inventory(team: TeamCluster) -> Any:
    """The program's `cluster_inventory` against this cluster (planning/addons.py parses the lists)."""
    from planning.addons import inventory_from_api

    if not team.readable:
        return "the API server answered 401"
    lists = team.api_lists()
    return inventory_from_api(
        lists["crds"],
        lists["deployments"],
        lists["daemonsets"],
        lists["prometheuses"],
        lists["gateway_classes"],
        lists["gateway_configs"],
        lists["namespaces"],
    )


def tag_filter_values(filters: list[dict[str, Any]], tag: str) -> list[str]:
    for found in filters:
        if found["name"] == f"tag:{tag}":
            return list(found["values"])
    return []


SUBNET_ID = re.compile(r"^subnet-[0-9a-f]+$")
