"""Which GPU nodes each side runs on: `gpuNodes` for both (the default), or a node group of its own
where the stack file has `prefillNodes` or `decodeNodes` (same keys as `gpuNodes`). With either set, the
stack has two GPU node groups, one per side: a side without its own section runs on `gpuNodes`' group.
Planning, the node groups, the RayService's worker groups and the cost all ask here."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from config.cluster import GpuNodesConfig
    from config.settings import Settings

Side = Literal["prefill", "decode"]
SIDES: tuple[Side, Side] = ("prefill", "decode")
SIDE_SECTIONS: dict[Side, str] = {"prefill": "prefillNodes", "decode": "decodeNodes"}
"""The stack-file section of each side's own GPU nodes."""


@dataclass(frozen=True)
class SideNodes:
    """The GPU nodes a side runs on, and the section of the stack file that describes them."""

    side: Side
    section: str
    """`prefillNodes`, `decodeNodes`, or `gpuNodes` where the side has no section of its own."""
    config: GpuNodesConfig


def split(settings: Settings) -> bool:
    """Whether the sides run on node groups of their own (`prefillNodes` or `decodeNodes` set)."""
    return settings.prefill_nodes is not None or settings.decode_nodes is not None


def side_nodes(settings: Settings, side: Side) -> SideNodes:
    """The GPU nodes `side` runs on: its own section when the stack file has one, else `gpuNodes`."""
    own = settings.prefill_nodes if side == "prefill" else settings.decode_nodes
    if own is None:
        return SideNodes(side, "gpuNodes", settings.gpu_nodes)
    return SideNodes(side, SIDE_SECTIONS[side], own)


def all_side_nodes(settings: Settings) -> tuple[SideNodes, SideNodes]:
    return side_nodes(settings, "prefill"), side_nodes(settings, "decode")


def gpu_zone_setting(settings: Settings) -> str | None:
    """The zone the stack file asks the GPU nodes to run in: `gpuNodes.availabilityZone`, or where the
    sides have their own groups, the one their sections agree on (config/settings.py refuses two)."""
    if not split(settings):
        return settings.gpu_nodes.availability_zone
    zones = [s.config.availability_zone for s in all_side_nodes(settings) if s.config.availability_zone]
    return zones[0] if zones else None


def gpu_instance_types(settings: Settings) -> str | list[str]:
    """The GPU instance type, or where the sides have node groups of their own, each side's (prefill's
    first, a type once)."""
    if not split(settings):
        return settings.gpu_nodes.instance_type
    return list(dict.fromkeys(s.config.instance_type for s in all_side_nodes(settings)))


def gpu_subnet_setting(settings: Settings) -> tuple[str, str | None]:
    """(the section that names it, the subnet of a team's VPC) the GPU nodes go to: `gpuNodes.subnetId`,
    or where the sides have their own groups, the one subnet their sections agree on (config/settings.py
    refuses two), named by the first own section when none gives one."""
    if not split(settings):
        return "gpuNodes", settings.gpu_nodes.subnet_id
    sides = all_side_nodes(settings)
    given = [s for s in sides if s.config.subnet_id]
    if given:
        return given[0].section, given[0].config.subnet_id
    return next(s.section for s in sides if s.section != "gpuNodes"), None
