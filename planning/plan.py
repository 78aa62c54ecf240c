"""Everything that follows from a stack's settings and the hardware it names, decided once.

`plan_stack` refuses, naming the keys, every setting the hardware cannot carry: a GPU type that is not
catalogued or has no GPU or EFA, a tensor-parallel size above the node's GPUs, more workers than the
nodes host, a zero-downtime upgrade without room for a second cluster, a model that does not fit.
"""

from __future__ import annotations

from dataclasses import dataclass

from config import PROJECT, ConfigError, Settings, versions
from planning.capacity import FitReport, WorkerResources, fit_report, pods_per_node, worker_resources
from planning.catalog import InstanceType, known_types, lookup
from planning.upgrades import UpgradePlan, plan_upgrades


@dataclass(frozen=True)
class Plan:
    gpu: InstanceType
    """The GPU node type, as the catalog describes it."""
    gpu_pods_per_node: int
    """GPU worker pods one GPU node hosts (GPUs / tensorParallelSize, at most one per EFA interface)."""
    gpu_workers: int
    """GPU worker pods of one Ray cluster: one per prefill or decode replica."""
    worker: WorkerResources
    """CPU and memory of each GPU worker pod."""
    fit: FitReport
    """Whether the model can start on a worker, with the numbers (logged at every preview)."""
    upgrade: UpgradePlan
    """How a Ray cluster change rolls out."""
    image: str
    """The Ray LLM image the head and workers run."""


def _gpu_type(name: str) -> InstanceType:
    allowed = ", ".join(known_types(gpu=True, efa=True))
    spec = lookup(name)
    if spec is None:
        reason = f"{name!r} is not in the instance catalog"
    elif not spec.has_gpu:
        reason = f"{name!r} has no GPU"
    elif not spec.has_efa:
        reason = f"{name!r} has no EFA, so NIXL could not move the KV cache over EFA"
    else:
        return spec
    raise ConfigError([f"{PROJECT}:gpuNodes.instanceType: {reason}; allowed: {allowed}"])


def plan_stack(settings: Settings) -> Plan:
    """Raises ConfigError naming every key involved when the hardware cannot carry the settings."""
    gpu = _gpu_type(settings.gpu_nodes.instance_type)
    model = settings.model
    tp = model.tensor_parallel_size
    if tp > gpu.gpus:
        raise ConfigError(
            [
                f"{PROJECT}:model.tensorParallelSize: {tp} needs {tp} GPUs in one pod, but "
                f"gpuNodes.instanceType {gpu.name} has {gpu.gpus}"
            ]
        )
    per_node = pods_per_node(gpu, tp)
    workers = model.prefill_replicas + model.decode_replicas
    capacity = settings.gpu_nodes.desired_size * per_node
    problems: list[str] = []
    if workers > capacity:
        problems.append(
            f"{PROJECT}:model.prefillReplicas + model.decodeReplicas = {workers} GPU workers, but "
            f"gpuNodes.desiredSize {settings.gpu_nodes.desired_size} x {per_node} worker(s) per "
            f"{gpu.name} hosts only {capacity}; raise gpuNodes.desiredSize (and maxSize)"
        )
    try:
        upgrade = plan_upgrades(settings, capacity, workers)
    except ValueError as error:
        problems.append(str(error))
        upgrade = UpgradePlan(zero_downtime=False)
    fit = fit_report(model, gpu, settings.serving.worker, per_node)
    if not fit.fits:
        problems.append(f"{PROJECT}:model: {fit.summary()}")
    if problems:
        raise ConfigError(problems)
    return Plan(
        gpu=gpu,
        gpu_pods_per_node=per_node,
        gpu_workers=workers,
        worker=worker_resources(gpu, per_node, settings.serving.worker),
        fit=fit,
        upgrade=upgrade,
        image=settings.serving.image or versions.regional_image(settings.region),
    )
