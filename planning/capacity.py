"""What the GPU hardware can carry: worker pods per node, their CPU and memory, and the fit check
that decides at preview time whether the model can start at all.

The fit check, per GPU (tensor parallelism splits weights and KV cache evenly over `tp` GPUs):

    budget   = GPU memory (catalog) x gpuMemoryUtilization
    need     = weights / tp + runtime overhead + KV cache for one maxModelLen sequence / tp
    weights  = parameters x bytes per dtype element        (or the checkpoint size if only that is known)
    overhead = 1.0 GiB with enforceEager (CUDA context, activation peak), 1.5 GiB with CUDA graphs
    KV cache = kvCacheBytesPerToken x maxModelLen

vLLM refuses to start when its KV cache cannot hold one `max_model_len` sequence, which is why one
full sequence is the bar. And host memory: the worker's memory limit must leave the page cache room
for the checkpoint next to the engine's own processes, or every restart reads the weights from disk
again (~145 s instead of ~2 s on g6.8xlarge).

Limits: the overhead is an estimate (vLLM profiles it at start-up; measured 0.8-1 GiB for 8-9 B models
on one GPU in eager mode); linear-attention state (Qwen3.5's Gated DeltaNet layers) is per sequence,
not per token, and small; quantized checkpoints need `parametersBillions` with `dtype` describing the
stored width or `checkpointGib`. A pass means "can start", not "has a large batch".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from config.base import quantity_value
from planning.catalog import CATALOG, InstanceType

if TYPE_CHECKING:
    from config.serving import ModelConfig, WorkerConfig

GIB = 2**30
DTYPE_BYTES = {"auto": 2, "bfloat16": 2, "float16": 2, "float32": 4}
HOST_OVERHEAD_GIB = 12.0
"""Resident memory of Ray's raylet, the vLLM engine process and the tokenizer, beside the page cache."""


@dataclass(frozen=True)
class ModelSize:
    parameters_billions: float
    checkpoint_gib: float
    kv_cache_bytes_per_token: int
    source: str
    hybrid_layers: bool = False
    """Per-sequence state layers beside attention (planning/kv_path.py)."""
    state_bytes_per_sequence: int = 0
    """What a hybrid model's state layers hold per sequence, whatever its length: the part of a
    request's KV transfer that does not grow with the prompt (planning/kv_path.py)."""
    kv_heads: int | None = None
    """KV heads of the attention layers: which prefill and decode tensor-parallel sizes NIXL can pair
    (planning/tensor_parallel.py)."""


KNOWN_MODELS: dict[str, ModelSize] = {
    # 9,653,104,368 parameters (vision encoder and MTP layer included), bf16 checkpoint ~18 GiB in
    # 4 safetensors shards. 32 layers, of which 8 full attention (every 4th) with 4 KV heads of dim
    # 256: 8 x 2 (K, V) x 4 x 256 x 2 bytes = 32 KiB per token; the 24 Gated DeltaNet layers keep a
    # fixed state per sequence instead: a recurrent state of 32 value heads x 128 x 128 and a conv
    # state of (kernel 4 - 1) x (2 x 16 x 128 + 32 x 128) channels, in bf16: 24 x 548,864 x 2 bytes.
    "Qwen/Qwen3.5-9B": ModelSize(
        parameters_billions=9.653,
        checkpoint_gib=18.0,
        kv_cache_bytes_per_token=8 * 2 * 4 * 256 * 2,
        source="huggingface.co/Qwen/Qwen3.5-9B config.json (layer_types, num_key_value_heads, head_dim)",
        hybrid_layers=True,
        state_bytes_per_sequence=24 * (32 * 128 * 128 + 3 * (2 * 16 * 128 + 32 * 128)) * 2,
        kv_heads=4,
    ),
}


