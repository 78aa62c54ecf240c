"""EC2 capacity reservations in the mocked account, answered as `__main__.capacity_reservations` reads
them (DescribeCapacityReservations' JSON, field names as the AWS CLI prints them; a resource group's
members as `aws resource-groups list-group-resources` lists them).

The mocked world's clock stands at NOW (the program's `now()` is pinned to it), so a reservation's dates
are fixed and so is every run's graph.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from config import ConfigError
from planning.reservation import KEY, reservation_ids, reservations_from_api

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
BLOCK_ID = "cr-0b10c0000000000a1"
ODCR_ID = "cr-0dc70000000000001"
GROUP_ARN = "arn:aws:resource-groups:us-east-1:123456789012:group/gpu-reservations"


def iso(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def reservation(
    id: str = ODCR_ID,
    *,
    kind: str = "default",
    instance_type: str = "g6.8xlarge",
    zone: str = "us-east-1b",
    total: int = 2,
    available: int | None = None,
    state: str = "active",
    start: datetime = NOW - timedelta(days=1),
    end: datetime | None = None,
    placement_group: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """One DescribeCapacityReservations item."""
    item: dict[str, Any] = {
        "CapacityReservationId": id,
        "OwnerId": "123456789012",
        "CapacityReservationArn": f"arn:aws:ec2:{zone[:-1]}:123456789012:capacity-reservation/{id}",
        "InstanceType": instance_type,
        "InstancePlatform": "Linux/UNIX",
        "AvailabilityZone": zone,
        "Tenancy": "default",
        "TotalInstanceCount": total,
        "AvailableInstanceCount": total if available is None else available,
        "EbsOptimized": True,
        "State": state,
        "StartDate": iso(start),
        "EndDateType": "limited" if end else "unlimited",
        "InstanceMatchCriteria": "targeted",
        "CreateDate": iso(start - timedelta(days=2)),
        "ReservationType": kind,
        **({"EndDate": iso(end)} if end else {}),
        **(
            {"PlacementGroupArn": f"arn:aws:ec2:{zone[:-1]}:123456789012:placement-group/{placement_group}"}
            if placement_group
            else {}
        ),
    }
    return {**item, **extra}


def block(**changes: Any) -> dict[str, Any]:
    """A Capacity Block of two p5.48xlarge in us-east-1b, a week from yesterday."""
    given = {
        "kind": "capacity-block",
        "instance_type": "p5.48xlarge",
        "total": 2,
        "available": 2,
        "start": NOW - timedelta(days=1),
        "end": NOW + timedelta(days=6),
        **changes,
    }
    return reservation(BLOCK_ID, **given)


def describe(
    reservations: tuple[dict[str, Any], ...], groups: dict[str, tuple[str, ...]], reference: str
) -> list[Any]:
    """What the program's reader returns for `reference`, or the ConfigError it raises on AWS's error."""
    if reference.startswith("arn:"):
        if reference not in groups:
            raise ConfigError([f"{KEY}: EC2 in us-east-1 does not describe {reference}: NotFoundException"])
        members = {
            "Resources": [],
            "ResourceIdentifiers": [
                {
                    "ResourceArn": f"arn:aws:ec2:us-east-1:123456789012:capacity-reservation/{i}",
                    "ResourceType": "AWS::EC2::CapacityReservation",
                }
                for i in groups[reference]
            ],
        }
        ids = reservation_ids(members)
        if not ids:
            return []
    else:
        ids = [reference]
    by_id = {r["CapacityReservationId"]: r for r in reservations}
    missing = [i for i in ids if i not in by_id]
    if missing:
        raise ConfigError(
            [
                f"{KEY}: EC2 in us-east-1 does not describe {reference}: An error occurred "
                f"(InvalidCapacityReservationId.NotFound) when calling the DescribeCapacityReservations "
                f"operation: The capacity reservation ID '{missing[0]}' does not exist"
            ]
        )
    return reservations_from_api({"CapacityReservations": [by_id[i] for i in ids]})
