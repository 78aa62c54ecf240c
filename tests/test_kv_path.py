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
from manifests.rayservice import build_rayservice
from ops.kube import ExecResult
from ops.verify import CHECK_NIXL, VerifyTarget, check_nixl_backend
from planning import plan_stack
from planning.capacity import KNOWN_MODELS
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
    return kv_config_in(run.one(RAYSERVICE).inputs["spec"]["serveConfigV2"])


def kv_config_in(serve_config_v2: str) -> dict[str, Any]:
    (app,) = yaml.safe_load(serve_config_v2)["applications"]
    sides = [
        app["args"][f"{side}_config"]["engine_kwargs"]["kv_transfer_config"] for side in ("prefill", "decode")
    ]
    assert sides[0] | {"engine_id": "x"} == sides[1] | {"engine_id": "x"}
    return sides[0]


class TestChosenFromTheHardware:
    def test_g6_with_the_hybrid_default_model_runs_the_seeds_path_by_emulated_reads(self):
        """The seed's settings: LIBFABRIC with GPU buffers over EFA, without GPUDirect RDMA."""
        path, warnings = plan_kv_path(model(), CATALOG["g6.8xlarge"])
        assert (path.backends, path.buffer_device, path.mechanism) == (("LIBFABRIC",), "cuda", "emulated")
        assert path.over_efa and warnings == []
        assert "by EFA emulated reads through host bounce buffers" in path.summary()
        assert "state layers rule out vLLM's host buffers" in path.reason

    def test_g6_with_an_attention_only_model_keeps_host_buffers_over_efa(self):
        path, warnings = plan_kv_path(model(**ATTENTION_ONLY), CATALOG["g6.8xlarge"])
        assert (path.backends, path.buffer_device, path.mechanism) == (("LIBFABRIC",), "cpu", "host")
        assert warnings == []
        assert "by host buffers registered on EFA" in path.summary()

    @pytest.mark.parametrize("gpu", ["p4d.24xlarge", "p5.48xlarge", "p5en.48xlarge"])
    def test_gpudirect_types_keep_gpu_buffers_read_by_rdma(self, gpu):
        path, warnings = plan_kv_path(model(), CATALOG[gpu])
        assert (path.backends, path.buffer_device, path.mechanism) == (("LIBFABRIC",), "cuda", "gpudirect")
        assert warnings == [] and "GPUDirect RDMA reads" in path.summary()

    @pytest.mark.parametrize("gpu", ["g5.12xlarge", "g6e.12xlarge", "g6.12xlarge", "g6.8xlarge"])
    def test_every_type_without_gpudirect_crosses_efa_by_default(self, gpu):
        for keys in ({}, ATTENTION_ONLY):
            path, _ = plan_kv_path(model(**keys), CATALOG[gpu])
            assert path.backends == ("LIBFABRIC",) and path.over_efa and path.mechanism != "gpudirect"


class TestOverrides:
    def test_the_seeds_literal_settings_preview_on_g6(self):
        path, warnings = plan_kv_path(
            model(nixlBackends=["LIBFABRIC"], kvBufferDevice="cuda"), CATALOG["g6.8xlarge"]
        )
        assert path.mechanism == "emulated" and warnings == []

    def test_gpu_buffers_for_an_attention_only_model_on_g6_are_emulated_reads(self):
        path, _ = plan_kv_path(model(**ATTENTION_ONLY, kvBufferDevice="cuda"), CATALOG["g6.8xlarge"])
        assert (path.buffer_device, path.mechanism) == ("cuda", "emulated")

    def test_host_buffers_for_a_hybrid_model_are_refused(self):
        with pytest.raises(
            ConfigError, match=r"model\.kvBufferDevice cpu: Qwen/Qwen3\.5-9B has state layers"
        ):
            plan_kv_path(model(kvBufferDevice="cpu"), CATALOG["g6.8xlarge"])

    def test_host_buffers_on_a_gpudirect_type_warn(self):
        path, warnings = plan_kv_path(model(**ATTENTION_ONLY, kvBufferDevice="cpu"), CATALOG["p5.48xlarge"])
        assert (path.buffer_device, path.mechanism) == ("cpu", "host")
        assert any("two extra copies" in w for w in warnings)

    def test_ucx_asked_for_is_said_to_go_over_tcp(self):
        for gpu in ("p5.48xlarge", "g6.8xlarge"):
            path, warnings = plan_kv_path(model(nixlBackends=["UCX"]), CATALOG[gpu])
            assert (path.backends, path.buffer_device, path.mechanism) == (("UCX",), "cuda", "tcp")
            assert any("goes over TCP (UCX)" in w for w in warnings)


