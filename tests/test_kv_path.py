"""The KV path follows from the hardware (issue 29): NIXL's backend and where the KV buffers live, from
the GPU type's GPUDirect RDMA and the model's layers (planning/kv_path.py), in the serve config, the
fit check, the preview and `ops verify`."""

from __future__ import annotations

import json
from typing import Any

import pytest
import yaml

from config import ConfigError
from config.serving import ModelConfig
from ops.kube import ExecResult
from ops.verify import CHECK_NIXL, VerifyTarget, check_nixl_backend
from planning import plan_stack
from planning.catalog import CATALOG
from planning.kv_path import plan_kv_path, transfer_floor
from tests.fakes.kube import fixture_text, healthy_cluster
from tests.fakes.pulumi import run_stack, stack_settings

RAYSERVICE = "kubernetes:ray.io/v1:RayService"

# An attention-only model the built-in knowledge does not have: its sizes are given.
ATTENTION_ONLY = {
    "id": "llama-8b",
    "source": "meta-llama/Llama-3.1-8B-Instruct",
    "parametersBillions": 8.03,
    "checkpointGib": 15.0,
    "kvCacheBytesPerToken": 131072,
    "maxModelLen": 4096,
}


def model(**keys: Any) -> ModelConfig:
    return ModelConfig.model_validate(keys)


def kv_config(run) -> dict[str, Any]:
    spec = run.one(RAYSERVICE).inputs["spec"]
    (app,) = yaml.safe_load(spec["serveConfigV2"])["applications"]
    sides = [
        app["args"][f"{side}_config"]["engine_kwargs"]["kv_transfer_config"] for side in ("prefill", "decode")
    ]
    assert sides[0] | {"engine_id": "x"} == sides[1] | {"engine_id": "x"}
    return sides[0]


class TestChosenFromTheHardware:
    def test_g6_with_the_hybrid_default_model_goes_ucx_with_gpu_buffers_and_says_tcp(self):
        path, warnings = plan_kv_path(model(), CATALOG["g6.8xlarge"])
        assert (path.backends, path.buffer_device, path.over_efa) == (("UCX",), "cuda", False)
        assert "state layers rule out vLLM's host buffers" in path.reason
        (warning,) = warnings
        assert "goes over TCP (UCX), not EFA" in warning and "p5.48xlarge" in warning

    def test_g6_with_an_attention_only_model_keeps_host_buffers_over_efa(self):
        path, warnings = plan_kv_path(model(**ATTENTION_ONLY), CATALOG["g6.8xlarge"])
        assert (path.backends, path.buffer_device, path.over_efa) == (("LIBFABRIC",), "cpu", True)
        assert warnings == []
        assert "no GPUDirect RDMA, so the cache is copied into host memory" in path.summary()

    @pytest.mark.parametrize("gpu", ["p4d.24xlarge", "p5.48xlarge", "p5en.48xlarge"])
    def test_gpudirect_types_keep_gpu_buffers_over_efa(self, gpu):
        path, warnings = plan_kv_path(model(), CATALOG[gpu])
        assert (path.backends, path.buffer_device, path.over_efa) == (("LIBFABRIC",), "cuda", True)
        assert warnings == []

    @pytest.mark.parametrize("gpu", ["g5.12xlarge", "g6e.12xlarge", "g6.12xlarge"])
    def test_no_gpudirect_type_ever_registers_gpu_memory_with_libfabric(self, gpu):
        for keys in ({}, ATTENTION_ONLY):
            path, _ = plan_kv_path(model(**keys), CATALOG[gpu])
            assert not (path.buffer_device == "cuda" and "LIBFABRIC" in path.backends)


class TestOverrides:
    def test_libfabric_with_gpu_buffers_without_gpudirect_is_refused(self):
        with pytest.raises(
            ConfigError, match=r"model\.nixlBackends LIBFABRIC with GPU buffers needs GPUDirect RDMA"
        ):
            plan_kv_path(model(nixlBackends=["LIBFABRIC"], kvBufferDevice="cuda"), CATALOG["g6.8xlarge"])

    def test_host_buffers_for_a_hybrid_model_are_refused(self):
        with pytest.raises(
            ConfigError, match=r"model\.kvBufferDevice cpu: Qwen/Qwen3\.5-9B has state layers"
        ):
            plan_kv_path(model(kvBufferDevice="cpu"), CATALOG["g6.8xlarge"])

    def test_host_buffers_on_a_gpudirect_type_warn(self):
        path, warnings = plan_kv_path(model(**ATTENTION_ONLY, kvBufferDevice="cpu"), CATALOG["p5.48xlarge"])
        assert path.buffer_device == "cpu"
        assert any("two extra copies" in w for w in warnings)

    def test_ucx_asked_for_is_said_to_go_over_tcp(self):
        path, warnings = plan_kv_path(model(nixlBackends=["UCX"]), CATALOG["p5.48xlarge"])
        assert (path.backends, path.buffer_device) == (("UCX",), "cuda")
        assert any("goes over TCP (UCX)" in w for w in warnings)

    def test_libfabric_asked_for_with_an_attention_only_model_gets_host_buffers(self):
        path, _ = plan_kv_path(model(**ATTENTION_ONLY, nixlBackends=["LIBFABRIC"]), CATALOG["g6.8xlarge"])
        assert path.buffer_device == "cpu"


