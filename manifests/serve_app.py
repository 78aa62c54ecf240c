"""The Ray Serve application inside the RayService: `serveConfigV2`, in Serve's snake_case vocabulary.

One application runs `ray.serve.llm:build_pd_openai_app`: a prefill deployment and a decode deployment
of the same model behind one OpenAI-compatible ingress. vLLM's NixlConnector moves the KV cache from
the prefill GPU to the decode GPU; `backends: [LIBFABRIC]` makes NIXL use EFA through libfabric.
Without it NIXL picks UCX, which on EFA runs at TCP speed and says nothing about it.

With `serving.mode: aggregated` the application runs `ray.serve.llm:build_openai_app` instead: one
deployment of the same model with the same engine settings and no KV connector, as many replicas as
prefill and decode had together (Ray 2.58 ray/llm/_internal/serve/core/ingress/builder.py:146
`LLMServingArgs`, :227 `build_openai_app`).

Ray's own models accept unknown keys on purpose (older Serve reading newer configs); we generate the
config, so ours refuse them, and the tests check the output against Ray 2.58's own schemas.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

from config.autoscaling import AutoscalingConfig as ScalingSettings
from config.autoscaling import DecodeScaling, PrefillScaling, SideScaling, ttft_target
from config.base import SAFE_DUMPER
from config.routing import PrefixRouterConfig
from config.serving import ModelConfig, ServingConfig, Side
from planning.kv_path import KvPath, hybrid_layers, prefix_cache

PD_IMPORT_PATH = "ray.serve.llm:build_pd_openai_app"
SIDE_RESOURCES = {"prefill": "prefill-worker", "decode": "decode-worker"}
"""The Ray resource each side's worker group advertises, one per GPU, where the sides have node groups
of their own. Never a name ending in `gpu`: KubeRay 1.7 reads a group resource of that name as the GPU
count (ray-operator/controllers/ray/utils/resources.go `IsGPUResourceKey`)."""
VLLM_KV_LEASE_SECONDS = 30
"""vLLM 0.26's NixlConnector lease when none is given (nixl/base_scheduler.py:70-76): rendered only when
model.kvLeaseSeconds differs, so a stack that keeps it sees no serve-config change."""
AGGREGATED_IMPORT_PATH = "ray.serve.llm:build_openai_app"


class ServeModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NixlExtraConfig(ServeModel):
    backends: list[Literal["LIBFABRIC", "UCX"]] = Field(min_length=1)
    kv_lease_duration: int | None = Field(None, ge=1)
    """vLLM 0.26 NixlConnector: seconds prefill keeps a finished prompt's blocks for decode, renewed by
    decode's heartbeats (nixl/base_scheduler.py, base_worker.py); None: vLLM's own, 30."""


class KvTransferConfig(ServeModel):
    kv_connector: Literal["NixlConnector"] = "NixlConnector"
    kv_role: Literal["kv_both"] = "kv_both"
    kv_buffer_device: Literal["cuda", "cpu"]
    """vLLM 0.26 KVTransferConfig: where the connector keeps what NIXL sends (planning/kv_path.py)."""
    engine_id: str = Field(min_length=1, description="Distinct per side: prefill, decode.")
    kv_connector_extra_config: NixlExtraConfig
    kv_load_failure_policy: Literal["recompute", "fail"] | None = None
    """None: vLLM's own (`fail`), where the policy cannot act (a hybrid model: docs/design.md, "KV
    failures")."""


class OffloadExtraConfig(ServeModel):
    cpu_bytes_to_use: int = Field(gt=0)
    """vLLM 0.26 CPUOffloadingSpec: host bytes for the tier, across the worker's TP ranks
    (vllm/v1/kv_offload/cpu/spec.py:78-99); it refuses none."""


class OffloadConnector(ServeModel):
    """vLLM 0.26's OffloadingConnector: GPU-evicted KV blocks kept in host memory, looked up by prefix."""

    kv_connector: Literal["OffloadingConnector"] = "OffloadingConnector"
    kv_role: Literal["kv_both"] = "kv_both"
    kv_connector_extra_config: OffloadExtraConfig


