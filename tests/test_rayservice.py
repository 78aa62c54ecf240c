"""The serving layer: the RayService the dev stack creates carries every fact of the seed (SPEC.md),
passes KubeRay 1.7.0's CRD schema, Kubernetes' Pod schema, Ray 2.58's Serve and Serve LLM schemas and
build_pd_openai_app's rules, and objects broken on purpose fail those same checks, so a pass means
something. The upgrade path is explicit: it never waits for GPUs that do not exist."""

from __future__ import annotations

import copy
from typing import Any

import jsonpath_rfc9535
import pytest
import yaml
from pydantic import ValidationError

from config.autoscaling import AutoscalingConfig
from config.serving import ModelConfig, ServingConfig
from manifests.rayservice import RayServiceManifest, build_rayservice
from manifests.serve_app import PREFIX_ROUTER, ServeConfig, build_serve_config
from planning import plan_stack
from planning.kv_path import KvPath
from planning.upgrades import UpgradePlan
from tests.fakes.kube import fixture_json
from tests.fakes.pulumi import ROOT, STACKS, StackRun, minimal_config, run_stack, stack_settings
from tests.validators import aggregated_rule_errors, crd_errors, pd_rule_errors, pod_errors, serve_errors
from world.offline import ACCOUNT_ID

RAYSERVICE = "kubernetes:ray.io/v1:RayService"
RECORDED_STATUS = fixture_json("rayservice.json")
"""A healthy RayService as KubeRay 1.7 reports it (tests/fixtures/ops)."""


def status_selected(entry: str, obj: dict[str, Any]) -> tuple[str, str]:
    """(what a `jsonpath={path}=value` waitFor entry selects in `obj`, the value it waits for), with
    the path read by an RFC 9535 parser, as pulumi-kubernetes reads it."""
    assert entry.startswith("jsonpath={"), entry
    path, _, expected = entry.removeprefix("jsonpath={").rpartition("}=")
    found = [m.value for m in jsonpath_rfc9535.finditer(f"${path}", obj)]
    assert len(found) == 1, (path, found)
    return str(found[0]), expected


def registered(run: StackRun) -> dict[str, Any]:
    reg = run.one(RAYSERVICE)
    return {k: reg.inputs[k] for k in ("apiVersion", "kind", "metadata", "spec")}


def built(**sections: dict[str, Any]) -> dict[str, Any]:
    """The dev stack file's RayService with some sections' keys overridden, as build_rayservice makes
    it for the mocked account: what the program registers (test_the_program_registers_what_built_says)."""
    settings = stack_settings("dev", **sections)
    made = build_rayservice(settings, plan_stack(settings, stack="dev", account_id=ACCOUNT_ID)).to_dict()
    return {k: made[k] for k in ("apiVersion", "kind", "metadata", "spec")}


def upgrade_of(**sections: dict[str, Any]) -> UpgradePlan:
    """How the plan rolls out a Ray cluster change for the dev stack file with some sections overridden
    (the RayService's replaceOnChanges and deleteBeforeReplace follow it: components/rayservice.py)."""
    return plan_stack(stack_settings("dev", **sections), stack="dev", account_id=ACCOUNT_ID).upgrade


def test_the_program_registers_what_built_says(dev_stack: StackRun):
    assert registered(dev_stack) == built()


def serve_config(obj: dict[str, Any]) -> dict[str, Any]:
    return yaml.safe_load(obj["spec"]["serveConfigV2"])


