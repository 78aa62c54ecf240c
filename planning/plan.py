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
from dataclasses import dataclass, replace
from typing import Literal

from config import PROJECT, ConfigError, Settings, versions
from config.base import quantity_value
from config.serving import SIDES, Side
from config.sides import SideNodes, all_side_nodes, split
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
    hybrid_layers,
    plan_kv_path,
    plan_kv_path_between,
    prefix_cache,
    slower_floor,
    transfer_floor,
)
from planning.model_cache import ModelCachePlan, plan_model_cache
from planning.slo import slo_summary
from planning.system_pods import system_pods, system_pods_total
from planning.tensor_parallel import tensor_parallel_problems, tensor_parallel_warnings
from planning.upgrades import UpgradePlan, plan_upgrades


@dataclass(frozen=True)
class SidePlan:
    """What one side, prefill or decode, runs on: its GPU type, its workers and whether the model fits."""

    side: Literal["prefill", "decode"]
    section: str
    """The stack-file section of its nodes: `prefillNodes`, `decodeNodes`, or `gpuNodes` (shared)."""
    gpu: InstanceType
    tensor_parallel_size: int
    pods_per_node: int
    workers: int
    """The side's worker pods at least: one per replica."""
    max_workers: int
    worker: WorkerResources
    efa_per_worker: int
    shm_size: str
    fit: FitReport
    kv_floor: TransferFloor
    """What this end of the KV path carries (the pair's floor is the slower end's)."""

    def hardware_summary(self) -> str:
        gpu, tp = self.gpu, self.tensor_parallel_size
        return (
            f"{self.side} on {self.section}: {gpu.name} (per {gpu.origin}): {gpu.vcpu} vCPU, "
            f"{gpu.memory_gib} GiB, {gpu.gpus} x {gpu.gpu_model} {gpu.gpu_memory_gib:g} GiB, "
            f"{gpu.efa_interfaces} EFA, GPUDirect RDMA {'yes' if gpu.gpudirect_rdma else 'no'}; "
            f"{self.pods_per_node} worker(s) per node, each {tp} GPU, {self.efa_per_worker} EFA, "
            f"{self.worker.cpu} CPU, {self.worker.memory} memory, /dev/shm {self.shm_size}"
        )


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
    sides: tuple[SidePlan, ...] = ()
    """Where the sides run on GPU node groups of their own (`prefillNodes`, `decodeNodes`), or on shared
    gpuNodes at tensor-parallel sizes of their own: prefill's and decode's plans, and the fields above
    are prefill's (the KV path and floor the pair's). Empty where both run alike on `gpuNodes`."""

    notes: tuple[str, ...] = ()
    """More lines the preview logs: how the sides scale on latency targets (`autoscaling.signal: slo`),
    where the CPU tier for the KV cache lives (`model.kvOffloadGib`)."""

    @property
    def split(self) -> bool:
        """Whether each side has a GPU node group (and a worker group) of its own."""
        return any(s.section != "gpuNodes" for s in self.sides)

    @property
    def split_workers(self) -> bool:
        """Whether each side has a worker group of its own: on node groups of its own, or on shared
        gpuNodes at a tensor-parallel size of its own (`model.<side>.tensorParallelSize`)."""
        return bool(self.sides)

    def side(self, side: Literal["prefill", "decode"]) -> SidePlan:
        """The side's plan: its own, or on shared `gpuNodes` the stack's."""
        for found in self.sides:
            if found.side == side:
                return found
        return SidePlan(
            side=side,
            section="gpuNodes",
            gpu=self.gpu,
            tensor_parallel_size=self.fit.tensor_parallel_size,
            pods_per_node=self.gpu_pods_per_node,
            workers=self.gpu_workers,
            max_workers=self.max_gpu_workers,
            worker=self.worker,
            efa_per_worker=self.efa_per_worker,
            shm_size=self.shm_size,
            fit=self.fit,
            kv_floor=self.kv_floor,
        )

    @property
    def worker_gpus(self) -> int:
        """GPUs the GPU workers take at least: each side's replicas x its tensor-parallel size."""
        if not self.sides:
            return self.gpu_workers * self.fit.tensor_parallel_size
        return sum(p.workers * p.tensor_parallel_size for p in self.sides)

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
        return (
            f"{gpu.name} (per {gpu.origin}): {gpu.vcpu} vCPU, {gpu.memory_gib} GiB, {gpu.gpus} x "
            f"{gpu.gpu_model} {gpu.gpu_memory_gib:g} GiB, {gpu.efa_interfaces} EFA, GPUDirect RDMA "
            f"{'yes' if gpu.gpudirect_rdma else 'no'}; {self.gpu_pods_per_node} worker(s) per node, each "
            f"{tp} GPU, {self.efa_per_worker} EFA, {self.worker.cpu} CPU, {self.worker.memory} memory, "
            f"/dev/shm {self.shm_size}"
        )

    def summaries(self) -> tuple[str, ...]:
        """What the preview logs about the hardware, the fit and the KV path."""
        if self.sides:
            return (
                *(
                    line
                    for side in self.sides
                    for line in (side.hardware_summary(), f"{side.side}: {side.fit.summary()}")
                ),
                self.kv_path.summary(),
                self.kv_floor.summary(),
                self.kv_crossing.summary(),
            )
        if self.mode == "aggregated":
            return (
                self.hardware_summary(),
                self.fit.summary(),
                f"serving mode aggregated: {self.gpu_workers} replicas (build_openai_app), each prefilling "
                "and decoding its own requests; no KV connector, no KV cache crosses nodes",
                *self.notes,
            )
        return (
            self.hardware_summary(),
            self.fit.summary(),
            self.kv_path.summary(),
            self.kv_floor.summary(),
            self.kv_crossing.summary(),
            *self.notes,
        )