class NixlChild(ServeModel):
    """NIXL as a MultiConnector child: no engine_id, which vLLM takes from the parent
    (multi_connector.py:213-231 builds `KVTransferConfig(**child, engine_id=...)`, so a child's own
    would be a duplicate argument)."""

    kv_connector: Literal["NixlConnector"] = "NixlConnector"
    kv_role: Literal["kv_both"] = "kv_both"
    kv_buffer_device: Literal["cuda", "cpu"]
    kv_connector_extra_config: NixlExtraConfig


class MultiExtraConfig(ServeModel):
    connectors: tuple[NixlChild, OffloadConnector]
    """NIXL first: vLLM loads from the first child that has tokens (multi_connector.py:381-400), and
    Ray 2.58 takes the P/D protocol from the first (kv_transfer/multi_connector.py `_primary`)."""


class MultiKvTransferConfig(ServeModel):
    """Prefill with a CPU tier (`model.kvOffloadGib`): NIXL and vLLM's OffloadingConnector together.
    No engine_id: Ray 2.58's MultiConnectorBackend makes NIXL's unique engine_id on a copy of the
    config only (kv_transfer/multi_connector.py setup, nixl.py), so a rendered one would be shared by
    every prefill replica; without one vLLM gives each engine a uuid (vllm/config/kv_transfer.py:93-94),
    which the children inherit."""

    kv_connector: Literal["MultiConnector"] = "MultiConnector"
    kv_role: Literal["kv_both"] = "kv_both"
    kv_buffer_device: Literal["cuda", "cpu"]
    kv_connector_extra_config: MultiExtraConfig
    kv_load_failure_policy: Literal["recompute", "fail"] | None = None


class EngineKwargs(ServeModel):
    # Further vLLM engine arguments (model.extraEngineKwargs) pass through; Ray checks them against
    # vLLM's AsyncEngineArgs when it builds the engine.
    model_config = ConfigDict(extra="allow", frozen=True)

    max_model_len: int = Field(gt=0)
    dtype: str
    gpu_memory_utilization: float = Field(gt=0, le=1)
    enforce_eager: bool
    tensor_parallel_size: int | None = Field(None, ge=1)
    max_num_seqs: int | None = Field(None, ge=1)
    max_num_batched_tokens: int | None = Field(None, ge=1)
    kv_transfer_config: KvTransferConfig | MultiKvTransferConfig | None = None
    """None: aggregated, each replica keeps its own KV cache."""
    kv_offloading_size: float | None = Field(None, gt=0)
    """Aggregated with `model.kvOffloadGib`: vLLM's own CPU tier (GiB), which sets its
    OffloadingConnector as the one connector (vllm/config/vllm.py:857-889); never beside NIXL."""
    kv_offloading_backend: Literal["native"] | None = None


class CloudMirror(ServeModel):
    """Ray downloads every file under the prefix with boto3 before vLLM starts, into the node's
    Hugging Face cache; `<bucket_uri>/hash` names the snapshot."""

    bucket_uri: str = Field(pattern=r"^s3://")


class ModelLoadingConfig(ServeModel):
    model_id: str = Field(min_length=1)
    model_source: CloudMirror | Annotated[str, StringConstraints(min_length=1)]


class AutoscalingPolicy(ServeModel):
    """A custom policy (ray.serve.config.AutoscalingPolicy): a class Ray builds with `policy_kwargs`."""

    policy_function: str = Field(pattern=r"^[\w.]+:\w+$")
    policy_kwargs: dict[str, str | float]


class AutoscalingConfig(ServeModel):
    """Ray Serve's autoscaling of one side (ray.serve.config.AutoscalingConfig): its own request-count
    policy with a target, or the stack's `policy`, which Ray wraps in the same delays and bounds."""

    min_replicas: int = Field(ge=1)
    max_replicas: int = Field(ge=1)
    target_ongoing_requests: float | None = Field(None, gt=0)
    upscale_delay_s: float = Field(ge=0)
    downscale_delay_s: float = Field(ge=0)
    policy: AutoscalingPolicy | None = None

    @model_validator(mode="after")
    def _a_target_or_a_policy(self) -> AutoscalingConfig:
        if (self.target_ongoing_requests is None) == (self.policy is None):
            raise ValueError("an autoscaling_config has target_ongoing_requests or a policy, exactly one")
        return self


