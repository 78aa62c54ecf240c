"""Which way the KV cache goes from the prefill GPU to the decode GPU: NIXL's backend, where vLLM's
connector keeps the buffers NIXL moves, the mechanism that carries the bytes, the rate to expect and the
floor `ops verify` holds a measured transfer to, decided from the GPU type's hardware and the model.

What was read, at the versions the serving image carries (docs/design.md "The KV path" has every
source with its file and line):

- libfabric's EFA provider (>= 2.0; the image's EFA installer carries 2.x) claims FI_HMEM for CUDA
  memory even where the NIC cannot register GPU memory ("EFA RDM can support HMEM even if p2p support
  is not available", prov/efa/src/efa_prov_info.c), registers such a buffer under a software key
  without ibv_reg_mr (efa_mr.c), and turns `fi_read` of it into an emulated read: send packets, each
  (about 8 KB, the device's MTU) copied between the GPU and a host bounce buffer with cudaMemcpy or gdrcopy
  (rdm/efa_rdm_rma.c, rdm/efa_rdm_pke_utils.c). The per-packet copies cap each direction near
  0.9-1.0 GB/s.
- NIXL's LIBFABRIC plugin (>= 0.8.0; the image's 1.3) registers GPU memory with `fi_mr_regattr` as
  FI_HMEM_CUDA with no GPUDirect check (src/utils/libfabric/libfabric_rail.cpp); its README's "GDR
  support is currently required" predates that.
- vLLM's NixlConnector takes `kv_buffer_device` "cuda" or "cpu". With "cpu" it keeps a host copy of
  the whole KV cache, copied out in bulk on the prefill side and in on the decode side
  (base_worker.py `initialize_host_xfer_buffer`); that copy asserts one 4-D tensor per layer, so
  hybrid models (Mamba / Gated DeltaNet state layers) cannot use it.
- UCX has no EFA transport NIXL uses here: it moves GPU buffers by staging them through host memory
  over TCP, measured at 0.47-0.57 GB/s between two processes on an H200 with NIXL 1.3.x and 1.5.1
  (tests/fixtures/nixl/).

So, by GPU type:
- GPUDirect RDMA (p4d, p5): LIBFABRIC, GPU buffers; the EFA device reads GPU memory itself.
- none (g5, g6, g6e), hybrid model (the default Qwen3.5-9B): LIBFABRIC, GPU buffers, EFA emulated
  reads through host bounce buffers: the seed's path.
- none, attention-only model: LIBFABRIC, host buffers. The source shows them faster here: vLLM copies
  a request's blocks in bulk (PCIe speed, tens of GB/s), and EFA then moves host memory, which needs no
  per-packet GPU copy, so the link rather than the bounce copy sets the rate. The price is a host copy
  of the KV cache, which the fit check counts. `model.kvBufferDevice: cuda` keeps them on the GPU.
- UCX, asked for: over TCP.

Each path's floor is a share of what that path can carry (its ceiling), not of the link alone: half for
a path the link bounds, 40% for one a copy bounds (copy rates move with the CPU, PCIe and the GPU's
copy engines). A path that silently degraded (TCP where EFA was planned, one rail of several, a
ceiling not reached by far) falls below it, or `ops verify` sees the other mechanism in the logs.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from config import PROJECT, ConfigError
from config.serving import ModelConfig
from planning.capacity import KNOWN_MODELS
from planning.catalog import InstanceType

Backend = Literal["LIBFABRIC", "UCX"]
BufferDevice = Literal["cuda", "cpu"]
Wire = Literal["efa", "tcp"]
Mechanism = Literal["gpudirect", "emulated", "host", "tcp"]

MECHANISMS: dict[Mechanism, str] = {
    "gpudirect": "GPUDirect RDMA reads (the EFA device reads GPU memory directly)",
    "emulated": "EFA emulated reads through host bounce buffers (libfabric sends each ~8 KB packet "
    "through a cudaMemcpy between GPU and host memory)",
    "host": "host buffers registered on EFA (vLLM copies the KV blocks between GPU and host memory in "
    "bulk; EFA moves host memory)",
    "tcp": "UCX over TCP",
}
"""What each mechanism is, as the preview and `ops plan` say it."""
MECHANISM_NAMES: dict[Mechanism, str] = {
    "gpudirect": "GPUDirect RDMA reads",
    "emulated": "EFA emulated reads through host bounce buffers",
    "host": "host buffers registered on EFA",
    "tcp": "UCX over TCP",
}
"""The same, short, as `ops verify` names what it saw."""

LINK_FLOOR_SHARE = 0.5
"""The floor of a path the link bounds (GPUDirect, host buffers on EFA, host buffers over TCP)."""
COPY_FLOOR_SHARE = 0.4
"""The floor of a path a copy bounds (emulated reads, UCX staging GPU buffers): lower, since copy
rates move with the CPU, PCIe and the GPU's copy engines."""
BOUNCE_COPY_GBYTES_S = (0.5, 1.0)
"""EFA emulated reads of GPU memory: one cudaMemcpy per ~8 KB packet caps each direction near
0.9-1.0 GB/s (libfabric rdm/efa_rdm_pke_utils.c); plan for 0.5-1."""
UCX_STAGING_GBYTES_S = (0.45, 0.55)
"""UCX moving GPU buffers over TCP stages them through host memory ("software emulation" of the get):
0.47 GB/s (0.46-0.50) measured with NIXL 1.3.1 between two processes on an H200, and 0.49-0.57 in the
recordings with NIXL 1.3.0, 1.3.1 and 1.5.1 (tests/fixtures/nixl/ucx-gpu-tcp-*.json); tuning UCX's
fragments, rails and protocol did not lift it above 0.53."""
TCP_FLOW_GBPS = 10.0
"""EC2: a single TCP flow between instances of one cluster placement group reaches up to 10 Gbit/s
(5 outside one); https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-instance-network-bandwidth.html.
The GPU nodes share a cluster placement group (pulumi-eks, `enable_efa_support`), and a UCX tcp
endpoint is one connection."""
EC2_BANDWIDTH_SOURCE = "EC2's baseline bandwidth for the type"