def default_cluster_name(stack: str) -> str:
    """`<project>-<stack>`, cut to what EKS accepts (letters, digits, hyphens, at most 100)."""
    return re.sub(r"[^A-Za-z0-9-]", "-", f"{PROJECT}-{stack}")[:100].rstrip("-")


def _gpu_type(
    settings: Settings, ec2: Ec2InstanceType | None, side: SideNodes | None = None
) -> tuple[InstanceType, list[str]]:
    """`side`: a side's own nodes (`prefillNodes`, `decodeNodes`); None: `gpuNodes`."""
    nodes = side.config if side else settings.gpu_nodes
    section = side.section if side else "gpuNodes"
    spec, warnings = resolve(
        nodes.instance_type, nodes.instance_spec, ec2, f"{PROJECT}:{section}.instanceSpec"
    )
    if spec is None:
        reason = (
            f"{nodes.instance_type!r} is not in the instance catalog, and offline nobody asks EC2; describe "
            f"it with {PROJECT}:{section}.instanceSpec, or pick a catalogued type"
        )
    elif not spec.has_gpu:
        reason = f"{nodes.instance_type!r} has no GPU"
    elif not spec.has_efa:
        reason = f"{nodes.instance_type!r} has no EFA, so NIXL could not move the KV cache over EFA"
    else:
        return spec, warnings
    allowed = ", ".join(known_types(gpu=True, efa=True))
    raise ConfigError([f"{PROJECT}:{section}.instanceType: {reason}; catalogued: {allowed}"])


def _idle_gpus(settings: Settings, gpu: InstanceType) -> tuple[str, str] | None:
    """(what sits idle, with the numbers; what would use it), or None when every GPU works."""
    tp = settings.model.tensor_parallel_size
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


def _offload_problems(settings: Settings) -> list[str]:
    """`model.kvOffloadGib` where no prefix cache is kept: vLLM 0.26's OffloadingConnector finds blocks by
    their prefix-cache hashes, and for a hybrid model asserts prefix caching to align its block sizes
    (vllm/distributed/kv_transfer/kv_connector/v1/offloading/config.py:50-57); vLLM keeps none by default
    for a hybrid model such as the default (planning/kv_path.py `prefix_cache`)."""
    model = settings.model
    if not model.kv_offload_gib or prefix_cache(model):
        return []
    why = (
        "vLLM 0.26 keeps no prefix cache for a hybrid model unless asked, and its offload connector "
        "needs one to align the state layers' blocks"
        if hybrid_layers(model) and "enable_prefix_caching" not in model.extra_engine_kwargs
        else "model.extraEngineKwargs turns the prefix cache off"
    )
    return [
        f"{PROJECT}:model.kvOffloadGib: a CPU tier is looked up by prefix-cache block hashes, and {why}; "
        f"set {PROJECT}:model.extraEngineKwargs.enable_prefix_caching: true, or remove kvOffloadGib"
    ]