class TestInTheStack:
    def test_the_g6_dev_stack_serve_config_and_preview(self, dev_stack):
        assert kv_config(dev_stack) == {
            "kv_connector": "NixlConnector",
            "kv_role": "kv_both",
            "engine_id": "prefill",
            "kv_buffer_device": "cuda",
            "kv_connector_extra_config": {"backends": ["UCX"]},
        }
        assert any(
            m.startswith("KV cache path: NIXL UCX over TCP, buffers in GPU memory") for m in dev_stack.infos
        )
        assert any("goes over TCP (UCX), not EFA" in w for w in dev_stack.warnings)

    def test_a_p5_stack_keeps_gpu_buffers_over_efa(self):
        run = run_stack(
            stack="prod",
            overrides={
                "gpuNodes": {"instanceType": "p5.48xlarge", "minSize": 3, "desiredSize": 3, "maxSize": 3},
                "model": {"tensorParallelSize": 8},
            },
        )
        kv = kv_config(run)
        assert (kv["kv_buffer_device"], kv["kv_connector_extra_config"]) == (
            "cuda",
            {"backends": ["LIBFABRIC"]},
        )
        assert any("NIXL LIBFABRIC over EFA, buffers in GPU memory" in m for m in run.infos)
        assert not any("over TCP" in w for w in run.warnings)

    def test_host_buffers_count_in_the_workers_memory(self):
        settings = stack_settings("dev", model=ATTENTION_ONLY)
        plan = plan_stack(settings, stack="dev")
        assert plan.kv_path.buffer_device == "cpu"
        assert plan.fit.host_kv_gib == pytest.approx(plan.fit.kv_pool_gib) and plan.fit.host_kv_gib > 1
        assert f"{plan.fit.host_kv_gib:.1f} GiB of host KV buffers" in plan.fit.summary()
        # a worker too small for page cache + processes + the host copy is refused, saying so
        tight = int(15 + 12 + plan.fit.host_kv_gib - 1)
        with pytest.raises(ConfigError, match=r"GiB of host KV buffers; raise serving\.worker\.memory"):
            plan_stack(
                stack_settings("dev", model=ATTENTION_ONLY, serving={"worker": {"memory": f"{tight}Gi"}}),
                stack="dev",
            )

    def test_the_serve_config_passes_vllms_kv_transfer_fields(self, dev_stack):
        from tests.validators import VLLM_KV_TRANSFER_FIELDS

        assert set(kv_config(dev_stack)) <= VLLM_KV_TRANSFER_FIELDS
        assert json.dumps(kv_config(dev_stack))  # plain data


class TestVerifyExpectsThePlansBackend:
    def test_ucx_passes_where_the_plan_chose_it_and_fails_where_it_did_not(self):
        cluster = healthy_cluster()
        for pod in list(cluster.grep):
            cluster.grep[pod] = ExecResult(fixture_text("grep_ucx.txt"), "", 0)
        ucx = check_nixl_backend(
            cluster, VerifyTarget("inference", "ray-llm", "qwen3.5-9b", kv_backends=("UCX",))
        )
        assert ucx.name == CHECK_NIXL and ucx.passed and "as the plan chose" in ucx.reason
        efa = check_nixl_backend(cluster, VerifyTarget("inference", "ray-llm", "qwen3.5-9b"))
        assert not efa.passed and "NIXL fell back to UCX" in efa.reason

    def test_the_cli_expects_what_the_stacks_plan_chose(self):
        from argparse import Namespace

        from ops.cli import _kv_target

        options = {"kv_probe_mib": 256, "kv_floor": None}
        dev = _kv_target(Namespace(stack="dev", **options), stack_settings("dev"))
        assert (dev["kv_backends"], dev["kv_buffer_device"], dev["kv_over_efa"]) == (("UCX",), "cuda", False)
        assert dev["kv_probe"].backends == ("UCX",) and dev["kv_probe"].memory == "VRAM"
        assert dev["kv_floor"].tcp_gbytes_s == 0.625  # g6.8xlarge: half of one TCP flow's 10 Gbit/s
        bare = _kv_target(Namespace(stack=None, **options), None)
        assert (bare["kv_backends"], bare["kv_buffer_device"], bare["kv_floor"]) == (
            ("LIBFABRIC",),
            "cuda",
            None,
        )


