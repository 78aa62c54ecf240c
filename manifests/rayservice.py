"""The KubeRay RayService as typed data, and the one function that builds the serving layer from the
settings and the plan.

Field names mirror the `ray.io/v1` CRD we pin (KubeRay 1.7.0); only the fields we set are modelled.
`build_serving` is the only builder: the Pulumi component and `python -m ops render` both call it, so
what you review is what gets applied.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field, SecretStr

from config import Settings
from manifests import ray_ports
from manifests.decode_heal import DecodeHeal, decode_heal
from manifests.jobs import JOBS, ProgramJob
from manifests.k8s import (
    Capabilities,
    ConfigMapVolumeSource,
    Container,
    ContainerPort,
    EmptyDirVolumeSource,
    EnvVar,
    EnvVarSource,
    ExecAction,
    HostPathVolumeSource,
    K8sModel,
    Lifecycle,
    LifecycleHandler,
    NamespacedManifest,
    ObjectFieldSelector,
    ObjectMeta,
    PodMetadata,
    PodSecurityContext,
    PodSpec,
    PodTemplate,
    ResourceRequirements,
    SeccompProfile,
    SecretKeySelector,
    SecurityContext,
    Volume,
    VolumeMount,
    namespace,
    pod_security_labels,
    tolerations_of,
)
from manifests.model_cache import RAY_SERVICE_ACCOUNT, model_copy_job, service_accounts
from manifests.observability.dashboards import head_dashboard_env
from manifests.observability.monitors import head_metrics_ports, pod_monitors
from manifests.prepull import prepull_daemon_set
from manifests.ray_auth import RAY_AUTH_SECRET
from manifests.readiness import serve_ready_check
from manifests.serve_app import (
    LLM_POLICY,
    PREFIX_ROUTER,
    SIDE_RESOURCES,
    ServeConfig,
    build_serve_config,
    routes_by_prefix,
)
from planning import Plan
from planning import system_pods as requests
from planning.nodes import EFA_RESOURCE, GPU_RESOURCE, placement
from planning.plan import SidePlan

HF_TOKEN_SECRET = "hf-token"
"""Kubernetes Secret (in the serving namespace) holding the Hugging Face token, when one is set."""
HF_TOKEN_KEY = "token"
MODEL_CACHE_PATH = "/data/huggingface"
RAY_PLUGINS = "ray-llm-plugins"
"""ConfigMap with jobs/ray_node_cache.py (and jobs/llm_autoscaling.py where a side scales on it), mounted
on the Ray pods' PYTHONPATH."""
RAY_PLUGINS_PATH = "/opt/ray-llm-eks"
SAFE_TO_EVICT = "cluster-autoscaler.kubernetes.io/safe-to-evict"
RAY_WORKER_IDLE_SECONDS = 60
"""How long a GPU worker pod without a Serve replica stays before KubeRay's autoscaler removes it."""
TERMINATION_MARGIN_SECONDS = 60
"""Beyond the replicas' graceful shutdown, for `ray stop` and the engine's exit."""
NODE_MODEL_CACHE = "/var/lib/ray-llm/model-cache"
"""On each GPU node's disk: the Hugging Face cache outlives the worker pods, so a replaced worker (a
Ray cluster change, an eviction) finds the weights there, and the page cache still holds them."""


class HeadGroupSpec(K8sModel):
    ray_start_params: dict[str, str]
    template: PodTemplate


class WorkerGroupSpec(K8sModel):
    group_name: str
    replicas: int = Field(ge=0)
    min_replicas: int = Field(ge=0)
    max_replicas: int = Field(ge=0)
    resources: dict[str, str] | None = None
    """Ray resources of each worker (KubeRay 1.7 passes them to `ray start --resources`, and Ray's
    autoscaler reads them: ray/autoscaler/_private/kuberay/autoscaling_config.py `_get_custom_resources`)."""
    ray_start_params: dict[str, str]
    template: PodTemplate


class AutoscalerResources(K8sModel):
    requests: dict[str, str]
    limits: dict[str, str]


class AutoscalerOptions(K8sModel):
    version: Literal["v2"] = "v2"
    upscaling_mode: Literal["Default"] = "Default"
    idle_timeout_seconds: int = Field(ge=0)
    resources: AutoscalerResources