def _notes(settings: Settings, grows: bool) -> tuple[str, ...]:
    return tuple(n for n in (slo_summary(settings, grows), offload_summary(settings)) if n)


def offload_summary(settings: Settings) -> str | None:
    """The preview's line on the CPU tier (`model.kvOffloadGib`): where it is, what it holds."""
    model = settings.model
    if not model.kv_offload_gib:
        return None
    where = (
        "on each aggregated replica (vLLM's own kv_offloading_size: no NIXL to keep beside it)"
        if settings.serving.mode == "aggregated"
        else "on each prefill worker, in a MultiConnector after NIXL; none on decode, which loads every "
        "prompt from prefill over NIXL (asked first), so a tier there would only store"
    )
    kept = (
        "; hybrid model: vLLM 0.26's offload connector keeps the attention layers' blocks and treats the "
        "state layers as a window of one chunk (offloading/scheduler.py:102-110): a hit needs the blocks "
        "up to the prefix and the state at its end, both in the tier"
        if hybrid_layers(model)
        else ""
    )
    return (
        f"CPU KV tier (model.kvOffloadGib): {model.kv_offload_gib:g} GiB of pinned host memory {where}; "
        f"a prompt whose prefix the GPU evicted loads it from there instead of computing it again{kept}"
    )


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


def _idle_nodes(settings: Settings, gpu: InstanceType, per_node: int, max_workers: int) -> str | None:
    """The warning when the GPU workers, at their most (maximum replicas x tensorParallelSize), use
    fewer GPUs than the GPU nodes at desiredSize hold, with what to set; None when they can use them
    all, or when no GPU node runs (parked, or desiredSize 0). GPUs a node's EFA interfaces leave idle
    are `_idle_gpus`'."""
    nodes = 0 if settings.autoscaling.parked else settings.gpu_nodes.desired_size
    tp = settings.model.tensor_parallel_size
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
    return problems + _offload_problems(settings)


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
    disaggregated = settings.serving.mode == "disaggregated"
    side_warnings = _side_engine_warnings(settings)
    if split(settings) or (disaggregated and settings.model.split_tensor_parallel):
        # Sides of different tensor-parallel sizes on shared gpuNodes: a worker group each, as on node
        # groups of their own (both sections `gpuNodes`).
        warnings = check_arns(settings, account_id) + exposure_warnings(settings) + side_warnings
        return _plan_split(settings, stack=stack, ec2=ec2 or {}, account_id=account_id, warnings=warnings)
    plan = _plan_shared(settings, stack=stack, ec2=ec2, account_id=account_id)
    return replace(plan, warnings=(*plan.warnings, *side_warnings)) if side_warnings else plan


def _side_engine_warnings(settings: Settings) -> list[str]:
    """The sides' own engine settings (`model.prefill`, `model.decode`): a pair of tensor-parallel sizes
    vLLM 0.26's NIXL connector cannot serve is refused (planning/tensor_parallel.py), what preview cannot
    tell is said; with `serving.mode: aggregated` the side keys do nothing."""
    if settings.serving.mode == "aggregated":
        return [
            f"{PROJECT}:model.{side} does nothing with {PROJECT}:serving.mode aggregated (one deployment "
            "runs the shared model keys); it applies again when the mode is disaggregated"
            for side in SIDES
            if getattr(settings.model, side) is not None
        ]
    pairing = tensor_parallel_problems(settings.model)
    if pairing:
        raise ConfigError(pairing)
    return tensor_parallel_warnings(settings.model)