class TestVerifyProvesTheLibfabricPath:
    """NIXL at INFO names the provider its rails use and whether they have FI_HMEM (NIXL 1.3.1)."""

    def run(self, grep: str, device: str = "cuda"):
        cluster = healthy_cluster()
        for pod in list(cluster.grep):
            cluster.grep[pod] = ExecResult(grep, "", 0)
        target = VerifyTarget("inference", "ray-llm", "qwen3.5-9b", kv_buffer_device=device)
        return check_nixl_backend(cluster, target)

    def test_efa_with_hmem_passes_and_shows_the_provider(self):
        result = self.run(fixture_text("grep_libfabric.txt"))
        assert result.passed and "provider efa" in result.reason

    @pytest.mark.parametrize("provider", ["tcp", "sockets", "tcp;ofi_rxm"])
    def test_a_provider_other_than_efa_fails_saying_what_to_check(self, provider):
        result = self.run(f"Backend LIBFABRIC was instantiated\nrails using provider={provider}\n")
        assert not result.passed
        assert f"provider {provider}, not efa" in result.reason and "security group" in result.reason

    def test_gpu_buffers_on_rails_without_hmem_fail(self):
        grep = (
            "Backend LIBFABRIC was instantiated\nrails using provider=efa\n"
            "Using provider without FI_HMEM support\n"
        )
        result = self.run(grep)
        assert not result.passed and "no FI_HMEM, so GPU buffers cannot be registered" in result.reason
        assert self.run(grep, device="cpu").passed  # host buffers need no HMEM

    def test_no_provider_logged_fails_naming_the_log_level(self):
        result = self.run("Backend LIBFABRIC was instantiated\n")
        assert not result.passed and "NIXL_LOG_LEVEL=INFO" in result.reason

    def test_the_workers_log_at_info_only_with_libfabric(self, dev_stack):
        def worker_env(run):
            spec = run.one(RAYSERVICE).inputs["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]
            return {e["name"]: e.get("value") for e in spec["template"]["spec"]["containers"][0]["env"]}

        assert "NIXL_LOG_LEVEL" not in worker_env(dev_stack)  # UCX on g6 + Qwen3.5
        run = run_stack(stack="dev", overrides={"model": ATTENTION_ONLY})
        assert worker_env(run)["NIXL_LOG_LEVEL"] == "INFO"


class TestTheTransferFloor:
    """What `ops verify` holds a measured KV transfer to: half of one GPU's share of the node's network,
    over EFA; over TCP at most half of one flow's 10 Gbit/s (planning/kv_path.py `transfer_floor`)."""

    @pytest.mark.parametrize(
        ("gpu", "efa_per_worker", "tp", "efa_gbytes_s"),
        [
            ("g6.8xlarge", 1, 1, 1.562),  # 25 Gbit/s, one EFA
            ("g6e.48xlarge", 1, 2, 6.25),  # 400 Gbit/s over 4 EFA: one of them
            ("p4d.24xlarge", 4, 8, 6.25),  # 8 GPUs share 4 EFA: one per GPU at least
            ("p5.48xlarge", 32, 8, 25.0),  # 32 EFA over 8 GPUs: 4 per GPU, 400 Gbit/s
            ("p5.48xlarge", 4, 1, 25.0),
        ],
    )
    def test_over_efa_it_is_half_of_one_gpus_share(self, gpu, efa_per_worker, tp, efa_gbytes_s):
        floor = transfer_floor(CATALOG[gpu], efa_per_worker, tp)
        assert floor.on("efa") == pytest.approx(efa_gbytes_s, abs=0.001)
        assert floor.on("tcp") == pytest.approx(min(efa_gbytes_s, 0.625), abs=0.001)
        assert f"{CATALOG[gpu].network_gbps:g} Gbit/s" in floor.basis

    def test_a_type_whose_bandwidth_nobody_states_has_no_floor(self):
        from dataclasses import replace

        floor = transfer_floor(replace(CATALOG["g6.8xlarge"], network_gbps=0.0), 1, 1)
        assert (floor.on("efa"), floor.on("tcp")) == (None, None)
        assert "not known" in floor.summary()

    def test_the_preview_states_the_floor_from_ec2s_bandwidth(self, dev_stack):
        (line,) = [m for m in dev_stack.infos if m.startswith("KV transfer floor for `ops verify`")]
        assert "1.56 GB/s over EFA, 0.62 GB/s over TCP" in line and "g6.8xlarge" in line

    def test_ec2s_bandwidth_wins_and_a_catalog_that_disagrees_warns(self):
        from planning.catalog import Ec2InstanceType, from_ec2

        def g6(network_gbps: float) -> Ec2InstanceType:
            return Ec2InstanceType(
                "g6.8xlarge", 32, 131072, 1, "L4", 22888, efa_max_interfaces=1, network_gbps=network_gbps
            )

        described, warnings = from_ec2(g6(50.0), CATALOG["g6.8xlarge"])
        assert described.network_gbps == 50.0
        assert any("network_gbps 25, EC2 says 50.0" in w for w in warnings)
        same, quiet = from_ec2(g6(25.0), CATALOG["g6.8xlarge"])
        assert same.network_gbps == 25.0 and quiet == []