class AuthOptions(K8sModel):
    mode: Literal["token"] = "token"
    secret_name: str = RAY_AUTH_SECRET


class RayClusterSpec(K8sModel):
    ray_version: str
    auth_options: AuthOptions = Field(default_factory=AuthOptions)
    enable_in_tree_autoscaling: bool | None = None
    autoscaler_options: AutoscalerOptions | None = None
    head_group_spec: HeadGroupSpec
    worker_group_specs: list[WorkerGroupSpec]


class UpgradeStrategy(K8sModel):
    type: Literal["NewCluster", "None"]


class RayServiceSpec(K8sModel):
    upgrade_strategy: UpgradeStrategy
    serve_config_v2: str
    ray_cluster_config: RayClusterSpec


class RayServiceManifest(NamespacedManifest):
    api_version: Literal["ray.io/v1"] = "ray.io/v1"
    kind: Literal["RayService"] = "RayService"
    spec: RayServiceSpec

    def cluster_fingerprint(self) -> str:
        """A hash of `spec.rayClusterConfig`: a change to it means a new Ray cluster."""
        cluster = self.to_dict()["spec"]["rayClusterConfig"]
        return hashlib.sha256(json.dumps(cluster, sort_keys=True).encode()).hexdigest()[:16]


def ready_annotations(settings: Settings, plan: Plan) -> dict[str, str]:
    """pulumi-kubernetes' await rules: `pulumi up` returns once the RayService is Ready (KubeRay: serve
    endpoints exist, for the current generation) and the application reports RUNNING.

    The application is named in bracket notation: pulumi-kubernetes parses the path per RFC 9535
    (since 4.24), where `.qwen-pd` is a syntax error and `['qwen-pd']` is not. Application names are
    DNS labels, so nothing inside the quotes needs escaping."""
    app = settings.serving.application_name
    # With zero-downtime upgrades the old cluster stays Ready while the new one comes up: wait for
    # KubeRay to finish switching (it reports UpgradeInProgress False with NoPendingCluster).
    upgrading = ["condition=UpgradeInProgress=False"] if plan.upgrade.zero_downtime else []
    return {
        "pulumi.com/waitFor": json.dumps(
            [
                "condition=Ready",
                *upgrading,
                f"jsonpath={{.status.activeServiceStatus.applicationStatuses['{app}'].status}}=RUNNING",
            ]
        ),
        "pulumi.com/timeoutSeconds": str(settings.serving.ready_timeout_minutes * 60),
    }


def _ports(ports: dict[str, int]) -> list[ContainerPort]:
    return [ContainerPort(name=name, container_port=port) for name, port in ports.items()]


def _aws_env(settings: Settings) -> list[EnvVar]:
    """The AWS SDKs' region from the stack, and no instance metadata: the Ray pods' credentials come
    from EKS Pod Identity, and the network policies block IMDS, so an SDK asking it would only wait."""
    return [
        EnvVar(name="AWS_REGION", value=settings.region),
        EnvVar(name="AWS_DEFAULT_REGION", value=settings.region),
        EnvVar(name="AWS_EC2_METADATA_DISABLED", value="true"),
    ]


def _ray_stop() -> Lifecycle:
    return Lifecycle(pre_stop=LifecycleHandler(exec=ExecAction(command=["/bin/sh", "-c", "ray stop"])))


def worker_security_context(privileges: str) -> SecurityContext:
    """`ipc-lock`: root, IPC_LOCK added, nothing else. Memory registration for EFA pins pages: host
    memory (libfabric's bounce buffers, NIXL's control buffers) counts against RLIMIT_MEMLOCK, which a
    container inherits from containerd, unless the process holds CAP_IPC_LOCK, which only root keeps;
    GPU memory is pinned by the EFA driver's peer-memory path, which takes no capability. The EFA
    devices (/dev/infiniband/uverbs*) are what the EFA device plugin mounts for the request. No
    privilege escalation: nothing in the image needs setuid. `privileged`: every device of the node."""
    if privileges == "privileged":
        return SecurityContext(privileged=True)
    return SecurityContext(
        run_as_user=0,
        allow_privilege_escalation=False,
        # NET_RAW: raw sockets, which nothing of Ray, vLLM or libfabric opens (EFA goes through verbs).
        capabilities=Capabilities(add=["IPC_LOCK"], drop=["NET_RAW"]),
    )


