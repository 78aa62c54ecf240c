"""What the stack knows about instance types: EC2's own description, asked at every preview and up
(`aws.ec2.get_instance_type`), merged with a small offline catalog.

The catalog serves offline work (`ops render`, the tests) and says what EC2 does not: GPU memory as
the driver reports it (what vLLM's `gpu_memory_utilization` is a fraction of) and GPUDirect RDMA.
EC2 wins on everything it says, and a disagreement is a preview warning; a type the catalog does not
know needs no code change (`from_ec2`).

Sources (read 2026-11): AWS "Accelerated computing instance specifications"
(https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html) and "General purpose instance
specifications" (https://docs.aws.amazon.com/ec2/latest/instancetypes/gp.html); vCPU, memory, GPU
memory and the maximum EFA interfaces as EC2's DescribeInstanceTypes reports them, tabulated in
aws/karpenter-provider-aws website/content/en/docs/reference/instance-types.md; the EFA device
plugin's allow-list (aws/eks-charts stable/aws-efa-k8s-device-plugin/values.yaml), which agrees that
g5/g6/g6e have EFA from 8xlarge up; GPUDirect RDMA only on P-series from p4d (aws/aws-ofi-nccl#547).
`network_gbps` is each type's baseline network bandwidth from the same EC2 pages' network tables
(#ac_network, #gp_network), as aws/karpenter-provider-aws scrapes them into
pkg/providers/instancetype/zz_generated.bandwidth.go @ 7f27b4e85d31 (2026-08-18, Mbit/s there).
`gpu_memory_gib` is the memory per GPU that vLLM's `gpu_memory_utilization` is a fraction of: what
nvidia-smi reports where we have a reading (A10G 23028 MiB, L4 23034 MiB), else EC2's figure.
"""

from __future__ import annotations

from dataclasses import dataclass

from config import ConfigError
from config.base import InstanceSpec


@dataclass(frozen=True)
class InstanceType:
    name: str
    vcpu: int
    memory_gib: int
    gpus: int = 0
    gpu_model: str = ""
    gpu_memory_gb: int = 0
    """Per GPU, as AWS states it (decimal GB)."""
    gpu_memory_gib: float = 0.0
    """Per GPU, as the driver reports it (what vLLM budgets against)."""
    efa_interfaces: int = 0
    """Maximum EFA interfaces; 0 means the type has no EFA."""
    gpudirect_rdma: bool = False
    local_nvme_gb: int = 0
    """Instance-store NVMe, in GB (0: none or unknown)."""
    network_gbps: float = 0.0
    """Baseline network bandwidth of the whole instance, in Gbit/s, the sum over its network cards (0:
    unknown): what `ops verify`'s KV transfer floor is a share of (planning/kv_path.py)."""
    network_cards: int = 0
    """EC2's maximum network cards (0: unknown offline, where each EFA interface has a card of its own, as
    on every catalogued EFA type): an EFA node group gets one interface per card."""
    source: str = "https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html"

    @property
    def has_gpu(self) -> bool:
        return self.gpus > 0

    @property
    def has_efa(self) -> bool:
        return self.efa_interfaces > 0

    @property
    def origin(self) -> str:
        """Who described the type: EC2, the stack file, or (offline) the catalog."""
        if self.source.startswith("EC2"):
            return "EC2"
        return "stack file" if self.source.startswith("the stack file") else "offline catalog"

    def describe_gpu(self) -> str:
        return f"{self.gpu_model} {self.gpu_memory_gb} GB"


_AC = "https://docs.aws.amazon.com/ec2/latest/instancetypes/ac.html"
_GP = "https://docs.aws.amazon.com/ec2/latest/instancetypes/gp.html"

# Memory per GPU in GiB: nvidia-smi's total where known, else EC2's MiB figure.
_A10G = 22.49  # nvidia-smi 23028 MiB
_L4 = 22.49  # nvidia-smi 23034 MiB
_L40S = 44.70  # EC2 45776 MiB
_A100_40 = 40.0  # EC2 40960 MiB
_H100_80 = 80.0  # EC2 81920 MiB
_H200 = 141.0  # EC2 144384 MiB

