"""Shared building blocks of the config models: strict camelCase models and the value types that
several sections use (DNS names, Kubernetes quantities, versions)."""

from __future__ import annotations

import re
from typing import Annotated

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints
from pydantic.alias_generators import to_camel


class StrictModel(BaseModel):
    """Stack-file keys are camelCase (`maxModelLen`), Python attributes snake_case; unknown keys are
    errors, never silently ignored; a loaded config cannot be changed by a component."""

    model_config = ConfigDict(
        extra="forbid",
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        validate_default=True,
    )


DnsLabel = Annotated[
    str,
    StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63),
]
"""A Kubernetes namespace or object name (RFC 1123 label)."""

SemVer = Annotated[str, StringConstraints(pattern=r"^v?\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$")]
"""A chart or Ray version such as `1.7.0` or `v0.5.30`."""

# The grammar of resource.Quantity in k8s.io/apimachinery (the same regex the CRD schemas carry).
_QUANTITY = re.compile(
    r"^(\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))"
    r"(([KMGTPE]i)|[numkMGTPE]|([eE](\+|-)?(([0-9]+(\.[0-9]*)?)|(\.[0-9]+))))?$"
)

_BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
_DECIMAL = {
    "n": 1e-9,
    "u": 1e-6,
    "m": 1e-3,
    "": 1,
    "k": 1e3,
    "M": 1e6,
    "G": 1e9,
    "T": 1e12,
    "P": 1e15,
    "E": 1e18,
}


def _check_quantity(value: str) -> str:
    if not _QUANTITY.match(value):
        raise ValueError(f"{value!r} is not a Kubernetes quantity; write e.g. '2', '500m', '8Gi' or '1.5G'")
    return value


def _number_as_text(value: object) -> object:
    """YAML reads `cpuRequest: 2` as a number; as a quantity it means what `"2"` means."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return str(value)
    return value


Quantity = Annotated[str, BeforeValidator(_number_as_text), AfterValidator(_check_quantity)]
"""A Kubernetes resource quantity (`2`, `500m`, `8Gi`); a YAML number is read as the same quantity."""


def quantity_value(value: str) -> float:
    """The number a quantity stands for (`8Gi` -> 8589934592.0, `500m` -> 0.5)."""
    _check_quantity(value)
    match = re.match(r"^([+-]?[0-9.]+)(.*)$", value)
    assert match is not None
    number, suffix = float(match.group(1)), match.group(2)
    if suffix in _BINARY:
        return number * _BINARY[suffix]
    if suffix in _DECIMAL:
        return number * _DECIMAL[suffix]
    return float(value)  # exponent form such as 1e3


class InstanceSpec(StrictModel):
    """An instance type described in the stack file, for types the catalog in planning/catalog.py does
    not know. Figures as EC2's DescribeInstanceTypes reports them; GPU memory as the driver reports it."""

    vcpu: int = Field(ge=1, description="vCPUs.")
    memory_gib: int = Field(ge=1, description="Memory in GiB.")
    gpus: int = Field(0, ge=0, description="GPUs.")
    gpu_model: str = Field("", description="GPU model, e.g. `L4` (for messages).")
    gpu_memory_gib: float = Field(0, ge=0, description="Memory per GPU in GiB, as nvidia-smi reports it.")
    efa_interfaces: int = Field(0, ge=0, description="Maximum EFA interfaces; 0 without EFA.")
    gpudirect_rdma: bool = Field(False, description="Whether the GPUs register memory with EFA directly.")