def pods_per_node(spec: InstanceType, tensor_parallel_size: int) -> int:
    """GPU worker pods one node hosts: each takes `tp` GPUs and at least one EFA interface."""
    return max(0, min(spec.gpus // tensor_parallel_size, spec.efa_interfaces))


def efa_per_pod(spec: InstanceType, per_node: int) -> int:
    """EFA interfaces each worker pod requests: its share of the node's, all of them when it owns the
    node (p5.48xlarge with tensor parallel 8: 32), so the KV cache crosses nodes over every rail the
    node has rather than one."""
    return spec.efa_interfaces // max(per_node, 1)


def idle_gpus(spec: InstanceType, tensor_parallel_size: int) -> int:
    """GPUs of a node no worker uses (a g6.12xlarge's 4 GPUs share 1 EFA interface: 3 idle at tp 1)."""
    return spec.gpus - pods_per_node(spec, tensor_parallel_size) * tensor_parallel_size


def tensor_parallel_for_all_gpus(spec: InstanceType) -> int | None:
    """The smallest tensor-parallel size that leaves no GPU of the node idle, if any does."""
    return next(
        (tp for tp in range(1, spec.gpus + 1) if spec.gpus % tp == 0 and idle_gpus(spec, tp) == 0), None
    )


SHM_PER_GPU_GIB = 16
"""Memory-backed /dev/shm per GPU of a worker (NCCL's intra-node buffers under tensor parallelism,
NIXL's host staging without GPUDirect RDMA): the seed's 16Gi for its one GPU, scaled."""


def shm_size(tensor_parallel_size: int, worker_memory_gib: float) -> str:
    """`SHM_PER_GPU_GIB` per GPU of the worker, at most a quarter of its memory (it counts against it)."""
    return f"{int(min(SHM_PER_GPU_GIB * tensor_parallel_size, worker_memory_gib // 4))}Gi"


@dataclass(frozen=True)
class WorkerResources:
    cpu: str
    memory: str
    memory_gib: float


def worker_share(spec: InstanceType, per_node: int) -> tuple[int, int]:
    """(vCPU, GiB) one GPU worker pod can have: the node's share after what the node keeps for itself.

    The node keeps max(2, vCPU/16) vCPUs and 8 % of its memory + 4 GiB for the kubelet's reservation
    (EKS AL2023: ~255 MiB + 11 MiB per pod), eviction threshold and the DaemonSets (aws-node,
    kube-proxy, device plugins). On g6.8xlarge that leaves 30 vCPU and 113 GiB: far above the ~18 GiB
    checkpoint, so the page cache keeps the weights across restarts.
    """
    cpu_free = spec.vcpu - max(2, spec.vcpu // 16)
    memory_free = spec.memory_gib - (math.ceil(spec.memory_gib * 0.08) + 4)
    return max(1, cpu_free // max(per_node, 1)), max(1, memory_free // max(per_node, 1))


def worker_resources(spec: InstanceType, per_node: int, worker: WorkerConfig) -> WorkerResources:
    """CPU and memory of one GPU worker pod: `serving.worker` overrides, else the node's share."""
    cpu_share, memory_share = worker_share(spec, per_node)
    cpu = worker.cpu or str(cpu_share)
    memory = worker.memory or f"{memory_share}Gi"
    return WorkerResources(cpu=cpu, memory=memory, memory_gib=quantity_value(memory) / GIB)


SYSTEM_NODE_RESERVED_CPU = 1.0
"""vCPU a system node keeps for the kubelet's reservation and its system pods (coredns 2 x 0.1,
KubeRay 0.1, kube-proxy 0.1, aws-node 0.025, ...)."""
SYSTEM_NODE_RESERVED_GIB = 3
"""Memory a system node keeps for the kubelet's reservation, eviction threshold and system pods."""


def system_node_free(spec: InstanceType, stack_pods: tuple[float, float] = (0, 0)) -> tuple[float, float]:
    """(vCPU, bytes) a system node offers the Ray head beside the system pods and `stack_pods`, the
    (vCPU, bytes) of the stack's own controllers and proxies (planning/system_pods.py), counted as if
    all ran on the head's node."""
    cpu, memory = stack_pods
    free_memory = (spec.memory_gib - SYSTEM_NODE_RESERVED_GIB) * GIB - memory
    return spec.vcpu - SYSTEM_NODE_RESERVED_CPU - cpu, free_memory


@dataclass(frozen=True)
class FitReport:
    instance: InstanceType
    utilization: float
    tensor_parallel_size: int
    weights_gib: float
    overhead_gib: float
    kv_cache_gib: float
    checkpoint_gib: float
    worker_memory_gib: float
    problems: tuple[str, ...]
    host_kv_gib: float = 0.0
    """Host memory of the worker's KV buffers (kv_buffer_device cpu: a copy of its whole KV cache)."""
    offload_gib: float = 0.0
    """Host memory of the worker's CPU tier for the KV cache (model.kvOffloadGib, pinned by vLLM)."""

    @property
    def budget_gib(self) -> float:
        return self.instance.gpu_memory_gib * self.utilization

    @property
    def need_gib(self) -> float:
        tp = self.tensor_parallel_size
        return self.weights_gib / tp + self.overhead_gib + self.kv_cache_gib / tp

    @property
    def fits(self) -> bool:
        return not self.problems

    def summary(self) -> str:
        if self.problems:
            return "model does not fit: " + "; ".join(self.problems)
        host = HOST_OVERHEAD_GIB + self.host_kv_gib + self.offload_gib
        page_cache = self.worker_memory_gib - host - self.checkpoint_gib
        margin = self.budget_gib - self.need_gib
        host_kv = f", {self.host_kv_gib:.1f} GiB of host KV buffers" if self.host_kv_gib else ""
        host_kv += f", {self.offload_gib:g} GiB of CPU KV tier" if self.offload_gib else ""
        return (
            f"model fits {self.instance.name}: needs {self.need_gib:.1f} GiB of the "
            f"{self.budget_gib:.1f} GiB GPU budget per GPU (margin {margin:.1f} GiB); "
            f"worker memory {self.worker_memory_gib:.0f} GiB keeps the {self.checkpoint_gib:.0f} GiB "
            f"checkpoint in page cache{host_kv} with {page_cache:.0f} GiB to spare"
        )

    @property
    def kv_pool_gib(self) -> float:
        """What vLLM gives the KV cache on one GPU: the budget less weights and runtime."""
        return max(self.budget_gib - self.weights_gib / self.tensor_parallel_size - self.overhead_gib, 0.0)


def fit_report(
    model: ModelConfig,
    spec: InstanceType,
    worker: WorkerConfig,
    per_node: int,
    host_kv: bool = False,
    *,
    tensor_parallel_size: int | None = None,
) -> FitReport:
    """`host_kv`: the KV buffers live in host memory (planning/kv_path.py), a copy of the worker's
    whole KV cache, which the worker's memory must hold beside the page cache. `tensor_parallel_size`:
    the side's, where a side runs its own (None: `model.tensorParallelSize`)."""
    if tensor_parallel_size is not None and tensor_parallel_size != model.tensor_parallel_size:
        model = model.model_copy(update={"tensor_parallel_size": tensor_parallel_size})
    known = KNOWN_MODELS.get(model.source)
    params = model.parameters_billions or (known.parameters_billions if known else None)
    checkpoint = model.checkpoint_gib or (known.checkpoint_gib if known else None)
    kv_per_token = model.kv_cache_bytes_per_token or (known.kv_cache_bytes_per_token if known else None)
    problems: list[str] = []
    if params is None and checkpoint is None:
        problems.append(
            f"the size of {model.source} is unknown; set model.parametersBillions or model.checkpointGib"
        )
    if kv_per_token is None:
        problems.append(
            f"the KV cache of {model.source} is unknown; set model.kvCacheBytesPerToken "
            "(2 x attention layers x KV heads x head dim x dtype bytes)"
        )
    dtype_bytes = DTYPE_BYTES[model.dtype]
    weights = params * 1e9 * dtype_bytes / GIB if params is not None else (checkpoint or 0.0)
    checkpoint = checkpoint if checkpoint is not None else weights
    resources = worker_resources(spec, per_node, worker)
    report = FitReport(
        instance=spec,
        utilization=model.gpu_memory_utilization,
        tensor_parallel_size=model.tensor_parallel_size,
        weights_gib=weights,
        overhead_gib=1.0 if model.enforce_eager else 1.5,
        kv_cache_gib=(kv_per_token or 0) * model.max_model_len / GIB,
        checkpoint_gib=checkpoint,
        worker_memory_gib=resources.memory_gib,
        problems=(),
    )
    if problems:
        return _with(report, problems)
    if host_kv:
        report = replace(report, host_kv_gib=report.kv_pool_gib * model.tensor_parallel_size)
    report = replace(report, offload_gib=model.kv_offload_gib or 0.0)
    gpu = f"{spec.name}: {spec.describe_gpu()} x {model.gpu_memory_utilization:.2f}"
    tp = model.tensor_parallel_size
    if weights / tp > report.budget_gib:
        problems.append(
            f"weights {weights / tp:.1f} GiB per GPU exceed the {report.budget_gib:.1f} GiB budget of {gpu} "
            f"by {weights / tp - report.budget_gib:.1f} GiB"
        )
    elif report.need_gib > report.budget_gib:
        problems.append(
            f"weights {weights / tp:.1f} GiB + runtime {report.overhead_gib:.1f} GiB + KV cache "
            f"{report.kv_cache_gib / tp:.2f} GiB for model.maxModelLen {model.max_model_len} need "
            f"{report.need_gib:.1f} GiB per GPU, {report.need_gib - report.budget_gib:.1f} GiB above the "
            f"{report.budget_gib:.1f} GiB budget of {gpu}; "
            "lower maxModelLen, raise gpuMemoryUtilization or tensorParallelSize, or pick a larger GPU"
        )
    host = HOST_OVERHEAD_GIB + report.host_kv_gib + report.offload_gib
    if resources.memory_gib < checkpoint + host:
        beside = f"{HOST_OVERHEAD_GIB:.0f} GiB of processes" + (
            f" and {report.host_kv_gib:.1f} GiB of host KV buffers" if report.host_kv_gib else ""
        )
        beside += f" and model.kvOffloadGib {report.offload_gib:g} GiB" if report.offload_gib else ""
        lower = ", or lower model.kvOffloadGib" if report.offload_gib else ""
        problems.append(
            f"worker memory {resources.memory} leaves no page cache for the {checkpoint:.0f} GiB "
            f"checkpoint next to {beside}; raise serving.worker.memory "
            f"to at least {math.ceil(checkpoint + host)}Gi{lower}"
        )
    return _with(report, problems)


def _with(report: FitReport, problems: list[str]) -> FitReport:
    return replace(report, problems=tuple(problems))


def fits_elsewhere(
    model: ModelConfig, spec: InstanceType, worker: WorkerConfig, host_kv: bool = False
) -> list[str]:
    """Where a model that does not fit `spec` would, from the catalog, in the order a refusal names
    them: tensor parallelism across more GPUs of the same kind (the fewest GPUs that hold it), then a
    bigger GPU at the model's tensor-parallel size. Empty when neither fits, or the model's size is
    unknown (the refusal says what to set)."""

    def fits(candidate: InstanceType, tp: int) -> bool:
        per_node = pods_per_node(candidate, tp)
        if not per_node or candidate.gpus % tp:
            return False
        sized = model.model_copy(update={"tensor_parallel_size": tp})
        return fit_report(sized, candidate, worker, per_node, host_kv=host_kv).fits

    gpus = sorted(
        (t for t in CATALOG.values() if t.gpus and t.efa_interfaces), key=lambda t: (t.gpus, t.name)
    )
    fixes = []
    wider = [
        (tp, t)
        for t in gpus
        if t.gpu_model == spec.gpu_model
        for tp in range(model.tensor_parallel_size + 1, t.gpus + 1)
        if fits(t, tp)
    ]
    if wider:
        tp, t = min(wider, key=lambda found: (found[0], found[1].gpus))
        fixes.append(
            f"model.tensorParallelSize {tp} on gpuNodes.instanceType {t.name} "
            f"({t.gpus} x {t.describe_gpu()}: tensor parallelism across more GPUs)"
        )
    tp = model.tensor_parallel_size
    bigger = [t for t in gpus if t.gpu_memory_gib > spec.gpu_memory_gib and fits(t, tp)]
    if bigger:
        t = min(bigger, key=lambda t: (t.gpu_memory_gib, t.gpus))
        fixes.append(f"gpuNodes.instanceType {t.name} ({t.gpus} x {t.describe_gpu()}: a bigger GPU)")
    return fixes
