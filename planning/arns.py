"""Every ARN the stack file gives, checked where the config alone cannot: against the stack's partition
and region, and (once the caller is known, at preview) its account. The config types already hold each
key to its service and resource type (config/base.py `arn_of`). A wrong one would otherwise fail only
after the cluster exists (an NLB that cannot load its certificate, a cluster that cannot use its key,
nodes that never launch).

What may come from another account: EKS access entries of type STANDARD take principals of any account
(EKS, "Create access entries"); a KMS key of another account works only when its key policy grants this
account (and, for volumes, the Auto Scaling service-linked role), so it is a warning; an ACM certificate
never (an NLB uses certificates of its own account and region).
"""

from __future__ import annotations

from typing import Literal

from config import PROJECT, ConfigError, Settings
from planning.access import partition_of

Accounts = Literal["same", "warn", "any"]
KMS_OTHER_ACCOUNT = (
    "its key policy must grant this account (and, for volumes, the Auto Scaling service-linked role), or "
    "nothing can use it"
)


def _given(settings: Settings) -> list[tuple[str, str, bool, Accounts]]:
    """(key, ARN, regional, which accounts may own it) for every ARN the stack file sets."""
    cluster, endpoint = settings.cluster, settings.endpoint
    given: list[tuple[str, str | None, bool, Accounts]] = [
        ("endpoint.certificateArn", endpoint.certificate_arn, True, "same"),
        ("cluster.secretsKmsKeyArn", cluster.secrets_kms_key_arn, True, "warn"),
        ("cluster.volumeKmsKeyArn", cluster.volume_kms_key_arn, True, "warn"),
        *(
            (f"cluster.adminPrincipalArns[{i}]", a, False, "any")
            for i, a in enumerate(cluster.admin_principal_arns)
        ),
        *(
            (f"cluster.viewerPrincipalArns[{i}]", a, False, "any")
            for i, a in enumerate(cluster.viewer_principal_arns)
        ),
        *(
            (f"cluster.refreshPrincipalArns[{i}]", a, False, "any")
            for i, a in enumerate(cluster.refresh_principal_arns)
        ),
    ]
    return [(key, arn, regional, accounts) for key, arn, regional, accounts in given if arn]


def check_arns(settings: Settings, account_id: str | None) -> list[str]:
    """Warnings; raises ConfigError naming every key whose ARN cannot work. `account_id`: the caller's
    account (None offline: then partition and region only)."""
    partition = partition_of(settings.region)
    problems, warnings = [], []
    for key, arn, regional, accounts in _given(settings):
        key = f"{PROJECT}:{key}"
        _, arn_partition, _, region, account, _ = arn.split(":", 5)
        if arn_partition != partition:
            problems.append(
                f"{key}: {arn} is in partition {arn_partition}, aws:region {settings.region} in {partition}"
            )
        if regional and region != settings.region:
            problems.append(
                f"{key}: {arn} is in {region}; it must be in the stack's region, {settings.region}"
            )
        if account_id and account != account_id and accounts != "any":
            message = f"{key}: {arn} belongs to account {account}, not the stack's account {account_id}"
            if accounts == "same":
                problems.append(f"{message}; an NLB uses only certificates of its own account")
            else:
                warnings.append(f"{message}: {KMS_OTHER_ACCOUNT}")
    if problems:
        raise ConfigError(problems)
    return warnings
