"""The fit check decides at preview time whether the model can start on the chosen GPUs, and the
pod sizing turns the GPU instance into worker requests. The seed's configuration is known to run on
g6.8xlarge, so it must pass; models that cannot start must be refused with the numbers."""

from __future__ import annotations

import pytest

from config import ConfigError, load_settings
from config.serving import ModelConfig, WorkerConfig
from planning import plan_stack
from planning.capacity import KNOWN_MODELS, fit_report, pods_per_node, worker_resources
from planning.catalog import CATALOG, known_types
from tests.fakes.pulumi import minimal_config

P = "ray-llm-eks"


def report_for(instance: str = "g6.8xlarge", **model):
    spec = CATALOG[instance]
    m = ModelConfig.model_validate(model)
    return fit_report(m, spec, WorkerConfig.model_validate({}), pods_per_node(spec, m.tensor_parallel_size))


def test_seed_model_fits_g6_8xlarge_and_shows_its_margin():
    report = report_for()
    assert report.fits, report.summary()
    # weights 9.653e9 x 2 bytes = 17.98 GiB; L4 22.49 GiB x 0.90 = 20.24 GiB
    assert report.weights_gib == pytest.approx(17.98, abs=0.01)
    assert report.budget_gib == pytest.approx(20.24, abs=0.01)
    assert report.kv_cache_gib == pytest.approx(0.125)  # 32 KiB/token x 4096
    assert "margin 1.1 GiB" in report.summary()


def test_weights_larger_than_the_budget_are_refused_with_the_numbers():
    report = report_for(
        source="Qwen/Qwen3-14B", parameters_billions=15.0, kv_cache_bytes_per_token=160 * 1024
    )
    assert not report.fits
    assert (
        "weights 27.9 GiB per GPU exceed the 20.2 GiB budget of g6.8xlarge: L4 24 GB x 0.90"
        in report.summary()
    )


def test_kv_cache_for_max_model_len_counts():
    """Weights fit, but one 32k-token sequence of a dense 8B model does not."""
    fits = report_for(source="Qwen/Qwen3-8B", parameters_billions=8.2, kv_cache_bytes_per_token=147456)
    assert fits.fits
    report = report_for(
        source="Qwen/Qwen3-8B", parameters_billions=8.2, kv_cache_bytes_per_token=147456, max_model_len=32768
    )
    assert not report.fits
    assert "KV cache 4.50 GiB for model.maxModelLen 32768" in report.summary()


def test_cuda_graphs_cost_more_than_eager_mode():
    assert report_for(enforce_eager=False).overhead_gib > report_for().overhead_gib


def test_lower_utilization_can_make_the_seed_model_not_fit():
    assert not report_for(gpu_memory_utilization=0.8).fits


def test_tensor_parallelism_splits_the_weights():
    model = {"source": "Qwen/Qwen3-32B", "parameters_billions": 32.8, "kv_cache_bytes_per_token": 262144}
    assert not report_for("g6e.12xlarge", **model).fits
    assert report_for("g6e.12xlarge", tensor_parallel_size=2, **model).fits


def test_unknown_model_needs_its_size():
    report = report_for(source="acme/secret-model")
    assert not report.fits
    assert "set model.parametersBillions or model.checkpointGib" in report.summary()
    assert "set model.kvCacheBytesPerToken" in report.summary()


def test_worker_memory_must_leave_page_cache_for_the_checkpoint():
    spec = CATALOG["g6.8xlarge"]
    report = fit_report(
        ModelConfig.model_validate({}), spec, WorkerConfig.model_validate({"memory": "24Gi"}), 1
    )
    assert not report.fits
    assert "worker memory 24Gi leaves no page cache for the 18 GiB checkpoint" in report.summary()


def test_fit_check_runs_before_any_resource():
    config = {**minimal_config("sa-east-1"), f"{P}:model": {"maxModelLen": 1_000_000}}
    with pytest.raises(ConfigError, match="ray-llm-eks:model: model does not fit"):
        plan_stack(load_settings(config), stack="dev")