@dataclass(frozen=True)
class KvPath:
    backends: tuple[Backend, ...]
    buffer_device: BufferDevice
    mechanism: Mechanism
    reason: str

    @property
    def over_efa(self) -> bool:
        """Whether the KV bytes cross EFA (LIBFABRIC) rather than TCP (UCX alone)."""
        return self.mechanism != "tcp"

    def summary(self) -> str:
        where = "GPU" if self.buffer_device == "cuda" else "host"
        wire = "EFA" if self.over_efa else "TCP"
        return (
            f"KV cache path: NIXL {'+'.join(self.backends)} over {wire}, buffers in {where} memory "
            f"(kv_buffer_device {self.buffer_device}), by {MECHANISMS[self.mechanism]}: {self.reason}"
        )


@dataclass(frozen=True)
class TransferFloor:
    """What the planned path carries and the least rate `ops verify` accepts, in GB/s (decimal), with
    the basis of both."""

    mechanism: Mechanism
    expected_gbytes_s: tuple[float, float] | None
    """The rate to expect (low, high); None where the type's network is not known."""
    gbytes_s: float | None
    """The floor; None where the type's network is not known."""
    basis: str

    @property
    def wire(self) -> Wire:
        return "tcp" if self.mechanism == "tcp" else "efa"

    def summary(self) -> str:
        if self.gbytes_s is None or self.expected_gbytes_s is None:
            return f"KV transfer floor for `ops verify`: none ({self.basis})"
        low, high = self.expected_gbytes_s
        expect = f"{high:.2f}" if low == high else f"{low:.2f}-{high:.2f}"
        return (
            f"KV transfer rate to expect: {expect} GB/s; floor for `ops verify`: {self.gbytes_s:.2f} GB/s "
            f"({self.basis})"
        )


