"""Which way the KV cache goes from the prefill GPU to the decode GPU: NIXL's backend and where vLLM's
connector keeps the buffers NIXL moves, decided from the GPU type's hardware and the model's layers.

What was read, at the pinned versions (vLLM 0.26.0 wheel, NIXL 1.3.1, Ray 2.58.0):

- NIXL's LIBFABRIC backend (EFA) registers GPU memory only through GPUDirect RDMA: "GDR (GPU Direct
  RDMA) support is currently required" (src/plugins/libfabric/README.md); without FI_HMEM it falls back
  to registering the GPU address as system memory (libfabric_rail.cpp), which fails. Host memory
  (DRAM) it registers on EFA always.
- vLLM's NixlConnector supports `kv_buffer_device` "cuda" or "cpu" on CUDA (nixl/utils.py
  `_NIXL_SUPPORTED_DEVICE`). With "cpu" it allocates a host copy of the whole KV cache, per layer, the
  shape of the GPU cache (base_worker.py `initialize_host_xfer_buffer`), and registers that as DRAM; the
  prefill side copies GPU to host per request, the decode side host to GPU. The host copy asserts a 4-D
  tensor per layer, so a hybrid model (Mamba / Gated DeltaNet state layers, stored as a list of state
  tensors: gpu_model_runner.py) cannot use it.
- UCX moves GPU buffers without GPUDirect RDMA by staging them through host memory, over TCP on EFA
  instances (UCX has no EFA transport): slow, but it works.
- Ray Serve LLM passes `kv_transfer_config` to vLLM unchanged but for `engine_id`
  (engines/vllm/kv_transfer/nixl.py).

So: GPUDirect RDMA (p4d, p5 families): LIBFABRIC with GPU buffers. None (g5, g6, g6e): LIBFABRIC with
host buffers when the model has only attention layers; for a hybrid model (the default Qwen3.5-9B)
UCX with GPU buffers, over TCP, which the preview says in so many words. (UCX 1.19 and later, which
NIXL 1.3.1's wheel bundles as 1.21.0, also has an EFA transport, `srd`; whether it serves the reads is
up to UCX on the node, and `ops verify`'s transfer probe reports the transport it saw.)

The floor `ops verify` holds a measured KV transfer to (`transfer_floor`) is half of what one GPU's
share of the node's network carries: over EFA, the instance's baseline bandwidth times the EFA
interfaces per GPU of the worker over the node's; over TCP, at most one flow's 10 Gbit/s. A path that
silently degraded (TCP where EFA was planned, one rail of several) falls far below it; protocol
overhead does not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from config import PROJECT, ConfigError
from config.serving import ModelConfig
from planning.capacity import KNOWN_MODELS
from planning.catalog import InstanceType

Backend = Literal["LIBFABRIC", "UCX"]
BufferDevice = Literal["cuda", "cpu"]
Wire = Literal["efa", "tcp"]

FLOOR_SHARE = 0.5
"""The floor is this share of what the worker's network carries."""
TCP_FLOW_GBPS = 10.0
"""EC2: a single TCP flow between instances of one cluster placement group reaches up to 10 Gbit/s
(5 outside one); https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-network-bandwidth.html.
The GPU nodes share a cluster placement group (pulumi-eks, `enable_efa_support`), and a UCX tcp
endpoint is one connection."""
EC2_BANDWIDTH_SOURCE = "EC2's baseline bandwidth for the type"


@dataclass(frozen=True)
class TransferFloor:
    """The least KV transfer rate `ops verify` accepts, per wire, in GB/s (decimal), with its basis."""

    efa_gbytes_s: float | None
    tcp_gbytes_s: float | None
    basis: str

    def on(self, wire: Wire) -> float | None:
        return self.efa_gbytes_s if wire == "efa" else self.tcp_gbytes_s

    def summary(self) -> str:
        if self.efa_gbytes_s is None or self.tcp_gbytes_s is None:
            return f"KV transfer floor for `ops verify`: none ({self.basis})"
        return (
            f"KV transfer floor for `ops verify`: {self.efa_gbytes_s:.2f} GB/s over EFA, "
            f"{self.tcp_gbytes_s:.2f} GB/s over TCP ({self.basis})"
        )