CATALOG: dict[str, InstanceType] = {
    t.name: t
    for t in (
        # CPU types for the system node group.
        InstanceType("m7i.large", vcpu=2, memory_gib=8, network_gbps=0.781, source=_GP),
        InstanceType("m7i.xlarge", vcpu=4, memory_gib=16, network_gbps=1.562, source=_GP),
        InstanceType("m7i.2xlarge", vcpu=8, memory_gib=32, network_gbps=3.125, source=_GP),
        InstanceType("m7i.4xlarge", vcpu=16, memory_gib=64, network_gbps=6.25, source=_GP),
        # GPU types without EFA: valid GPUs, refused for the EFA worker group.
        InstanceType("g5.xlarge", 4, 16, 1, "A10G", 24, _A10G, network_gbps=2.5, source=_AC),
        InstanceType("g6.xlarge", 4, 16, 1, "L4", 24, _L4, network_gbps=2.5, source=_AC),
        InstanceType("g6.2xlarge", 8, 32, 1, "L4", 24, _L4, network_gbps=5, source=_AC),
        InstanceType("g6.4xlarge", 16, 64, 1, "L4", 24, _L4, network_gbps=10, source=_AC),
        # g5: NVIDIA A10G, EFA from 8xlarge up.
        InstanceType(
            "g5.8xlarge", 32, 128, 1, "A10G", 24, _A10G, efa_interfaces=1, network_gbps=25, source=_AC
        ),
        InstanceType(
            "g5.12xlarge", 48, 192, 4, "A10G", 24, _A10G, efa_interfaces=1, network_gbps=40, source=_AC
        ),
        InstanceType(
            "g5.16xlarge", 64, 256, 1, "A10G", 24, _A10G, efa_interfaces=1, network_gbps=25, source=_AC
        ),
        InstanceType(
            "g5.24xlarge", 96, 384, 4, "A10G", 24, _A10G, efa_interfaces=1, network_gbps=50, source=_AC
        ),
        InstanceType(
            "g5.48xlarge", 192, 768, 8, "A10G", 24, _A10G, efa_interfaces=1, network_gbps=100, source=_AC
        ),
        # g6: NVIDIA L4, EFA from 8xlarge up, no GPUDirect RDMA.
        InstanceType("g6.8xlarge", 32, 128, 1, "L4", 24, _L4, efa_interfaces=1, network_gbps=25, source=_AC),
        InstanceType("g6.12xlarge", 48, 192, 4, "L4", 24, _L4, efa_interfaces=1, network_gbps=40, source=_AC),
        InstanceType("g6.16xlarge", 64, 256, 1, "L4", 24, _L4, efa_interfaces=1, network_gbps=25, source=_AC),
        InstanceType("g6.24xlarge", 96, 384, 4, "L4", 24, _L4, efa_interfaces=1, network_gbps=50, source=_AC),
        InstanceType(
            "g6.48xlarge", 192, 768, 8, "L4", 24, _L4, efa_interfaces=1, network_gbps=100, source=_AC
        ),
        # g6e: NVIDIA L40S.
        InstanceType(
            "g6e.8xlarge", 32, 256, 1, "L40S", 48, _L40S, efa_interfaces=1, network_gbps=25, source=_AC
        ),
        InstanceType(
            "g6e.12xlarge", 48, 384, 4, "L40S", 48, _L40S, efa_interfaces=1, network_gbps=100, source=_AC
        ),
        InstanceType(
            "g6e.16xlarge", 64, 512, 1, "L40S", 48, _L40S, efa_interfaces=1, network_gbps=35, source=_AC
        ),
        InstanceType(
            "g6e.24xlarge", 96, 768, 4, "L40S", 48, _L40S, efa_interfaces=2, network_gbps=200, source=_AC
        ),
        InstanceType(
            "g6e.48xlarge", 192, 1536, 8, "L40S", 48, _L40S, efa_interfaces=4, network_gbps=400, source=_AC
        ),
        # p4d / p5 / p5e / p5en: A100, H100, H200 with GPUDirect RDMA over EFA.
        InstanceType(
            "p4d.24xlarge",
            96,
            1152,
            8,
            "A100",
            40,
            _A100_40,
            efa_interfaces=4,
            gpudirect_rdma=True,
            network_gbps=400,
            source=_AC,
        ),
        InstanceType(
            "p5.48xlarge",
            192,
            2048,
            8,
            "H100",
            80,
            _H100_80,
            efa_interfaces=32,
            gpudirect_rdma=True,
            network_gbps=3200,
            source=_AC,
        ),
        InstanceType(
            "p5e.48xlarge",
            192,
            2048,
            8,
            "H200",
            141,
            _H200,
            efa_interfaces=32,
            gpudirect_rdma=True,
            network_gbps=3200,
            source=_AC,
        ),
        InstanceType(
            "p5en.48xlarge",
            192,
            2048,
            8,
            "H200",
            141,
            _H200,
            efa_interfaces=16,
            gpudirect_rdma=True,
            network_gbps=3200,
            source=_AC,
        ),
    )
}


@dataclass(frozen=True)
class Ec2InstanceType:
    """EC2's DescribeInstanceTypes answer for one type, in its own units (what `get_instance_type` says)."""

    name: str
    vcpus: int
    memory_mib: int
    gpus: int = 0
    gpu_name: str = ""
    gpu_memory_mib: int = 0
    """Per GPU."""
    efa_max_interfaces: int = 0
    """0 when EFA is not supported."""
    instance_storage_gb: int = 0
    network_gbps: float = 0.0
    """The sum of the network cards' `BaselineBandwidthInGbps`."""
    network_cards: int = 0


def _gpudirect_rdma(name: str) -> bool:
    """Not in DescribeInstanceTypes: P-series GPUs (p4d and later) register their memory with EFA
    directly (aws/aws-ofi-nccl#547); G-series (g5, g6, g6e) do not."""
    return name.startswith("p")


