"""Everything that follows from a stack's settings and the hardware it names, decided once.

`plan_stack` refuses, naming the keys, every setting the hardware cannot carry and every pod that could
never be scheduled: a GPU type that is unknown or has no GPU or EFA, a tensor-parallel size above the
node's GPUs, more workers than the nodes host, worker CPU, memory or /dev/shm beyond what a node offers,
a Ray head that does not fit a system node, a zero-downtime upgrade without room for a second cluster,
a model that does not fit (unless `model.fitCheck` is `warn`). Otherwise `pulumi up` would wait out its
whole ready timeout for a pod that cannot be placed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

from config import PROJECT, ConfigError, Settings, versions
from config.base import quantity_value
from config.serving import SIDES, ModelConfig, Side
from planning.arns import check_arns
from planning.capacity import (
    GIB,
    FitReport,
    WorkerResources,
    efa_per_pod,
    fit_report,
    fits_elsewhere,
    idle_gpus,
    pods_per_node,
    shm_size,
    system_node_free,
    tensor_parallel_for_all_gpus,
    worker_resources,
    worker_share,
)
from planning.catalog import Ec2InstanceType, InstanceType, known_types, resolve
from planning.context import ClusterContext, own_cluster
from planning.exposure import exposure_warnings
from planning.kv_path import (
    Crossing,
    KvPath,
    TransferFloor,
    crossing,
    plan_kv_path,
    prefix_cache,
    transfer_floor,
)
from planning.model_cache import ModelCachePlan, plan_model_cache
from planning.system_pods import system_pods, system_pods_total
from planning.tensor_parallel import tensor_parallel_problems, tensor_parallel_warnings
from planning.upgrades import UpgradePlan, plan_upgrades


@dataclass(frozen=True)
class SidePods:
    """One side's GPU worker pods, by its own tensor-parallel size (`ModelConfig.side`)."""

    side: Side
    tensor_parallel_size: int
    pods_per_node: int
    """This side's worker pods one GPU node hosts (GPUs / its tensorParallelSize, at most one per EFA
    interface)."""
    workers: int
    """This side's replicas at least, one pod each."""
    max_workers: int
    """This side's replicas at most, when Serve scales it up."""
    worker: WorkerResources
    efa_per_worker: int
    shm_size: str
    fit: FitReport


