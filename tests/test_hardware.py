"""Every class of GPU hardware is used whole, as EC2 describes it: a worker requests its share of the
node's EFA interfaces (all 32 on a p5.48xlarge it owns), GPUs nobody uses are refused unless accepted,
and EC2's answer (world/instance-types.json, real DescribeInstanceTypes figures) wins over the offline
catalog, with a warning where they disagree. Each class renders a RayService that passes KubeRay's CRD,
the Pod schema and Ray's own serve schemas.

A class's RayService is what build_rayservice makes of the plan the program makes with EC2's answer
(`built_for`, no stack run); the one full run, of a type only EC2 describes, holds the program to
registering exactly that (test_a_type_ec2_knows_and_the_catalog_does_not_works_without_a_code_change)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from config import ConfigError, load_settings
from manifests.rayservice import build_rayservice
from planning import plan_stack
from planning.catalog import Ec2InstanceType
from tests.fakes.pulumi import EC2_INSTANCE_TYPES, AwsState, StackRun, minimal_config, run_stack
from tests.validators import crd_errors, pd_rule_errors, pod_errors, serve_errors
from world.offline import ACCOUNT_ID
from world.reads import instance_types

P = "ray-llm-eks"
RAYSERVICE = "kubernetes:ray.io/v1:RayService"
REGION = "us-east-1"
ZONES = [f"{REGION}a", f"{REGION}b"]


@dataclass(frozen=True)
class HardwareClass:
    instance_type: str
    tensor_parallel_size: int
    gpus_per_worker: int
    efa_per_worker: int
    workers_per_node: int
    gpudirect_rdma: bool
    shm: str


CLASSES = [
    # single GPU, single EFA: the seed
    HardwareClass("g6.8xlarge", 1, 1, 1, 1, False, "16Gi"),
    # several GPUs behind one EFA interface: tensor parallel over all four
    HardwareClass("g6.12xlarge", 4, 4, 1, 1, False, "43Gi"),
    # several GPUs and several EFA interfaces, no GPUDirect RDMA: four workers share a node
    HardwareClass("g6e.48xlarge", 2, 2, 1, 4, False, "32Gi"),
    # P-series with GPUDirect RDMA: one worker owns the node and all of its EFA interfaces
    HardwareClass("p4d.24xlarge", 8, 8, 4, 1, True, "128Gi"),
    HardwareClass("p5.48xlarge", 8, 8, 32, 1, True, "128Gi"),
]


def hw_config(instance_type: str, tp: int, **sections: dict[str, Any]) -> dict[str, Any]:
    """A stack file of a region and a GPU type, with the tensor-parallel size, and more sections' keys."""
    gpu_nodes = sections.pop("gpuNodes", {})
    return {
        **minimal_config(REGION),
        f"{P}:gpuNodes": {"instanceType": instance_type, **gpu_nodes},
        f"{P}:model": {"tensorParallelSize": tp},
        **{f"{P}:{section}": values for section, values in sections.items()},
    }


def stack_for(instance_type: str, tp: int, **gpu_nodes: Any) -> StackRun:
    return run_stack(
        config=hw_config(instance_type, tp, gpuNodes=gpu_nodes),
        stack="hw",
        offerings={REGION: {instance_type: ZONES}},
    )


def built_for(config: dict[str, Any], aws: AwsState | None = None) -> dict[str, Any]:
    """The RayService the program registers for `config` (stack `hw`) in an account `aws` describes, as
    build_rayservice makes it from the plan with EC2's answer for the types (world/reads.py), as the
    program reads it: what the full run below registers (test_a_type_ec2_knows_...)."""
    settings = load_settings(config)
    world = (aws or AwsState()).world(REGION, {REGION: {settings.gpu_nodes.instance_type: ZONES}})
    plan = plan_stack(settings, stack="hw", ec2=instance_types(settings, world), account_id=ACCOUNT_ID)
    made = build_rayservice(settings, plan).to_dict()
    return {k: made[k] for k in ("apiVersion", "kind", "metadata", "spec")}


def registered(run: StackRun) -> dict[str, Any]:
    return {k: run.one(RAYSERVICE).inputs[k] for k in ("apiVersion", "kind", "metadata", "spec")}


