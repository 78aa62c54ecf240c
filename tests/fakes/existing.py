"""A team's EKS cluster in the mocked AWS account, as EKS and EC2 answer the invokes world/aws.py makes
about it (the offline world, world/offline.py, holds its facts and answers the program's runs).

Each answer is in the invoke's wire names, completed by `wire` from the SDK's own result types so a
field the program does not read is still present, as AWS's answers always are. Tests change a field
(`dataclasses.replace`) to make another team's cluster.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, replace
from typing import Any

from world import offline
from world.offline import (
    CERTIFICATE_AUTHORITY,
    CLUSTER_SG,
    DEFAULT_CRDS,
    DEFAULT_DEPLOYMENTS,
    DEFAULT_PROMETHEUSES,
    DEFAULT_SUBNETS,
    TEAM_CLUSTER,
    TEAM_REGION,
    TEAM_VPC,
    Subnet,
)
from world.offline import (
    workload as _workload,
)

__all__ = [
    "CLUSTER_SG",
    "DEFAULT_CRDS",
    "DEFAULT_DEPLOYMENTS",
    "DEFAULT_PROMETHEUSES",
    "DEFAULT_SUBNETS",
    "TEAM_CLUSTER",
    "TEAM_REGION",
    "TEAM_VPC",
    "Subnet",
    "_workload",
]


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
class TeamCluster(offline.TeamCluster):
    """The offline world's team cluster, with what EKS and EC2 answer about it."""

    # --- EKS and EC2 -----------------------------------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        from pulumi_aws.eks import outputs

        return {
            "id": self.name,
            "name": self.name,
            "arn": self.arn,
            "version": self.version,
            "status": self.status,
            "endpoint": self.endpoint,
            "certificateAuthorities": [
                wire(outputs.GetClusterCertificateAuthorityResult, data=CERTIFICATE_AUTHORITY)
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
                            issuer=self.oidc_issuer,
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


TEAM_WITH_GATEWAY = replace(
    TeamCluster(),
    deployments=(
        *TeamCluster().deployments,
        _workload("Deployment", "gateways", "envoy-gateway", "gateway-helm", "envoyproxy/gateway:v1.8.2"),
    ),
    crds=(*TeamCluster().crds, "gatewayclasses.gateway.networking.k8s.io"),
    gateway_classes=(
        {
            "metadata": {"name": "eg"},
            "spec": {"controllerName": "gateway.envoyproxy.io/gatewayclass-controller"},
            "status": {"conditions": [{"type": "Accepted", "status": "True"}]},
        },
    ),
)
"""The team runs Envoy Gateway (in `gateways`, the default deploy mode) with an accepted GatewayClass."""


def description(team: offline.TeamCluster) -> Any:
    """The cluster as world/aws.py reads it from these answers (planning's type)."""
    return team.description()


def team_inventory(team: offline.TeamCluster) -> Any:
    """What world/kubernetes.py reads from its API (planning/addons.py parses the lists)."""
    return team.inventory()


def tag_filter_values(filters: list[dict[str, Any]], tag: str) -> list[str]:
    for found in filters:
        if found["name"] == f"tag:{tag}":
            return list(found["values"])
    return []


SUBNET_ID = re.compile(r"^subnet-[0-9a-f]+$")