@dataclass(frozen=True)
class Plan:
    cluster_name: str
    """EKS cluster name: `cluster.existingClusterName`, else `cluster.name`, else derived from project and
    stack."""
    gpu: InstanceType
    """The GPU node type, as the stack file or the catalog describes it."""
    system: InstanceType | None
    """The system node type, when the stack file or the catalog describes it."""
    gpu_pods_per_node: int
    """GPU worker pods one GPU node hosts (GPUs / tensorParallelSize, at most one per EFA interface)."""
    gpu_workers: int
    """GPU worker pods of one Ray cluster at least: one per prefill or decode replica."""
    max_gpu_workers: int
    """GPU worker pods of one Ray cluster at most, when Serve scales the sides up."""
    worker: WorkerResources
    """CPU and memory of each GPU worker pod."""
    efa_per_worker: int
    """EFA interfaces each worker requests: its share of the node's."""
    shm_size: str
    """Memory-backed /dev/shm of each worker."""
    fit: FitReport
    """Whether the model can start on a worker, with the numbers (logged at every preview)."""
    kv_path: KvPath
    """NIXL's backend and where the KV buffers live, and why (logged at every preview)."""
    kv_floor: TransferFloor
    """The KV transfer rate to expect and the least `ops verify` accepts (logged at every preview)."""
    kv_crossing: Crossing
    """How long a full prompt's KV takes to cross at that rate (logged at every preview)."""
    upgrade: UpgradePlan
    """How a Ray cluster change rolls out."""
    image: str
    """The Ray LLM image the head and workers run."""
    model_cache: ModelCachePlan | None = None
    """Where the workers load the weights from, when not from Hugging Face."""
    context: ClusterContext | None = None
    """The cluster the stack serves on: its own (from the settings) unless `__main__.py` read an existing
    one (planning/context.py)."""
    warnings: tuple[str, ...] = ()
    """What preview should say but not refuse."""
    mode: Literal["disaggregated", "aggregated"] = "disaggregated"
    """`serving.mode`: `aggregated` replicas move no KV cache, so the KV path above is not taken."""
    side_pods: tuple[SidePods, ...] = ()
    """Prefill's and decode's worker pods, each by its own tensor-parallel size. Where the two sizes
    are the same (always with `serving.mode: aggregated`), `gpu_pods_per_node`, `worker`,
    `efa_per_worker`, `shm_size` and `fit` above describe both sides' pods; otherwise they are decode's,
    and each side has a KubeRay worker group of its own (`split_workers`)."""

    def side(self, side: Side) -> SidePods:
        return next(p for p in self.side_pods if p.side == side)

    @property
    def worker_gpus(self) -> int:
        """GPUs the GPU workers take at least: each side's replicas x its tensor-parallel size."""
        return sum(p.workers * p.tensor_parallel_size for p in self.side_pods)

    @property
    def split_workers(self) -> bool:
        """Whether prefill and decode run in worker groups of their own (their pods differ)."""
        return len({p.tensor_parallel_size for p in self.side_pods}) > 1

    @property
    def ray_autoscaling(self) -> bool:
        """Whether KubeRay's in-tree autoscaler adds and removes GPU worker pods."""
        return self.max_gpu_workers > self.gpu_workers

    @property
    def cluster_context(self) -> ClusterContext:
        """The cluster's context; an existing cluster's is set once read (`__main__.py`, `ops render`)."""
        if self.context is None:
            raise ValueError("the existing cluster's context is read at preview: plan it with its facts")
        return self.context

    def hardware_summary(self) -> str:
        """What each GPU node and worker gets, for the preview log."""
        gpu, tp = self.gpu, self.fit.tensor_parallel_size
        node = (
            f"{gpu.name} (per {gpu.origin}): {gpu.vcpu} vCPU, {gpu.memory_gib} GiB, {gpu.gpus} x "
            f"{gpu.gpu_model} {gpu.gpu_memory_gib:g} GiB, {gpu.efa_interfaces} EFA, GPUDirect RDMA "
            f"{'yes' if gpu.gpudirect_rdma else 'no'}; "
        )
        if self.split_workers:
            return node + "; ".join(
                f"{p.side}: {p.pods_per_node} worker(s) per node, each {p.tensor_parallel_size} GPU, "
                f"{p.efa_per_worker} EFA, {p.worker.cpu} CPU, {p.worker.memory} memory, /dev/shm {p.shm_size}"
                for p in self.side_pods
            )
        return node + (
            f"{self.gpu_pods_per_node} worker(s) per node, each "
            f"{tp} GPU, {self.efa_per_worker} EFA, {self.worker.cpu} CPU, {self.worker.memory} memory, "
            f"/dev/shm {self.shm_size}"
        )

    def fit_summaries(self) -> tuple[str, ...]:
        """The fit check's line, one per side where the sides' engines differ."""
        fits = {p.fit for p in self.side_pods}
        if len(fits) <= 1:
            return (self.fit.summary(),)
        return tuple(f"{p.side}: {p.fit.summary()}" for p in self.side_pods)

    def summaries(self) -> tuple[str, ...]:
        """What the preview logs about the hardware, the fit and the KV path."""
        if self.mode == "aggregated":
            return (
                self.hardware_summary(),
                *self.fit_summaries(),
                f"serving mode aggregated: {self.gpu_workers} replicas (build_openai_app), each prefilling "
                "and decoding its own requests; no KV connector, no KV cache crosses nodes",
            )
        return (
            self.hardware_summary(),
            *self.fit_summaries(),
            self.kv_path.summary(),
            self.kv_floor.summary(),
            self.kv_crossing.summary(),
        )


def default_cluster_name(stack: str) -> str:
    """`<project>-<stack>`, cut to what EKS accepts (letters, digits, hyphens, at most 100)."""
    return re.sub(r"[^A-Za-z0-9-]", "-", f"{PROJECT}-{stack}")[:100].rstrip("-")


def _gpu_type(settings: Settings, ec2: Ec2InstanceType | None) -> tuple[InstanceType, list[str]]:
    nodes = settings.gpu_nodes
    spec, warnings = resolve(
        nodes.instance_type, nodes.instance_spec, ec2, f"{PROJECT}:gpuNodes.instanceSpec"
    )
    if spec is None:
        reason = (
            f"{nodes.instance_type!r} is not in the instance catalog, and offline nobody asks EC2; describe "
            f"it with {PROJECT}:gpuNodes.instanceSpec, or pick a catalogued type"
        )
    elif not spec.has_gpu:
        reason = f"{nodes.instance_type!r} has no GPU"
    elif not spec.has_efa:
        reason = f"{nodes.instance_type!r} has no EFA, so NIXL could not move the KV cache over EFA"
    else:
        return spec, warnings
    allowed = ", ".join(known_types(gpu=True, efa=True))
    raise ConfigError([f"{PROJECT}:gpuNodes.instanceType: {reason}; catalogued: {allowed}"])