PREFIX_ROUTER = "prefix_routing:ResilientPrefixRouter"
"""jobs/prefix_routing.py, on the Ray pods' PYTHONPATH: Ray Serve LLM's PrefixCacheAffinityRouter with its
prefix tree on the head node, routing by power of two while the tree is lost (docs/design.md, "Routing")."""


class PrefixRouterKwargs(ServeModel):
    """PrefixCacheAffinityRouter.initialize_state's arguments (prefix_aware_router.py), which
    ResilientPrefixRouter takes as they are."""

    imbalanced_threshold: float | None = Field(None, gt=0)
    match_rate_threshold: float = Field(ge=0, le=1)
    do_eviction: Literal[True] = True
    eviction_threshold_chars: int = Field(gt=0)
    eviction_target_chars: int = Field(gt=0)
    eviction_interval_secs: int = Field(ge=1)


class RequestRouterConfig(ServeModel):
    """ray.serve.config.RequestRouterConfig: the router every handle to this deployment uses."""

    request_router_class: Literal["prefix_routing:ResilientPrefixRouter"] = PREFIX_ROUTER
    request_router_kwargs: PrefixRouterKwargs


class DeploymentConfig(ServeModel):
    """A fixed `num_replicas`, or an `autoscaling_config`; always explicit request limits, which Ray
    Serve LLM would otherwise set to 1e9 (no replica ever looks busy, so nothing scales)."""

    num_replicas: int | None = Field(None, ge=1)
    autoscaling_config: AutoscalingConfig | None = None
    max_ongoing_requests: int = Field(ge=1)
    graceful_shutdown_timeout_s: float = Field(ge=0)
    request_router_config: RequestRouterConfig | None = None

    @model_validator(mode="after")
    def _one_way_to_size(self) -> DeploymentConfig:
        if (self.num_replicas is None) == (self.autoscaling_config is None):
            raise ValueError("a deployment has num_replicas or autoscaling_config, exactly one")
        return self


class CallbackConfig(ServeModel):
    callback_class: str = Field(pattern=r"^[\w.]+:\w+$")


class PlacementBundle(ServeModel):
    """One engine worker's bundle: a GPU, and one unit of the side's own Ray resource."""

    model_config = ConfigDict(extra="allow", frozen=True)
    GPU: float = Field(gt=0)


class PlacementGroupConfig(ServeModel):
    """LLMConfig.placement_group_config: Ray 2.58 repeats `bundle_per_worker` once per engine worker
    (tensor x pipeline parallel size) and keeps the default strategy, PACK
    (ray/llm/_internal/serve/engines/vllm/vllm_models.py `placement_bundles`, `placement_strategy`)."""

    bundle_per_worker: PlacementBundle


class LLMSide(ServeModel):
    model_loading_config: ModelLoadingConfig
    engine_kwargs: EngineKwargs
    deployment_config: DeploymentConfig
    callback_config: CallbackConfig | None = None
    placement_group_config: PlacementGroupConfig | None = None
    """Where the sides have worker groups of their own: each engine worker asks for one unit of its
    side's Ray resource, which only that side's worker group advertises (manifests/rayservice.py)."""


class PDArgs(ServeModel):
    prefill_config: LLMSide
    decode_config: LLMSide

    @model_validator(mode="after")
    def _same_model_distinct_engines(self) -> PDArgs:
        prefill, decode = self.prefill_config, self.decode_config
        if prefill.model_loading_config.model_id != decode.model_loading_config.model_id:
            raise ValueError(
                "prefill and decode must serve the same model_id "
                f"({prefill.model_loading_config.model_id!r} != {decode.model_loading_config.model_id!r})"
            )
        prefill_kv, decode_kv = (
            prefill.engine_kwargs.kv_transfer_config,
            decode.engine_kwargs.kv_transfer_config,
        )
        if prefill_kv is None or decode_kv is None:
            raise ValueError("prefill and decode each need a kv_transfer_config (build_pd_openai_app)")
        if isinstance(decode_kv, MultiKvTransferConfig):
            raise ValueError("decode loads every prompt over NIXL: a CPU tier there only stores")
        if getattr(prefill_kv, "engine_id", None) == getattr(decode_kv, "engine_id", 0):
            raise ValueError(f"prefill and decode share the NIXL engine_id {decode_kv.engine_id!r}")
        return self