def serving_namespace_labels() -> dict[str, str]:
    """Pod Security: the GPU workers add IPC_LOCK and mount a hostPath (the node's model cache), both
    beyond baseline, so the serving namespace enforces privileged; warn and audit report everything
    above baseline, so those pods stand out in the audit log."""
    return pod_security_labels("privileged", audit="baseline")


def llm_policy_shipped(settings: Settings, plan: Plan) -> bool:
    """Whether a side scales through jobs/llm_autoscaling.py: Ray imports it where it builds the app,
    which may be the head, so the head mounts the plugins too (only then: its pod stays as it was)."""
    return settings.autoscaling.signal in ("llm", "slo") and plan.ray_autoscaling


def policy_scope(settings: Settings, plan: Plan) -> dict[str, str]:
    """What the LLM-signal policy's queries select besides the Ray cluster: the Ray pods' namespace and
    the `job` labels of the stack's PodMonitors (`<monitor namespace>/<name>`, prometheus-operator's
    promcfg.go), so a series another workload pushes into a shared Prometheus is not read."""
    jobs = sorted(
        f"{m['metadata']['namespace']}/{m['metadata']['name']}"
        for m in pod_monitors(settings, plan.cluster_context)
    )
    return {"namespace": settings.serving.namespace, "jobs": "|".join(jobs)}


def serve_config_of(settings: Settings, plan: Plan) -> ServeConfig:
    serving = settings.serving
    return build_serve_config(
        settings.model,
        serving.application_name,
        plan.kv_path,
        plan.model_cache.uri if plan.model_cache else None,
        settings.autoscaling,
        serving,
        mode=serving.mode,
        policy_scope=policy_scope(settings, plan) if llm_policy_shipped(settings, plan) else None,
        ttft_objective=settings.observability.ttft_objective_seconds,
        pinned=plan.split_workers,
    )


def prefix_router_shipped(settings: Settings, plan: Plan) -> bool:
    """Whether a side routes through jobs/prefix_routing.py: like the policy, Ray imports it where it
    builds the app, so the head mounts the plugins too (only then)."""
    return routes_by_prefix(serve_config_of(settings, plan))


def head_plugins(settings: Settings, plan: Plan) -> bool:
    return llm_policy_shipped(settings, plan) or prefix_router_shipped(settings, plan)


def plugin_files(settings: Settings, plan: Plan) -> dict[str, str]:
    modules = [
        "ray_node_cache",
        *([LLM_POLICY.split(":")[0]] if llm_policy_shipped(settings, plan) else []),
        *([PREFIX_ROUTER.split(":")[0]] if prefix_router_shipped(settings, plan) else []),
    ]
    return {f"{m}.py": (JOBS / f"{m}.py").read_text() for m in modules}


def serve_service_name(rayservice_name: str) -> str:
    """The Service KubeRay creates in front of the serve application (port 8000)."""
    return f"{rayservice_name}-serve-svc"


@dataclass(frozen=True)
class ServingManifests:
    """The serving layer: its namespace, the RayService, and the Hugging Face token for Secret
    `hf-token` (key `token`), which only the Pulumi program creates and nothing renders."""

    namespace: dict[str, Any]
    rayservice: RayServiceManifest
    ready_check: ProgramJob
    """After a serve config change: the Job `pulumi up` waits on until the new config is RUNNING."""
    prepull: dict[str, Any]
    """DaemonSet pulling the Ray image on every GPU node as soon as it joins (manifests/prepull.py)."""
    plugins: dict[str, Any]
    """ConfigMap of the Ray pods' PYTHONPATH (the node cache callback), before the RayService."""
    service_accounts: list[dict[str, Any]]
    """The Ray pods' and the copy Job's, which EKS Pod Identity gives their AWS access."""
    model_copy: ProgramJob | None
    """Before the RayService: the Job copying the model into the S3 cache (None: nothing to copy)."""
    hf_token: SecretStr | None
    decode_heal: DecodeHeal | None = None
    """`serving.selfHeal`: the CronJob restarting a decode replica with a stale NIXL agent, after the
    RayService."""

    @property
    def service_name(self) -> str:
        return serve_service_name(self.rayservice.metadata.name)