def worker(obj: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the worker group, its container) of a RayService."""
    group = obj["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]
    return group, group["template"]["spec"]["containers"][0]


@pytest.mark.parametrize("hw", CLASSES, ids=lambda hw: hw.instance_type)
def test_each_class_gets_all_of_its_hardware_and_passes_the_upstream_schemas(hw: HardwareClass):
    obj = built_for(hw_config(hw.instance_type, hw.tensor_parallel_size))
    group, container = worker(obj)
    limits = container["resources"]["limits"]
    assert limits["nvidia.com/gpu"] == str(hw.gpus_per_worker)
    assert limits["vpc.amazonaws.com/efa"] == str(hw.efa_per_worker)
    assert container["resources"]["requests"] == limits
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert ("FI_EFA_USE_DEVICE_RDMA" in env) == hw.gpudirect_rdma
    volumes = {v["name"]: v for v in group["template"]["spec"]["volumes"]}
    assert volumes["dshm"]["emptyDir"] == {"medium": "Memory", "sizeLimit": hw.shm}
    # the two workers (prefill, decode) fit the two nodes; EFA and GPUs add up per node
    assert (
        hw.workers_per_node * hw.efa_per_worker
        <= EC2_INSTANCE_TYPES[hw.instance_type]["efaMaximumInterfaces"]
    )
    serve = yaml.safe_load(obj["spec"]["serveConfigV2"])
    assert crd_errors(obj) == []
    assert pod_errors(group["template"]["spec"]) == []
    assert serve_errors(serve) == [] and pd_rule_errors(serve) == []


def test_idle_gpus_are_refused_with_the_numbers_and_what_to_do():
    with pytest.raises(ConfigError) as caught:
        stack_for("g6.12xlarge", 1)
    message = str(caught.value)
    assert "g6.12xlarge has 4 GPUs and 1 EFA interface(s)" in message
    assert "3 of its 4 GPUs sit idle (6 of 8 paid for across gpuNodes.desiredSize 2)" in message
    assert "ray-llm-eks:model.tensorParallelSize 4" in message
    assert "ray-llm-eks:gpuNodes.acceptIdleGpus: true" in message


def test_idle_gpus_can_be_accepted_and_preview_still_says_so():
    _, container = worker(built_for(hw_config("g6.12xlarge", 1, gpuNodes={"acceptIdleGpus": True})))
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    settings = load_settings(
        {**minimal_config(REGION), f"{P}:gpuNodes": {"instanceType": "g6.12xlarge", "acceptIdleGpus": True}}
    )
    (warning,) = hardware_warnings(plan_stack(settings, stack="hw"))
    assert "3 of its 4 GPUs sit idle" in warning and "tensorParallelSize 4" in warning


def hardware_warnings(plan: Any) -> list[str]:
    """The plan's warnings about the hardware (not what the stack exposes: planning/exposure.py)."""
    return [
        w
        for w in plan.warnings
        if ":endpoint" not in w and "publicAccessCidrs" not in w and "KV cache goes over" not in w
    ]


def ec2_answer(name: str, **changes: Any) -> Ec2InstanceType:
    real = EC2_INSTANCE_TYPES[name]
    (gpu,) = real["gpuses"] or [{"count": 0, "name": "", "memorySize": 0}]
    base = Ec2InstanceType(
        name=name,
        vcpus=real["defaultVcpus"],
        memory_mib=real["memorySize"],
        gpus=gpu["count"],
        gpu_name=gpu["name"],
        gpu_memory_mib=gpu["memorySize"],
        efa_max_interfaces=real.get("efaMaximumInterfaces", 0),
        instance_storage_gb=real.get("totalInstanceStorage", 0),
    )
    return Ec2InstanceType(**{**base.__dict__, **changes})