class AggregatedArgs(ServeModel):
    """`build_openai_app`'s LLMServingArgs with one model: its replicas prefill and decode alike."""

    llm_configs: list[LLMSide] = Field(min_length=1, max_length=1)

    @model_validator(mode="after")
    def _no_kv_connector(self) -> AggregatedArgs:
        if any(side.engine_kwargs.kv_transfer_config for side in self.llm_configs):
            raise ValueError("an aggregated replica keeps its KV cache: no kv_transfer_config")
        return self


class ServeApplication(ServeModel):
    name: str = Field(min_length=1)
    import_path: Literal["ray.serve.llm:build_pd_openai_app", "ray.serve.llm:build_openai_app"] = (
        PD_IMPORT_PATH
    )
    route_prefix: str = "/"
    args: PDArgs | AggregatedArgs

    @model_validator(mode="after")
    def _builder_takes_these_args(self) -> ServeApplication:
        expected = PD_IMPORT_PATH if isinstance(self.args, PDArgs) else AGGREGATED_IMPORT_PATH
        if self.import_path != expected:
            raise ValueError(f"{type(self.args).__name__} are {expected}'s args, not {self.import_path}'s")
        return self


class ServeConfig(ServeModel):
    applications: list[ServeApplication] = Field(min_length=1)

    def to_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json", exclude_none=True)

    def to_yaml(self) -> str:
        """The serveConfigV2 string: keys in declaration order, so the same config is the same text."""
        return yaml.dump(
            self.to_dict(), Dumper=SAFE_DUMPER, sort_keys=False, default_flow_style=False, width=120
        )


NODE_CACHE_CALLBACK = "ray_node_cache:ReuseNodeCache"
"""jobs/ray_node_cache.py, on the Ray pods' PYTHONPATH: skip the S3 download when the node has it."""


LLM_POLICY = "llm_autoscaling:LlmScalingPolicy"
"""jobs/llm_autoscaling.py, on the Ray pods' PYTHONPATH: a side's scaling on the engine's figures."""
SLO_POLICY = "llm_autoscaling:SloScalingPolicy"
"""The same module's policy on latency targets (`autoscaling.signal: slo`)."""


def deployment_name(model_id: str, side: Side) -> str:
    """The Serve deployment of a side: `Prefill:` or `Decode:` and the model id with `/` as `--` and `.`
    as `_` (Ray 2.58 ray/llm/_internal/serve/core/server/builder.py:37-38, 64-73; prefill_decode/
    builder.py `name_prefix`)."""
    return f"{side.capitalize()}:{model_id.replace('/', '--').replace('.', '_')}"


def band_kwargs(scaling: ScalingSettings, model_id: str, side: Side) -> dict[str, str | float]:
    """`autoscaling.ratio` for one side's policy: the band, which side it is, and its peer deployment,
    whose replicas the policy reads (jobs/llm_autoscaling.py `keep_in_band`). Empty without a band."""
    band = scaling.ratio
    if band is None:
        return {}
    peer: Side = "decode" if side == "prefill" else "prefill"
    return {
        "side": side,
        "peer": deployment_name(model_id, peer),
        "ratio_min": band.min,
        "ratio_max": band.max,
    }