def transfer_floor(gpu: InstanceType, efa_per_worker: int, tensor_parallel_size: int) -> TransferFloor:
    """Half of what one GPU's share of the node's network carries, over EFA and over TCP: the probe,
    like each tensor-parallel rank's KV transfer, moves one GPU's buffer, and NIXL stripes it over the
    EFA interfaces it finds near that GPU (one at least)."""
    if not gpu.network_gbps or not gpu.efa_interfaces or efa_per_worker < 1:
        return TransferFloor(None, None, f"the network bandwidth of {gpu.name} is not known")
    interfaces = max(1, efa_per_worker // max(tensor_parallel_size, 1))
    share_gbps = gpu.network_gbps * interfaces / gpu.efa_interfaces
    basis = (
        f"{FLOOR_SHARE:.0%} of {share_gbps:g} Gbit/s: {interfaces} of {gpu.name}'s {gpu.efa_interfaces} "
        f"EFA interface(s) per GPU, of {gpu.network_gbps:g} Gbit/s ({EC2_BANDWIDTH_SOURCE}); over TCP at "
        f"most one flow's {TCP_FLOW_GBPS:g} Gbit/s"
    )
    return TransferFloor(
        efa_gbytes_s=round(FLOOR_SHARE * share_gbps / 8, 3),
        tcp_gbytes_s=round(FLOOR_SHARE * min(share_gbps, TCP_FLOW_GBPS) / 8, 3),
        basis=basis,
    )


@dataclass(frozen=True)
class KvPath:
    backends: tuple[Backend, ...]
    buffer_device: BufferDevice
    reason: str
    over_efa: bool
    """Whether the KV bytes cross EFA (LIBFABRIC) rather than TCP (UCX alone)."""

    def summary(self) -> str:
        where = "GPU" if self.buffer_device == "cuda" else "host"
        wire = "EFA" if self.over_efa else "TCP"
        return (
            f"KV cache path: NIXL {'+'.join(self.backends)} over {wire}, buffers in {where} memory "
            f"(kv_buffer_device {self.buffer_device}): {self.reason}"
        )


def hybrid_layers(model: ModelConfig) -> bool:
    """Whether the model keeps per-sequence state layers beside attention (the config's say, else the
    built-in knowledge of the default model, else no)."""
    if model.hybrid_layers is not None:
        return model.hybrid_layers
    known = KNOWN_MODELS.get(model.source)
    return bool(known and known.hybrid_layers)


def plan_kv_path(model: ModelConfig, gpu: InstanceType) -> tuple[KvPath, list[str]]:
    """The path, and the warnings a preview prints; ConfigError for a combination that cannot work."""
    hybrid = hybrid_layers(model)
    gdr = gpu.gpudirect_rdma
    backends: tuple[Backend, ...] | None = tuple(model.nixl_backends) if model.nixl_backends else None
    device: BufferDevice | None = None if model.kv_buffer_device == "auto" else model.kv_buffer_device
    warnings: list[str] = []
    problems: list[str] = []
    if device is None:
        if gdr:
            device = "cuda"
        elif backends and "LIBFABRIC" not in backends:
            device = "cuda"  # UCX stages GPU buffers itself
        else:
            device = "cuda" if hybrid else "cpu"
    if backends is None:
        backends = ("UCX",) if (not gdr and device == "cuda") else ("LIBFABRIC",)
    if "LIBFABRIC" in backends and device == "cuda" and not gdr:
        problems.append(
            f"{PROJECT}:model.nixlBackends LIBFABRIC with GPU buffers needs GPUDirect RDMA, which "
            f"{gpu.name} has not (NIXL 1.3.1's libfabric plugin registers GPU memory only through it); "
            "set model.kvBufferDevice: cpu (attention-only models), or nixlBackends: [UCX]"
        )
    if device == "cpu" and hybrid:
        problems.append(
            f"{PROJECT}:model.kvBufferDevice cpu: {model.source} has state layers beside attention "
            "(model.hybridLayers), which vLLM 0.26's host buffer cannot hold (it asserts one 4-D "
            "tensor per layer); use GPU buffers (kvBufferDevice: cuda) with UCX, or a GPU type with "
            "GPUDirect RDMA (p4d, p5) and LIBFABRIC"
        )
    if problems:
        raise ConfigError(problems)
    over_efa = "LIBFABRIC" in backends
    if gdr and device == "cuda" and over_efa:
        reason = f"{gpu.name} has GPUDirect RDMA, so NIXL registers the GPU cache with EFA directly"
    elif device == "cpu" and over_efa:
        reason = (
            f"{gpu.name} has no GPUDirect RDMA, so the cache is copied into host memory NIXL sends over "
            "EFA (the prefill side copies out, the decode side in)"
        )
    elif not over_efa and not gdr and hybrid and model.kv_buffer_device == "auto" and not model.nixl_backends:
        reason = (
            f"{gpu.name} has no GPUDirect RDMA for GPU buffers, and {model.source}'s state layers rule out "
            "vLLM's host buffers, so UCX moves the GPU cache over TCP"
        )
        warnings.append(
            f"{PROJECT}:model: the KV cache goes over TCP (UCX), not EFA: {reason}. For EFA, pick a GPU "
            "type with GPUDirect RDMA (p4d.24xlarge, p5.48xlarge) or an attention-only model"
        )
    else:
        reason = "as model.nixlBackends and model.kvBufferDevice say"
        if not over_efa:
            warnings.append(
                f"{PROJECT}:model.nixlBackends has no LIBFABRIC: the KV cache goes over TCP (UCX)"
            )
    if gdr and device == "cpu":
        warnings.append(
            f"{PROJECT}:model.kvBufferDevice cpu on {gpu.name}, which has GPUDirect RDMA: every transfer "
            "takes two extra copies through host memory; `auto` keeps the cache on the GPU"
        )
    return KvPath(backends, device, reason, over_efa), warnings