def head_pod(obj: dict[str, Any]) -> dict[str, Any]:
    return obj["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]


def worker_groups(obj: dict[str, Any]) -> list[dict[str, Any]]:
    return obj["spec"]["rayClusterConfig"]["workerGroupSpecs"]


@pytest.fixture(scope="module")
def rayservice(dev_stack: StackRun) -> dict[str, Any]:
    return registered(dev_stack)


class TestSeedFacts:
    def test_identity(self, rayservice):
        assert (rayservice["apiVersion"], rayservice["kind"]) == ("ray.io/v1", "RayService")
        assert rayservice["metadata"]["name"] == "ray-llm"
        assert rayservice["metadata"]["namespace"] == "inference"
        assert rayservice["spec"]["rayClusterConfig"]["rayVersion"] == "2.58.0"

    def test_serve_application(self, rayservice):
        (app,) = serve_config(rayservice)["applications"]
        assert app["name"] == "qwen"
        assert app["import_path"] == "ray.serve.llm:build_pd_openai_app"
        assert app["route_prefix"] == "/"
        assert set(app["args"]) == {"prefill_config", "decode_config"}
        for side in ("prefill", "decode"):
            config = app["args"][f"{side}_config"]
            assert config["model_loading_config"] == {
                "model_id": "qwen3.5-9b",
                # the stack's regional S3 copy of Qwen/Qwen3.5-9B (planning/model_cache.py)
                "model_source": {
                    "bucket_uri": "s3://ray-llm-multinode-models-895680ba-123456789012-sa-east-1/models/Qwen/Qwen3.5-9B/main"
                },
            }
            assert config["engine_kwargs"] == {
                "max_model_len": 4096,
                "dtype": "bfloat16",
                "gpu_memory_utilization": 0.9,
                "enforce_eager": True,
                # the seed's: LIBFABRIC with GPU buffers, emulated reads on g6 (planning/kv_path.py)
                "kv_transfer_config": {
                    "kv_connector": "NixlConnector",
                    "kv_role": "kv_both",
                    "engine_id": side,
                    "kv_buffer_device": "cuda",
                    # vLLM's lease (30 s) and its failure policy left as they are: a hybrid model
                    "kv_connector_extra_config": {"backends": ["LIBFABRIC"]},
                },
            }
            assert config["deployment_config"]["num_replicas"] == 1
            assert "autoscaling_config" not in config["deployment_config"]  # min = max: fixed
            # one replica a side: nothing to choose, so Serve's default router, as before routing keys
            assert "request_router_config" not in config["deployment_config"]

    def test_head_is_cpu_only_on_the_system_node(self, rayservice):
        head = rayservice["spec"]["rayClusterConfig"]["headGroupSpec"]
        assert head["rayStartParams"].items() >= {"num-gpus": "0", "dashboard-host": "0.0.0.0"}.items()
        pod = head_pod(rayservice)
        assert pod["nodeSelector"] == {"role": "system"}
        (container,) = pod["containers"]
        # Ray's own (manifests/ray_ports.py; test_network_policy checks them), 44227: the dashboard's
        # metrics; the autoscaler's (44217) only where it runs (test_autoscaling)
        assert sorted(p["containerPort"] for p in container["ports"]) == [
            *(6379, 6380, 6381, 6382, 6383, 8000, 8080, 8265, 10001, 44227, 52365)
        ]
        assert {"name": "serve", "containerPort": 8000} in container["ports"]
        assert container["resources"] == {
            "requests": {"cpu": "2", "memory": "8Gi"},
            "limits": {"cpu": "3", "memory": "12Gi"},
        }
        assert "nvidia.com/gpu" not in container["resources"]["limits"]
        # the image's user, less NET_RAW and escalation; only the GPU workers add anything
        assert container["securityContext"] == {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["NET_RAW"]},
        }
        assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}

    def test_gpu_workers(self, rayservice):
        (group,) = worker_groups(rayservice)
        assert group["replicas"] == group["minReplicas"] == group["maxReplicas"] == 2
        assert group["rayStartParams"]["num-gpus"] == "1"
        pod = group["template"]["spec"]
        assert pod["nodeSelector"] == {"role": "gpu-worker"}
        assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
        (container,) = pod["containers"]
        assert container["image"] == "763104351884.dkr.ecr.sa-east-1.amazonaws.com/ray:serve-llm-cuda-v1.0"
        # not privileged: root with IPC_LOCK (test_least_privilege)
        assert container["securityContext"] == {
            "runAsUser": 0,
            "allowPrivilegeEscalation": False,
            "capabilities": {"add": ["IPC_LOCK"], "drop": ["NET_RAW"]},
        }
        limits = container["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == "1" and limits["vpc.amazonaws.com/efa"] == "1"
        assert container["resources"]["requests"] == limits
        # sized from g6.8xlarge (32 vCPU, 128 GiB), leaving room for the node's daemons
        assert (limits["cpu"], limits["memory"]) == ("30", "113Gi")
        env = {e["name"]: e for e in container["env"]}
        assert env["FI_PROVIDER"]["value"] == "efa"
        assert env["VLLM_HOST_IP"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
        assert env["VLLM_SSM_CONV_STATE_LAYOUT"]["value"] == "DS"
        assert env["HF_HOME"]["value"].startswith("/data/")
        assert "FI_EFA_USE_DEVICE_RDMA" not in env  # g6 has EFA but no GPUDirect RDMA
        assert "HF_TOKEN" not in env
        volumes = {v["name"]: v for v in pod["volumes"]}
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert volumes[mounts["/dev/shm"]]["emptyDir"]["medium"] == "Memory"
        assert container["lifecycle"]["preStop"]["exec"]["command"][-1] == "ray stop"

    def test_up_waits_until_the_application_serves(self, rayservice):
        wait_for = yaml.safe_load(rayservice["metadata"]["annotations"]["pulumi.com/waitFor"])
        assert wait_for[0] == "condition=Ready"
        assert [status_selected(e, RECORDED_STATUS) for e in wait_for[1:]] == [("RUNNING", "RUNNING")]

    @pytest.mark.parametrize("app", ["qwen-pd", "llm2", "a"])
    def test_any_application_name_is_awaited(self, app: str):
        """pulumi-kubernetes parses waitFor's path per RFC 9535 (since 4.24): `.qwen-pd` is a syntax
        error, and a hard-coded name would wait for an application that does not exist."""
        # The manifest as the program applies it (tests/test_ops_render.py holds the two the same).
        settings = stack_settings(serving={"applicationName": app})
        rayservice = build_rayservice(settings, plan_stack(settings, stack="dev")).to_dict()
        entries = yaml.safe_load(rayservice["metadata"]["annotations"]["pulumi.com/waitFor"])[1:]
        status = {"activeServiceStatus": {"applicationStatuses": {app: {"status": "RUNNING"}}}}
        assert [status_selected(e, {"status": status}) for e in entries] == [("RUNNING", "RUNNING")]

    def test_up_waits_as_long_as_configured(self):
        run = run_stack(stack="prod")
        assert registered(run)["metadata"]["annotations"]["pulumi.com/timeoutSeconds"] == str(60 * 60)

    def test_deprecated_thresholds_are_not_used(self, rayservice):
        spec = rayservice["spec"]
        assert "serviceUnhealthySecondThreshold" not in spec
        assert "deploymentUnhealthySecondThreshold" not in spec


class TestUpstreamSchemas:
    def test_rayservice_passes_the_kuberay_crd(self, rayservice):
        assert crd_errors(rayservice) == []

    def test_pod_templates_pass_the_core_pod_schema(self, rayservice):
        assert pod_errors(head_pod(rayservice)) == []
        for group in worker_groups(rayservice):
            assert pod_errors(group["template"]["spec"]) == []

    def test_serve_config_passes_rays_own_schemas(self, rayservice):
        assert serve_errors(serve_config(rayservice)) == []

    def test_build_pd_openai_app_rules_hold(self, rayservice):
        assert pd_rule_errors(serve_config(rayservice)) == []

    @pytest.mark.parametrize("stack", STACKS)
    def test_every_stack_passes(self, stack):
        obj = registered(run_stack(stack=stack))
        assert crd_errors(obj) == []
        assert pod_errors(worker_groups(obj)[0]["template"]["spec"]) == []
        # each mode's builder's rules (tests/test_serving_mode.py has the aggregated stack's own tests)
        rules = (
            aggregated_rule_errors if stack_settings(stack).serving.mode == "aggregated" else pd_rule_errors
        )
        assert serve_errors(serve_config(obj)) == [] and rules(serve_config(obj)) == []


class TestBrokenObjectsFail:
    """Each check must be able to fail, or its pass means nothing."""

    def test_unknown_field_fails_the_crd_and_the_pod_schema(self, rayservice):
        broken = copy.deepcopy(rayservice)
        head_pod(broken)["containers"][0]["imagePullPolisy"] = "Always"
        assert any("imagePullPolisy" in e for e in crd_errors(broken))
        assert pod_errors(head_pod(broken))
        broken = copy.deepcopy(rayservice)
        broken["spec"]["rayClusterConfig"]["rayVersio"] = "2.58.0"
        assert any("rayVersio" in e for e in crd_errors(broken))

    def test_bad_quantity_fails(self, rayservice):
        broken = copy.deepcopy(rayservice)
        worker_groups(broken)[0]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"] = (
            "113GB!"
        )
        assert any("113GB!" in e for e in crd_errors(broken))
        # Kubernetes' Pod schema leaves quantities unchecked; our typed model does not.
        with pytest.raises(ValidationError, match="not a Kubernetes quantity"):
            RayServiceManifest.model_validate(broken)

    def test_misspelled_upgrade_strategy_fails_the_crd(self, rayservice):
        broken = copy.deepcopy(rayservice)
        broken["spec"]["upgradeStrategy"] = {"typ": "None"}
        assert any("typ" in e for e in crd_errors(broken))
        # The CRD types `type` as a plain string (KubeRay checks the value at reconcile time); ours
        # allows only the two values the stack uses.
        broken["spec"]["upgradeStrategy"] = {"type": "Rolling"}
        with pytest.raises(ValidationError, match="upgradeStrategy"):
            RayServiceManifest.model_validate(broken)

    def test_missing_backend_fails(self, rayservice):
        config = serve_config(rayservice)
        kv = config["applications"][0]["args"]["decode_config"]["engine_kwargs"]["kv_transfer_config"]
        kv["kv_connector_extra_config"]["backends"] = []
        assert any("are not LIBFABRIC and/or UCX" in e for e in pd_rule_errors(config))
        with pytest.raises(ValidationError):
            ServeConfig.model_validate(config)
        del kv["kv_connector_extra_config"]
        assert pd_rule_errors(config)

    def test_a_kv_field_vllm_does_not_have_and_a_bad_buffer_device_fail(self, rayservice):
        config = serve_config(rayservice)
        kv = config["applications"][0]["args"]["prefill_config"]["engine_kwargs"]["kv_transfer_config"]
        kv["kv_buffer_device"] = "gpu"
        kv["kv_buffer"] = "cpu"
        kv["kv_load_failure_policy"] = "retry"
        errors = pd_rule_errors(config)
        assert any("kv_load_failure_policy 'retry' is not recompute or fail" in e for e in errors)
        assert any("['kv_buffer'] are not vLLM 0.26 KVTransferConfig fields" in e for e in errors)
        assert any("kv_buffer_device 'gpu' is not cuda or cpu" in e for e in errors)

    def test_different_models_fail(self, rayservice):
        config = serve_config(rayservice)
        args = config["applications"][0]["args"]
        args["decode_config"]["model_loading_config"]["model_id"] = "other"
        assert any("model id mismatch" in e for e in pd_rule_errors(config))
        with pytest.raises(ValidationError, match="same model_id"):
            ServeConfig.model_validate(config)

    def test_missing_kv_transfer_config_fails(self, rayservice):
        config = serve_config(rayservice)
        del config["applications"][0]["args"]["prefill_config"]["engine_kwargs"]["kv_transfer_config"]
        assert any("kv_transfer_config is required" in e for e in pd_rule_errors(config))

    def test_unknown_pd_arg_fails(self, rayservice):
        config = serve_config(rayservice)
        config["applications"][0]["args"]["router_config"] = {}
        assert any("not PDServingArgs fields" in e for e in pd_rule_errors(config))

    def test_rays_schemas_reject_what_ray_would(self, rayservice):
        config = serve_config(rayservice)
        config["applications"][0]["args"]["prefill_config"]["deployment_config"]["num_replicas"] = -1
        assert any("prefill_config" in e for e in serve_errors(config))
        duplicate = serve_config(rayservice)
        duplicate["applications"].append(copy.deepcopy(duplicate["applications"][0]))
        assert any("ServeDeploySchema" in e for e in serve_errors(duplicate))

    def test_typed_model_refuses_unknown_serve_keys(self, rayservice):
        config = serve_config(rayservice)
        config["applications"][0]["args"]["prefill_config"]["deployment_confg"] = {}
        with pytest.raises(ValidationError, match="deployment_confg"):
            ServeConfig.model_validate(config)


class TestServingVariants:
    def test_more_decode_replicas_more_workers(self):
        obj = built(
            model={"decodeReplicas": 3, "extraEngineKwargs": {"enable_prefix_caching": True}},
            gpuNodes={"desiredSize": 4, "maxSize": 4},
            serving={"prefixRouter": {"imbalancedThreshold": 8}},
        )
        assert worker_groups(obj)[0]["replicas"] == 4
        args = serve_config(obj)["applications"][0]["args"]
        assert args["prefill_config"]["deployment_config"]["num_replicas"] == 1
        assert args["decode_config"]["deployment_config"]["num_replicas"] == 3
        # three decode replicas to choose from, and a prefix cache opted into: prefix affinity, with its
        # prefix tree kept bounded
        assert args["decode_config"]["deployment_config"]["request_router_config"] == {
            "request_router_class": "prefix_routing:ResilientPrefixRouter",
            "request_router_kwargs": {
                "imbalanced_threshold": 8,
                "match_rate_threshold": 0.1,
                "do_eviction": True,
                "eviction_threshold_chars": 400000,
                "eviction_target_chars": 360000,
                "eviction_interval_secs": 10,
            },
        }
        assert "request_router_config" not in args["prefill_config"]["deployment_config"]
        assert crd_errors(obj) == [] and serve_errors(serve_config(obj)) == []
        assert pd_rule_errors(serve_config(obj)) == []

    def test_another_model_and_tensor_parallelism(self):
        obj = built(
            gpuNodes={"instanceType": "g6e.12xlarge", "acceptIdleGpus": True},
            model={
                "id": "qwen3-32b",
                "source": "Qwen/Qwen3-32B",
                "parametersBillions": 32.8,
                "kvCacheBytesPerToken": 262144,
                "tensorParallelSize": 2,
                "extraEngineKwargs": {"trust_remote_code": True},
            },
        )
        pod = worker_groups(obj)[0]["template"]["spec"]
        assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "2"
        assert worker_groups(obj)[0]["rayStartParams"]["num-gpus"] == "2"
        engine = serve_config(obj)["applications"][0]["args"]["decode_config"]["engine_kwargs"]
        assert engine["tensor_parallel_size"] == 2 and engine["trust_remote_code"] is True
        assert serve_errors(serve_config(obj)) == [] and pd_rule_errors(serve_config(obj)) == []

    def test_gpudirect_rdma_only_where_the_hardware_has_it(self):
        run = run_stack(
            overrides={"gpuNodes": {"instanceType": "p5.48xlarge", "desiredSize": 1, "minSize": 1}},
            config=minimal_config("us-east-1"),
        )
        env = {
            e["name"]: e.get("value")
            for e in worker_groups(registered(run))[0]["template"]["spec"]["containers"][0]["env"]
        }
        assert env["FI_EFA_USE_DEVICE_RDMA"] == "1"

    def test_image_override(self):
        image = "public.ecr.aws/deep-learning-containers/ray:serve-llm-cuda-v1.0"
        obj = built(serving={"image": image})
        assert {c["image"] for c in [head_pod(obj)["containers"][0]]} == {image}


class TestModelCache:
    def test_weights_live_on_the_node_and_outlive_the_worker_pods(self, rayservice):
        """A Ray cluster change replaces every worker pod; the weights stay on the node's disk."""
        pod = worker_groups(rayservice)[0]["template"]["spec"]
        (container,) = pod["containers"]
        env = {e["name"]: e.get("value") for e in container["env"]}
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        (cache,) = [v for v in pod["volumes"] if v["name"] == "model-cache"]
        assert cache == {
            "name": "model-cache",
            "hostPath": {"path": "/var/lib/ray-llm/model-cache", "type": "DirectoryOrCreate"},
        }
        assert env["HF_HOME"].startswith(mounts["model-cache"] + "/")


class TestUpgradePath:
    """KubeRay's default upgrade starts a second Ray cluster for any rayClusterConfig change; with as
    many GPU nodes as workers it never schedules. The stack picks the path from the capacity."""

    def test_exact_capacity_recreates_instead_of_waiting_for_gpus(self, dev_stack: StackRun):
        reg = dev_stack.one(RAYSERVICE)
        assert reg.inputs["spec"]["upgradeStrategy"] == {"type": "None"}
        assert reg.replace_on_changes == ["spec.rayClusterConfig"]
        assert reg.delete_before_replace is True

    def test_serve_config_changes_stay_in_place(self, dev_stack: StackRun):
        reg = dev_stack.one(RAYSERVICE)
        assert not any(path.startswith("spec.serveConfigV2") for path in reg.replace_on_changes)
        assert "spec" not in reg.replace_on_changes

    def test_spare_capacity_uses_zero_downtime_upgrades(self):
        run = run_stack(
            overrides={"gpuNodes": {"desiredSize": 4, "maxSize": 4}, "systemNodes": {"desiredSize": 2}}
        )
        reg = run.one(RAYSERVICE)
        assert reg.inputs["spec"]["upgradeStrategy"] == {"type": "NewCluster"}
        assert reg.replace_on_changes == []
        assert reg.delete_before_replace is False

    def test_one_spare_gpu_node_is_not_room_for_a_second_cluster(self):
        """A second Ray cluster needs as many GPU workers as the first: 3 nodes for 2 + 2 workers is short."""
        obj = built(gpuNodes={"desiredSize": 3, "maxSize": 3}, systemNodes={"desiredSize": 2})
        assert obj["spec"]["upgradeStrategy"] == {"type": "None"}

    def test_spare_gpus_without_room_for_a_second_head_still_recreate(self):
        """A second Ray cluster also needs a second head (2 CPU requested): one m7i.xlarge cannot
        host two, so the upgrade would wait forever for the head instead of the GPUs."""
        sections = {
            "gpuNodes": {"desiredSize": 4, "maxSize": 4},
            "systemNodes": {"instanceType": "m7i.xlarge"},
            "observability": {"enabled": False},
        }
        assert built(**sections)["spec"]["upgradeStrategy"] == {"type": "None"}
        assert upgrade_of(**sections).replace_on_changes == ["spec.rayClusterConfig"]

    def test_a_larger_system_node_hosts_both_heads(self):
        obj = built(gpuNodes={"desiredSize": 4, "maxSize": 4}, systemNodes={"instanceType": "m7i.2xlarge"})
        assert obj["spec"]["upgradeStrategy"] == {"type": "NewCluster"}

    def test_recreate_can_be_forced(self):
        sections = {"gpuNodes": {"desiredSize": 4, "maxSize": 4}, "serving": {"upgradeStrategy": "recreate"}}
        assert built(**sections)["spec"]["upgradeStrategy"] == {"type": "None"}
        assert upgrade_of(**sections).replace_on_changes == ["spec.rayClusterConfig"]


KV_PATH = KvPath(backends=("LIBFABRIC",), buffer_device="cuda", mechanism="emulated", reason="test")


PREFIX_CACHED = {"extra_engine_kwargs": {"enable_prefix_caching": True}}
"""The default (hybrid) model opted into vLLM's prefix cache."""


def routed_sides(
    serving: dict[str, Any], autoscaling: dict[str, Any] | None = None, model: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Each side's deployment_config for 2 prefill and 1 decode replica under these settings."""
    config = build_serve_config(
        ModelConfig(prefill_replicas=2, **(PREFIX_CACHED if model is None else model)),  # type: ignore[call-arg]
        "qwen",
        KV_PATH,
        scaling=AutoscalingConfig.model_validate(autoscaling or {}),
        serving=ServingConfig.model_validate(serving),
    ).to_dict()
    args = config["applications"][0]["args"]
    return {side: args[f"{side}_config"]["deployment_config"] for side in ("prefill", "decode")}


class TestRouting:
    def test_prefix_affinity_where_a_side_has_a_choice(self):
        sides = routed_sides({})
        assert sides["prefill"]["request_router_config"]["request_router_class"] == PREFIX_ROUTER
        assert "request_router_config" not in sides["decode"]

    def test_a_side_that_may_scale_out_gets_it_too(self):
        sides = routed_sides({}, {"decode": {"maxReplicas": 3}})
        assert sides["decode"]["autoscaling_config"]["min_replicas"] == 1
        assert sides["decode"]["request_router_config"]["request_router_class"] == PREFIX_ROUTER

    def test_only_where_the_engine_caches_prefixes(self):
        """vLLM 0.26 caches prefixes by default only for an attention-only model; the default Qwen3.5 is
        hybrid, so without an opt-in no side routes by prefix, and switched off, none does either."""
        assert all("request_router_config" not in side for side in routed_sides({}, model={}).values())
        attention_only = routed_sides({}, model={"hybrid_layers": False})
        assert attention_only["prefill"]["request_router_config"]["request_router_class"] == PREFIX_ROUTER
        off = {"extra_engine_kwargs": {"enable_prefix_caching": False}, "hybrid_layers": False}
        assert all("request_router_config" not in side for side in routed_sides({}, model=off).values())

    def test_the_router_ships_to_the_ray_pods_and_keeps_its_tree_on_the_head(self):
        """The rendered class is jobs/prefix_routing.py's, in the plugins ConfigMap and on the head's
        PYTHONPATH (where Ray builds the app); its tree goes where Serve keeps its controller: the head
        node, no CPU, so no GPU worker is held by it. tests/live/test_prefix_router.py kills the tree."""
        from jobs.prefix_routing import TREE_OPTIONS

        run = run_stack(
            overrides={
                "model": {"decodeReplicas": 2, "extraEngineKwargs": {"enable_prefix_caching": True}},
                "gpuNodes": {"desiredSize": 3, "maxSize": 3},
            }
        )
        plugins = run.one("kubernetes:core/v1:ConfigMap", "ray-llm-plugins").inputs["data"]
        assert plugins["prefix_routing.py"] == (ROOT / "jobs" / "prefix_routing.py").read_text()
        head = registered(run)["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]
        (container,) = head["containers"]
        assert {"name": "PYTHONPATH", "value": "/opt/ray-llm-eks"} in container["env"]
        assert {"name": "plugins", "mountPath": "/opt/ray-llm-eks"} in container["volumeMounts"]
        assert pod_errors(head) == []
        options = TREE_OPTIONS
        assert options["num_cpus"] == 0 and options["resources"] == {"node:__internal_head__": 0.001}
        assert options["lifetime"] == "detached" and "max_restarts" not in options
        # dev (1 + 1) routes nothing by prefix: its plugins and head stay as they were
        dev = run_stack()
        assert set(dev.one("kubernetes:core/v1:ConfigMap", "ray-llm-plugins").inputs["data"]) == {
            "ray_node_cache.py"
        }

    def test_power_of_two_is_serves_default(self):
        sides = routed_sides({"requestRouter": "power-of-two"}, {"decode": {"maxReplicas": 3}})
        assert all("request_router_config" not in side for side in sides.values())

    def test_kv_aware_is_refused_naming_the_key(self):
        with pytest.raises(ValidationError, match=r"serving.requestRouter: kv-aware .* ai-dynamo"):
            ServingConfig.model_validate({"requestRouter": "kv-aware"})

    def test_eviction_target_above_threshold_is_refused(self):
        with pytest.raises(ValidationError, match="evictionTargetChars 500000 is above"):
            ServingConfig.model_validate({"prefixRouter": {"evictionTargetChars": 500000}})

    def test_preview_says_why_a_side_keeps_power_of_two(self):
        from config import load_settings
        from planning import plan_stack

        model = {"id": "m", "source": "org/m", "parametersBillions": 8, "kvCacheBytesPerToken": 131072}

        def warning(model_changes: dict[str, Any], **sections: Any) -> str:
            nodes = {"gpuNodes": {"maxSize": 3}}
            config = minimal_config("us-east-1", model={**model, **model_changes}, **nodes, **sections)
            warnings = plan_stack(load_settings(config), stack="t").warnings
            return " ".join(w for w in warnings if "serving.requestRouter prefix" in w)

        scaled = {"decode": {"maxReplicas": 2}}
        off = {"extraEngineKwargs": {"enable_prefix_caching": False}}
        said = warning(off, autoscaling=scaled)
        assert "enable_prefix_caching is false" in said and "decode keeps Serve's power-of-two" in said
        assert not warning({}, autoscaling=scaled)  # attention only: the cache is on (vLLM's default)
        hybrid = warning({"hybridLayers": True}, autoscaling=scaled)
        assert "hybrid model" in hybrid and "enable_prefix_caching: true" in hybrid
        assert not warning({"hybridLayers": True, **{"extraEngineKwargs": {"enable_prefix_caching": True}}})
        assert not warning(off)  # 1 + 1: no side routes
        assert not warning(off, autoscaling=scaled, serving={"requestRouter": "power-of-two"})

    def test_rays_checks_catch_a_wrong_router(self, rayservice):
        config = serve_config(rayservice)
        deployment = config["applications"][0]["args"]["decode_config"]["deployment_config"]
        deployment["request_router_config"] = {
            "request_router_class": PREFIX_ROUTER,
            "request_router_kwargs": {"imbalance_threshold": 8},
        }
        assert any(
            "['imbalance_threshold'] are not ResilientPrefixRouter" in e for e in pd_rule_errors(config)
        )
        deployment["request_router_config"]["request_router_class"] = PREFIX_ROUTER.replace("Prefix", "Prefx")
        assert any("decode_config" in e for e in serve_errors(config))