def test_worker_size_is_the_node_minus_what_the_node_keeps():
    spec = CATALOG["g6.8xlarge"]
    size = worker_resources(spec, 1, WorkerConfig.model_validate({}))
    assert (size.cpu, size.memory) == ("30", "113Gi")
    # far above the ~18 GiB checkpoint, below the node's allocatable (~122 GiB on 128 GiB)
    assert 18 * 3 < size.memory_gib < 120


def test_worker_size_is_shared_when_a_node_hosts_several_workers():
    spec = CATALOG["g6e.12xlarge"]  # 4 GPUs but one EFA interface: one worker per node
    assert pods_per_node(spec, 1) == 1
    p5 = CATALOG["p5.48xlarge"]  # 8 GPUs, 32 EFA interfaces
    assert pods_per_node(p5, 2) == 4
    size = worker_resources(p5, 4, WorkerConfig.model_validate({}))
    assert size.cpu == str((192 - 12) // 4)


def test_worker_size_override_wins():
    size = worker_resources(
        CATALOG["g6.8xlarge"], 1, WorkerConfig.model_validate({"cpu": "16", "memory": "64Gi"})
    )
    assert (size.cpu, size.memory, size.memory_gib) == ("16", "64Gi", 64)


def test_catalog_entries_are_consistent():
    for spec in CATALOG.values():
        assert spec.source.startswith("https://")
        if spec.has_gpu:
            assert spec.gpu_model and spec.gpu_memory_gib <= spec.gpu_memory_gb
        else:
            assert not spec.has_efa
    for family in ("g5", "g6", "g6e", "p4d", "p5", "p5e"):
        assert any(t.startswith(f"{family}.") for t in known_types(gpu=True, efa=True)), family
    # EFA from 8xlarge up on g-families; GPUDirect RDMA only on P-series
    assert not CATALOG["g6.4xlarge"].has_efa and CATALOG["g6.8xlarge"].has_efa
    assert not CATALOG["g6.8xlarge"].gpudirect_rdma and CATALOG["p5.48xlarge"].gpudirect_rdma


def test_known_model_numbers_follow_the_architecture():
    qwen = KNOWN_MODELS["Qwen/Qwen3.5-9B"]
    # bf16: the parameter count and the checkpoint's size on disk must tell the same story
    assert qwen.parameters_billions * 2 * 1e9 / 2**30 == pytest.approx(qwen.checkpoint_gib, rel=0.01)


def test_a_model_that_does_not_fit_is_refused_with_where_it_would_fit_first():
    """Qwen3-32B (60 GiB of bf16 weights) on one L4: tensor parallelism over four L4s, or one bigger GPU,
    each checked against the catalog; `fitCheck: warn` comes last, as the way to go on regardless."""
    model = {
        "id": "q32",
        "source": "Qwen/Qwen3-32B",
        "parametersBillions": 32,
        "kvCacheBytesPerToken": 262144,
    }
    with pytest.raises(ConfigError) as refused:
        plan_stack(load_settings({**minimal_config("us-east-1"), f"{P}:model": model}), stack="t")
    message = str(refused.value)
    wider = "it fits with model.tensorParallelSize 4 on gpuNodes.instanceType g6.12xlarge (4 x L4 24 GB"
    bigger = "or with gpuNodes.instanceType p5.48xlarge (8 x H100 80 GB: a bigger GPU)"
    assert wider in message and bigger in message
    assert message.index(wider) < message.index(bigger) < message.index("or set model.fitCheck: warn")
    # Each named fix is one the plan accepts.
    for gpu, tp in (("g6.12xlarge", 4), ("p5.48xlarge", 1)):
        fixed = {
            **minimal_config("us-east-1"),
            f"{P}:model": {**model, "tensorParallelSize": tp},
            f"{P}:gpuNodes": {"instanceType": gpu, "acceptIdleGpus": True},
        }
        assert plan_stack(load_settings(fixed), stack="t").fit.fits, gpu
