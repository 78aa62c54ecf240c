"""EC2 capacity reservations for the tests' accounts (DescribeCapacityReservations' JSON, field names as
the AWS CLI prints them: world/offline.py's `reservation`), and a Capacity Block.

The offline world's clock stands at NOW, so a reservation's dates are fixed and so is every run's graph.
"""

from __future__ import annotations

import re
from datetime import timedelta
from pathlib import Path
from typing import Any

import yaml

from world.offline import NOW, iso, reservation

__all__ = [
    "BLOCK_ID",
    "GROUP_ARN",
    "NOW",
    "ODCR_ID",
    "block",
    "docs_reservation_example",
    "iso",
    "reservation",
]

BLOCK_ID = "cr-0b10c0000000000a1"
ODCR_ID = "cr-0dc70000000000001"
GROUP_ARN = "arn:aws:resource-groups:us-east-1:123456789012:group/gpu-reservations"


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


def docs_reservation_example() -> dict[str, Any]:
    """The stack-file sections (`gpuNodes`, `model`) docs/operations.md's "Reserved GPU capacity" shows."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "operations.md").read_text()
    section = text.split("## Reserved GPU capacity", 1)[1]
    example = re.search(r"```yaml\n(.*?)```", section, re.S)
    assert example, "docs/operations.md's 'Reserved GPU capacity' has no YAML example"
    return yaml.safe_load(example.group(1))
