"""An EKS cluster a team already runs (`cluster.existingClusterName`), as the stack reads it, and where
the stack's own node groups go in it.

`__main__.py` reads the cluster at every preview and up (EKS DescribeCluster and its add-ons, EC2's
subnets and route tables in the cluster's VPC); `plan_existing` decides from that, and refuses before any
resource what cannot work, saying what to do:

- a Kubernetes version the stack's pinned charts and controllers do not support;
- authentication mode `CONFIG_MAP` (the stack's access entries need the API);
- no EKS Pod Identity agent (every controller and the Ray pods get their AWS access through it), unless
  `cluster.installPodIdentityAgent` lets the stack add it;
- no private subnet (no route to an internet gateway) in a zone that offers the GPU type, or a
  `gpuNodes.subnetId` that is not one.

The GPU subnet, once chosen, is recorded on the stack's own EFA security group (as the zones are on the
stack's VPC otherwise: planning/zones.py) and kept, whatever subnets the team adds later.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from config import PROJECT, ConfigError, Settings, versions
from config.sides import all_side_nodes, gpu_instance_types, gpu_subnet_setting, gpu_zone_setting
from planning.zones import StackRecord

POD_IDENTITY_AGENT = "eks-pod-identity-agent"
ACCESS_ENTRY_MODES = ("API", "API_AND_CONFIG_MAP")


@dataclass(frozen=True)
class Subnet:
    id: str
    zone: str
    cidr: str
    private: bool
    """No route to an internet gateway in its route table (its own, else the VPC's main one)."""
    in_cluster: bool
    """One of the subnets the cluster was created with (its control-plane ENIs may live there)."""
    available_ips: int = 0


@dataclass(frozen=True)
class ClusterDescription:
    """What EKS and EC2 say about the cluster and its VPC."""

    name: str
    arn: str
    version: str
    """Kubernetes minor, e.g. `1.35`."""
    endpoint: str
    certificate_authority: str
    """Base64 PEM, as DescribeCluster gives it."""
    vpc_id: str
    vpc_cidrs: tuple[str, ...]
    """Every IPv4 range of the VPC (the primary and any associated: pods may get addresses from any)."""
    subnets: tuple[Subnet, ...]
    """Every subnet of the VPC."""
    security_group_id: str
    """The EKS cluster security group (every managed node group and the control plane's ENIs)."""
    oidc_issuer: str
    authentication_mode: str
    addons: Mapping[str, str] = field(default_factory=dict)
    """EKS add-ons installed: name -> its configuration values (JSON, or empty)."""
    addon_roles: frozenset[str] = frozenset()
    """The add-ons with an IAM role of their own (IRSA or a Pod Identity association)."""
    status: str = "ACTIVE"

    @property
    def cni_uses_node_role(self) -> bool:
        """aws-node on the stack's nodes borrows their role unless the VPC CNI add-on has its own: the
        role then needs AmazonEKS_CNI_Policy (a self-managed VPC CNI is assumed to, as EKS's default)."""
        return "vpc-cni" not in self.addon_roles

    @property
    def enforces_network_policies(self) -> bool:
        """The VPC CNI add-on's network policy agent is on (`enableNetworkPolicy`, add-on >= v1.14)."""
        try:
            config = json.loads(self.addons.get("vpc-cni") or "{}")
        except ValueError:
            return False
        return str(config.get("enableNetworkPolicy", "")).lower() == "true"


@dataclass(frozen=True)
class ExistingPlan:
    cluster: ClusterDescription
    gpu_subnet: Subnet
    system_subnets: tuple[Subnet, ...]
    """Where the stack's system node group goes: the cluster's private subnets."""
    install_pod_identity_agent: bool
    warnings: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def gpu_zone(self) -> str:
        return self.gpu_subnet.zone

    def load_balancer_subnets(self, public: bool) -> tuple[str, ...]:
        """One subnet per zone for the endpoint's NLB: public for an internet-facing one, private
        otherwise; the cluster's own first. The load balancer controller would look for subnets by their
        `kubernetes.io/role/*elb` tags, which a team's VPC need not carry."""
        chosen: dict[str, Subnet] = {}
        for subnet in sorted(self.cluster.subnets, key=lambda s: (not s.in_cluster, s.zone, s.id)):
            if subnet.private != public and subnet.zone not in chosen:
                chosen[subnet.zone] = subnet
        return tuple(s.id for s in sorted(chosen.values(), key=lambda s: s.zone))

    def summary(self) -> str:
        c = self.cluster
        return (
            f"existing cluster {c.name}: Kubernetes {c.version}, VPC {c.vpc_id} ({', '.join(c.vpc_cidrs)}), "
            f"authentication {c.authentication_mode}; GPU nodes in {self.gpu_subnet.id} "
            f"({self.gpu_zone}), system nodes in {', '.join(s.id for s in self.system_subnets)}"
        )


def plan_existing(
    settings: Settings,
    cluster: ClusterDescription,
    offered_zones: Iterable[str],
    record: StackRecord | None,
    policy_engines: Sequence[str] | None = None,
) -> ExistingPlan:
    """Where the stack's node groups go in `cluster`; ConfigError for every reason it cannot serve there.
    `policy_engines`: what enforces NetworkPolicies there (planning/addons.py `network_policy_engines`,
    from the cluster's workloads); None where they could not be read: the VPC CNI add-on's configuration
    alone then says."""
    key = f"{PROJECT}:cluster.existingClusterName"
    problems: list[str] = []
    warnings: list[str] = []
    notes: list[str] = []
    offered = sorted(set(offered_zones))
    if cluster.status != "ACTIVE":
        problems.append(
            f"{key}: cluster {cluster.name} is {cluster.status}, not ACTIVE; wait for it or fix it"
        )
    unsupported = versions.stack_version_problem(cluster.version)
    if unsupported:
        problems.append(
            f"{key}: cluster {cluster.name} runs {unsupported}. Upgrade the cluster, or use a release of "
            "this stack made for that version"
        )
    if cluster.authentication_mode not in ACCESS_ENTRY_MODES:
        problems.append(
            f"{key}: cluster {cluster.name} authenticates with {cluster.authentication_mode} only; the stack "
            "grants access with EKS access entries, which need API_AND_CONFIG_MAP (keeps your aws-auth "
            f"ConfigMap working): `aws eks update-cluster-config --name {cluster.name} --access-config "
            "authenticationMode=API_AND_CONFIG_MAP`"
        )
    install_agent = False
    if POD_IDENTITY_AGENT not in cluster.addons:
        if settings.cluster.install_pod_identity_agent:
            install_agent = True
            notes.append(
                f"cluster {cluster.name} has no EKS Pod Identity agent: the stack adds the add-on "
                "(cluster.installPodIdentityAgent), and `destroy` leaves it running"
            )
        else:
            problems.append(
                f"{key}: cluster {cluster.name} has no EKS Pod Identity agent, through which the stack's "
                "controllers and Ray pods get their AWS access. Set "
                f"{PROJECT}:cluster.installPodIdentityAgent: "
                f"true to let the stack add it, or add it yourself: `aws eks create-addon --cluster-name "
                f"{cluster.name} --addon-name {POD_IDENTITY_AGENT}`"
            )
    enforced = bool(policy_engines) if policy_engines is not None else cluster.enforces_network_policies
    if not enforced:
        unenforced = (
            f"cluster {cluster.name} enforces no NetworkPolicy (the VPC CNI's network policy agent is off, "
            "and no Calico or Cilium runs), so the stack's default deny and the Ray pods' listed paths would "
            "be ignored: every pod of the cluster would reach Ray Serve on :8000 without an API key, and "
            "Prometheus. Turn enforcement on: the vpc-cni add-on's configuration "
            f'`{{"enableNetworkPolicy": "true"}}` (`aws eks update-addon --cluster-name {cluster.name} '
            "--addon-name vpc-cni --resolve-conflicts PRESERVE --configuration-values "
            '\'{"enableNetworkPolicy": "true"}\'`), or on a self-managed VPC CNI its '
            "`enableNetworkPolicy=true` chart value"
        )
        if settings.cluster.accept_unenforced_network_policies:
            warnings.append(f"{unenforced} (cluster.acceptUnenforcedNetworkPolicies: accepted)")
        else:
            problems.append(
                f"{key}: {unenforced}; or set {PROJECT}:cluster.acceptUnenforcedNetworkPolicies: true to "
                "serve there anyway"
            )
    gpu_subnet = _gpu_subnet(settings, cluster, offered, record, problems, warnings)
    system = tuple(s for s in cluster.subnets if s.private and s.in_cluster) or tuple(
        s for s in cluster.subnets if s.private
    )
    if not system:
        problems.append(
            f"{key}: VPC {cluster.vpc_id} of cluster {cluster.name} has no private subnet (one whose route "
            "table has no route to an internet gateway); the stack's nodes never get public addresses"
        )
    if problems:
        raise ConfigError(problems)
    assert gpu_subnet is not None
    return ExistingPlan(
        cluster=cluster,
        gpu_subnet=gpu_subnet,
        system_subnets=tuple(sorted(system, key=lambda s: (s.zone, s.id))),
        install_pod_identity_agent=install_agent,
        warnings=tuple(warnings),
        notes=tuple(notes),
    )


def _gpu_subnet(
    settings: Settings,
    cluster: ClusterDescription,
    offered: list[str],
    record: StackRecord | None,
    problems: list[str],
    warnings: list[str],
) -> Subnet | None:
    """The given subnet, else the recorded one, else the first private subnet (the cluster's own first)
    in a zone that offers the GPU type (`gpuNodes.availabilityZone`, if set). Where the sides have GPU
    nodes of their own, one subnet for both (EFA does not cross subnets): the one their sections give
    (config/settings.py refuses two), in a zone that offers both types."""
    types = gpu_instance_types(settings)
    instance = types if isinstance(types, str) else " and ".join(types)
    zone = gpu_zone_setting(settings)
    by_id = {s.id: s for s in cluster.subnets}
    section, given = gpu_subnet_setting(settings)
    zone_section = next(
        (s.section for s in all_side_nodes(settings) if s.config.availability_zone == zone and zone),
        "gpuNodes",
    )
    key = f"{PROJECT}:{section}.subnetId"

    def unusable(subnet: Subnet) -> str | None:
        if not subnet.private:
            return f"{subnet.id} is public (its route table sends 0.0.0.0/0 to an internet gateway)"
        if subnet.zone not in offered:
            return (
                f"{subnet.id} is in {subnet.zone}, which does not offer {instance} (zones that do: {offered})"
            )
        if zone and subnet.zone != zone:
            return f"{subnet.id} is in {subnet.zone}, not {PROJECT}:{zone_section}.availabilityZone {zone}"
        return None

    if given:
        subnet = by_id.get(given)
        if subnet is None:
            problems.append(
                f"{key}: {given} is not a subnet of VPC {cluster.vpc_id} of cluster {cluster.name}"
            )
            return None
        reason = unusable(subnet)
        if reason:
            problems.append(f"{key}: {reason}")
            return None
        if not subnet.in_cluster:
            warnings.append(_outside(subnet, cluster))
        return subnet
    recorded = by_id.get(record.gpu_subnet) if record and record.gpu_subnet else None
    if record and record.gpu_subnet and recorded is None:
        problems.append(
            f"{key}: {record.gpu_subnet}, where this stack's GPU nodes run, is gone from VPC "
            f"{cluster.vpc_id}; "
            f"set {key} to another private subnet in a zone that offers {instance}"
        )
        return None
    if recorded is not None:
        reason = unusable(recorded)
        if reason is None:
            return recorded
        problems.append(
            f"{key}: {reason}; it is where this stack's GPU nodes run, and moving them replaces the GPU node "
            f"group: set {key} to a subnet that works"
        )
        return None
    candidates = [s for s in cluster.subnets if unusable(s) is None]
    if not candidates:
        private_zones = sorted({s.zone for s in cluster.subnets if s.private})
        where = (
            f"{PROJECT}:{zone_section}.availabilityZone {zone}" if zone else f"zones that offer {instance}"
        )
        problems.append(
            f"{PROJECT}:cluster.existingClusterName: VPC {cluster.vpc_id} has no private subnet in {where} "
            f"(zones that offer it: {offered or 'none'}; zones with private subnets: "
            f"{private_zones or 'none'}). "
            f"Add a private subnet there (with a NAT route), or pick another {section}.instanceType"
        )
        return None
    chosen = sorted(candidates, key=lambda s: (not s.in_cluster, s.zone, s.id))[0]
    if not chosen.in_cluster:
        warnings.append(_outside(chosen, cluster))
    return chosen


def _outside(subnet: Subnet, cluster: ClusterDescription) -> str:
    return (
        f"the GPU nodes go to {subnet.id} ({subnet.zone}), a subnet of the VPC outside cluster "
        f"{cluster.name}'s own: its nodes reach the control plane through the VPC as any node does"
    )
