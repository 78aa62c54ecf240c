"""Who may use the cluster's Kubernetes API, and the partition its ARNs live in.

Three kinds of principal, one access policy each (docs/design.md, "Who reads what"):
- admins (`AmazonEKSClusterAdminPolicy`): `pulumi up`, by a person or the deploy workflow;
- viewers (`AmazonEKSViewPolicy`: no Secrets): `pulumi preview`, which reads no Secret (pulumi-kubernetes'
  helm.v3.Release reads its release only in Read, that is on refresh or import; a Kubernetes object's
  dry-run is refused to a viewer and the provider falls back to an inputs-only diff); on a team's
  cluster a viewer also joins `preview_reader_group`, bound to exactly what world/kubernetes.py lists
  there (`PREVIEW_READS`);
- refreshers (`AmazonEKSAdminViewPolicy`: Secrets included): `pulumi preview --refresh`, the drift check,
  which reads every object back, the stack's Secrets and Helm's release records among them.

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
VIEWER_POLICY = "AmazonEKSViewPolicy"
"""Read most objects, Secrets not among them, change nothing: enough for `pulumi preview`."""
REFRESH_POLICY = "AmazonEKSAdminViewPolicy"
"""Read every object, Secrets included, change nothing: what `pulumi preview --refresh` reads back."""
ROLES = {ADMIN_POLICY: "admin", VIEWER_POLICY: "viewer", REFRESH_POLICY: "refresh"}

PREVIEW_READS: tuple[tuple[str, str], ...] = (
    ("apiextensions.k8s.io", "customresourcedefinitions"),
    ("apps", "deployments"),
    ("apps", "daemonsets"),
    ("monitoring.coreos.com", "prometheuses"),
    ("gateway.networking.k8s.io", "gatewayclasses"),
    ("", "configmaps"),
    ("", "namespaces"),
)
"""(API group, resource) of every list world/kubernetes.py makes of a team's cluster at preview. The
view policy lacks the cluster-scoped and custom ones, so a viewer gets them from a ClusterRole of the
stack's (tests/test_existing_cluster.py holds this to the reader's paths)."""


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
    kubernetes_groups: tuple[str, ...] = ()
    """RBAC groups the principal joins besides its access policy."""

    @property
    def key(self) -> str:
        """Stable per principal, so adding or removing one principal touches only its own entry."""
        account, kind, name = principal_key(self.principal_arn)
        return f"{ROLES[self.policy]}-{account}-{kind}-{name}"


def refresh_reach_warning(settings: Settings, stack_namespaces: Iterable[str]) -> str | None:
    """On a team's cluster, what `refreshPrincipalArns` can read: everything, the team's Secrets too.

    Narrowing it (a namespaced association for the stack's namespaces, plus a ClusterRole naming the
    stack's cluster-scoped objects) cannot be verified offline: a refresh reads back what Helm releases
    and yaml ConfigGroups made (CRDs, ClusterRoles, webhooks), whose names no mock shows, and a refresh
    that lacks one read fails. So the principal keeps the cluster-scoped association and the preview says
    what that means (docs/design.md, "Who reads what")."""
    cluster = settings.cluster
    if not cluster.existing_cluster_name or not cluster.refresh_principal_arns:
        return None
    ours = ", ".join(sorted(set(stack_namespaces)))
    return (
        f"cluster.refreshPrincipalArns on team cluster {cluster.existing_cluster_name}: "
        f"{', '.join(cluster.refresh_principal_arns)} get {REFRESH_POLICY} at cluster scope, so they can "
        "read every object of the cluster: every namespace's Secrets, the team's included (not only this "
        f"stack's namespaces: {ours}), every ConfigMap, Pod and workload, and every cluster-scoped object; "
        "they can change nothing. List a refresh principal here only if the team accepts that, or run this "
        "stack's drift check without --refresh (its viewer reads no Secret)"
    )


def preview_reader_group(settings: Settings) -> str:
    """The RBAC group of the stack's viewers on a team's cluster (one per stack: two stacks share none)."""
    return f"{PROJECT}-{settings.serving.namespace}-preview-readers"


@dataclass(frozen=True)
class AccessPlan:
    entries: tuple[AccessEntry, ...]
    notes: tuple[str, ...] = ()


def plan_access(settings: Settings, creator: str | None, existing_entries: Iterable[str] = ()) -> AccessPlan:
    """Access entries for the listed admins and viewers, less the cluster's creator. On an existing
    cluster, `existing_entries`: the listed principals that have an entry the stack did not make (the
    team's), which the stack leaves as it is (a second entry for one principal fails)."""
    cluster = settings.cluster
    lists = [
        ("adminPrincipalArns", cluster.admin_principal_arns, ADMIN_POLICY),
        ("viewerPrincipalArns", cluster.viewer_principal_arns, VIEWER_POLICY),
        ("refreshPrincipalArns", cluster.refresh_principal_arns, REFRESH_POLICY),
    ]
    problems = []
    for i, (key, arns, _) in enumerate(lists):
        for earlier, earlier_arns, _ in lists[:i]:
            keys = {principal_key(a) for a in earlier_arns}
            both = sorted(a for a in arns if principal_key(a) in keys)
            if both:
                problems.append(
                    f"{PROJECT}:cluster.{key}: {both} are also in {PROJECT}:cluster.{earlier}; a principal "
                    "has one access entry, so list it once"
                )
    if problems:
        raise ConfigError(problems)
    on_team_cluster = bool(cluster.existing_cluster_name)
    entries, notes = [], []
    listed = [(arn, policy) for _, arns, policy in lists for arn in arns]
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
        groups = (preview_reader_group(settings),) if on_team_cluster and policy == VIEWER_POLICY else ()
        entries.append(AccessEntry(arn, policy, groups))
    return AccessPlan(entries=tuple(entries), notes=tuple(notes))