def test_ec2_wins_over_the_catalog_and_a_disagreement_warns():
    settings = load_settings(minimal_config(REGION))
    agreeing = plan_stack(settings, stack="hw", ec2={"g6.8xlarge": ec2_answer("g6.8xlarge")})
    assert hardware_warnings(agreeing) == [] and agreeing.gpu.origin == "EC2"
    assert agreeing.gpu.local_nvme_gb == 900
    assert agreeing.gpu.gpu_memory_gib == 22.49  # the driver's figure, which EC2 does not give
    newer = plan_stack(settings, stack="hw", ec2={"g6.8xlarge": ec2_answer("g6.8xlarge", vcpus=48)})
    assert newer.gpu.vcpu == 48 and newer.worker.cpu == "45"
    (warning,) = hardware_warnings(newer)
    assert "planning/catalog.py says vcpu 32, EC2 says 48" in warning


def test_a_type_ec2_knows_and_the_catalog_does_not_works_without_a_code_change():
    """A hypothetical next generation: EC2 describes it, nothing in the code names it."""
    future = {
        "id": "p9.48xlarge",
        "defaultVcpus": 192,
        "memorySize": 2097152,
        "gpuses": [{"name": "X200", "manufacturer": "NVIDIA", "count": 8, "memorySize": 184320}],
        "efaSupported": True,
        "efaMaximumInterfaces": 16,
    }
    aws = AwsState(instance_types={**EC2_INSTANCE_TYPES, "p9.48xlarge": future})
    config = hw_config("p9.48xlarge", 8)
    run = run_stack(config=config, stack="hw", offerings={REGION: {"p9.48xlarge": ZONES}}, aws=aws)
    # What the program registers is what build_rayservice makes of its plan: what the hardware classes'
    # test reads (built_for), for a class of its own.
    assert registered(run) == built_for(config, aws)
    _, container = worker(registered(run))
    assert container["resources"]["limits"]["vpc.amazonaws.com/efa"] == "16"
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["FI_EFA_USE_DEVICE_RDMA"] == "1"  # P-series


def test_a_type_ec2_does_not_know_fails_before_any_resource_naming_the_key():
    with pytest.raises(
        ConfigError, match=r"gpuNodes.instanceType: EC2 in us-east-1 does not describe 'g9.mega'"
    ):
        stack_for("g9.mega", 1)


def _warnings(gpu_nodes: dict[str, Any], model: dict[str, Any]) -> list[str]:
    config = {**minimal_config(REGION), f"{P}:gpuNodes": gpu_nodes, f"{P}:model": model}
    return list(plan_stack(load_settings(config), stack="hw").warnings)


def test_the_idle_node_advice_never_names_the_desired_size_the_stack_has():
    """3 workers of tensorParallelSize 4 on 2 x p5.48xlarge (2 a node) fill both nodes, 4 GPUs idle: one
    node fewer would not hold them, so `desiredSize 2` (what the stack has) is no advice."""
    p5 = {"instanceType": "p5.48xlarge", "desiredSize": 2, "minSize": 2, "maxSize": 2}
    (warning,) = [
        w
        for w in _warnings(p5, {"tensorParallelSize": 4, "prefillReplicas": 1, "decodeReplicas": 2})
        if "paid for and idle" in w
    ]
    assert "4 GPU(s) paid for and idle" in warning
    assert "desiredSize 2 (" not in warning and "more replicas" in warning
    # Where fewer nodes would do (2 workers of tensorParallelSize 8 on 3 nodes), it names how many.
    three = {**p5, "desiredSize": 3, "minSize": 3, "maxSize": 3}
    (fewer,) = [w for w in _warnings(three, {"tensorParallelSize": 8}) if "paid for and idle" in w]
    assert "gpuNodes.desiredSize 2 (and minSize/maxSize to match)" in fewer


def test_the_idle_gpu_advice_never_names_the_type_the_stack_has():
    """tensorParallelSize 3 on a p5.48xlarge leaves 2 of its 8 GPUs idle: the other types are named."""
    (warning,) = [
        w
        for w in _warnings({"instanceType": "p5.48xlarge", "acceptIdleGpus": True}, {"tensorParallelSize": 3})
        if "sit idle" in w
    ]
    assert "2 of its 8 GPUs sit idle" in warning
    assert "(g6.8xlarge, g6e.8xlarge)" in warning and "p5.48xlarge)" not in warning
