"""Where the stack serves, decided before any resource from what the world said: its own VPC and
cluster (the zones and record of planning/zones.py), or a team's (planning/existing_cluster.py and
planning/addons.py), with who may administer it and what the stack keeps as its record."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from config import Settings
from planning.access import AccessPlan, plan_access, refresh_reach_warning
from planning.addons import (
    EBS_CSI_ADDON,
    AddonPlan,
    Inventory,
    crds_left_behind,
    network_policy_engines,
    plan_addons,
    self_managed_ebs_csi,
)
from planning.context import ClusterContext
from planning.context import existing_cluster as existing_context
from planning.existing_cluster import ClusterDescription, ExistingPlan, plan_existing
from planning.keys import key_choices, plan_key_changes
from planning.plan import Plan
from planning.reservation import capacity_change_warnings, capacity_record
from planning.zones import StackRecord, plan_zones


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
    team_ebs_csi: str | None = None
    """Where a team's self-managed EBS CSI driver runs (its Helm chart or manifests), if it does."""

    @property
    def installs_ebs_csi(self) -> bool:
        """Whether the stack installs the EBS CSI driver (for Prometheus's volume): always on its own
        cluster; on a team's, unless it runs one, as the EKS add-on or self-managed (never taken over)."""
        if self.existing is None:
            return True
        return EBS_CSI_ADDON not in self.existing.cluster.addons and self.team_ebs_csi is None


def own_cluster(
    settings: Settings,
    plan: Plan,
    stack_id: str,
    *,
    record: StackRecord | None,
    offered: Sequence[str],
    creator: str,
    model_bucket: str,
) -> Where:
    """The VPC and cluster the stack creates: zones and record from the stack's VPC (planning/zones.py);
    `creator`: who created (or creates) its cluster; `model_bucket`: its default bucket's kept name."""
    zones = plan_zones(settings, offered, record)
    key_warnings = plan_key_changes(settings, record)
    access = plan_access(settings, creator)
    kept = StackRecord(
        zones.cluster_zones,
        zones.gpu_zone,
        creator,
        *key_choices(settings),
        gpu_capacity=capacity_record(settings),
        model_bucket=model_bucket,
    )
    return Where(
        context=plan.cluster_context,
        gpu_zone=zones.gpu_zone,
        cluster_zones=zones.cluster_zones,
        record=kept,
        access=access,
        infos=access.notes,
        warnings=(*zones.warnings, *key_warnings, *capacity_change(settings, record)),
    )


def team_cluster(
    settings: Settings,
    *,
    cluster: ClusterDescription,
    record: StackRecord | None,
    offered: Sequence[str],
    inventory: Inventory | str,
    own_namespaces: Mapping[str, str],
    team_entries: Sequence[str],
    model_bucket: str,
) -> Where:
    """A team's cluster (`cluster.existingClusterName`): planned, with what runs in it
    (planning/existing_cluster.py, planning/addons.py). `team_entries`: the listed principals that
    already have an access entry the stack did not make; `model_bucket`: its default bucket's kept
    name."""
    readable = isinstance(inventory, Inventory)
    engines = network_policy_engines(inventory, cluster.enforces_network_policies) if readable else None
    existing = plan_existing(settings, cluster, offered, record, policy_engines=engines)
    driver = self_managed_ebs_csi(inventory) if isinstance(inventory, Inventory) else None
    ebs_notes = (
        (
            f"EBS CSI: the cluster's own, self-managed ({driver.where}), serves Prometheus's volume, "
            "encrypted with the account's default EBS key (its role may not use the stack's); the stack "
            "leaves it alone",
        )
        if driver and settings.observability.enabled
        else ()
    )
    addons = plan_addons(
        settings, inventory, ours=record.installed if record else (), own_namespaces=own_namespaces
    )
    access = plan_access(settings, None, existing_entries=list(team_entries))
    ours = stack_namespaces(settings, addons, own_namespaces)
    _, volumes = key_choices(settings)
    kept = StackRecord(
        (existing.gpu_zone,),
        existing.gpu_zone,
        volume_key=volumes,
        gpu_subnet=existing.gpu_subnet.id,
        installed=tuple(sorted(addons.install)),
        gpu_capacity=capacity_record(settings),
        model_bucket=model_bucket,
    )
    return Where(
        context=existing_context(settings, existing, addons),
        gpu_zone=existing.gpu_zone,
        cluster_zones=tuple(sorted({s.zone for s in existing.system_subnets})),
        record=kept,
        access=access,
        existing=existing,
        infos=(
            existing.summary(),
            *existing.notes,
            *addons.notes,
            *ebs_notes,
            *filter(None, [crds_left_behind(addons)]),
            *access.notes,
        ),
        warnings=(
            *existing.warnings,
            *addons.warnings,
            *filter(None, [refresh_reach_warning(settings, ours)]),
            *plan_key_changes(settings, record),
            *capacity_change(settings, record),
        ),
        team_ebs_csi=driver.where if driver else None,
    )


def stack_namespaces(settings: Settings, addons: AddonPlan, own_namespaces: Mapping[str, str]) -> set[str]:
    """The namespaces of the stack's own objects on a team's cluster: the serving namespace and those of
    the add-ons it installs."""
    installed = (own_namespaces[key] for key in addons.install if key in own_namespaces)
    return {settings.serving.namespace, *installed}


def capacity_change(settings: Settings, record: StackRecord | None) -> tuple[str, ...]:
    """Whether this up moves the GPU nodes on, off or between reservations (none on a first up)."""
    return capacity_change_warnings(settings, record.gpu_capacity) if record else ()