def _idle_gpus(settings: Settings, gpu: InstanceType, tp: int) -> tuple[str, str] | None:
    """(what sits idle, with the numbers; what would use it), or None when every GPU works."""
    idle = idle_gpus(gpu, tp)
    if not idle:
        return None
    nodes = settings.gpu_nodes.desired_size
    better = tensor_parallel_for_all_gpus(gpu)
    fixes = [f"{PROJECT}:model.tensorParallelSize {better}"] if better else []
    # Never the type the stack has.
    others = [t for t in ("g6.8xlarge", "g6e.8xlarge", "p5.48xlarge") if t != gpu.name]
    fixes.append(f"a type with one GPU per EFA interface ({', '.join(others)})")
    summary = (
        f"{PROJECT}:gpuNodes.instanceType {gpu.name} has {gpu.gpus} GPUs and {gpu.efa_interfaces} EFA "
        f"interface(s); each worker needs one, so a node hosts {pods_per_node(gpu, tp)} worker(s) of "
        f"tensorParallelSize {tp} and {idle} of its {gpu.gpus} GPUs sit idle ({idle * nodes} of "
        f"{gpu.gpus * nodes} paid for across gpuNodes.desiredSize {nodes})"
    )
    return summary, " or ".join(fixes)


KV_ONLY_MODEL_KEYS = {
    "nixl_backends": "nixlBackends",
    "kv_buffer_device": "kvBufferDevice",
    "kv_load_failure_policy": "kvLoadFailurePolicy",
    "kv_lease_seconds": "kvLeaseSeconds",
}
"""model keys that shape the NIXL connector, which an aggregated deployment does not run."""
KV_KEY_DEFAULTS = {"nixl_backends": None, "kv_buffer_device": "auto"}
"""The KV path's keys as the model leaves them unset (an aggregated plan falls back to them)."""


def _kv_keys_unused(settings: Settings) -> list[str]:
    """A warning for each KV-transfer key the stack file sets where `serving.mode: aggregated` has no
    KV connector to give it to: it does nothing until the mode is disaggregated again."""
    if settings.serving.mode != "aggregated":
        return []
    given = sorted(KV_ONLY_MODEL_KEYS[k] for k in settings.model.model_fields_set & KV_ONLY_MODEL_KEYS.keys())
    return [
        f"{PROJECT}:model.{key} does nothing with {PROJECT}:serving.mode aggregated (no KV connector: "
        "each replica keeps its own KV cache); it applies again when the mode is disaggregated"
        for key in given
    ]


def _prefix_router_without_cache(settings: Settings) -> list[str]:
    """`serving.requestRouter: prefix` where a side may run more than one replica but the engine keeps
    no prefix cache: those sides keep Serve's power-of-two choice (manifests/serve_app.py
    `prefix_routed`), and the preview says why. vLLM 0.26 keeps none when extraEngineKwargs turns it off,
    and by default none for a hybrid model (planning/kv_path.py `prefix_cache`)."""
    model, scaling = settings.model, settings.autoscaling
    aggregated = settings.serving.mode == "aggregated"
    if settings.serving.request_router != "prefix" or (aggregated and prefix_cache(model)):
        return []
    prefill = scaling.prefill.max_replicas or model.prefill_replicas
    decode = scaling.decode.max_replicas or model.decode_replicas
    if aggregated:
        sides = ["the aggregated deployment"] if prefill + decode >= 2 else []
    else:
        # Each side's own engine (`model.<side>.extraEngineKwargs` may turn the cache on or off).
        most_of: dict[Side, int] = {"prefill": prefill, "decode": decode}
        sides = [s for s in SIDES if most_of[s] >= 2 and not prefix_cache(model.side(s))]
    if not sides:
        return []
    where = " and ".join(sides)
    engine, key = model, "model.extraEngineKwargs"
    if not aggregated:
        side: Side = "prefill" if sides[0] == "prefill" else "decode"
        engine = model.side(side)  # the first side named: its own key where it sets one
        own = getattr(model, side)
        if own is not None and own.extra_engine_kwargs and "enable_prefix_caching" in own.extra_engine_kwargs:
            key = f"model.{side}.extraEngineKwargs"
    if engine.extra_engine_kwargs.get("enable_prefix_caching") is False:
        why = f"{PROJECT}:{key}.enable_prefix_caching is false, so no replica keeps one"
        fix = "turn prefix caching on for prefix routing"
    else:
        why = (
            f"{model.id} is a hybrid model ({PROJECT}:model.hybridLayers), for which vLLM 0.26 keeps no "
            "prefix cache unless asked (it calls caching its state layers experimental, and tests that "
            "with NIXL only for models that keep every state, which Qwen3.5's Gated DeltaNet does not)"
        )
        fix = (
            f"to opt in, set {PROJECT}:model.extraEngineKwargs.enable_prefix_caching: true "
            '(docs/design.md, "Routing")'
        )
    return [
        f"{PROJECT}:serving.requestRouter prefix sends a prompt to the replica that holds its prefix, but "
        f"{why}: {where} {'keeps' if len(sides) == 1 else 'keep'} Serve's power-of-two choice instead; {fix}"
    ]


