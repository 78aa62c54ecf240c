"""Who may administer the cluster, and the partition its ARNs live in.

EKS already makes whoever creates the cluster an admin (pulumi-eks sets
bootstrapClusterCreatorAdminPermissions); a second access entry for the same principal fails at
`up` with ResourceInUseException, so `check_admins` refuses it before any resource exists.
"""

from __future__ import annotations

from config import PROJECT, ConfigError, Settings


def partition_of(region: str) -> str:
    """The ARN partition of a region: `aws-cn` in China, `aws-us-gov` in GovCloud, else `aws`."""
    if region.startswith("cn-"):
        return "aws-cn"
    if region.startswith("us-gov-"):
        return "aws-us-gov"
    return "aws"


def deployer_role_arn(caller_arn: str) -> str:
    """The IAM principal behind STS's caller ARN: an assumed role's session ARN
    (`arn:aws:sts::123:assumed-role/Name/session`) names the role `arn:aws:iam::123:role/Name`."""
    _, partition, service, _, account, resource = caller_arn.split(":", 5)
    if service == "sts" and resource.startswith("assumed-role/"):
        return f"arn:{partition}:iam::{account}:role/{resource.split('/')[1]}"
    return caller_arn


def _role_key(arn: str) -> tuple[str, str] | None:
    """(account, role name) of a role ARN; STS session ARNs drop the role's path, so compare these."""
    if ":role/" not in arn:
        return None
    return arn.split(":")[4], arn.rsplit("/", 1)[-1]


def check_admins(settings: Settings, caller_arn: str) -> None:
    deployer = deployer_role_arn(caller_arn)
    duplicates = [
        arn
        for arn in settings.cluster.admin_principal_arns
        if arn == deployer or (_role_key(arn) is not None and _role_key(arn) == _role_key(deployer))
    ]
    if duplicates:
        raise ConfigError(
            [
                f"{PROJECT}:cluster.adminPrincipalArns: {duplicates} is the identity running Pulumi "
                f"({caller_arn}), which EKS already makes cluster admin; a second access entry for it "
                "fails, so remove it"
            ]
        )