def llm_policy(
    side: SideScaling,
    scaling: ScalingSettings,
    scope: Mapping[str, str] | None = None,
    ttft_objective: float | None = None,
    aggregated: bool = False,
    band: Mapping[str, str | float] | None = None,
) -> AutoscalingPolicy | None:
    """`autoscaling.signal: llm`: prefill on the prompt tokens it holds, decode on its KV-cache use.
    `signal: slo`: prefill on its p95 time to first token, decode on its p95 inter-token latency, an
    `aggregated` deployment on both (`ttft_objective`: prefill's default target).
    `scope`: the policy's `namespace` and `jobs`, the labels the stack's PodMonitors give the Ray pods'
    series (manifests/rayservice.py `policy_scope`), so its queries read this stack's pods only."""
    if scaling.signal == "slo":
        ttft = ttft_target(scaling, ttft_objective or 0.0)
        targets: dict[str, str | float] = (
            {"ttft_target": ttft, "itl_target": scaling.decode.itl_target_seconds}
            if aggregated
            else {"ttft_target": ttft}
            if isinstance(side, PrefillScaling)
            else {"itl_target": scaling.decode.itl_target_seconds}
        )
        return AutoscalingPolicy(
            policy_function=SLO_POLICY,
            policy_kwargs={**targets, "band": scaling.downscale_band, **(scope or {})},
        )
    if scaling.signal != "llm":
        return None
    if isinstance(side, PrefillScaling):
        signal, target = "prompt_tokens", float(side.target_prompt_tokens)
    elif isinstance(side, DecodeScaling):
        signal, target = "kv_cache", side.target_kv_cache_usage
    else:
        return None
    return AutoscalingPolicy(
        policy_function=LLM_POLICY,
        policy_kwargs={
            "signal": signal,
            "target": target,
            "band": scaling.downscale_band,
            **(scope or {}),
            **(band or {}),
        },
    )


def _deployment(
    replicas: int,
    side: SideScaling,
    scaling: ScalingSettings,
    scope: Mapping[str, str] | None = None,
    ttft_objective: float | None = None,
    aggregated: bool = False,
    band: Mapping[str, str | float] | None = None,
) -> DeploymentConfig:
    maximum = side.max_replicas or replicas
    policy = llm_policy(side, scaling, scope, ttft_objective, aggregated, band)
    autoscaling = (
        AutoscalingConfig(
            min_replicas=replicas,
            max_replicas=maximum,
            target_ongoing_requests=None if policy else side.target_ongoing_requests,
            upscale_delay_s=scaling.upscale_delay_seconds,
            downscale_delay_s=scaling.downscale_delay_seconds,
            policy=policy,
        )
        if maximum > replicas
        else None
    )
    return DeploymentConfig(
        num_replicas=None if autoscaling else replicas,
        autoscaling_config=autoscaling,
        max_ongoing_requests=side.max_ongoing_requests,
        # A replica being removed (scale-down, an upgrade) finishes what it holds first.
        graceful_shutdown_timeout_s=scaling.graceful_shutdown_seconds,
    )


def prefix_routed(deployment: DeploymentConfig, serving: ServingConfig | None, model: ModelConfig) -> bool:
    """Whether the side gets Ray Serve LLM's prefix-affinity router: `serving.requestRouter: prefix`,
    a choice of replicas (with one there is nothing to choose, and the router would only add its
    prefix-tree actor and its actor calls to every request), and an engine that keeps a prefix cache
    (without one the replica holding a prefix computes it again like any other). docs/design.md,
    "Routing"."""
    scaling = deployment.autoscaling_config
    most = scaling.max_replicas if scaling else deployment.num_replicas or 1
    return serving is not None and serving.request_router == "prefix" and most >= 2 and prefix_cache(model)


def routed(
    deployment: DeploymentConfig, serving: ServingConfig | None, model: ModelConfig
) -> DeploymentConfig:
    """The side with the prefix-affinity router where `prefix_routed`, else Serve's default."""
    if serving is None or not prefix_routed(deployment, serving, model):
        return deployment
    return deployment.model_copy(update={"request_router_config": prefix_router(serving.prefix_router)})


def routes_by_prefix(config: ServeConfig) -> bool:
    """Whether any side of the config routes through jobs/prefix_routing.py (shipped to the Ray pods)."""
    for app in config.applications:
        args = app.args
        sides = [args.prefill_config, args.decode_config] if isinstance(args, PDArgs) else args.llm_configs
        if any(side.deployment_config.request_router_config for side in sides):
            return True
    return False