def _shared_fit(
    settings: Settings,
    gpu: InstanceType,
    per_node: int,
    host_kv: bool,
    problems: list[str],
    warnings: list[str],
) -> FitReport:
    """The fit check on the shared gpuNodes: once where both sides run the shared engine, else once per
    side's own (`model.<side>`, e.g. its gpuMemoryUtilization), naming it; prefill's report."""
    model = settings.model
    aggregated = settings.serving.mode == "aggregated"
    engines = {s: model if aggregated else model.side(s) for s in SIDES}
    own = any(e is not model for e in engines.values())
    for engine, key in [(e, f"model ({s})") for s, e in engines.items()] if own else [(model, "model")]:
        report = fit_report(engine, gpu, settings.serving.worker, per_node, host_kv=host_kv)
        if report.fits:
            continue
        if model.fit_check == "warn":
            warnings.append(f"{PROJECT}:{key}: {report.summary()} (model.fitCheck is warn: going on)")
        else:
            # The fixes first: where the model would fit, then the way to go on regardless.
            elsewhere = fits_elsewhere(engine, gpu, settings.serving.worker, host_kv)
            fixes = f"; it fits with {', or with '.join(elsewhere)}" if elsewhere else ""
            problems.append(f"{PROJECT}:{key}: {report.summary()}{fixes}; or set model.fitCheck: warn")
    return fit_report(engines["prefill"], gpu, settings.serving.worker, per_node, host_kv=host_kv)


def _plan_shared(
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
    tp = model.tensor_parallel_size
    if tp > gpu.gpus:
        raise ConfigError(
            [
                f"{PROJECT}:model.tensorParallelSize: {tp} needs {tp} GPUs in one pod, but "
                f"{PROJECT}:gpuNodes.instanceType {gpu.name} has {gpu.gpus}"
            ]
        )
    system = _system_type(settings, ec2, warnings)
    per_node = pods_per_node(gpu, tp)
    workers = model.prefill_replicas + model.decode_replicas
    scaling = settings.autoscaling
    max_workers = (scaling.prefill.max_replicas or model.prefill_replicas) + (
        scaling.decode.max_replicas or model.decode_replicas
    )
    # The most the nodes ever host: Cluster Autoscaler grows the group up to maxSize.
    capacity = settings.gpu_nodes.max_size * per_node
    resources = worker_resources(gpu, per_node, settings.serving.worker)
    shm = settings.serving.worker.shm_size or shm_size(tp, resources.memory_gib)
    problems = _head_problems(settings, system) + _worker_problems(settings, gpu, per_node, shm)
    idle = _idle_gpus(settings, gpu)
    if idle and settings.gpu_nodes.accept_idle_gpus:
        warnings.append(f"{idle[0]}, as gpuNodes.acceptIdleGpus says; to use them: {idle[1]}")
    elif idle:
        problems.append(f"{idle[0]}; use {idle[1]}, or set {PROJECT}:gpuNodes.acceptIdleGpus: true")
    idle_nodes = _idle_nodes(settings, gpu, per_node, max_workers)
    if idle_nodes:
        warnings.append(idle_nodes)
    warnings += _kv_keys_unused(settings) + _prefix_router_without_cache(settings)
    problems += _capacity_problems(settings, gpu, per_node, workers, max_workers, capacity)
    try:
        upgrade = plan_upgrades(settings, system, capacity, max_workers)
    except ValueError as error:
        problems.append(str(error))
        upgrade = UpgradePlan(zero_downtime=False)
    # Aggregated, no KV connector runs: what the KV-transfer keys would do is not said, and a value that
    # could not work is no problem (`_kv_keys_unused` says they do nothing); the path stays the one
    # those keys give where it can be planned, so the workers' env and policies do not change.
    aggregated = settings.serving.mode == "aggregated"
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
    fit = _shared_fit(settings, gpu, per_node, host_kv, problems, warnings)
    if problems:
        raise ConfigError(problems)
    kv_floor = transfer_floor(kv_path, gpu, efa_per_pod(gpu, per_node), tp)
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
        kv_crossing=crossing(model, kv_floor, tp),
        upgrade=upgrade,
        image=_image(settings),
        warnings=tuple(warnings),
        model_cache=plan_model_cache(settings, stack, cluster_name, account_id),
        context=None if settings.cluster.existing_cluster_name else own_cluster(settings),
        mode=settings.serving.mode,
        notes=_notes(settings, max_workers > workers),
    )


def side_tensor_parallel_size(settings: Settings, side: Literal["prefill", "decode"]) -> tuple[int, str]:
    """The side's tensor-parallel size and the key that sets it: the side's own
    (`model.<side>.tensorParallelSize`, ModelConfig.side) where the stack file has it, else the shared
    `model.tensorParallelSize`."""
    own = getattr(settings.model, side)
    if settings.serving.mode == "disaggregated" and own is not None and own.tensor_parallel_size:
        return own.tensor_parallel_size, f"{PROJECT}:model.{side}.tensorParallelSize"
    return settings.model.tensor_parallel_size, f"{PROJECT}:model.tensorParallelSize"


