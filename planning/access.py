"""Who may use the cluster's Kubernetes API, and the partition its ARNs live in.

EKS makes whoever creates the cluster an admin with an access entry of its own (pulumi-eks keeps
`bootstrapClusterCreatorAdminPermissions` on). A second entry for that principal fails with
ResourceInUseException, so the creator, recorded on the stack's VPC (planning/zones.py), is skipped
when listed; every other listed principal gets its entry, whoever runs `pulumi up`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from config import PROJECT, ConfigError, Settings

ADMIN_POLICY = "AmazonEKSClusterAdminPolicy"
VIEWER_POLICY = "AmazonEKSAdminViewPolicy"
"""Read every object, Secrets included (Helm keeps releases in Secrets, so a preview reads them),
change nothing."""


def partition_of(region: str) -> str:
    """The ARN partition of a region: `aws-cn` in China, `aws-us-gov` in GovCloud, else `aws`."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def principal_key(arn: str) -> tuple[str, str, str]:
    """(account, kind, name) of an IAM role or user ARN. A role's path is left out: STS session ARNs
    drop it, so a role is the same role with or without it."""
    account, resource = arn.split(":")[4], arn.split(":", 5)[5]
    kind, _, rest = resource.partition("/")
    return account, kind, rest.rsplit("/", 1)[-1]


@dataclass(frozen=True)
class AccessEntry:
    principal_arn: str
    policy: str
    """Name of the EKS access policy, associated at cluster scope."""

    @property
    def key(self) -> str:
        """Stable per principal, so adding or removing one principal touches only its own entry."""
        account, kind, name = principal_key(self.principal_arn)
        role = "admin" if self.policy == ADMIN_POLICY else "viewer"
        return f"{role}-{account}-{kind}-{name}"


@dataclass(frozen=True)
class AccessPlan:
    entries: tuple[AccessEntry, ...]
    notes: tuple[str, ...] = ()


def plan_access(settings: Settings, creator: str | None, existing_entries: Iterable[str] = ()) -> AccessPlan:
    """Access entries for the listed admins and viewers, less the cluster's creator. On an existing
    cluster, `existing_entries`: the listed principals that have an entry the stack did not make (the
    team's), which the stack leaves as it is (a second entry for one principal fails)."""
    cluster = settings.cluster
    admins = {principal_key(a) for a in cluster.admin_principal_arns}
    both = sorted(a for a in cluster.viewer_principal_arns if principal_key(a) in admins)
    if both:
        raise ConfigError(
            [
                f"{PROJECT}:cluster.viewerPrincipalArns: {both} are also in "
                f"{PROJECT}:cluster.adminPrincipalArns; a principal has one access entry, so list it once"
            ]
        )
    entries, notes = [], []
    listed = [(a, ADMIN_POLICY) for a in cluster.admin_principal_arns]
    listed += [(v, VIEWER_POLICY) for v in cluster.viewer_principal_arns]
    teams = {principal_key(a) for a in existing_entries}
    for arn, policy in listed:
        if creator and principal_key(arn) == principal_key(creator):
            notes.append(f"{arn} created the cluster, so EKS made it admin already: no access entry of ours")
            continue
        if principal_key(arn) in teams:
            notes.append(
                f"{arn} has an access entry on the cluster already (not the stack's): left as the team "
                "made it"
            )
            continue
        entries.append(AccessEntry(arn, policy))
    return AccessPlan(entries=tuple(entries), notes=tuple(notes))