class TestInTheStack:
    def test_the_g6_dev_stack_serve_config_is_the_seeds_and_the_preview_names_the_mechanism(self, dev_stack):
        assert kv_config(dev_stack) == {
            "kv_connector": "NixlConnector",
            "kv_role": "kv_both",
            "engine_id": "prefill",
            "kv_buffer_device": "cuda",
            # vLLM's own lease (30 s) and no failure policy: it cannot act on a hybrid model in vLLM 0.26
            "kv_connector_extra_config": {"backends": ["LIBFABRIC"]},
        }
        (path,) = [m for m in dev_stack.infos if m.startswith("KV cache path: ")]
        assert path.startswith("KV cache path: NIXL LIBFABRIC over EFA, buffers in GPU memory")
        assert "by EFA emulated reads through host bounce buffers" in path
        assert not any("over TCP" in w for w in dev_stack.warnings)

    def test_the_preview_says_how_long_a_full_prompts_kv_takes_to_cross(self, dev_stack):
        """Qwen3.5-9B, 4096 tokens: 32 KiB per token (128 MiB) plus 25 MiB of Gated DeltaNet state,
        at the emulated reads' 0.5-1.0 GB/s."""
        (line,) = [m for m in dev_stack.infos if m.startswith("KV crossing time")]
        assert "a full 4096-token prompt's KV (153 MiB per GPU, 25 MiB of it per-sequence state)" in line
        assert line.endswith("crosses in 161-321 ms")

    def test_a_crossing_that_rounds_to_nothing_is_said_to_take_under_a_millisecond(self):
        """p5 with tensorParallelSize 8: 19 MiB per GPU at GPUDirect RDMA's rate, 0.4 ms, never "0 ms"."""
        from planning import plan_stack
        from tests.fakes.pulumi import stack_settings

        p5 = stack_settings("dev", gpuNodes={"instanceType": "p5.48xlarge"}, model={"tensorParallelSize": 8})
        line = plan_stack(p5, stack="dev").kv_crossing.summary()
        assert line.endswith("(19 MiB per GPU, 3 MiB of it per-sequence state) crosses in under 1 ms"), line

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

    def test_the_failure_policy_and_a_lease_of_its_own_reach_vllm_where_they_act(self):
        """An attention-only model gets model.kvLoadFailurePolicy; a lease other than vLLM's 30 s is
        said; the hybrid default model and vLLM's own lease leave the serve config as it was."""
        model = {
            "source": "org/attention-only",
            "id": "a",
            "parametersBillions": 8,
            "kvCacheBytesPerToken": 131072,
        }

        def built(**given: Any) -> dict[str, Any]:
            """The serve config the program applies (tests/test_ops_render.py holds them the same)."""
            settings = stack_settings("dev", model={**model, **given})
            return kv_config_in(
                build_rayservice(settings, plan_stack(settings, stack="dev")).spec.serve_config_v2
            )

        kv = built(kvLeaseSeconds=60)
        assert kv["kv_load_failure_policy"] == "recompute"
        assert kv["kv_connector_extra_config"]["kv_lease_duration"] == 60
        failing = built(kvLoadFailurePolicy="fail")
        assert failing["kv_load_failure_policy"] == "fail"
        assert "kv_lease_duration" not in failing["kv_connector_extra_config"]

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
        assert (dev["kv_backends"], dev["kv_buffer_device"], dev["kv_mechanism"]) == (
            ("LIBFABRIC",),
            "cuda",
            "emulated",
        )
        assert dev["kv_probe"].backends == ("LIBFABRIC",) and dev["kv_probe"].memory == "VRAM"
        assert dev["kv_floor"].gbytes_s == 0.4  # 40% of the bounce copy's 1 GB/s
        bare = _kv_target(Namespace(stack=None, **options), None)
        assert (bare["kv_backends"], bare["kv_buffer_device"], bare["kv_mechanism"], bare["kv_floor"]) == (
            ("LIBFABRIC",),
            "cuda",
            None,
            None,
        )