def _side_replicas(settings: Settings, side: Literal["prefill", "decode"]) -> tuple[int, int, str]:
    """(replicas at least, at most, the key of the most) of a side."""
    model, scaling = settings.model, settings.autoscaling
    least = model.prefill_replicas if side == "prefill" else model.decode_replicas
    most = getattr(scaling, side).max_replicas
    key = f"autoscaling.{side}.maxReplicas" if most else f"model.{side}Replicas"
    return least, most or least, key


def _side_problems(
    settings: Settings, nodes: SideNodes, gpu: InstanceType, tp: int, tp_key: str
) -> tuple[list[str], list[str]]:
    """(problems, warnings) of one side on its own GPU nodes: its workers against its nodes."""
    section, config = f"{PROJECT}:{nodes.section}", nodes.config
    _, most, most_key = _side_replicas(settings, nodes.side)
    per_node = pods_per_node(gpu, tp)
    problems: list[str] = []
    warnings: list[str] = []
    idle = idle_gpus(gpu, tp)
    if idle:
        better = tensor_parallel_for_all_gpus(gpu)
        summary = (
            f"{section}.instanceType {gpu.name} has {gpu.gpus} GPUs and {gpu.efa_interfaces} EFA "
            f"interface(s); each {nodes.side} worker needs one, so a node hosts {per_node} worker(s) of "
            f"{tp_key} {tp} and {idle} of its {gpu.gpus} GPUs sit idle"
        )
        fix = f"{tp_key} {better}" if better else "a type with one GPU per EFA interface"
        if config.accept_idle_gpus:
            warnings.append(f"{summary}, as {nodes.section}.acceptIdleGpus says; to use them: {fix}")
        else:
            problems.append(f"{summary}; use {fix}, or set {section}.acceptIdleGpus: true")
    shared = not split(settings)  # both sides on gpuNodes: nodes counted together (`_shared_node_checks`)
    capacity = config.max_size * per_node
    if most > capacity and not shared:
        problems.append(
            f"{PROJECT}:{most_key} = {most} {nodes.side} workers at most, but {section}.maxSize "
            f"{config.max_size} x {per_node} worker(s) per {gpu.name} hosts only {capacity}; raise "
            f"{nodes.section}.maxSize (and desiredSize)"
        )
    if settings.serving.worker.privileges == "privileged" and per_node > 1 and most > 1:
        problems.append(
            f"{PROJECT}:serving.worker.privileges is privileged, but {per_node} {nodes.side} workers share "
            f"a {gpu.name} ({section}.instanceType, {tp_key}): a privileged container sees every GPU of the "
            "node, so two workers would both start on GPU 0; use ipc-lock, or a tensorParallelSize of all "
            "the node's GPUs"
        )
    running = 0 if settings.autoscaling.parked or shared else config.desired_size
    if running and per_node and most < running * per_node:
        used, held = most * tp, running * gpu.gpus
        reserved = config.capacity_reservation
        billed = f" (reservation {reserved} bills them used or not)" if reserved else ""
        warnings.append(
            f"{section}: the {nodes.side} workers use at most {used} GPU(s) ({most} worker(s) x {tp_key} "
            f"{tp}), but {nodes.section}.desiredSize {running} x {gpu.name} hold {held}: {held - used} "
            f"GPU(s) paid for and idle{billed}; set {nodes.section}.desiredSize {-(-most // per_node)}, or "
            f"more {nodes.side} replicas"
        )
    return problems, warnings