def _idle_nodes(
    settings: Settings, gpu: InstanceType, per_node: int, max_workers: int, tp: int
) -> str | None:
    """The warning when the GPU workers, at their most (maximum replicas x tensorParallelSize), use
    fewer GPUs than the GPU nodes at desiredSize hold, with what to set; None when they can use them
    all, or when no GPU node runs (parked, or desiredSize 0). GPUs a node's EFA interfaces leave idle
    are `_idle_gpus`'."""
    nodes = 0 if settings.autoscaling.parked else settings.gpu_nodes.desired_size
    if not nodes or not per_node or max_workers >= nodes * per_node:
        return None
    used, held = max_workers * tp, nodes * gpu.gpus
    needed = -(-max_workers // per_node)  # ceil: the nodes the workers fill
    reserved = settings.gpu_nodes.capacity_reservation
    billed = f" (reservation {reserved} bills them used or not)" if reserved else ""
    # Fewer nodes only where the workers fill fewer: never the desiredSize the stack already has.
    fixes = [f"gpuNodes.desiredSize {needed} (and minSize/maxSize to match)"] if needed < nodes else []
    if gpu.gpus > 1:
        fixes.append("a gpuNodes.instanceType with fewer GPUs")
    larger = [
        t
        for t in range(tp + 1, gpu.gpus + 1)
        if gpu.gpus % t == 0 and max_workers <= nodes * pods_per_node(gpu, t) and max_workers * t <= held
    ]
    if larger:
        fixes.append(f"model.tensorParallelSize {larger[-1]}")
    fixes.append(
        "more replicas (model.prefillReplicas and model.decodeReplicas, or autoscaling's maxReplicas)"
    )
    return (
        f"{PROJECT}:gpuNodes: the GPU workers use at most {used} GPU(s) ({max_workers} worker(s) x "
        f"model.tensorParallelSize {tp}), but gpuNodes.desiredSize {nodes} x {gpu.name} hold {held}: "
        f"{held - used} GPU(s) paid for and idle{billed}; set " + ", or ".join(fixes)
    )


def _worker_problems(settings: Settings, gpu: InstanceType, per_node: int, shm: str) -> list[str]:
    """Worker pods that could never be scheduled, or never start."""
    worker = settings.serving.worker
    cpu_share, memory_share = worker_share(gpu, per_node)
    where = f"{per_node} worker(s) per {gpu.name}"
    problems = []
    if worker.cpu and quantity_value(worker.cpu) > cpu_share:
        problems.append(
            f"{PROJECT}:serving.worker.cpu: {worker.cpu} is more than a node offers a worker "
            f"({cpu_share} with {where}); the pod could never be scheduled"
        )
    if worker.memory and quantity_value(worker.memory) > memory_share * GIB:
        problems.append(
            f"{PROJECT}:serving.worker.memory: {worker.memory} is more than a node offers a worker "
            f"({memory_share}Gi with {where}); the pod could never be scheduled"
        )
    memory = worker.memory or f"{memory_share}Gi"
    if quantity_value(shm) >= quantity_value(memory):
        problems.append(
            f"{PROJECT}:serving.worker.shmSize: {shm} of memory-backed /dev/shm counts against "
            f"the worker's memory {memory} and must stay well below it"
        )
    return problems


def _head_problems(settings: Settings, system: InstanceType | None) -> list[str]:
    """The head must fit one system node, and the head and the stack's own pods (gateway, load
    balancer controller, metrics) all of them together."""
    if system is None:
        return []
    head = settings.serving.head
    nodes = settings.system_nodes.desired_size
    cpu_node, memory_node = system_node_free(system)
    cpu_pods, memory_pods = system_pods_total(settings)
    where = f"{PROJECT}:systemNodes.instanceType {system.name}"
    beside = (
        f"beside the system pods and the stack's own ({cpu_pods:g} vCPU, {memory_pods / GIB:.2f}Gi: "
        f"{', '.join(system_pods(settings))}) on {PROJECT}:systemNodes.desiredSize {nodes}"
    )
    problems = []
    for what, request, node_free, pods, unit in (
        ("cpuRequest", head.cpu_request, cpu_node, cpu_pods, 1),
        ("memoryRequest", head.memory_request, memory_node, memory_pods, GIB),
    ):
        need = quantity_value(request)
        if need > node_free:
            problems.append(
                f"{PROJECT}:serving.head.{what}: {request} does not fit a {where} beside the system pods "
                f"({node_free / unit:g}{'Gi' if unit == GIB else ' vCPU'} free)"
            )
        elif need + pods > node_free * nodes:
            free = node_free * nodes - pods
            problems.append(
                f"{PROJECT}:serving.head.{what}: {request} does not fit {beside} "
                f"({max(free, 0) / unit:.2f}{'Gi' if unit == GIB else ' vCPU'} left); raise "
                "systemNodes.desiredSize or pick a larger systemNodes.instanceType"
            )
    return problems


def _image(settings: Settings) -> str:
    serving = settings.serving
    if serving.image:
        return serving.image
    if settings.region not in versions.DLC_REGIONS:
        raise ConfigError(
            [
                f"{PROJECT}:serving.image: aws:region {settings.region} has no known Ray LLM DLC registry "
                f"(account {versions.DLC_REGISTRY_ACCOUNT} serves "
                f"{', '.join(sorted(versions.DLC_REGIONS))}); set it, e.g. to the public mirror "
                f"{versions.RAY_LLM_PUBLIC_IMAGE} or a copy in your own ECR"
            ]
        )
    return versions.regional_image(settings.region, serving.image_digest)


def _capacity_problems(
    settings: Settings, gpu: InstanceType, per_node: int, workers: int, max_workers: int, capacity: int
) -> list[str]:
    """What the GPU nodes at maxSize cannot host, and privileged workers that would share a node's GPUs."""
    found: list[str] = []
    if max_workers > capacity:
        which = (
            "model.prefillReplicas + model.decodeReplicas"
            if max_workers == workers
            else "autoscaling.prefill.maxReplicas + autoscaling.decode.maxReplicas"
        )
        found.append(
            f"{PROJECT}:{which} = {max_workers} GPU workers at most, but "
            f"{PROJECT}:gpuNodes.maxSize {settings.gpu_nodes.max_size} x {per_node} worker(s) per "
            f"{gpu.name} hosts only {capacity}; raise gpuNodes.maxSize (and desiredSize)"
        )
    if settings.serving.worker.privileges == "privileged" and per_node > 1 and max_workers > 1:
        found.append(
            f"{PROJECT}:serving.worker.privileges is privileged, but {per_node} workers share a "
            f"{gpu.name} (gpuNodes.instanceType, model.tensorParallelSize): a privileged container sees "
            "every GPU of the node, so two workers would both start on GPU 0; use ipc-lock, or a "
            "tensorParallelSize of all the node's GPUs"
        )
    return found


def _tp_key(model: ModelConfig, side: Side, aggregated: bool) -> str:
    """The key that sets a side's tensor-parallel size: its own where the stack file has it."""
    own = None if aggregated else getattr(model, side)
    if own is not None and own.tensor_parallel_size is not None:
        return f"model.{side}.tensorParallelSize"
    return "model.tensorParallelSize"


def _side_keys_unused(settings: Settings) -> list[str]:
    """`serving.mode: aggregated` runs one deployment on the shared keys: per-side ones do nothing."""
    if settings.serving.mode != "aggregated":
        return []
    return [
        f"{PROJECT}:model.{side} does nothing with {PROJECT}:serving.mode aggregated (one deployment runs "
        "the shared model keys); it applies again when the mode is disaggregated"
        for side in SIDES
        if getattr(settings.model, side) is not None
    ]


def _most(settings: Settings, side: Side) -> int:
    own = settings.model.prefill_replicas if side == "prefill" else settings.model.decode_replicas
    return getattr(settings.autoscaling, side).max_replicas or own


def _side_pods(
    settings: Settings, gpu: InstanceType, side: Side, engine: ModelConfig, host_kv: bool
) -> SidePods:
    """`side`'s worker pods, sized by its own tensor-parallel size."""
    tp = engine.tensor_parallel_size
    per_node = pods_per_node(gpu, tp)
    resources = worker_resources(gpu, per_node, settings.serving.worker)
    return SidePods(
        side=side,
        tensor_parallel_size=tp,
        pods_per_node=per_node,
        workers=settings.model.prefill_replicas if side == "prefill" else settings.model.decode_replicas,
        max_workers=_most(settings, side),
        worker=resources,
        efa_per_worker=efa_per_pod(gpu, per_node),
        shm_size=settings.serving.worker.shm_size or shm_size(tp, resources.memory_gib),
        fit=fit_report(engine, gpu, settings.serving.worker, per_node, host_kv=host_kv),
    )


def _nodes_for(gpu: InstanceType, engines: Mapping[Side, ModelConfig], settings: Settings, most: bool) -> int:
    """GPU nodes the sides' pods fill, each side's pods on nodes of their own (a conservative count:
    Kubernetes may also mix them on one node where GPUs and EFA interfaces allow)."""
    total = 0
    for side, engine in engines.items():
        pods = _most(settings, side) if most else getattr(settings.model, f"{side}_replicas")
        per_node = pods_per_node(gpu, engine.tensor_parallel_size)
        total += -(-pods // per_node) if per_node else 0
    return total


def _split_pod_problems(
    settings: Settings, gpu: InstanceType, engines: Mapping[Side, ModelConfig], warnings: list[str]
) -> list[str]:
    """`_worker_problems` and the idle-GPU check for each side's pods (their sizes differ)."""
    problems: list[str] = []
    for side, engine in engines.items():
        tp = engine.tensor_parallel_size
        per_node = pods_per_node(gpu, tp)
        resources = worker_resources(gpu, per_node, settings.serving.worker)
        shm = settings.serving.worker.shm_size or shm_size(tp, resources.memory_gib)
        problems += _worker_problems(settings, gpu, per_node, shm)
        idle = _idle_gpus(settings, gpu, tp)
        if idle:
            what = f"{idle[0].replace('tensorParallelSize', f'{side} tensorParallelSize', 1)}"
            fix = idle[1].replace("model.tensorParallelSize", f"model.{side}.tensorParallelSize")
            if settings.gpu_nodes.accept_idle_gpus:
                warnings.append(f"{what}, as gpuNodes.acceptIdleGpus says; to use them: {fix}")
            else:
                problems.append(f"{what}; use {fix}, or set {PROJECT}:gpuNodes.acceptIdleGpus: true")
    return list(dict.fromkeys(problems))


def _split_idle_nodes(
    settings: Settings, gpu: InstanceType, engines: Mapping[Side, ModelConfig]
) -> str | None:
    """`_idle_nodes` where the sides' pods differ: the warning when the sides at their most fill fewer
    GPU nodes (side by side, `_nodes_for`) than gpuNodes.desiredSize keeps."""
    nodes = 0 if settings.autoscaling.parked else settings.gpu_nodes.desired_size
    needed = _nodes_for(gpu, engines, settings, most=True)
    if not nodes or needed >= nodes:
        return None
    used = sum(_most(settings, s) * e.tensor_parallel_size for s, e in engines.items())
    sizes = ", ".join(
        f"{s} {_most(settings, s)} x tensorParallelSize {e.tensor_parallel_size}" for s, e in engines.items()
    )
    return (
        f"{PROJECT}:gpuNodes: the GPU workers use at most {used} GPU(s) ({sizes}), which fill {needed} "
        f"{gpu.name} node(s), but gpuNodes.desiredSize is {nodes}: {nodes - needed} node(s) paid for and "
        f"idle; set gpuNodes.desiredSize {needed} (and minSize/maxSize to match), or more replicas "
        "(model.prefillReplicas and model.decodeReplicas, or autoscaling's maxReplicas)"
    )


def _split_capacity_problems(
    settings: Settings, gpu: InstanceType, engines: Mapping[Side, ModelConfig]
) -> list[str]:
    """The sides' pods at their most must fit gpuNodes.maxSize, counted node by node per side."""
    nodes = _nodes_for(gpu, engines, settings, most=True)
    found: list[str] = []
    if nodes > settings.gpu_nodes.max_size:
        sizes = ", ".join(
            f"{side} {_most(settings, side)} x tensorParallelSize {e.tensor_parallel_size} "
            f"({pods_per_node(gpu, e.tensor_parallel_size)} per node)"
            for side, e in engines.items()
        )
        found.append(
            f"{PROJECT}:gpuNodes.maxSize {settings.gpu_nodes.max_size}: the GPU workers at their most "
            f"({sizes}) fill {nodes} {gpu.name} nodes; raise gpuNodes.maxSize (and desiredSize), or "
            "lower model.prefillReplicas / model.decodeReplicas (autoscaling's maxReplicas)"
        )
    privileged = settings.serving.worker.privileges == "privileged"
    if privileged and any(pods_per_node(gpu, e.tensor_parallel_size) > 1 for e in engines.values()):
        found.append(
            f"{PROJECT}:serving.worker.privileges is privileged, but several workers share a {gpu.name} "
            "(gpuNodes.instanceType, the sides' tensorParallelSize): a privileged container sees every GPU "
            "of the node, so two workers would both start on GPU 0; use ipc-lock"
        )
    return found


def _engines(settings: Settings, gpu: InstanceType, warnings: list[str]) -> dict[Side, ModelConfig]:
    """Each side's engine as its LLMConfig runs it (aggregated: one deployment on the shared keys);
    raises ConfigError for a side wider than the node, or a pair of sizes NIXL cannot serve."""
    model = settings.model
    aggregated = settings.serving.mode == "aggregated"
    engines: dict[Side, ModelConfig] = {s: model if aggregated else model.side(s) for s in SIDES}
    too_wide = [
        f"{PROJECT}:{_tp_key(model, s, aggregated)}: {e.tensor_parallel_size} needs "
        f"{e.tensor_parallel_size} GPUs in one pod, but {PROJECT}:gpuNodes.instanceType {gpu.name} has "
        f"{gpu.gpus}"
        for s, e in engines.items()
        if e.tensor_parallel_size > gpu.gpus
    ]
    if too_wide:
        raise ConfigError(list(dict.fromkeys(too_wide)))
    if not aggregated:
        pairing = tensor_parallel_problems(model)
        if pairing:
            raise ConfigError(pairing)
        warnings += tensor_parallel_warnings(model)
    warnings += _side_keys_unused(settings)
    return engines


def _pod_problems(
    settings: Settings,
    gpu: InstanceType,
    per_node: int,
    shm: str,
    max_workers: int,
    tp: int,
    warnings: list[str],
) -> list[str]:
    """Both sides' pods alike: what could never be scheduled, and GPUs or nodes left idle."""
    problems = _worker_problems(settings, gpu, per_node, shm)
    idle = _idle_gpus(settings, gpu, tp)
    if idle and settings.gpu_nodes.accept_idle_gpus:
        warnings.append(f"{idle[0]}, as gpuNodes.acceptIdleGpus says; to use them: {idle[1]}")
    elif idle:
        problems.append(f"{idle[0]}; use {idle[1]}, or set {PROJECT}:gpuNodes.acceptIdleGpus: true")
    idle_nodes = _idle_nodes(settings, gpu, per_node, max_workers, tp)
    if idle_nodes:
        warnings.append(idle_nodes)
    return problems


def _fit_problems(
    settings: Settings,
    gpu: InstanceType,
    engines: Mapping[Side, ModelConfig],
    side_pods: tuple[SidePods, ...],
    host_kv: bool,
    warnings: list[str],
) -> list[str]:
    """The fit check: once where both sides run the same engine (as the shared keys give it), else once
    per side, naming it."""
    problems: list[str] = []
    checked: dict[FitReport, Side] = {p.fit: p.side for p in side_pods}
    for report, side in checked.items():
        key = "model" if len(checked) == 1 else f"model ({side})"
        if report.fits:
            continue
        if settings.model.fit_check == "warn":
            warnings.append(f"{PROJECT}:{key}: {report.summary()} (model.fitCheck is warn: going on)")
        else:
            # The fixes first: where the model would fit, then the way to go on regardless.
            elsewhere = fits_elsewhere(engines[side], gpu, settings.serving.worker, host_kv)
            fixes = f"; it fits with {', or with '.join(elsewhere)}" if elsewhere else ""
            problems.append(f"{PROJECT}:{key}: {report.summary()}{fixes}; or set model.fitCheck: warn")
    return problems


def plan_stack(
    settings: Settings,
    *,
    stack: str,
    ec2: Mapping[str, Ec2InstanceType] | None = None,
    account_id: str | None = None,
) -> Plan:
    """Raises ConfigError naming every key involved when the hardware cannot carry the settings.
    `ec2`: EC2's description of the GPU and system types (at preview and up; offline, the catalog);
    `account_id`: the AWS account (offline unknown), which names the model cache's bucket."""
    ec2 = ec2 or {}
    arn_warnings = check_arns(settings, account_id) + exposure_warnings(settings)
    gpu, warnings = _gpu_type(settings, ec2.get(settings.gpu_nodes.instance_type))
    warnings += arn_warnings
    model = settings.model
    aggregated = settings.serving.mode == "aggregated"
    engines = _engines(settings, gpu, warnings)
    tp = engines["decode"].tensor_parallel_size
    system_nodes = settings.system_nodes
    system, system_warnings = resolve(
        system_nodes.instance_type,
        system_nodes.instance_spec,
        ec2.get(system_nodes.instance_type),
        f"{PROJECT}:systemNodes.instanceSpec",
    )
    warnings += system_warnings
    extended = versions.eks_extended_support(settings.cluster.kubernetes_version)
    if extended and not settings.cluster.existing_cluster_name:
        warnings.append(
            f"{PROJECT}:cluster.kubernetesVersion: {settings.cluster.kubernetes_version} left EKS's standard "
            f"support on {extended}; extended support bills the control plane at 6x the hourly rate"
        )
    if system is None:
        warnings.append(
            f"{PROJECT}:systemNodes.instanceType {system_nodes.instance_type} is not in the instance "
            f"catalog: describe it with {PROJECT}:systemNodes.instanceSpec so preview can check that the "
            "Ray head fits"
        )
    per_node = pods_per_node(gpu, tp)
    workers = model.prefill_replicas + model.decode_replicas
    scaling = settings.autoscaling
    max_workers = (scaling.prefill.max_replicas or model.prefill_replicas) + (
        scaling.decode.max_replicas or model.decode_replicas
    )
    split = len({e.tensor_parallel_size for e in engines.values()}) > 1
    # The most the nodes ever host: Cluster Autoscaler grows the group up to maxSize.
    capacity = settings.gpu_nodes.max_size * per_node
    resources = worker_resources(gpu, per_node, settings.serving.worker)
    shm = settings.serving.worker.shm_size or shm_size(tp, resources.memory_gib)
    problems = _head_problems(settings, system)
    if split:
        problems += _split_pod_problems(settings, gpu, engines, warnings)
        warnings += [w for w in (_split_idle_nodes(settings, gpu, engines),) if w]
    else:
        problems += _pod_problems(settings, gpu, per_node, shm, max_workers, tp, warnings)
    warnings += _kv_keys_unused(settings)
    warnings += _prefix_router_without_cache(settings)
    if split:
        # Nodes, not pods: a node full of one side's pods may have no room for the other side's.
        capacity, cluster = settings.gpu_nodes.max_size, _nodes_for(gpu, engines, settings, most=True)
        problems += _split_capacity_problems(settings, gpu, engines)
    else:
        cluster = max_workers
        problems += _capacity_problems(settings, gpu, per_node, workers, max_workers, capacity)
    try:
        upgrade = plan_upgrades(settings, system, capacity, cluster)
    except ValueError as error:
        problems.append(str(error))
        upgrade = UpgradePlan(zero_downtime=False)
    # Aggregated, no KV connector runs: what the KV-transfer keys would do is not said, and a value that
    # could not work is no problem (`_kv_keys_unused` says they do nothing); the path stays the one
    # those keys give where it can be planned, so the workers' env and policies do not change.
    try:
        kv_path, kv_warnings = plan_kv_path(model, gpu)
    except ConfigError as error:
        if not aggregated:
            raise ConfigError([*problems, *error.problems]) from None
        kv_path, kv_warnings = plan_kv_path(model.model_copy(update=KV_KEY_DEFAULTS), gpu)
    if not aggregated:
        warnings += kv_warnings
    # Host KV buffers are NIXL's: an aggregated replica has none to hold.
    host_kv = settings.serving.mode == "disaggregated" and kv_path.buffer_device == "cpu"
    side_pods = tuple(_side_pods(settings, gpu, s, engines[s], host_kv) for s in SIDES)
    fit = side_pods[SIDES.index("decode")].fit
    problems += _fit_problems(settings, gpu, engines, side_pods, host_kv, warnings)
    if problems:
        raise ConfigError(problems)
    # The KV cache crosses in as many streams as the side with fewer ranks has (each rank moves its
    # heads' share; the wider side's ranks read or are read in groups).
    narrow = min(side_pods, key=lambda p: p.tensor_parallel_size)
    kv_floor = transfer_floor(kv_path, gpu, narrow.efa_per_worker, narrow.tensor_parallel_size)
    cluster_name = (
        settings.cluster.existing_cluster_name or settings.cluster.name or default_cluster_name(stack)
    )
    return Plan(
        cluster_name=cluster_name,
        gpu=gpu,
        system=system,
        gpu_pods_per_node=per_node,
        gpu_workers=workers,
        max_gpu_workers=max_workers,
        worker=resources,
        efa_per_worker=efa_per_pod(gpu, per_node),
        shm_size=shm,
        fit=fit,
        kv_path=kv_path,
        kv_floor=kv_floor,
        kv_crossing=crossing(engines[narrow.side], kv_floor, narrow.tensor_parallel_size),
        upgrade=upgrade,
        image=_image(settings),
        warnings=tuple(warnings),
        model_cache=plan_model_cache(settings, stack, cluster_name, account_id),
        context=None if settings.cluster.existing_cluster_name else own_cluster(settings),
        mode=settings.serving.mode,
        side_pods=side_pods,
    )