def build_serving(settings: Settings, plan: Plan) -> ServingManifests:
    rayservice = build_rayservice(settings, plan)
    return ServingManifests(
        namespace=namespace(settings.serving.namespace, serving_namespace_labels()),
        rayservice=rayservice,
        ready_check=serve_ready_check(settings, rayservice.spec.serve_config_v2, plan.image),
        prepull=prepull_daemon_set(settings, plan),
        plugins={
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": RAY_PLUGINS, "namespace": settings.serving.namespace},
            "data": plugin_files(settings, plan),
        },
        service_accounts=service_accounts(settings),
        model_copy=model_copy_job(
            settings, plan, (HF_TOKEN_SECRET, HF_TOKEN_KEY) if settings.hugging_face_token else None
        ),
        hf_token=settings.hugging_face_token,
        decode_heal=decode_heal(settings, plan.cluster_context, plan.image),
    )


def _head_pod(settings: Settings, plan: Plan) -> PodSpec:
    """The Ray head's pod: on the system nodes, no GPU; the autoscaler's sidecar where Ray autoscales."""
    head = settings.serving.head
    where = placement(settings)
    plugins_on_head = head_plugins(settings, plan)
    image = plan.image

    return PodSpec(
        service_account_name=RAY_SERVICE_ACCOUNT,
        node_selector=where.system_selector,
        tolerations=tolerations_of(where.system_tolerations),
        containers=[
            Container(
                name="ray-head",
                image=image,
                # Every port another pod may reach, pinned (manifests/ray_ports.py). KubeRay points the
                # <name>-serve-svc Service at the one named "serve"; the head's PodMonitor scrapes
                # `metrics` and Ray's autoscaler and dashboard metrics.
                ports=_ports({**ray_ports.container_ports(head=True), **head_metrics_ports(settings)}),
                env=[
                    *_aws_env(settings),
                    *(
                        EnvVar(name=k, value=v)
                        for k, v in (
                            head_dashboard_env(plan.cluster_context) if settings.observability.enabled else {}
                        ).items()
                    ),
                    *([EnvVar(name="PYTHONPATH", value=RAY_PLUGINS_PATH)] if plugins_on_head else []),
                ],
                volume_mounts=[VolumeMount(name="plugins", mount_path=RAY_PLUGINS_PATH)]
                if plugins_on_head
                else None,
                resources=ResourceRequirements(
                    requests={"cpu": head.cpu_request, "memory": head.memory_request},
                    limits={"cpu": head.cpu_limit, "memory": head.memory_limit},
                ),
                # The image's user (root), without what the head never uses.
                security_context=SecurityContext(
                    allow_privilege_escalation=False, capabilities=Capabilities(drop=["NET_RAW"])
                ),
                lifecycle=_ray_stop(),
            )
        ],
        volumes=[Volume(name="plugins", config_map=ConfigMapVolumeSource(name=RAY_PLUGINS))]
        if plugins_on_head
        else None,
        # Only KubeRay's autoscaler (a sidecar here) talks to the Kubernetes API.
        automount_service_account_token=plan.ray_autoscaling,
        # The runtime's default seccomp profile: the head runs no GPU or EFA code.
        security_context=PodSecurityContext(seccomp_profile=SeccompProfile(type="RuntimeDefault")),
    )