def _nodes_for(settings: Settings, gpu: InstanceType, sizes: Mapping[Side, int]) -> int:
    """GPU nodes the sides' pods at their most fill, each side's pods on nodes of their own (a
    conservative count: Kubernetes may also mix them on one node where GPUs and EFA interfaces allow)."""
    total = 0
    for side, tp in sizes.items():
        per_node = pods_per_node(gpu, tp)
        total += -(-_side_replicas(settings, side)[1] // per_node) if per_node else 0
    return total


def _shared_node_checks(
    settings: Settings, gpu: InstanceType, sizes: Mapping[Side, int], warnings: list[str]
) -> list[str]:
    """Both sides on `gpuNodes` at different tensor-parallel sizes: the nodes the sides fill together
    against gpuNodes.maxSize (a problem) and desiredSize (idle nodes, a warning)."""
    nodes = _nodes_for(settings, gpu, sizes)
    described = ", ".join(
        f"{side} {_side_replicas(settings, side)[1]} x tensorParallelSize {tp} "
        f"({pods_per_node(gpu, tp)} per node)"
        for side, tp in sizes.items()
    )
    config = settings.gpu_nodes
    running = 0 if settings.autoscaling.parked else config.desired_size
    if running and nodes < running:
        warnings.append(
            f"{PROJECT}:gpuNodes: the GPU workers at their most ({described}) fill {nodes} {gpu.name} "
            f"node(s), but gpuNodes.desiredSize is {running}: {running - nodes} node(s) paid for and idle; "
            f"set gpuNodes.desiredSize {nodes} (and minSize/maxSize to match), or more replicas"
        )
    if nodes > config.max_size:
        return [
            f"{PROJECT}:gpuNodes.maxSize {config.max_size}: the GPU workers at their most ({described}) fill "
            f"{nodes} {gpu.name} nodes; raise gpuNodes.maxSize (and desiredSize), or lower "
            "model.prefillReplicas / model.decodeReplicas (autoscaling's maxReplicas)"
        ]
    return []


def _system_type(
    settings: Settings, ec2: Mapping[str, Ec2InstanceType], warnings: list[str]
) -> InstanceType | None:
    """The system node type, adding what preview says about it and the cluster's version to `warnings`."""
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
    return system


def _side_plan(
    settings: Settings,
    nodes: SideNodes,
    gpu: InstanceType,
    tp: int,
    tp_key: str,
    kv_path: KvPath,
    problems: list[str],
    warnings: list[str],
) -> SidePlan:
    """One side on its own GPU nodes: its workers and the fit on its type at its tensor-parallel size,
    adding what cannot work to `problems` and what preview says to `warnings`."""
    model = settings.model.side(nodes.side)  # the side's own engine (gpuMemoryUtilization, ...)
    host_kv = kv_path.buffer_device == "cpu"
    per_node = pods_per_node(gpu, tp)
    resources = worker_resources(gpu, per_node, settings.serving.worker)
    shm = settings.serving.worker.shm_size or shm_size(tp, resources.memory_gib)
    problems += _worker_problems(settings, gpu, per_node, shm)
    side_problems, side_warnings = _side_problems(settings, nodes, gpu, tp, tp_key)
    problems += side_problems
    warnings += side_warnings
    if nodes.side == "decode":  # the CPU tier is prefill's alone (manifests/serve_app.py `_kv_transfer`)
        model = model.model_copy(update={"kv_offload_gib": None})
    fit = fit_report(model, gpu, settings.serving.worker, per_node, host_kv=host_kv, tensor_parallel_size=tp)
    where = f"{nodes.side} on {PROJECT}:{nodes.section}.instanceType {gpu.name}"
    if not fit.fits and model.fit_check == "warn":
        warnings.append(f"{PROJECT}:model: {where}: {fit.summary()} (model.fitCheck is warn: going on)")
    elif not fit.fits:
        sized = model.model_copy(update={"tensor_parallel_size": tp})
        elsewhere = fits_elsewhere(sized, gpu, settings.serving.worker, host_kv)
        fixes = f"; it fits with {', or with '.join(elsewhere)}" if elsewhere else ""
        fixes = fixes.replace("gpuNodes.", f"{nodes.section}.")
        problems.append(f"{PROJECT}:model: {where}: {fit.summary()}{fixes}; or set model.fitCheck: warn")
    least, most, _ = _side_replicas(settings, nodes.side)
    efa = efa_per_pod(gpu, per_node)
    return SidePlan(
        side=nodes.side,
        section=nodes.section,
        gpu=gpu,
        tensor_parallel_size=tp,
        pods_per_node=per_node,
        workers=least,
        max_workers=most,
        worker=resources,
        efa_per_worker=efa,
        shm_size=shm,
        fit=fit,
        kv_floor=transfer_floor(kv_path, gpu, efa, tp),
    )


def _plan_split(
    settings: Settings,
    *,
    stack: str,
    ec2: Mapping[str, Ec2InstanceType],
    account_id: str | None,
    warnings: list[str],
) -> Plan:
    """`plan_stack` where each side has a GPU node group of its own (`prefillNodes`, `decodeNodes`):
    each side's type, workers and fit against its own nodes, the KV path between the two types."""
    model = settings.model
    problems: list[str] = []
    sides = all_side_nodes(settings)
    gpus: list[InstanceType] = []
    for nodes in sides:
        gpu, found = _gpu_type(settings, ec2.get(nodes.config.instance_type), nodes)
        warnings += [w for w in found if w not in warnings]
        gpus.append(gpu)
    sizes = [side_tensor_parallel_size(settings, nodes.side) for nodes in sides]
    too_wide = [
        f"{key}: {tp} needs {tp} GPUs in one {nodes.side} pod, but {PROJECT}:{nodes.section}.instanceType "
        f"{gpu.name} has {gpu.gpus}"
        for nodes, gpu, (tp, key) in zip(sides, gpus, sizes, strict=True)
        if tp > gpu.gpus
    ]
    if too_wide:
        raise ConfigError(too_wide)
    system = _system_type(settings, ec2, warnings)
    problems += _head_problems(settings, system)
    kv_path, kv_warnings = plan_kv_path_between(model, gpus[0], gpus[1])
    warnings += kv_warnings
    plans = [
        _side_plan(settings, nodes, gpu, tp, tp_key, kv_path, problems, warnings)
        for nodes, gpu, (tp, tp_key) in zip(sides, gpus, sizes, strict=True)
    ]
    warnings += _kv_keys_unused(settings)
    warnings += _prefix_router_without_cache(settings)
    # Zero-downtime upgrades need room for a second cluster on each side's nodes: the tighter side decides.
    tightest = min(
        plans,
        key=lambda p: (sides[SIDE_INDEX[p.side]].config.max_size * p.pods_per_node) / (2 * p.max_workers),
    )
    capacity = sides[SIDE_INDEX[tightest.side]].config.max_size * tightest.pods_per_node
    cluster = tightest.max_workers
    if not split(settings):  # one gpuNodes group for both sides: counted in nodes, side by side
        sized: dict[Side, int] = {p.side: p.tensor_parallel_size for p in plans}
        problems += _shared_node_checks(settings, gpus[0], sized, warnings)
        capacity, cluster = settings.gpu_nodes.max_size, _nodes_for(settings, gpus[0], sized)
    try:
        upgrade = plan_upgrades(settings, system, capacity, cluster)
    except ValueError as error:
        problems.append(str(error).replace("gpuNodes.maxSize", f"{tightest.section}.maxSize"))
        upgrade = UpgradePlan(zero_downtime=False)
    if problems:
        raise ConfigError(problems)
    floor = slower_floor([p.kv_floor for p in plans])
    slower = next(p for p in plans if p.kv_floor is floor)
    prefill = plans[0]
    existing = settings.cluster.existing_cluster_name
    cluster_name = existing or settings.cluster.name or default_cluster_name(stack)
    return Plan(
        cluster_name=cluster_name,
        gpu=prefill.gpu,
        system=system,
        gpu_pods_per_node=prefill.pods_per_node,
        gpu_workers=sum(p.workers for p in plans),
        max_gpu_workers=sum(p.max_workers for p in plans),
        worker=prefill.worker,
        efa_per_worker=prefill.efa_per_worker,
        shm_size=prefill.shm_size,
        fit=prefill.fit,
        kv_path=kv_path,
        kv_floor=floor,
        kv_crossing=crossing(model, floor, slower.tensor_parallel_size),
        upgrade=upgrade,
        image=_image(settings),
        warnings=tuple(warnings),
        model_cache=plan_model_cache(settings, stack, cluster_name, account_id),
        context=None if existing else own_cluster(settings),
        mode=settings.serving.mode,
        sides=tuple(plans),
        notes=_notes(settings, any(p.max_workers > p.workers for p in plans)),
    )


SIDE_INDEX = {"prefill": 0, "decode": 1}
