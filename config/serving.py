"""The `kuberay`, `serving` and `model` sections: the operator, the RayService's pods and the model
Ray Serve LLM runs with prefill/decode disaggregation."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from config import versions
from config.base import (
    BucketName,
    CpuQuantity,
    DnsLabel,
    MemoryQuantity,
    Namespace,
    SemVer,
    StrictModel,
    quantity_value,
    s3_bucket_problem,
)
from config.routing import KV_AWARE_REFUSED, PrefixRouterConfig, RequestRouter
from config.versions import MIN_RAY_VERSION

IMAGE_REFERENCE = (
    r"^[a-z0-9][a-z0-9.-]*(:[0-9]+)?/[a-z0-9._/-]+"  # registry host[:port]/repository
    r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?(@sha256:[0-9a-f]{64})?$"  # :tag and/or @digest
)


class KubeRayConfig(StrictModel):
    """The KubeRay operator (Helm chart `kuberay-operator`), on the system nodes."""

    chart_version: SemVer = Field(
        versions.KUBERAY_CHART_VERSION,
        description="`kuberay-operator` Helm chart version; the stack applies the same release's CRDs (Helm "
        "would never upgrade them).",
    )
    namespace: Namespace = Field("kuberay-operator", description="Namespace of the operator.")


class HeadConfig(StrictModel):
    """The CPU-only Ray head on the system node (the seed's numbers)."""

    cpu_request: CpuQuantity = Field("2", description="CPU request of the Ray head.")
    memory_request: MemoryQuantity = Field("8Gi", description="Memory request of the Ray head.")
    cpu_limit: CpuQuantity = Field("3", description="CPU limit of the Ray head.")
    memory_limit: MemoryQuantity = Field("12Gi", description="Memory limit of the Ray head.")

    @model_validator(mode="after")
    def _limits_cover_requests(self) -> HeadConfig:
        for what in ("cpu", "memory"):
            request = getattr(self, f"{what}_request")
            limit = getattr(self, f"{what}_limit")
            if quantity_value(limit) < quantity_value(request):
                raise ValueError(f"{what}Limit {limit} is below {what}Request {request}")
        return self


class WorkerConfig(StrictModel):
    """GPU worker pods. CPU and memory default to what the GPU instance leaves after the node's own
    daemons (see planning/capacity.py); set them only to override that."""

    cpu: CpuQuantity | None = Field(None, description="CPU request and limit per worker (override).")
    memory: MemoryQuantity | None = Field(None, description="Memory request and limit per worker (override).")
    shm_size: MemoryQuantity | None = Field(
        None,
        description="Size of the memory-backed /dev/shm (NCCL, NIXL and vLLM use it; it counts against the "
        "worker's memory). Default: 16Gi per GPU of the worker, at most a quarter of its memory.",
    )
    privileges: Literal["ipc-lock", "privileged"] = Field(
        "ipc-lock",
        description="What the worker container may do beyond the default. `ipc-lock`: not privileged, "
        "root with `IPC_LOCK` added, so NIXL and libfabric can pin host memory for EFA whatever the "
        "node's memlock limit; the EFA and GPU devices come from their device plugins. `privileged`: "
        "the seed's setting, every device of the node (every GPU, too), so it is refused where two "
        'workers may share a node. See docs/design.md, "Worker privileges".',
    )


class ServingConfig(StrictModel):
    """The RayService: names, image, upgrade path, readiness timeout, and the sizes of the Ray
    head (`head`) and of each GPU worker (`worker`)."""

    namespace: Namespace = Field("inference", description="Namespace of the RayService.")
    name: str = Field(
        "ray-llm",
        # KubeRay refuses anything but a DNS-1035 label of at most 47 characters, and the RayService
        # then never becomes Ready (ray-operator/controllers/ray/utils/validation.go).
        pattern=r"^[a-z]([-a-z0-9]*[a-z0-9])?$",
        max_length=47,
        description="RayService name: a DNS-1035 label (a lower-case letter first) of at most 47 "
        "characters, as KubeRay requires; the endpoint Service is `<name>-serve-svc`.",
    )
    application_name: DnsLabel = Field(
        "qwen", description="Name of the Ray Serve application (the seed's `qwen`)."
    )
    mode: Literal["disaggregated", "aggregated"] = Field(
        "disaggregated",
        description="How Ray Serve LLM serves the model. `disaggregated`: prefill and decode replicas "
        "(`build_pd_openai_app`), the KV cache crossing nodes over NIXL. `aggregated`: plain replicas "
        "that each prefill and decode their own requests (`build_openai_app`), no KV connector, on the "
        "same GPU workers: `model.prefillReplicas + model.decodeReplicas` replicas, scaling up to both "
        "sides' `maxReplicas` together by `autoscaling.decode`'s request targets. Measure which is "
        'better with `ops bench` (docs/operations.md, "Disaggregated or aggregated?").',
    )
    image: str | None = Field(
        None,
        pattern=IMAGE_REFERENCE,
        description="Ray LLM container image, by tag or by digest (`repo@sha256:...`). Default: the AWS Ray "
        f"LLM DLC in the stack's region (`{versions.DLC_REGISTRY_ACCOUNT}.dkr.ecr.<region>.amazonaws.com/"
        f"{versions.RAY_LLM_IMAGE_REPOSITORY}:{versions.RAY_LLM_IMAGE_TAG}`) where that registry exists; "
        "elsewhere this key is required (the public mirror or your own ECR copy).",
    )
    image_digest: str | None = Field(
        None,
        pattern=r"^sha256:[0-9a-f]{64}$",
        description="Pin the default DLC image by digest instead of its mutable tag, so what runs is what "
        "you tested (`docker buildx imagetools inspect <image>` or `aws ecr describe-images` shows it).",
    )
    readiness_check_image: str | None = Field(
        None,
        pattern=IMAGE_REFERENCE,
        description="Image of the Job that checks a new serve config is the one RUNNING (a Python 3 "
        "interpreter is all it needs; it holds Ray's token, so pin it by digest). Default: the serving "
        "image, which the head already runs (by digest with `imageDigest`).",
    )
    ray_version: SemVer = Field(
        versions.RAY_VERSION,
        description="Ray version inside the image (KubeRay's `rayVersion`); at least 2.52, the first "
        "with the token authentication the stack turns on.",
    )
    upgrade_strategy: Literal["auto", "recreate", "newCluster"] = Field(
        "auto",
        description="How a change to the Ray cluster (pods, image, resources) rolls out. `recreate`: "
        "Pulumi deletes the RayService and creates it anew (downtime, never waits for GPUs that do not "
        "exist). `newCluster`: KubeRay's zero-downtime upgrade, which starts a second cluster and needs "
        "twice the GPU workers. `auto`: `newCluster` when the GPU nodes can host two clusters, "
        "otherwise `recreate`.",
    )
    ready_timeout_minutes: int = Field(
        45,
        ge=5,
        le=180,
        description="How long `pulumi up` waits for the serve application to be RUNNING (image pull "
        "~15 GiB, model download, weight load on both sides).",
    )
    head: HeadConfig = Field(default_factory=HeadConfig)  # type: ignore[arg-type]
    worker: WorkerConfig = Field(default_factory=WorkerConfig)  # type: ignore[arg-type]
    request_router: RequestRouter = Field(
        "prefix",
        description="How Serve picks a replica of each side. `prefix`: Ray Serve LLM's "
        "PrefixCacheAffinityRouter (`prefixRouter`) on every side that may run more than one replica, "
        "where the engine keeps a prefix cache (vLLM 0.26: not for a hybrid model such as the default "
        "unless `model.extraEngineKwargs.enable_prefix_caching` is true; the preview says so); other "
        "sides keep Serve's default. `power-of-two`: Serve's default everywhere. "
        '`kv-aware` (Ray\'s alpha KVAwareRouter) is refused: see docs/design.md, "Routing".',
    )
    prefix_router: PrefixRouterConfig = Field(default_factory=PrefixRouterConfig)  # type: ignore[arg-type]
    self_heal: bool = Field(
        False,
        description="Decode heals itself after a stale NIXL agent: a CronJob in the serving namespace "
        "restarts a decode replica (through Ray's Jobs API) when every KV transfer into it failed for 5 "
        "minutes, none completed, and a prefill replica restarted; at most once per 30 minutes, with a "
        "log line and a Kubernetes Event. Needs serving.mode disaggregated and observability.enabled "
        '(docs/operations.md, "KV transfers keep failing").',
    )

    @field_validator("ray_version")
    @classmethod
    def _has_token_auth(cls, value: str) -> str:
        major, minor = (int(part) for part in value.lstrip("v").split(".")[:2])
        if (major, minor) < MIN_RAY_VERSION:
            raise ValueError(
                f"Ray {value} has no token authentication, which the stack turns on (KubeRay refuses "
                "authOptions below Ray 2.52.0); use an image with Ray 2.52 or later"
            )
        return value

    @field_validator("request_router")
    @classmethod
    def _router_the_image_can_serve(cls, value: str) -> str:
        if value == "kv-aware":
            raise ValueError(KV_AWARE_REFUSED)
        return value

    @model_validator(mode="after")
    def _one_way_to_name_the_image(self) -> ServingConfig:
        if self.image and self.image_digest:
            raise ValueError(
                "imageDigest pins the default image; with image set, put the digest in it (repo@sha256:...)"
            )
        return self


_RESERVED_ENGINE_KWARGS = {
    "max_model_len",
    "dtype",
    "gpu_memory_utilization",
    "enforce_eager",
    "kv_transfer_config",
    "tensor_parallel_size",
    "max_num_seqs",
    "max_num_batched_tokens",
    "model",
    "served_model_name",
    # vLLM 0.26 replaces any kv_connector with its offload connector when kv_offloading_size is set
    # (vllm/config/vllm.py:857-889): NIXL would be gone. model.kvOffloadGib renders it beside NIXL.
    "kv_offloading_size",
    "kv_offloading_backend",
}
_OWNED_BY = (
    "maxModelLen, dtype, gpuMemoryUtilization, enforceEager, tensorParallelSize, maxNumSeqs, "
    "maxNumBatchedTokens, nixlBackends, id/source, kvOffloadGib"
)

Side = Literal["prefill", "decode"]
SIDES: tuple[Side, Side] = ("prefill", "decode")


def _no_owned_engine_kwargs(value: dict[str, Any]) -> dict[str, Any]:
    owned = sorted(_RESERVED_ENGINE_KWARGS & value.keys())
    if owned:
        raise ValueError(f"{owned} are set by their own model keys ({_OWNED_BY}); remove them here")
    return value


class SideModelConfig(StrictModel):
    """What one side, prefill or decode, runs differently from the shared `model` keys: each key set
    here replaces the shared one for that side's LLMConfig (and its GPU workers) only."""

    tensor_parallel_size: int | None = Field(
        None,
        ge=1,
        le=8,
        description="This side's GPUs per replica (default: `model.tensorParallelSize`). Prefill and "
        "decode sizes must divide one another (vLLM 0.26's NIXL connector; docs/design.md, "
        '"Per-side engine settings" says which other pairs it refuses); with different sizes each side '
        "gets a KubeRay worker group of its own.",
    )
    gpu_memory_utilization: float | None = Field(
        None, gt=0, le=1, description="This side's `gpuMemoryUtilization` (default: the shared one)."
    )
    max_num_seqs: int | None = Field(
        None, ge=1, description="This side's `maxNumSeqs` (default: the shared one)."
    )
    max_num_batched_tokens: int | None = Field(
        None, ge=1, description="This side's `maxNumBatchedTokens` (default: the shared one)."
    )
    extra_engine_kwargs: dict[str, Any] | None = Field(
        None,
        description="Engine arguments for this side, merged over `model.extraEngineKwargs` (a key here "
        "replaces the shared key of that name). Keys that other settings own are refused.",
    )

    @field_validator("extra_engine_kwargs")
    @classmethod
    def _no_owned_keys(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else _no_owned_engine_kwargs(value)


class ModelConfig(StrictModel):
    """The model Ray Serve LLM serves on both sides, prefill and decode, and what the fit check
    needs to know about it. Each prefill or decode replica is one GPU worker pod with
    `tensorParallelSize` GPUs (the side's own where `prefill` or `decode` sets one); `gpuNodes.desiredSize`
    must host them all, at min(GPUs / tensorParallelSize, EFA interfaces) pods per node."""

    id: str = Field(
        "qwen3.5-9b",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._:/-]*$",
        description="Model id clients send in `model` (the OpenAI API's name for it).",
    )
    source: str = Field(
        "Qwen/Qwen3.5-9B",
        pattern=r"^([A-Za-z0-9][\w.-]*/[\w.-]+|s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^\s]*)?)$",
        description="Where the weights come from: a Hugging Face repo id (`org/name`, copied into the "
        "stack's S3 model cache once when `modelCache.enabled`), or an `s3://bucket/prefix` you keep "
        "yourself (with a `hash` file naming the snapshot).",
    )
    revision: str = Field(
        "main",
        pattern=r"^[\w.-]{1,64}$",
        description="Hugging Face revision (branch, tag or commit) the model cache copies; a new revision "
        "copies again. Pin a commit to know what you serve.",
    )
    max_model_len: int = Field(4096, gt=0, description="Context length per request (vLLM `max_model_len`).")
    dtype: Literal["auto", "bfloat16", "float16", "float32"] = Field(
        "bfloat16", description="Weight and activation precision (vLLM `dtype`)."
    )
    gpu_memory_utilization: float = Field(
        0.90,
        gt=0,
        le=1,
        description="Fraction of each GPU's memory vLLM may use for weights, activations and KV cache.",
    )
    enforce_eager: bool = Field(
        True, description="Skip CUDA graph capture to lower peak GPU memory (vLLM `enforce_eager`)."
    )
    tensor_parallel_size: int = Field(
        1, ge=1, le=8, description="GPUs per replica (vLLM `tensor_parallel_size`), all in one pod."
    )
    max_num_seqs: int | None = Field(
        None,
        ge=1,
        description="Most sequences one engine runs at once (vLLM `max_num_seqs`). Unset: vLLM's own "
        "default, and the serve config carries none.",
    )
    max_num_batched_tokens: int | None = Field(
        None,
        ge=1,
        description="Most tokens one engine step processes (vLLM `max_num_batched_tokens`), the chunk "
        "size of a long prompt. Unset: vLLM's own default, and the serve config carries none.",
    )
    prefill: SideModelConfig | None = Field(
        None,
        description="Prefill's own engine settings (tensorParallelSize, gpuMemoryUtilization, maxNumSeqs, "
        "maxNumBatchedTokens, extraEngineKwargs), each replacing the shared key for prefill only.",
    )
    decode: SideModelConfig | None = Field(
        None,
        description="Decode's own engine settings, as `prefill`, for decode only.",
    )
    prefill_replicas: int = Field(
        1,
        ge=1,
        description="Prefill replicas, one GPU worker pod each (`serving.mode: aggregated`: added to "
        "decodeReplicas, the replicas).",
    )
    decode_replicas: int = Field(
        1,
        ge=1,
        description="Decode replicas, one GPU worker pod each (`serving.mode: aggregated`: added to "
        "prefillReplicas, the replicas).",
    )
    nixl_backends: list[Literal["LIBFABRIC", "UCX"]] | None = Field(
        None,
        min_length=1,
        description="NIXL transfer backends for the KV cache. Unset: LIBFABRIC, which moves the KV cache "
        "over EFA on every GPU type (planning/kv_path.py; the preview says by which mechanism and how "
        "fast). `[UCX]` moves it over TCP, on the pinned port range the worker policy opens.",
    )
    kv_load_failure_policy: Literal["recompute", "fail"] = Field(
        "recompute",
        description="What decode does with a request whose KV cache did not arrive (vLLM "
        "`kv_load_failure_policy`): `recompute` computes the missing blocks itself (the answer comes, "
        "later), `fail` ends the request with an error (HTTP 500). vLLM 0.26 applies neither to a "
        "hybrid model such as the default's, whose serve config therefore carries none (docs/design.md, "
        '"KV failures").',
    )
    kv_lease_seconds: int = Field(
        30,
        ge=6,
        le=3600,
        description="How long prefill keeps a finished prompt's KV blocks for decode to read (NIXL "
        "`kv_lease_duration`); decode renews the lease while the request waits, so blocks a dead "
        "decode stranded are freed after it. vLLM's own, 30, is left out of the serve config.",
    )
    kv_buffer_device: Literal["auto", "cuda", "cpu"] = Field(
        "auto",
        description="Where vLLM's NIXL connector keeps the KV cache it sends (`kv_buffer_device`). `auto`: "
        "GPU memory, except with LIBFABRIC on a type without GPUDirect RDMA (g5, g6, g6e) for an "
        "attention-only model, where host memory is faster (counted in the worker's memory). `cpu` with "
        "a hybrid model is refused.",
    )
    kv_offload_gib: float | None = Field(
        None,
        gt=0,
        description="A CPU tier for the KV cache: GiB of each prefill worker's host memory (pinned) where "
        "vLLM 0.26's OffloadingConnector keeps KV blocks the GPU evicts, so a prompt whose prefix was "
        "computed before loads it from host memory instead of computing it again. Rendered beside NIXL "
        "in a MultiConnector on prefill only (decode loads every prompt from prefill over NIXL, so a "
        "tier there would only store); an aggregated replica gets vLLM's own `kv_offloading_size`. "
        "Needs a prefix cache (the default hybrid model: `extraEngineKwargs.enable_prefix_caching: "
        "true`). Counted in the worker's memory by the fit check. Unset: no tier.",
    )
    hybrid_layers: bool | None = Field(
        None,
        description="Whether the model has per-sequence state layers beside attention (Mamba, Gated "
        "DeltaNet), which vLLM 0.26's host KV buffers cannot hold. Built in for the default model "
        "(true); unset for another model means attention only.",
    )
    extra_engine_kwargs: dict[str, Any] = Field(
        {},
        description="Further vLLM engine arguments for both sides (e.g. `trust_remote_code`). Keys that "
        "other settings own are refused.",
    )
    fit_check: Literal["fail", "warn"] = Field(
        "fail",
        description="What a model that does not fit the GPUs does to preview: `fail` refuses the stack, "
        "naming where it would fit (tensor parallelism across more GPUs of the kind, a bigger GPU); `warn` "
        "logs how far off it is and goes on (for an estimate you know to be pessimistic).",
    )
    parameters_billions: float | None = Field(
        None,
        gt=0,
        description="Parameter count in billions, for the fit check. Built in for the default model.",
    )
    checkpoint_gib: float | None = Field(
        None, gt=0, description="Checkpoint size on disk in GiB. Built in for the default model."
    )
    kv_cache_bytes_per_token: int | None = Field(
        None,
        gt=0,
        description="KV-cache bytes per token (all attention layers, K and V). Built in for the "
        "default model; otherwise 2 x attention layers x KV heads x head dim x dtype bytes.",
    )

    @field_validator("source")
    @classmethod
    def _s3_prefix_of_a_valid_bucket(cls, value: str) -> str:
        if not value.startswith("s3://"):
            return value
        bucket, _, prefix = value.removeprefix("s3://").partition("/")
        problem = s3_bucket_problem(bucket)
        if problem:
            raise ValueError(problem)
        if not prefix.strip("/"):
            raise ValueError(
                f"{value} is the bucket's root; name the prefix that holds the model's files (and its "
                f"`hash` file), e.g. s3://{bucket}/models/<name>"
            )
        wild = sorted({c for c in prefix if c in "*?'"})
        if wild:
            # The prefix becomes the readers' IAM Resource, where * and ? are wildcards, and a word of
            # the bench's command line.
            raise ValueError(
                f"{value}: {' '.join(wild)} in the prefix would be IAM wildcards in the workers' read "
                "rights (or break a shell word); use a prefix of letters, digits, / . _ -"
            )
        return value

    @field_validator("extra_engine_kwargs")
    @classmethod
    def _no_owned_keys(cls, value: dict[str, Any]) -> dict[str, Any]:
        return _no_owned_engine_kwargs(value)

    def side(self, side: Side) -> ModelConfig:
        """The model as `side`'s LLMConfig and GPU workers see it: the shared keys with the side's own
        (`model.prefill` / `model.decode`) in their place, extraEngineKwargs merged key by key. The one
        place every per-side reader (serve config, fit check, worker groups, KV path) asks; without
        per-side keys it is the model itself."""
        own = self.prefill if side == "prefill" else self.decode
        if own is None:
            return self
        update: dict[str, Any] = {
            name: value for name, value in own if value is not None and name != "extra_engine_kwargs"
        }
        if own.extra_engine_kwargs is not None:
            update["extra_engine_kwargs"] = {**self.extra_engine_kwargs, **own.extra_engine_kwargs}
        return self.model_copy(update={**update, "prefill": None, "decode": None})

    def tensor_parallel_sizes(self) -> dict[Side, int]:
        """Each side's GPUs per replica."""
        return {side: self.side(side).tensor_parallel_size for side in SIDES}

    @property
    def split_tensor_parallel(self) -> bool:
        """Whether prefill and decode replicas take different numbers of GPUs (then each side has a
        worker group of its own)."""
        return len(set(self.tensor_parallel_sizes().values())) > 1


class ModelCacheConfig(StrictModel):
    """A regional copy of the model in S3: copied from Hugging Face once per model source and revision
    by a Job the stack runs, then loaded by every worker from S3 in the region (through the VPC's S3
    endpoint, not NAT). Ray's pods read it with EKS Pod Identity, no keys."""

    enabled: bool = Field(
        True,
        description="Load Hugging Face models from the S3 copy; off: each worker downloads from "
        "Hugging Face.",
    )
    bucket: BucketName | None = Field(
        None,
        description="An existing bucket to keep the copy in. Default: the stack creates one (private, "
        "encrypted, public access blocked) named `<cluster>-models-<key>-<account>-<region>` (`<key>`: 8 hex "
        "characters of a hash of stack, cluster and namespace), chosen on the first `up` and kept.",
    )
    prefix: str = Field("models", pattern=r"^[\w.-]+(/[\w.-]+)*$", description="Key prefix of the copies.")
    force_destroy: bool = Field(
        False,
        description="Let `pulumi destroy` delete the stack's bucket with the copies in it; otherwise "
        "destroy stops at a bucket that is not empty, so the copy is never lost by accident.",
    )