def prefix_router(settings: PrefixRouterConfig) -> RequestRouterConfig:
    return RequestRouterConfig(
        request_router_kwargs=PrefixRouterKwargs(
            imbalanced_threshold=settings.imbalanced_threshold,
            match_rate_threshold=settings.match_rate_threshold,
            eviction_threshold_chars=settings.eviction_threshold_chars,
            eviction_target_chars=settings.eviction_target_chars,
            eviction_interval_secs=settings.eviction_interval_seconds,
        )
    )


def _kv_transfer(
    model: ModelConfig, engine_id: str, kv_path: KvPath, offload: bool
) -> KvTransferConfig | MultiKvTransferConfig:
    """The side's NIXL connector; with `offload` (prefill, `model.kvOffloadGib`) inside a MultiConnector
    beside vLLM's OffloadingConnector."""
    extra = NixlExtraConfig(
        backends=list(kv_path.backends),
        kv_lease_duration=None if model.kv_lease_seconds == VLLM_KV_LEASE_SECONDS else model.kv_lease_seconds,
    )
    # vLLM 0.26 marks no block of a hybrid model invalid on a failed read, so the policy would change
    # nothing there but the serve config (and a redeploy for nothing).
    failure_policy = None if hybrid_layers(model) else model.kv_load_failure_policy
    if offload and model.kv_offload_gib:
        return MultiKvTransferConfig(
            kv_buffer_device=kv_path.buffer_device,
            kv_connector_extra_config=MultiExtraConfig(
                connectors=(
                    NixlChild(kv_buffer_device=kv_path.buffer_device, kv_connector_extra_config=extra),
                    OffloadConnector(
                        kv_connector_extra_config=OffloadExtraConfig(
                            cpu_bytes_to_use=round(model.kv_offload_gib * 2**30)
                        )
                    ),
                )
            ),
            kv_load_failure_policy=failure_policy,
        )
    return KvTransferConfig(
        engine_id=engine_id,
        kv_buffer_device=kv_path.buffer_device,
        kv_connector_extra_config=extra,
        kv_load_failure_policy=failure_policy,
    )


def _side(
    model: ModelConfig,
    source: str | CloudMirror,
    engine_id: str,
    deployment: DeploymentConfig,
    kv_path: KvPath | None,
    pinned: bool = False,
) -> LLMSide:
    """`model`: the side's engine (`ModelConfig.side`). `engine_id` and `kv_path`: the side's NIXL
    connector; `kv_path` None: none (aggregated). A CPU tier (`model.kvOffloadGib`) on prefill beside
    NIXL, on an aggregated replica alone. `pinned`: the side's engine workers run only on its own
    worker group (`SIDE_RESOURCES`)."""
    return LLMSide(
        placement_group_config=PlacementGroupConfig(
            bundle_per_worker=PlacementBundle.model_validate({"GPU": 1, SIDE_RESOURCES[engine_id]: 1})
        )
        if pinned
        else None,
        callback_config=CallbackConfig(callback_class=NODE_CACHE_CALLBACK)
        if isinstance(source, CloudMirror)
        else None,
        model_loading_config=ModelLoadingConfig(model_id=model.id, model_source=source),
        engine_kwargs=EngineKwargs(
            max_model_len=model.max_model_len,
            dtype=model.dtype,
            gpu_memory_utilization=model.gpu_memory_utilization,
            enforce_eager=model.enforce_eager,
            tensor_parallel_size=model.tensor_parallel_size if model.tensor_parallel_size > 1 else None,
            max_num_seqs=model.max_num_seqs,
            max_num_batched_tokens=model.max_num_batched_tokens,
            kv_transfer_config=_kv_transfer(model, engine_id, kv_path, offload=engine_id == "prefill")
            if kv_path
            else None,
            kv_offloading_size=model.kv_offload_gib if kv_path is None else None,
            kv_offloading_backend="native" if kv_path is None and model.kv_offload_gib else None,
            **model.extra_engine_kwargs,
        ),
        deployment_config=deployment,
    )


