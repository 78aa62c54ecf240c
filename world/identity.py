"""Who the program asks AWS as: the AWS provider's own identity, from the stack's `aws:` config.

pulumi-aws invokes already ask as the provider. What pulumi-aws has no invoke for goes through the AWS
CLI (a prerequisite already), and asks as the same identity here:
- `aws:profile` becomes `--profile`;
- `aws:assumeRoles` (one role: `roleArn`, `sessionName`, `externalId`, `duration`) becomes one
  `aws sts assume-role` call whose temporary credentials every later CLI call gets in its environment;
- `aws:region` becomes `--region`.

A team cluster's kubeconfig, and the token the program reads its inventory with, run
`aws eks get-token` with the same `--profile` and the role as `--role-arn` (`get_token`): EKS maps
the role, whatever the session is named. `get-token` has no external ID, so a team cluster's stack
whose role needs one is refused, with the fix: a profile that assumes the role.

A provider setting the CLI cannot be given the same way is refused at preview, naming the key, rather
than letting a read ask as someone else.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from config import ConfigError

ROLES_KEY = "aws:assumeRoles"
PROFILE_KEY = "aws:profile"

REFUSED = {
    "aws:accessKey": "credentials in stack config: give the provider and the AWS CLI the same "
    "credentials through a profile (aws:profile) or the AWS_* environment variables",
    "aws:secretKey": "credentials in stack config: give the provider and the AWS CLI the same "
    "credentials through a profile (aws:profile) or the AWS_* environment variables",
    "aws:token": "credentials in stack config: give the provider and the AWS CLI the same credentials "
    "through a profile (aws:profile) or the AWS_* environment variables",
    "aws:assumeRoleWithWebIdentity": "the AWS CLI reads web identity from the environment: set "
    "AWS_ROLE_ARN and AWS_WEB_IDENTITY_TOKEN_FILE instead, which the provider reads too",
    "aws:sharedConfigFiles": "set AWS_CONFIG_FILE instead, which the provider and the AWS CLI both read",
    "aws:sharedCredentialsFiles": "set AWS_SHARED_CREDENTIALS_FILE instead, which the provider and the "
    "AWS CLI both read",
    "aws:endpoints": "the reads through the AWS CLI would ask AWS's own endpoints",
    "aws:customCaBundle": "set AWS_CA_BUNDLE instead, which the provider and the AWS CLI both read",
    "aws:stsRegion": "the AWS CLI's role session would use the region's STS",
    "aws:useFipsEndpoint": "set AWS_USE_FIPS_ENDPOINT instead, which the provider and the AWS CLI both read",
}
"""Provider settings the CLI reads cannot be given as the provider is: why, and what to do instead."""
ROLE_FIELDS = {"roleArn", "sessionName", "externalId", "duration"}
DURATION = re.compile(r"(\d+(?:\.\d+)?)(h|m|s)")


@dataclass(frozen=True)
class AssumedRole:
    role_arn: str
    session_name: str | None = None
    external_id: str | None = None
    duration_seconds: int | None = None


@dataclass(frozen=True)
class Identity:
    """The provider's identity: a profile, a role it assumes, a region."""

    region: str
    profile: str | None = None
    role: AssumedRole | None = None

    def cli_options(self) -> list[str]:
        """The AWS CLI's global options that ask as this identity (the role comes by `assume_role`)."""
        return [*(["--profile", self.profile] if self.profile else []), "--region", self.region]

    def assume_role(self) -> list[str] | None:
        """The `aws sts assume-role` call that gives the role's credentials, or None without a role."""
        role = self.role
        if role is None:
            return None
        return [
            "sts",
            "assume-role",
            "--role-arn",
            role.role_arn,
            "--role-session-name",
            role.session_name or "ray-llm-eks-preview",
            *(["--external-id", role.external_id] if role.external_id else []),
            *(["--duration-seconds", str(role.duration_seconds)] if role.duration_seconds else []),
            "--output",
            "json",
        ]

    def get_token(self, cluster_name: str) -> list[str]:
        """`aws eks get-token`'s arguments for the cluster as this identity: a kubeconfig's exec
        plugin and the program's own inventory read run the same command."""
        return [
            "--region",
            self.region,
            *(["--profile", self.profile] if self.profile else []),
            "eks",
            "get-token",
            "--cluster-name",
            cluster_name,
            *(["--role-arn", self.role.role_arn] if self.role else []),
        ]


def _parsed(value: Any) -> Any:
    """A config value as the engine hands it over: objects and lists arrive as JSON strings."""
    if isinstance(value, str) and value[:1] in "[{":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def _seconds(duration: str) -> int | None:
    """A Go duration (`1h`, `90m`, `1h30m`, `3600s`) in seconds; None when it is not one."""
    parts = DURATION.findall(duration)
    if not parts or "".join(f"{n}{u}" for n, u in parts) != duration:
        return None
    return round(sum(float(n) * {"h": 3600, "m": 60, "s": 1}[u] for n, u in parts))


def provider_identity(config: Mapping[str, Any], region: str, team_cluster: bool) -> Identity:
    """The identity the stack's `aws:` config gives the provider; a setting that cannot be honoured as
    the provider honours it is refused, naming the key. `team_cluster`: the stack serves on a team's
    cluster, whose kubeconfig's `aws eks get-token` must ask as the provider too."""
    problems = [f"{key}: {why}" for key, why in REFUSED.items() if config.get(key) not in (None, "", [], {})]
    profile = config.get(PROFILE_KEY) or None
    role = None
    roles = _parsed(config.get(ROLES_KEY)) or []
    if not isinstance(roles, list) or not all(isinstance(r, dict) for r in roles):
        problems.append(f"{ROLES_KEY}: must be a list of objects, as pulumi-aws reads it")
        roles = []
    if len(roles) > 1:
        problems.append(
            f"{ROLES_KEY}: a chain of {len(roles)} roles; the AWS CLI reads assume one: name a profile "
            "that assumes the chain (aws:profile) instead"
        )
    elif roles:
        given = roles[0]
        for field in sorted(set(given) - ROLE_FIELDS):
            problems.append(
                f"{ROLES_KEY}[0].{field}: the reads through the AWS CLI cannot assume the role with it; "
                "name a profile that does (aws:profile) instead"
            )
        if not given.get("roleArn"):
            problems.append(f"{ROLES_KEY}[0].roleArn: not set")
        seconds = None
        if given.get("duration"):
            seconds = _seconds(str(given["duration"]))
            if seconds is None or not 900 <= seconds <= 43200:
                problems.append(
                    f"{ROLES_KEY}[0].duration: {given['duration']!r} is not a duration between 15m and 12h"
                )
        if team_cluster and given.get("externalId"):
            problems.append(
                f"{ROLES_KEY}[0].externalId: the team cluster's kubeconfig runs `aws eks get-token "
                "--role-arn`, which cannot send an external ID; name a profile that assumes the role with it "
                "(aws:profile) instead"
            )
        role = AssumedRole(
            role_arn=str(given.get("roleArn") or ""),
            session_name=given.get("sessionName") or None,
            external_id=given.get("externalId") or None,
            duration_seconds=seconds,
        )
    if problems:
        raise ConfigError(problems)
    return Identity(region=region, profile=str(profile) if profile else None, role=role)
