"""The real world: AWS and a team's cluster, asked as the AWS provider's identity (world/identity.py).

- pulumi-aws invokes wherever pulumi-aws has one: zones, instance types, the stack's record, EKS
  clusters and add-ons, access entries, STS and IAM. They go through the default provider, so they ask
  as it does, `aws:assumeRoles` included.
- The AWS CLI where it has none: On-Demand Capacity Reservations (its Capacity Block data source does
  not cover them, and one reader serves both), resource groups' members, and EKS tokens. Each call
  gets the stack's `--profile` and `--region`, and the role's credentials from one
  `aws sts assume-role`.
- A team's cluster's Kubernetes API with the Kubernetes client (world/kubernetes.py).
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pulumi_aws as aws

from planning.addons import Inventory
from planning.catalog import Ec2InstanceType
from planning.existing_cluster import POD_IDENTITY_AGENT, ClusterDescription, Subnet
from planning.names import stack_files_beside
from planning.reservation import Reservation, reservation_ids, reservations_from_api
from planning.zones import TAG_STACK, StackRecord
from world.identity import Identity
from world.reads import Caller, UnreadableError, record_of

Runner = Callable[..., subprocess.CompletedProcess[str]]


class AwsWorld:
    """`World` (world/reads.py) answered by AWS and the team's cluster."""

    def __init__(self, identity: Identity, project_dir: Path, run: Runner = subprocess.run):
        self.identity = identity
        self.region = identity.region
        self.project_dir = project_dir
        self._run = run
        self._role_env: dict[str, str] | None = None

    # --- pulumi-aws invokes ----------------------------------------------------------------------------

    def caller(self) -> Caller:
        found = aws.get_caller_identity()
        return Caller(account_id=found.account_id, arn=found.arn)

    def now(self) -> datetime:
        return datetime.now(UTC)

    def zones_offering(self, instance_type: str) -> list[str]:
        offerings = aws.ec2.get_instance_type_offerings(
            filters=[
                aws.ec2.GetInstanceTypeOfferingsFilterArgs(name="instance-type", values=[instance_type])
            ],
            location_type="availability-zone",
            region=self.region,
        )
        return list(offerings.locations)

    def instance_type(self, name: str) -> Ec2InstanceType:
        try:
            answer = aws.ec2.get_instance_type(instance_type=name, region=self.region)
        except Exception as error:  # a failed invoke raises a bare Exception carrying AWS's message
            raise UnreadableError(str(error)) from None
        gpus = list(answer.gpuses or [])
        return Ec2InstanceType(
            name=name,
            vcpus=answer.default_vcpus,
            memory_mib=answer.memory_size,
            gpus=sum(g.count for g in gpus),
            gpu_name=gpus[0].name if gpus else "",
            gpu_memory_mib=gpus[0].memory_size if gpus else 0,
            efa_max_interfaces=answer.efa_maximum_interfaces if answer.efa_supported else 0,
            instance_storage_gb=answer.total_instance_storage or 0,
            network_gbps=sum(card.baseline_bandwidth for card in answer.network_cards or []),
            network_cards=answer.maximum_network_cards or 0,
        )

    def stack_record(self, stack_id: str) -> StackRecord | None:
        found = aws.ec2.get_vpcs(
            filters=[aws.ec2.GetVpcsFilterArgs(name=f"tag:{TAG_STACK}", values=[stack_id])],
            region=self.region,
        ).ids
        return record_of(found, "VPCs", stack_id, lambda id: aws.ec2.get_vpc(id=id, region=self.region).tags)

    def cluster_names(self) -> list[str]:
        return list(aws.eks.get_clusters(region=self.region).names)

    def session_issuer(self, arn: str) -> str:
        return aws.iam.get_session_context(arn=arn).issuer_arn

    def existing_cluster(self, name: str) -> ClusterDescription:
        """Its VPC's ranges, every subnet of the VPC with its zone and whether its route table (its own,
        else the VPC's main one: DescribeRouteTables' subnet filter matches explicit associations only)
        sends traffic to an internet gateway, and the EKS add-ons the stack cares about."""
        region = self.region
        try:
            found = aws.eks.get_cluster(name=name, region=region)
        except Exception as error:  # a failed invoke raises a bare Exception carrying AWS's message
            raise UnreadableError(str(error)) from None
        vpc_config = found.vpc_config
        vpc = aws.ec2.get_vpc(id=vpc_config.vpc_id, region=region)
        cidrs = [a.cidr_block for a in vpc.cidr_block_associations or [] if a.state == "associated"]
        tables = [
            aws.ec2.get_route_table(route_table_id=table, region=region)
            for table in aws.ec2.get_route_tables(vpc_id=vpc_config.vpc_id, region=region).ids
        ]
        main_table = next((t for t in tables if any(a.main for a in t.associations or [])), None)
        explicit = {a.subnet_id: t for t in tables for a in t.associations or [] if a.subnet_id}

        def public(subnet_id: str) -> bool:
            table = explicit.get(subnet_id, main_table)
            return bool(table) and any((r.gateway_id or "").startswith("igw-") for r in table.routes or [])

        subnets = []
        filters = [aws.ec2.GetSubnetsFilterArgs(name="vpc-id", values=[vpc_config.vpc_id])]
        for subnet_id in sorted(aws.ec2.get_subnets(filters=filters, region=region).ids):
            subnet = aws.ec2.get_subnet(id=subnet_id, region=region)
            subnets.append(
                Subnet(
                    id=subnet_id,
                    zone=subnet.availability_zone,
                    cidr=subnet.cidr_block,
                    private=not public(subnet_id),
                    in_cluster=subnet_id in vpc_config.subnet_ids,
                    available_ips=subnet.available_ip_address_count,
                )
            )
        addons: dict[str, str] = {}
        with_roles = set()
        for addon in (POD_IDENTITY_AGENT, "vpc-cni", "aws-ebs-csi-driver"):
            try:
                answer = aws.eks.get_addon(addon_name=addon, cluster_name=name, region=region)
            except Exception:  # EKS answers ResourceNotFoundException for an add-on the cluster lacks
                continue
            addons[addon] = answer.configuration_values or ""
            if answer.service_account_role_arn or answer.pod_identity_associations:
                with_roles.add(addon)
        return ClusterDescription(
            name=name,
            arn=found.arn,
            version=found.version,
            endpoint=found.endpoint,
            certificate_authority=found.certificate_authorities[0].data,
            vpc_id=vpc_config.vpc_id,
            vpc_cidrs=tuple(dict.fromkeys(cidrs or [vpc.cidr_block])),
            subnets=tuple(subnets),
            security_group_id=vpc_config.cluster_security_group_id,
            oidc_issuer=found.identities[0].oidcs[0].issuer if found.identities else "",
            authentication_mode=found.access_configs[0].authentication_mode
            if found.access_configs
            else "CONFIG_MAP",
            addons=addons,
            addon_roles=frozenset(with_roles),
            status=found.status,
        )

    def existing_record(self, stack_id: str) -> StackRecord | None:
        found = aws.ec2.get_security_groups(
            filters=[aws.ec2.GetSecurityGroupsFilterArgs(name=f"tag:{TAG_STACK}", values=[stack_id])],
            region=self.region,
        ).ids
        return record_of(
            found,
            "security groups",
            stack_id,
            lambda id: aws.ec2.get_security_group(id=id, region=self.region).tags,
        )

    def access_entries(self, cluster_name: str, principals: Sequence[str], stack_id: str) -> list[str]:
        teams = []
        for arn in principals:
            try:
                entry = aws.eks.get_access_entry(
                    cluster_name=cluster_name, principal_arn=arn, region=self.region
                )
            except Exception:  # ResourceNotFoundException: no entry yet
                continue
            if (entry.tags or {}).get(TAG_STACK) != stack_id:
                teams.append(arn)
        return teams

    def stack_files(self, stack: str) -> Mapping[str, Mapping[str, Any]]:
        return stack_files_beside(self.project_dir, stack)

    # --- the AWS CLI -----------------------------------------------------------------------------------

    def cli(self, *command: str) -> str:
        """The AWS CLI's output for `command`, asked as the provider's identity; UnreadableError with the
        CLI's last line of complaint."""
        env = self.role_env()
        # `--profile` would win over the role's credentials in the environment: the role signs alone.
        options = ["--region", self.region] if env else self.identity.cli_options()
        return self._cli([*options, *command], env)

    def role_env(self) -> dict[str, str]:
        """The environment of every CLI call: the role's temporary credentials when the provider
        assumes one (one `aws sts assume-role` per run)."""
        assume = self.identity.assume_role()
        if assume is None:
            return {}
        if self._role_env is None:
            found = json.loads(self._cli([*self.identity.cli_options(), *assume], {}))["Credentials"]
            self._role_env = {
                "AWS_ACCESS_KEY_ID": found["AccessKeyId"],
                "AWS_SECRET_ACCESS_KEY": found["SecretAccessKey"],
                "AWS_SESSION_TOKEN": found["SessionToken"],
            }
        return self._role_env

    def _cli(self, argv: list[str], env: Mapping[str, str]) -> str:
        given = None
        if env:  # the role's credentials, not a profile, are what the call signs with
            given = {**{k: v for k, v in os.environ.items() if k != "AWS_PROFILE"}, **env}
        try:
            done = self._run(
                ["aws", *argv], capture_output=True, text=True, timeout=60, check=False, env=given
            )
        except (OSError, subprocess.SubprocessError) as error:
            raise UnreadableError(f"cannot run the AWS CLI: {error}") from None
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()
            raise UnreadableError(said[-1] if said else f"exit {done.returncode}")
        return done.stdout or "{}"

    def reservations(self, reference: str) -> list[Reservation]:
        ids = [reference]
        if reference.startswith("arn:"):
            members = self.cli(
                "resource-groups", "list-group-resources", "--group", reference, "--output", "json"
            )
            ids = reservation_ids(json.loads(members))
            if not ids:
                return []
        found = self.cli(
            "ec2", "describe-capacity-reservations", "--capacity-reservation-ids", *ids, "--output", "json"
        )
        return reservations_from_api(json.loads(found))

    def token(self, cluster_name: str) -> str:
        """A token for the cluster's API, from `aws eks get-token` run as a kubeconfig runs it."""
        argv = [*self.identity.get_token(cluster_name), "--output", "json"]
        return json.loads(self._cli(argv, {}))["status"]["token"]

    def inventory(self, cluster: ClusterDescription) -> Inventory | str:
        from world.kubernetes import inventory

        try:
            token = self.token(cluster.name)
        except (UnreadableError, ValueError, KeyError) as error:
            return f"`aws eks get-token` failed: {error}".strip()
        return inventory(cluster, token)