def transfer_floor(
    path: KvPath, gpu: InstanceType, efa_per_worker: int, tensor_parallel_size: int
) -> TransferFloor:
    """What the planned mechanism carries for one GPU, and the floor under it. The probe, like each
    tensor-parallel rank's KV transfer, moves one GPU's buffer, and NIXL stripes it over the EFA
    interfaces it finds near that GPU (one at least)."""
    mechanism = path.mechanism
    if not gpu.network_gbps or not gpu.efa_interfaces or efa_per_worker < 1:
        return TransferFloor(mechanism, None, None, f"the network bandwidth of {gpu.name} is not known")
    interfaces = max(1, efa_per_worker // max(tensor_parallel_size, 1))
    share_gbps = gpu.network_gbps * interfaces / gpu.efa_interfaces
    share = share_gbps / 8
    link = (
        f"{share:.2f} GB/s: {interfaces} of {gpu.name}'s {gpu.efa_interfaces} EFA interface(s) per GPU, "
        f"of {gpu.network_gbps:g} Gbit/s ({EC2_BANDWIDTH_SOURCE})"
    )
    flow = min(share_gbps, TCP_FLOW_GBPS) / 8
    if mechanism in ("gpudirect", "host"):
        expected, share_of, basis = (share, share), LINK_FLOOR_SHARE, f"the link: {link}"
    elif mechanism == "emulated":
        low, high = (min(rate, share) for rate in BOUNCE_COPY_GBYTES_S)
        expected, share_of = (low, high), COPY_FLOOR_SHARE
        basis = (
            f"the bounce copy: {high:.2f} GB/s at most, one cudaMemcpy per ~8 KB packet (libfabric's "
            f"emulated reads; the link carries {share:.2f})"
        )
    elif path.buffer_device == "cuda":
        low, high = (min(rate, flow) for rate in UCX_STAGING_GBYTES_S)
        expected, share_of = (low, high), COPY_FLOOR_SHARE
        basis = (
            f"UCX's staging of GPU buffers: {high:.2f} GB/s at most (recorded on a GPU with NIXL 1.3.1; "
            f"one TCP flow carries {flow:.2f})"
        )
    else:
        expected, share_of = (flow, flow), LINK_FLOOR_SHARE
        basis = f"one TCP flow: {flow:.2f} GB/s, at most {TCP_FLOW_GBPS:g} Gbit/s (EC2), of {link}"
    floor = round(share_of * expected[1], 3)
    return TransferFloor(
        mechanism,
        (round(expected[0], 3), round(expected[1], 3)),
        floor,
        f"{share_of:.0%} of {basis}",
    )


@dataclass(frozen=True)
class Crossing:
    """How long a full `maxModelLen` prompt's KV takes to cross, at the rate to expect."""

    kv_bytes: int | None
    """KV bytes per token times tokens, plus a hybrid model's per-sequence state, per GPU; None: not
    known (an unknown model without `kvCacheBytesPerToken`)."""
    tokens: int
    state_bytes: int
    seconds: tuple[float, float] | None

    def summary(self) -> str:
        if self.kv_bytes is None:
            return (
                f"KV crossing time: not known (set model.kvCacheBytesPerToken for a {self.tokens}-token "
                "prompt's size)"
            )
        state = f", {self.state_bytes / 2**20:.0f} MiB of it per-sequence state" if self.state_bytes else ""
        size = f"{self.kv_bytes / 2**20:.0f} MiB per GPU{state}"
        if self.seconds is None:
            return f"KV crossing time: a full {self.tokens}-token prompt's KV is {size}"
        low, high = self.seconds
        if low == high or _ms(low) == _ms(high):
            time = f"in {_ms(low)}"
        elif _ms(low) == UNDER_1_MS:
            time = f"in {UNDER_1_MS} to {_ms(high)}"
        elif high < 1:
            time = f"in {low * 1000:.0f}-{high * 1000:.0f} ms"
        else:
            time = f"in {_ms(low)}-{_ms(high)}"
        return f"KV crossing time: a full {self.tokens}-token prompt's KV ({size}) crosses {time}"


UNDER_1_MS = "under 1 ms"


def _ms(seconds: float) -> str:
    """Milliseconds, or seconds from one on; what rounds to 0 ms (p5's RDMA reads of a small cache) is
    said to take under one, never none."""
    if round(seconds * 1000) == 0:
        return UNDER_1_MS
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def crossing(model: ModelConfig, floor: TransferFloor, tensor_parallel_size: int) -> Crossing:
    known = KNOWN_MODELS.get(model.source)
    per_token = model.kv_cache_bytes_per_token or (known.kv_cache_bytes_per_token if known else None)
    ranks = max(tensor_parallel_size, 1)  # each rank moves its own heads' share, in parallel
    state = (known.state_bytes_per_sequence if known else 0) // ranks
    tokens = model.max_model_len
    if per_token is None:
        return Crossing(None, tokens, state, None)
    size = per_token * tokens // ranks + state
    if floor.expected_gbytes_s is None:
        return Crossing(size, tokens, state, None)
    low, high = floor.expected_gbytes_s
    return Crossing(size, tokens, state, (size / (high * 1e9), size / (low * 1e9)))


def hybrid_layers(model: ModelConfig) -> bool:
    """Whether the model keeps per-sequence state layers beside attention (the config's say, else the
    built-in knowledge of the default model, else no)."""
    if model.hybrid_layers is not None:
        return model.hybrid_layers
    known = KNOWN_MODELS.get(model.source)
    return bool(known and known.hybrid_layers)


def prefix_cache(model: ModelConfig) -> bool:
    """Whether vLLM 0.26 keeps a prefix cache for the model: `enable_prefix_caching` where
    model.extraEngineKwargs sets it, else vLLM's default, which is on for an attention-only model and off
    for a hybrid one ("keep it opt-in for now while the feature matures", vllm/engine/arg_utils.py:2518-2522,
    2552-2553). So the default Qwen3.5 keeps none unless the stack file opts in (docs/design.md,
    "Routing")."""
    explicit = model.extra_engine_kwargs.get("enable_prefix_caching")
    if explicit is not None:
        return bool(explicit)
    return not hybrid_layers(model)


def plan_kv_path(model: ModelConfig, gpu: InstanceType) -> tuple[KvPath, list[str]]:
    """The path, and the warnings a preview prints; ConfigError for a combination that cannot work."""
    hybrid = hybrid_layers(model)
    gdr = gpu.gpudirect_rdma
    backends: tuple[Backend, ...] = tuple(model.nixl_backends or ("LIBFABRIC",))
    libfabric = "LIBFABRIC" in backends
    device: BufferDevice
    if model.kv_buffer_device != "auto":
        device = model.kv_buffer_device
    else:
        device = "cpu" if (libfabric and not gdr and not hybrid) else "cuda"
    if device == "cpu" and hybrid:
        raise ConfigError(
            [
                f"{PROJECT}:model.kvBufferDevice cpu: {model.source} has state layers beside attention "
                "(model.hybridLayers), which vLLM's host buffer cannot hold (it asserts one 4-D tensor "
                "per layer); use GPU buffers (kvBufferDevice: cuda or auto): over EFA by emulated reads "
                "without GPUDirect RDMA, by RDMA reads with it (p4d, p5)"
            ]
        )
    warnings: list[str] = []
    if not libfabric:
        mechanism: Mechanism = "tcp"
        reason = "as model.nixlBackends says"
        warnings.append(
            f"{PROJECT}:model.nixlBackends has no LIBFABRIC: the KV cache goes over TCP (UCX), not EFA"
        )
    elif device == "cpu":
        mechanism = "host"
        reason = (
            f"{gpu.name} has no GPUDirect RDMA, and an attention-only model's blocks copy to host memory in "
            "bulk, so EFA moves host memory at the link's rate rather than GPU memory one bounce-copied "
            "packet at a time"
            if not gdr
            else "as model.kvBufferDevice says"
        )
        if gdr:
            warnings.append(
                f"{PROJECT}:model.kvBufferDevice cpu on {gpu.name}, which has GPUDirect RDMA: every "
                "transfer takes two extra copies through host memory; `auto` keeps the cache on the GPU"
            )
    elif gdr:
        mechanism = "gpudirect"
        reason = f"{gpu.name} has GPUDirect RDMA, so the EFA device reads the GPU cache directly"
    else:
        mechanism = "emulated"
        reason = (
            f"{gpu.name} has no GPUDirect RDMA, so libfabric's EFA provider emulates each read with send "
            "packets bounced through host memory"
            + (
                f" ({model.source}'s state layers rule out vLLM's host buffers)"
                if hybrid and model.kv_buffer_device == "auto"
                else ""
            )
        )
    return KvPath(backends, device, mechanism, reason), warnings


def weaker_end(prefill: InstanceType, decode: InstanceType) -> InstanceType:
    """The end of the KV path that sets its mechanism, where the sides run on two GPU types: both ends
    register the same kind of buffer with NIXL (one `kv_buffer_device` for the pair), and an RDMA read
    needs GPUDirect RDMA at both ends, so the end without it decides; at equal footing, the one whose
    network is slower (it sets the floor too)."""

    def strength(gpu: InstanceType) -> tuple[bool, float]:
        return gpu.gpudirect_rdma, gpu.network_gbps or 0.0

    return prefill if strength(prefill) <= strength(decode) else decode


def plan_kv_path_between(
    model: ModelConfig, prefill: InstanceType, decode: InstanceType
) -> tuple[KvPath, list[str]]:
    """The KV path between two GPU types: the weaker end's (`weaker_end`); one type, `plan_kv_path`."""
    if prefill.name == decode.name:
        return plan_kv_path(model, prefill)
    weaker = weaker_end(prefill, decode)
    path, warnings = plan_kv_path(model, weaker)
    stronger = decode if weaker is prefill else prefill
    if stronger.gpudirect_rdma and not weaker.gpudirect_rdma:
        path = replace(
            path,
            reason=f"{path.reason} ({stronger.name} has GPUDirect RDMA, but its peer {weaker.name} does "
            "not, and the weaker end sets the path)",
        )
    return path, warnings


def slower_floor(floors: list[TransferFloor]) -> TransferFloor:
    """Of the two ends' floors, the one with the lower rate to expect (a transfer is as fast as its
    slower end); an end whose rate is not known makes the pair's unknown."""
    unknown = [f for f in floors if f.expected_gbytes_s is None]
    if unknown:
        return unknown[0]
    return min(floors, key=lambda f: (f.expected_gbytes_s or (0.0, 0.0))[1])
