"""What the stack's Kubernetes objects depend on about the cluster they go to, beyond the stack file:
its VPC's ranges (network policies admit the load balancer and the API server from there), its
Kubernetes version, which add-ons the stack installs and which it uses (planning/addons.py), and where
the endpoint's load balancer goes. The stack's own cluster says it from the settings; an existing one
from what preview read (planning/existing_cluster.py)."""

from __future__ import annotations

from dataclasses import dataclass

from config import Settings, versions
from planning.addons import EVERYTHING, AddonPlan, as_chosen
from planning.existing_cluster import ExistingPlan


@dataclass(frozen=True)
class ClusterContext:
    vpc_cidrs: tuple[str, ...]
    kubernetes_version: str
    addons: AddonPlan = EVERYTHING
    load_balancer_subnets: tuple[str, ...] = ()
    """The NLB's subnets, named on its Service; empty: the controller finds them by their role tags
    (the stack's own VPC carries them)."""
    existing: bool = False


def own_cluster(settings: Settings) -> ClusterContext:
    """The cluster and VPC the stack creates."""
    return ClusterContext(
        vpc_cidrs=(str(settings.network.vpc_cidr),), kubernetes_version=settings.cluster.kubernetes_version
    )


def offline_existing(settings: Settings, vpc_cidrs: tuple[str, ...]) -> ClusterContext:
    """A team's cluster without reading it (`ops render --vpc-cidr`): the ranges given, the add-ons as
    the stack file chooses them (`auto` installs), the load balancer's subnets by the controller's tags."""
    return ClusterContext(
        vpc_cidrs=vpc_cidrs,
        kubernetes_version=versions.SUPPORTED_KUBERNETES[1],
        addons=as_chosen(settings),
        existing=True,
    )


def existing_cluster(settings: Settings, plan: ExistingPlan, addons: AddonPlan) -> ClusterContext:
    """A team's cluster, as read at preview."""
    return ClusterContext(
        vpc_cidrs=plan.cluster.vpc_cidrs,
        kubernetes_version=plan.cluster.version,
        addons=addons,
        load_balancer_subnets=plan.load_balancer_subnets(
            public=settings.endpoint.scheme == "internet-facing"
        ),
        existing=True,
    )