def _worker_env(settings: Settings, plan: Plan, side: SidePlan | None = None) -> list[EnvVar]:
    """The GPU workers' environment: the KV transfer's (EFA, NIXL, UCX), the model cache's, the token's.
    `side`: the side whose workers these are, where the sides have node groups of their own."""
    hf_token_secret = HF_TOKEN_SECRET if settings.hugging_face_token else None
    gpu = side.gpu if side else plan.gpu
    env = [
        # libfabric's EFA provider; NIXL's LIBFABRIC backend goes through it.
        EnvVar(name="FI_PROVIDER", value="efa"),
        # vLLM advertises this address to the other side for the NIXL handshake.
        EnvVar(
            name="VLLM_HOST_IP",
            value_from=EnvVarSource(field_ref=ObjectFieldSelector(field_path="status.podIP")),
        ),
        # Qwen3.5's hybrid (Gated DeltaNet) layers need this state layout for NIXL state transfer.
        EnvVar(name="VLLM_SSM_CONV_STATE_LAYOUT", value="DS"),
        # One replica per worker pod, so one fixed NIXL handshake port the network policies allow.
        EnvVar(name="VLLM_NIXL_SIDE_CHANNEL_PORT", value=str(ray_ports.NIXL_SIDE_CHANNEL)),
        EnvVar(name="HF_HOME", value=MODEL_CACHE_PATH),
        EnvVar(name="PYTHONPATH", value=RAY_PLUGINS_PATH),
        *_aws_env(settings),
    ]
    if gpu.gpudirect_rdma:
        # Only P-series GPUs can register GPU memory with the EFA NIC directly; g5/g6/g6e cannot.
        env.append(EnvVar(name="FI_EFA_USE_DEVICE_RDMA", value="1"))
    if "UCX" in plan.kv_path.backends:
        # UCX's tcp transport on ports the worker policy allows (manifests/ray_ports.py), not the kernel's.
        env.append(EnvVar(name="UCX_TCP_PORT_RANGE", value=ray_ports.UCX_TCP.env()))
    if "LIBFABRIC" in plan.kv_path.backends:
        # NIXL (default WARN) then logs the libfabric provider its rails use and whether it has FI_HMEM
        # (src/utils/libfabric/libfabric_rail_manager.cpp, libfabric_rail.cpp at 1.3.1): ops verify's proof.
        env.append(EnvVar(name="NIXL_LOG_LEVEL", value="INFO"))
    if hf_token_secret:
        env.append(
            EnvVar(
                name="HF_TOKEN",
                value_from=EnvVarSource(
                    secret_key_ref=SecretKeySelector(name=hf_token_secret, key=HF_TOKEN_KEY)
                ),
            )
        )
    return env


def _worker_pod(settings: Settings, plan: Plan, side: SidePlan | None = None) -> PodSpec:
    """A GPU worker's pod: its GPUs and EFA interfaces, the shared memory and the node's model cache.
    `side`: a side's worker on its own nodes (None: either side's, on the shared GPU nodes)."""
    worker_size = side.worker if side else plan.worker
    tp = side.tensor_parallel_size if side else settings.model.tensor_parallel_size
    where = placement(settings)
    image = plan.image
    env = _worker_env(settings, plan, side)
    worker_limits = {
        "cpu": worker_size.cpu,
        "memory": worker_size.memory,
        GPU_RESOURCE: str(tp),
        EFA_RESOURCE: str(side.efa_per_worker if side else plan.efa_per_worker),
    }
    tolerations = tolerations_of([where.gpu_toleration]) if where.gpu_tainted else None
    return PodSpec(
        service_account_name=RAY_SERVICE_ACCOUNT,
        termination_grace_period_seconds=settings.autoscaling.graceful_shutdown_seconds
        + TERMINATION_MARGIN_SECONDS,
        # A side on gpuNodes (its own worker group only for its tensor-parallel size) selects them all.
        node_selector=where.side_selector(side.side)
        if side and side.section != "gpuNodes"
        else where.gpu_selector,
        tolerations=tolerations,
        # Workers never call the Kubernetes API (the autoscaler is in the head pod); their AWS access
        # is Pod Identity's own projected token.
        automount_service_account_token=False,
        containers=[
            Container(
                name="ray-worker",
                image=image,
                env=env,
                ports=_ports(ray_ports.container_ports(head=False)),
                # Requests equal limits: Guaranteed QoS. The memory limit is most of the node, so the
                # page cache keeps the checkpoint and a restart loads weights in seconds.
                resources=ResourceRequirements(requests=worker_limits, limits=worker_limits),
                volume_mounts=[
                    VolumeMount(name="dshm", mount_path="/dev/shm"),
                    VolumeMount(name="model-cache", mount_path="/data"),
                    VolumeMount(name="plugins", mount_path=RAY_PLUGINS_PATH),
                ],
                security_context=worker_security_context(settings.serving.worker.privileges),
                lifecycle=_ray_stop(),
            )
        ],
        volumes=[
            Volume(
                name="dshm",
                empty_dir=EmptyDirVolumeSource(
                    medium="Memory", size_limit=side.shm_size if side else plan.shm_size
                ),
            ),
            # On the node's disk, not the pod's: the weights are downloaded once per node, not per pod.
            Volume(
                name="model-cache",
                host_path=HostPathVolumeSource(path=NODE_MODEL_CACHE, type="DirectoryOrCreate"),
            ),
            Volume(name="plugins", config_map=ConfigMapVolumeSource(name=RAY_PLUGINS)),
        ],
    )


