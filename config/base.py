"""Shared building blocks of the config models: strict camelCase models and the value types that
several sections use (DNS names, namespaces, S3 bucket names, Kubernetes quantities, durations,
versions). A value type refuses what can never work where it is used, in the unit it is read in: a
memory size without a unit is bytes to Kubernetes, so `16` is refused, not scheduled."""

from __future__ import annotations

import re
from ipaddress import IPv4Network
from typing import Annotated, Any

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
)
from pydantic.alias_generators import to_camel
from pydantic_core import InitErrorDetails, PydanticCustomError


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


def raise_all(model: str, problems: list[str]) -> None:
    """A model validator's problems, every one at once: each becomes its own line of the loader's
    message (a ValueError would stop at the first), under the section's key."""
    if problems:
        raise ValidationError.from_exception_data(
            model,
            [
                InitErrorDetails(
                    type=PydanticCustomError("value_error", "{problem}", {"problem": problem}),
                    loc=(),
                    input=None,
                )
                for problem in problems
            ],
        )


DnsLabel = Annotated[
    str,
    StringConstraints(pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$", max_length=63),
]
"""A Kubernetes object name (RFC 1123 label)."""

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

MIB = 2**20
MIN_MEMORY = 64 * MIB
"""Below this a container memory size is a unit left out (`16` is 16 bytes), never meant."""
MAX_CPUS = 448
"""More vCPUs than any EC2 instance has (u7in: 448): millicores written without their `m`."""


def _plausible_memory(value: str) -> str:
    if quantity_value(value) < MIN_MEMORY:
        raise ValueError(
            f"{value!r} is {quantity_value(value):g} bytes: Kubernetes reads a memory size without a unit as "
            f"bytes; write the unit, e.g. '{value}Gi' for {value} GiB or '{value}Mi' for {value} MiB"
        )
    return value


def _plausible_cpu(value: str) -> str:
    cpus = quantity_value(value)
    if cpus > MAX_CPUS:
        raise ValueError(
            f"{value!r} is {cpus:g} CPUs, more than any EC2 instance has; millicores are written with an m "
            f"('{value}m' is {cpus / 1000:g} CPUs)"
        )
    return value


MemoryQuantity = Annotated[Quantity, AfterValidator(_plausible_memory)]
"""A container's memory (`8Gi`): at least 64Mi, so a unit left out is caught."""
CpuQuantity = Annotated[Quantity, AfterValidator(_plausible_cpu)]
"""A container's CPU (`2`, `500m`): at most what an instance has, so millicores without `m` are caught."""

_HUMAN = {60: "a minute", 120: "2 minutes", 600: "10 minutes", 3600: "an hour", 86400: "a day"}


def _at_most(limit: float, units: tuple[str, str], limit_said: str, smaller: tuple[str, str], per: int):
    """A figure in `units` (name, symbol) of at most `limit`: a larger one is the same figure in the
    `smaller` units (`per` of which make one), written as if it were the larger."""

    def check(value: float) -> float:
        if value > limit:
            raise ValueError(
                f"{value:g} {units[0]} is more than {limit_said}; the value is in {units[0]}, not "
                f"{smaller[0]} ({value:g} {smaller[1]} is {value / per:g} {units[1]})"
            )
        return value

    return AfterValidator(check)


def seconds_at_most(limit: int) -> AfterValidator:
    """A duration in seconds of at most `limit`: a larger one is milliseconds written as seconds."""
    return _at_most(
        limit, ("seconds", "s"), _HUMAN.get(limit, f"{limit} seconds"), ("milliseconds", "ms"), 1000
    )


NEVER_PUBLIC = tuple(
    IPv4Network(cidr)
    for cidr in (
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
    )
)
"""Source ranges no request that crosses the internet ever has: RFC 1918, shared address space (RFC 6598),
loopback, link-local."""


def never_public(ranges: list[IPv4Network]) -> list[str]:
    """The ranges of `ranges` inside one that never reaches a public endpoint."""
    return [str(r) for r in ranges if any(r.subnet_of(p) for p in NEVER_PUBLIC)]


_ARN = re.compile(
    r"^arn:(?P<partition>aws[a-z-]*):(?P<service>[a-z0-9-]+):(?P<region>[a-z0-9-]*):(?P<account>\d{12}|):(?P<resource>.+)$"
)


def arn_of(service: str, resources: tuple[str, ...], example: str, *, regional: bool) -> AfterValidator:
    """An ARN of `service` whose resource begins with one of `resources`; the message names the kind
    expected and, for the usual mix-ups, what to give instead."""

    def check(value: str) -> str:
        found = _ARN.match(value)
        kind = f"{example}"
        if not found:
            raise ValueError(f"{value!r} is not an ARN; expected {kind}")
        if found["service"] == "sts" and found["resource"].startswith("assumed-role/"):
            role = found["resource"].split("/")[1]
            raise ValueError(
                f"{value} is an STS session; name its role: arn:{found['partition']}:iam::{found['account']}:"
                f"role/{role}"
            )
        if found["service"] == "kms" and found["resource"].startswith("alias/"):
            raise ValueError(
                f"{value} is a KMS alias; give the key's own ARN (`aws kms describe-key --key-id "
                f"{found['resource']} --query KeyMetadata.Arn`)"
            )
        if found["service"] != service or not found["resource"].startswith(resources):
            what = found["resource"].split("/")[0]
            raise ValueError(f"{value} names {found['service']}:{what}; expected {kind}")
        if regional and not found["region"]:
            raise ValueError(f"{value} names no region; expected {kind}")
        if not found["account"]:
            raise ValueError(f"{value} names no account; expected {kind}")
        return value

    return AfterValidator(check)


KmsKeyArn = Annotated[
    str, arn_of("kms", ("key/",), "a KMS key ARN, arn:aws:kms:<region>:<account>:key/<id>", regional=True)
]
AcmCertificateArn = Annotated[
    str,
    arn_of(
        "acm",
        ("certificate/",),
        "an ACM certificate ARN, arn:aws:acm:<region>:<account>:certificate/<id>",
        regional=True,
    ),
]
IamPrincipalArn = Annotated[
    str,
    arn_of(
        "iam",
        ("role/", "user/"),
        "an IAM role or user ARN, arn:aws:iam::<account>:role/<name>",
        regional=False,
    ),
]


KUBERNETES_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")


def _ours_to_own(value: str) -> str:
    if value in KUBERNETES_NAMESPACES or value.startswith("kube-"):
        raise ValueError(
            f"{value!r} is a namespace Kubernetes owns ({', '.join(KUBERNETES_NAMESPACES)}, kube-*); the "
            "stack gives its namespaces their own policies and Pod Security labels, so pick a name of its own"
        )
    return value


_IP_ADDRESS = re.compile(r"^\d{1,3}(\.\d{1,3}){3}$")
_BUCKET_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_BUCKET_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")


def s3_bucket_problem(name: str) -> str | None:
    """Why S3 refuses a general purpose bucket name (the S3 User Guide's naming rules), or None."""
    if not 3 <= len(name) <= 63:
        return f"{name!r} has {len(name)} characters; S3 bucket names have 3 to 63"
    if not re.fullmatch(r"[a-z0-9.-]+", name):
        return f"{name!r}: S3 bucket names hold only lower-case letters, digits, dots and hyphens"
    if not (name[0].isalnum() and name[-1].isalnum()):
        return f"{name!r}: an S3 bucket name begins and ends with a letter or digit"
    if ".." in name:
        return f"{name!r}: an S3 bucket name has no two adjacent dots"
    if _IP_ADDRESS.match(name):
        return f"{name!r}: an S3 bucket name is never formatted as an IP address"
    for prefix in _BUCKET_PREFIXES:
        if name.startswith(prefix):
            return f"{name!r}: S3 reserves bucket names beginning with {prefix!r}"
    for suffix in _BUCKET_SUFFIXES:
        if name.endswith(suffix):
            return f"{name!r}: S3 reserves bucket names ending with {suffix!r}"
    return None


def _check_bucket(value: str) -> str:
    problem = s3_bucket_problem(value)
    if problem:
        raise ValueError(problem)
    return value


BucketName = Annotated[str, AfterValidator(_check_bucket)]
"""An S3 general purpose bucket name, by all of S3's naming rules."""


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


MAX_INSTANCE_MEMORY_GIB = 32768
"""The largest EC2 instances' memory (u7in-32tb: 32 TiB)."""
MAX_GPU_MEMORY_GIB = 512
"""Far above any GPU's memory today (B300: 288 GB)."""


def gib_at_most(limit: int, what: str) -> AfterValidator:
    """A size in GiB of at most `limit`: a larger one is MiB written as GiB (what EC2's API reports)."""
    return _at_most(limit, ("GiB", "GiB"), f"{what} ({limit} GiB)", ("MiB", "MiB"), 1024)


Namespace = Annotated[DnsLabel, AfterValidator(_ours_to_own)]
"""A namespace the stack creates and owns: an RFC 1123 label, none of Kubernetes' own."""


class InstanceSpec(StrictModel):
    """An instance type described in the stack file, for types the catalog in planning/catalog.py does
    not know. Figures as EC2's DescribeInstanceTypes reports them; GPU memory as the driver reports it."""

    vcpu: int = Field(ge=1, le=MAX_CPUS, description="vCPUs.")
    memory_gib: Annotated[int, gib_at_most(MAX_INSTANCE_MEMORY_GIB, "any EC2 instance has")] = Field(
        ge=1, description="Memory in GiB."
    )
    gpus: int = Field(0, ge=0, le=16, description="GPUs.")
    gpu_model: str = Field("", description="GPU model, e.g. `L4` (for messages).")
    gpu_memory_gib: Annotated[float, gib_at_most(MAX_GPU_MEMORY_GIB, "any GPU has")] = Field(
        0, ge=0, description="Memory per GPU in GiB, as nvidia-smi reports it."
    )
    efa_interfaces: int = Field(0, ge=0, description="Maximum EFA interfaces; 0 without EFA.")
    gpudirect_rdma: bool = Field(False, description="Whether the GPUs register memory with EFA directly.")


SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""PyYAML's safe loader on libyaml where the wheel has it (the same documents, several times faster)."""


SAFE_DUMPER: Any = getattr(yaml, "CSafeDumper", yaml.SafeDumper)
"""PyYAML's safe dumper on libyaml where the wheel has it (the same text, several times faster)."""


def load_yaml(text: str) -> Any:
    """`yaml.safe_load`, on libyaml where available."""
    return yaml.load(text, Loader=SAFE_LOADER)