def _pd_application(
    name: str,
    model: ModelConfig,
    source: str | CloudMirror,
    kv_path: KvPath,
    scaling: ScalingSettings,
    serving: ServingConfig | None,
    scope: Mapping[str, str] | None = None,
    ttft_objective: float | None = None,
    pinned: bool = False,
) -> ServeApplication:
    """`build_pd_openai_app`: a prefill and a decode deployment, the KV cache crossing over NIXL, each
    with its own engine settings (`ModelConfig.side`). `pinned`: each side on its own worker group."""
    prefill, decode = model.side("prefill"), model.side("decode")
    return ServeApplication(
        name=name,
        args=PDArgs(
            prefill_config=_side(
                prefill,
                source,
                "prefill",
                routed(
                    _deployment(
                        model.prefill_replicas,
                        scaling.prefill,
                        scaling,
                        scope,
                        ttft_objective,
                        band=band_kwargs(scaling, model.id, "prefill"),
                    ),
                    serving,
                    prefill,
                ),
                kv_path,
                pinned,
            ),
            decode_config=_side(
                decode,
                source,
                "decode",
                routed(
                    _deployment(
                        model.decode_replicas,
                        scaling.decode,
                        scaling,
                        scope,
                        ttft_objective,
                        band=band_kwargs(scaling, model.id, "decode"),
                    ),
                    serving,
                    decode,
                ),
                kv_path,
                pinned,
            ),
        ),
    )


def aggregated_scaling(model: ModelConfig, scaling: ScalingSettings) -> tuple[int, SideScaling]:
    """The aggregated deployment's replicas and scaling: both sides' GPU workers together, at least and
    at most; decode's request targets, since a replica holds each request through its decode."""
    replicas = model.prefill_replicas + model.decode_replicas
    most = (scaling.prefill.max_replicas or model.prefill_replicas) + (
        scaling.decode.max_replicas or model.decode_replicas
    )
    return replicas, scaling.decode.model_copy(update={"max_replicas": most})


def _aggregated_application(
    name: str,
    model: ModelConfig,
    source: str | CloudMirror,
    scaling: ScalingSettings,
    serving: ServingConfig | None,
    scope: Mapping[str, str] | None = None,
    ttft_objective: float | None = None,
) -> ServeApplication:
    """`build_openai_app`: one deployment, each replica prefilling and decoding its own requests."""
    replicas, side = aggregated_scaling(model, scaling)
    return ServeApplication(
        name=name,
        import_path=AGGREGATED_IMPORT_PATH,
        args=AggregatedArgs(
            llm_configs=[
                _side(
                    model,
                    source,
                    "",
                    routed(
                        _deployment(replicas, side, scaling, scope, ttft_objective, aggregated=True),
                        serving,
                        model,
                    ),
                    None,
                )
            ]
        ),
    )


def build_serve_config(
    model: ModelConfig,
    application_name: str,
    kv_path: KvPath,
    s3_uri: str | None = None,
    scaling: ScalingSettings | None = None,
    serving: ServingConfig | None = None,
    mode: Literal["disaggregated", "aggregated"] = "disaggregated",
    policy_scope: Mapping[str, str] | None = None,
    ttft_objective: float | None = None,
    pinned: bool = False,
) -> ServeConfig:
    """`s3_uri`: load the weights from this S3 prefix (the model cache) instead of `model.source`.
    Streaming them into the GPUs (`load_format: runai_streamer`) is broken with an S3 source in Ray
    2.58 (ray-project/ray#64996, fixed for 2.59): once the image has 2.59, add it to `_side`'s
    engine kwargs. `mode`: `serving.mode`, which builder's application. `policy_scope`: the LLM-signal
    policy's pod selectors (`llm_policy`); `ttft_objective`: prefill's TTFT target by default (`slo`).
    `pinned`: each side on its own worker group (`SIDE_RESOURCES`)."""
    source: str | CloudMirror = CloudMirror(bucket_uri=s3_uri) if s3_uri else model.source
    scaling = scaling or ScalingSettings()  # type: ignore[call-arg]
    application = (
        _aggregated_application(
            application_name, model, source, scaling, serving, policy_scope, ttft_objective
        )
        if mode == "aggregated"
        else _pd_application(
            application_name, model, source, kv_path, scaling, serving, policy_scope, ttft_objective, pinned
        )
    )
    return ServeConfig(applications=[application])