def from_ec2(ec2: Ec2InstanceType, offline: InstanceType | None) -> tuple[InstanceType, list[str]]:
    """EC2's figures, with GPU memory as the driver reports it and GPUDirect RDMA from the catalog when
    it knows the type; and a warning for every figure where the catalog disagrees with EC2."""
    described = InstanceType(
        name=ec2.name,
        vcpu=ec2.vcpus,
        memory_gib=ec2.memory_mib // 1024,
        gpus=ec2.gpus,
        gpu_model=ec2.gpu_name,
        gpu_memory_gb=round(ec2.gpu_memory_mib * 2**20 / 1e9),
        gpu_memory_gib=offline.gpu_memory_gib if offline else round(ec2.gpu_memory_mib / 1024, 2),
        efa_interfaces=ec2.efa_max_interfaces,
        gpudirect_rdma=offline.gpudirect_rdma if offline else _gpudirect_rdma(ec2.name),
        local_nvme_gb=ec2.instance_storage_gb,
        network_gbps=ec2.network_gbps or (offline.network_gbps if offline else 0.0),
        network_cards=ec2.network_cards,
        source="EC2 DescribeInstanceTypes" + (" and planning/catalog.py" if offline else ""),
    )
    warnings = []
    if offline is not None:
        for field in ("vcpu", "memory_gib", "gpus", "efa_interfaces", "network_gbps"):
            ours, theirs = getattr(offline, field), getattr(described, field)
            # Bandwidth: the catalog's figures come in Mbit/s (1562 for EC2's 1.5625 Gbit/s).
            if abs(ours - theirs) > (0.01 * max(ours, theirs) if field == "network_gbps" else 0):
                warnings.append(
                    f"{ec2.name}: planning/catalog.py says {field} {ours}, EC2 says {theirs}; using EC2's "
                    "(update the catalog)"
                )
    return described, warnings


def lookup(name: str, described: InstanceSpec | None = None) -> InstanceType | None:
    """The type as the stack file describes it (`instanceSpec`), else as the catalog knows it."""
    if described is not None:
        return InstanceType(
            name=name,
            vcpu=described.vcpu,
            memory_gib=described.memory_gib,
            gpus=described.gpus,
            gpu_model=described.gpu_model or "GPU",
            gpu_memory_gb=round(described.gpu_memory_gib * 2**30 / 1e9),
            gpu_memory_gib=described.gpu_memory_gib,
            efa_interfaces=described.efa_interfaces,
            gpudirect_rdma=described.gpudirect_rdma,
            source="the stack file's instanceSpec",
        )
    return CATALOG.get(name)


SPEC_FIELDS = {"vcpu": "vcpu", "memory_gib": "memoryGib", "gpus": "gpus", "efa_interfaces": "efaInterfaces"}
"""What `instanceSpec` states that EC2 also describes, in the stack file's spelling."""
GPU_MEMORY_TOLERANCE = 0.05
"""The driver reports a little more or less GPU memory than EC2's figure (L4: 23034 MiB by nvidia-smi,
22888 MiB by EC2); a difference beyond this is a different GPU, or MiB written as GiB."""


def spec_differences(described: InstanceSpec, ec2: Ec2InstanceType) -> list[tuple[str, object, object]]:
    """(key, the stack file's figure, EC2's) for every figure where the two disagree."""
    theirs, _ = from_ec2(ec2, None)
    found = [
        (key, getattr(described, field), getattr(theirs, field))
        for field, key in SPEC_FIELDS.items()
        if getattr(described, field) != getattr(theirs, field)
    ]
    ec2_gib = ec2.gpu_memory_mib / 1024
    if described.gpus and abs(described.gpu_memory_gib - ec2_gib) > GPU_MEMORY_TOLERANCE * max(ec2_gib, 1):
        found.append(("gpuMemoryGib", described.gpu_memory_gib, round(ec2_gib, 2)))
    return found


def resolve(
    name: str, described: InstanceSpec | None, ec2: Ec2InstanceType | None, key: str = "instanceSpec"
) -> tuple[InstanceType | None, list[str]]:
    """EC2's answer (at preview and up) merged with the catalog, or with the stack file's description
    where the catalog does not know the type; offline, the stack file's description, else the catalog.
    None when nobody knows the type. A description EC2 contradicts is refused (ConfigError naming
    `key`): EC2 is right about its own types, and a figure it contradicts would size every pod."""
    if ec2 is None:
        return lookup(name, described), []
    if described is None:
        return from_ec2(ec2, CATALOG.get(name))
    wrong = spec_differences(described, ec2)
    if wrong:
        raise ConfigError(
            [
                f"{key}.{field}: {ours} contradicts EC2, which describes {name} with {field} {theirs}; "
                f"correct it, or remove {key} (EC2's description is used where it is absent)"
                for field, ours, theirs in wrong
            ]
        )
    return from_ec2(ec2, CATALOG.get(name) or lookup(name, described))


def known_types(*, gpu: bool, efa: bool | None = None) -> list[str]:
    """Names of catalogued types with (or without) GPUs, optionally filtered on EFA, sorted."""
    return sorted(t.name for t in CATALOG.values() if t.has_gpu == gpu and (efa is None or t.has_efa == efa))