def side_worker_group(settings: Settings, plan: Plan, side: SidePlan) -> WorkerGroupSpec:
    """A side's own worker group, on its own GPU nodes (`prefillNodes`, `decodeNodes`): its pods select
    the side's nodes by label, and each advertises one unit of the side's Ray resource per GPU, which
    only that side's engine workers ask for (manifests/serve_app.py `SIDE_RESOURCES`)."""
    tp = side.tensor_parallel_size
    return WorkerGroupSpec(
        group_name=f"{side.side}-workers",
        replicas=side.workers,
        min_replicas=side.workers,
        max_replicas=side.max_workers,
        resources={SIDE_RESOURCES[side.side]: str(tp)},
        ray_start_params={"num-gpus": str(tp), **ray_ports.ray_start_params(head=False)},
        template=PodTemplate(
            metadata=PodMetadata(annotations={SAFE_TO_EVICT: "false"}),
            spec=_worker_pod(settings, plan, side),
        ),
    )


def build_rayservice(settings: Settings, plan: Plan) -> RayServiceManifest:
    serving = settings.serving
    tp = settings.model.tensor_parallel_size
    serve_config = serve_config_of(settings, plan)
    head_pod = _head_pod(settings, plan)
    worker_pod = _worker_pod(settings, plan)

    workers, most = plan.gpu_workers, plan.max_gpu_workers
    autoscaler = requests.RAY_AUTOSCALER
    return RayServiceManifest(
        metadata=ObjectMeta(
            name=serving.name,
            namespace=serving.namespace,
            labels={"app.kubernetes.io/name": serving.name, "app.kubernetes.io/managed-by": "pulumi"},
            annotations=ready_annotations(settings, plan),
        ),
        spec=RayServiceSpec(
            upgrade_strategy=UpgradeStrategy(type=plan.upgrade.kuberay_strategy),
            serve_config_v2=serve_config.to_yaml(),
            ray_cluster_config=RayClusterSpec(
                ray_version=serving.ray_version,
                # Serve asks for replicas, KubeRay's autoscaler adds or removes worker pods for them.
                enable_in_tree_autoscaling=True if plan.ray_autoscaling else None,
                autoscaler_options=AutoscalerOptions(
                    idle_timeout_seconds=RAY_WORKER_IDLE_SECONDS,
                    resources=AutoscalerResources(
                        requests={"cpu": autoscaler.cpu, "memory": autoscaler.memory},
                        limits={"cpu": "500m", "memory": "512Mi"},
                    ),
                )
                if plan.ray_autoscaling
                else None,
                head_group_spec=HeadGroupSpec(
                    ray_start_params={
                        "num-gpus": "0",
                        "dashboard-host": "0.0.0.0",
                        **ray_ports.ray_start_params(head=True),
                    },
                    template=PodTemplate(spec=head_pod),
                ),
                worker_group_specs=[
                    WorkerGroupSpec(
                        group_name="gpu-workers",
                        replicas=workers,
                        min_replicas=workers,
                        max_replicas=most,
                        ray_start_params={"num-gpus": str(tp), **ray_ports.ray_start_params(head=False)},
                        template=PodTemplate(
                            # Cluster Autoscaler never drains a node from under a serving worker; Ray's
                            # autoscaler removes idle workers first, and then the node is empty.
                            metadata=PodMetadata(annotations={SAFE_TO_EVICT: "false"}),
                            spec=worker_pod,
                        ),
                    )
                ]
                if not plan.split_workers
                else [side_worker_group(settings, plan, side) for side in plan.sides],
            ),
        ),
    )