class TestVerifyProvesTheLibfabricPath:
    """NIXL at INFO names the provider its rails use and whether they have FI_HMEM (NIXL 1.3.1)."""

    def run(self, grep: str, device: str = "cuda", mechanism: str | None = None):
        cluster = healthy_cluster()
        for pod in list(cluster.grep):
            cluster.grep[pod] = ExecResult(grep, "", 0)
        target = VerifyTarget(
            "inference",
            "ray-llm",
            "qwen3.5-9b",
            kv_buffer_device=device,
            kv_mechanism=mechanism,  # type: ignore[arg-type]
        )
        return check_nixl_backend(cluster, target)

    def test_emulated_reads_in_the_workers_logs_are_named_and_fail_where_gpudirect_was_planned(self):
        grep = fixture_text("grep_libfabric.txt") + "Failed to register CUDA buffer with the EFA device\n"
        emulated = self.run(grep, mechanism="emulated")
        assert emulated.passed and "GPU buffers by emulated reads" in emulated.reason
        gpudirect = self.run(grep, mechanism="gpudirect")
        assert not gpudirect.passed and "where the plan expected GPUDirect RDMA" in gpudirect.reason
        assert self.run(fixture_text("grep_libfabric.txt"), mechanism="gpudirect").passed

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

    def test_no_cuda_runtime_for_libfabric_is_named_as_the_cause(self):
        grep = (
            "Backend LIBFABRIC was instantiated\nrails using provider=efa\n"
            "FI_HMEM cannot be supported because no compatible libraries were found\n"
            "Using provider without FI_HMEM support\n"
        )
        result = self.run(grep)
        assert not result.passed and "no compatible libraries were found" in result.reason
        assert "libcudart.so" in result.reason

    def test_no_provider_logged_fails_naming_the_log_level(self):
        result = self.run("Backend LIBFABRIC was instantiated\n")
        assert not result.passed and "NIXL_LOG_LEVEL=INFO" in result.reason

    def test_the_workers_log_at_info_only_with_libfabric(self, dev_stack):
        def worker_env(run):
            spec = run.one(RAYSERVICE).inputs["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]
            return {e["name"]: e.get("value") for e in spec["template"]["spec"]["containers"][0]["env"]}

        assert worker_env(dev_stack)["NIXL_LOG_LEVEL"] == "INFO"  # LIBFABRIC on g6 + Qwen3.5
        assert "UCX_TCP_PORT_RANGE" not in worker_env(dev_stack)
        assert "FI_EFA_USE_DEVICE_RDMA" not in worker_env(dev_stack)  # aborts on a NIC without RDMA read
        run = run_stack(stack="dev", overrides={"model": {"nixlBackends": ["UCX"]}})
        assert "NIXL_LOG_LEVEL" not in worker_env(run) and worker_env(run)["UCX_TCP_PORT_RANGE"]


class TestTheTransferFloor:
    """What the planned path carries and the floor `ops verify` holds a measured KV transfer to: a share
    of that path's own ceiling (planning/kv_path.py `transfer_floor`)."""

    @staticmethod
    def floor(gpu: str, efa_per_worker: int = 1, tp: int = 1, **keys: Any):
        path, _ = plan_kv_path(model(**keys), CATALOG[gpu])
        return transfer_floor(path, CATALOG[gpu], efa_per_worker, tp)

    @pytest.mark.parametrize(
        ("gpu", "efa_per_worker", "tp", "share"),
        [
            ("p4d.24xlarge", 4, 8, 12.5),  # 8 GPUs share 4 EFA: one per GPU at least, 100 Gbit/s
            ("p5.48xlarge", 32, 8, 50.0),  # 32 EFA over 8 GPUs: 4 per GPU, 400 Gbit/s
            ("p5.48xlarge", 4, 1, 50.0),
        ],
    )
    def test_gpudirect_is_held_to_half_of_one_gpus_share_of_the_link(self, gpu, efa_per_worker, tp, share):
        floor = self.floor(gpu, efa_per_worker, tp)
        assert floor.mechanism == "gpudirect" and floor.expected_gbytes_s == (share, share)
        assert floor.gbytes_s == pytest.approx(share / 2, abs=0.001)
        assert f"{CATALOG[gpu].network_gbps:g} Gbit/s" in floor.basis

    def test_emulated_reads_are_held_to_the_bounce_copy_not_the_link(self):
        floor = self.floor("g6.8xlarge")
        assert floor.expected_gbytes_s == (0.5, 1.0) and floor.gbytes_s == 0.4
        assert "40% of the bounce copy: 1.00 GB/s at most" in floor.basis

    def test_host_buffers_on_efa_are_held_to_half_the_link(self):
        floor = self.floor("g6.8xlarge", **ATTENTION_ONLY)
        assert floor.mechanism == "host" and floor.gbytes_s == pytest.approx(1.562, abs=0.001)

    def test_ucx_with_gpu_buffers_is_held_well_under_its_staging_ceiling(self):
        """0.47 GB/s (0.46-0.50) was recorded on an H200 with NIXL 1.3.1; a stack that chose UCX passes it."""
        floor = self.floor("g6.8xlarge", nixlBackends=["UCX"])
        assert floor.mechanism == "tcp" and floor.gbytes_s == 0.22
        assert floor.gbytes_s is not None and floor.gbytes_s < 0.46

    def test_ucx_with_host_buffers_is_held_to_half_of_one_tcp_flow(self):
        floor = self.floor("g6.8xlarge", **ATTENTION_ONLY, nixlBackends=["UCX"], kvBufferDevice="cpu")
        assert floor.gbytes_s == 0.625 and "one TCP flow" in floor.basis

    def test_a_type_whose_bandwidth_nobody_states_has_no_floor(self):
        from dataclasses import replace

        gpu = replace(CATALOG["g6.8xlarge"], network_gbps=0.0)
        path, _ = plan_kv_path(model(), gpu)
        floor = transfer_floor(path, gpu, 1, 1)
        assert floor.gbytes_s is None and "not known" in floor.summary()

    def test_the_preview_states_the_rate_and_the_floor_with_its_basis(self, dev_stack):
        (line,) = [m for m in dev_stack.infos if m.startswith("KV transfer rate to expect")]
        assert "0.50-1.00 GB/s; floor for `ops verify`: 0.40 GB/s" in line and "cudaMemcpy" in line

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


class TestWhatTheLastWaveLeftUnheld:
    """Issue 53 (6, 7): cases no test planned."""

    @pytest.mark.parametrize("gpu", ["p4d.24xlarge", "p5.48xlarge", "p5en.48xlarge"])
    def test_auto_with_an_attention_only_model_keeps_gpu_buffers_on_gpudirect_types(self, gpu):
        """Host buffers would cost two extra copies through host memory where the EFA device reads GPU
        memory itself; `auto` keeps GPU buffers there, whatever the model."""
        path, warnings = plan_kv_path(model(**ATTENTION_ONLY, kvBufferDevice="auto"), CATALOG[gpu])
        assert (path.backends, path.buffer_device, path.mechanism) == (("LIBFABRIC",), "cuda", "gpudirect")
        assert warnings == []

    def test_a_hybrid_models_state_is_split_across_tensor_parallel_ranks(self):
        """Qwen3.5-9B on g6.12xlarge at tensor parallel 2: each rank moves half the KV heads and half the
        Gated DeltaNet state (its value heads are split across ranks like the attention heads)."""
        state = KNOWN_MODELS["Qwen/Qwen3.5-9B"].state_bytes_per_sequence
        per_token = KNOWN_MODELS["Qwen/Qwen3.5-9B"].kv_cache_bytes_per_token
        assert per_token is not None
        plans = {
            tp: plan_stack(
                stack_settings(
                    "dev",
                    gpuNodes={"instanceType": "g6.12xlarge", "acceptIdleGpus": True},
                    model={"tensorParallelSize": tp},
                ),
                stack="dev",
            ).kv_crossing
            for tp in (1, 2)
        }
        assert plans[1].state_bytes == state and plans[2].state_bytes == state // 2
        assert plans[2].kv_bytes == per_token * 4096 // 2 + state // 2
        assert plans[1].seconds and plans[2].seconds and plans[2].seconds[1] < plans[1].seconds[1] * 0.51
        assert "(77 MiB per GPU, 13 MiB of it per-sequence state)" in plans[2].summary()

    def test_libfabric_after_ucx_still_plans_efa(self):
        """Issue 53's sweep: nixlBackends [UCX, LIBFABRIC] keeps LIBFABRIC, and the path over EFA; only a
        list without it goes over TCP."""
        for gpu, mechanism in (("g6.8xlarge", "emulated"), ("p5.48xlarge", "gpudirect")):
            path, warnings = plan_kv_path(model(nixlBackends=["UCX", "LIBFABRIC"]), CATALOG[gpu])
            assert path.backends == ("UCX", "LIBFABRIC") and path.over_efa
            assert path.mechanism == mechanism and warnings == []
