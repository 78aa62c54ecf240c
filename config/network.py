"""The `network` section: the VPC the cluster lives in."""

from __future__ import annotations

from ipaddress import IPv4Network
from typing import Annotated, Literal

from pydantic import Field, StringConstraints, field_validator

from config.base import StrictModel

AvailabilityZone = Annotated[str, StringConstraints(pattern=r"^[a-z]{2}(-[a-z]+)+-\d[a-z]$")]


class FlowLogsConfig(StrictModel):
    """VPC flow logs to CloudWatch Logs (Security Hub EC2.6): who talked to whom, accepted or rejected."""

    enabled: bool = Field(
        False,
        description="Record the VPC's traffic (every ENI, accepted and rejected) in the log group "
        "`/aws/vpc/<cluster>/flow-logs`. CloudWatch bills ingestion per GB; the prod example turns it on.",
    )
    retention_days: Literal[1, 3, 5, 7, 14, 30, 60, 90, 180, 365, 731, 1827, 3653] = Field(
        90, description="How long the flow log group keeps records."
    )


class NetworkConfig(StrictModel):
    """The VPC the cluster lives in: private subnets for every node, egress through NAT."""

    vpc_cidr: IPv4Network = Field(
        IPv4Network("10.0.0.0/16"),
        description="IPv4 range of the VPC, a private range from /16 to /19, cut in eighths: zone a's "
        "private subnet is the first eighth, b's the second, and so on (pods get VPC addresses there, "
        "so at least 1024 each); the public subnets of the NAT gateways are slices of the last eighth.",
    )
    nat_gateways: Literal["single", "perAz"] = Field(
        "single",
        description="`single`: one NAT gateway for the whole VPC (cheap, dev). `perAz`: one per "
        "availability zone, so losing a zone does not cut the others' egress (production).",
    )
    availability_zones: list[AvailabilityZone] | None = Field(
        None,
        description="Availability zones of the cluster's subnets; two or three, each offering the GPU "
        "type when first used. Default: on the first `up`, the first zones of the region that offer "
        "it (at most `maxAvailabilityZones`); after that, the zones the stack recorded on its VPC, "
        "whatever AWS starts or stops offering.",
    )
    max_availability_zones: int = Field(
        3, ge=2, le=3, description="With `availabilityZones` unset, on the first `up`: how many zones."
    )
    flow_logs: FlowLogsConfig = Field(default_factory=FlowLogsConfig)  # type: ignore[arg-type]

    @field_validator("vpc_cidr")
    @classmethod
    def _private_and_sized(cls, value: IPv4Network) -> IPv4Network:
        if not value.is_private:
            raise ValueError(f"{value} is not a private range; use e.g. 10.0.0.0/16")
        if not 16 <= value.prefixlen <= 19:
            raise ValueError(f"{value} must be a /16 to /19 so each zone gets room for its pods")
        return value

    @field_validator("availability_zones")
    @classmethod
    def _two_distinct(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return value
        if len(set(value)) != len(value):
            raise ValueError(f"{value} lists a zone twice")
        if not 2 <= len(value) <= 3:
            raise ValueError(f"{value} must name two or three zones (EKS needs at least two)")
        return value
