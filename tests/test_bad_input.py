"""Values users really write that can never work are refused before any resource, naming the key: one
test per rule, each with a realistic bad value, run through the real program under the mocks (so the
planner's rules, which need EC2's and the caller's answers, are exercised too)."""

from __future__ import annotations

from typing import Any

import pytest

from config import ConfigError
from config.settings import FIXED_NAMESPACES
from manifests.endpoint.chart import GATEWAY_NAMESPACE
from manifests.load_balancer import CONTROLLER_NAMESPACE
from manifests.observability.charts import MONITORING_NAMESPACE, NODE_AGENTS_NAMESPACE
from planning.zones import StackRecord, plan_zones
from tests.fakes import pulumi as fakes
from tests.fakes.pulumi import plan_of, run_stack, stack_settings

P = "ray-llm-eks"
ACCOUNT = "123456789012"
KEY = f"arn:aws:kms:sa-east-1:{ACCOUNT}:key/1234abcd-12ab-34cd-56ef-1234567890ab"
CERT = f"arn:aws:acm:sa-east-1:{ACCOUNT}:certificate/12345678-1234-1234-1234-123456789012"
PUBLIC = {"scheme": "internet-facing", "sourceRanges": ["198.51.100.0/24"], "hostname": "llm.example.com"}
ROLE = f"arn:aws:iam::{ACCOUNT}:role/platform-admins"


def refused(overrides: dict[str, dict[str, Any]], secrets: dict[str, str] | None = None, **kw: Any) -> str:
    """The message of the ConfigError the program raises, after checking that nothing was registered."""
    with pytest.raises(ConfigError) as raised:
        run_stack(overrides=overrides, secrets=secrets, **kw)
    assert fakes.LAST_RUN is not None and fakes.LAST_RUN.registrations == []
    return str(raised.value)


CASES = [
    # ARNs of the wrong kind, partition, region or account.
    (
        "kms-alias",
        {
            "cluster": {
                "secretsKmsKeyArn": KEY.replace("key/1234abcd-12ab-34cd-56ef-1234567890ab", "alias/eks")
            }
        },
        "cluster.secretsKmsKeyArn",
        "is a KMS alias; give the key's own ARN",
    ),
    (
        "cert-as-key",
        {"cluster": {"volumeKmsKeyArn": CERT}},
        "cluster.volumeKmsKeyArn",
        "expected a KMS key ARN",
    ),
    (
        "key-as-cert",
        {"endpoint": {**PUBLIC, "certificateArn": KEY}},
        "endpoint.certificateArn",
        "expected an ACM certificate ARN",
    ),
    (
        "sts-session",
        {"cluster": {"adminPrincipalArns": [f"arn:aws:sts::{ACCOUNT}:assumed-role/admins/alice"]}},
        "cluster.adminPrincipalArns[0]",
        f"is an STS session; name its role: arn:aws:iam::{ACCOUNT}:role/admins",
    ),
    (
        "key-other-region",
        {"cluster": {"secretsKmsKeyArn": KEY.replace("sa-east-1", "us-east-1")}},
        "cluster.secretsKmsKeyArn",
        "must be in the stack's region, sa-east-1",
    ),
    (
        "cert-other-account",
        {"endpoint": {**PUBLIC, "certificateArn": CERT.replace(ACCOUNT, "210987654321")}},
        "endpoint.certificateArn",
        "belongs to account 210987654321, not the stack's account 123456789012",
    ),
    (
        "china-principal",
        {"cluster": {"viewerPrincipalArns": [ROLE.replace("arn:aws:", "arn:aws-cn:")]}},
        "cluster.viewerPrincipalArns[0]",
        "is in partition aws-cn, aws:region sa-east-1 in aws",
    ),
    # Units.
    (
        "head-memory-no-unit",
        {"serving": {"head": {"memoryRequest": "8", "memoryLimit": "12"}}},
        "serving.head.memoryRequest",
        "'8' is 8 bytes",
    ),
    (
        "worker-memory-number",
        {"serving": {"worker": {"memory": 96}}},
        "serving.worker.memory",
        "write the unit",
    ),
    (
        "shm-no-unit",
        {"serving": {"worker": {"shmSize": "16"}}},
        "serving.worker.shmSize",
        "'16Gi' for 16 GiB",
    ),
    (
        "millicores-without-m",
        {"serving": {"head": {"cpuRequest": 2000, "cpuLimit": 3000}}},
        "serving.head.cpuRequest",
        "'2000m' is 2 CPUs",
    ),
    (
        "ttft-in-ms",
        {"observability": {"ttftObjectiveSeconds": 2000}},
        "observability.ttftObjectiveSeconds",
        "in seconds, not milliseconds (2000 ms is 2 s)",
    ),
    (
        "timeout-in-ms",
        {"endpoint": {"requestTimeoutSeconds": 900000}},
        "endpoint.requestTimeoutSeconds",
        "not milliseconds",
    ),
    (
        "delay-in-ms",
        {"autoscaling": {"upscaleDelaySeconds": 30000}},
        "autoscaling.upscaleDelaySeconds",
        "more than an hour",
    ),
    (
        "instance-memory-in-mib",
        {
            "gpuNodes": {
                "instanceType": "g6.8xlarge",
                "instanceSpec": {
                    "vcpu": 32,
                    "memoryGib": 131072,
                    "gpus": 1,
                    "gpuMemoryGib": 22.5,
                    "efaInterfaces": 1,
                },
            }
        },
        "gpuNodes.instanceSpec.memoryGib",
        "in GiB, not MiB (131072 MiB is 128 GiB)",
    ),
    (
        "gpu-memory-in-mib",
        {
            "gpuNodes": {
                "instanceSpec": {
                    "vcpu": 32,
                    "memoryGib": 128,
                    "gpus": 1,
                    "gpuMemoryGib": 23034,
                    "efaInterfaces": 1,
                }
            }
        },
        "gpuNodes.instanceSpec.gpuMemoryGib",
        "in GiB, not MiB",
    ),
    # Names AWS or Kubernetes reserve or forbid.
    (
        "bucket-underscore",
        {"modelCache": {"bucket": "ml_models"}},
        "modelCache.bucket",
        "only lower-case letters",
    ),
    ("bucket-ip", {"modelCache": {"bucket": "10.0.0.1"}}, "modelCache.bucket", "formatted as an IP address"),
    ("bucket-dots", {"modelCache": {"bucket": "models..prod"}}, "modelCache.bucket", "no two adjacent dots"),
    ("bucket-prefix", {"modelCache": {"bucket": "xn--models"}}, "modelCache.bucket", "beginning with 'xn--'"),
    (
        "bucket-suffix",
        {"modelCache": {"bucket": "models-s3alias"}},
        "modelCache.bucket",
        "ending with '-s3alias'",
    ),
    ("bucket-short", {"modelCache": {"bucket": "ml"}}, "modelCache.bucket", "3 to 63"),
    ("source-bucket-root", {"model": {"source": "s3://my-models/"}}, "model.source", "is the bucket's root"),
    ("source-iam-wildcard", {"model": {"source": "s3://my-models/qwen*"}}, "model.source", "IAM wildcards"),
    ("source-quote", {"model": {"source": "s3://my-models/it's"}}, "model.source", "break a shell word"),
    (
        "source-bad-bucket",
        {"model": {"source": "s3://my..models/qwen"}},
        "model.source",
        "no two adjacent dots",
    ),
    ("namespace-default", {"serving": {"namespace": "default"}}, "serving.namespace", "Kubernetes owns"),
    ("namespace-kube", {"kuberay": {"namespace": "kube-ray"}}, "kuberay.namespace", "Kubernetes owns"),
    (
        "namespace-twice",
        {"kuberay": {"namespace": "inference"}},
        "serving.namespace and ray-llm-eks:kuberay.namespace",
        "need a namespace each",
    ),
    (
        "namespace-monitoring",
        {"serving": {"namespace": "monitoring"}},
        "serving.namespace",
        "the metrics stack",
    ),
    # Network ranges that cannot work where they are used.
    (
        "private-public-endpoint",
        {"cluster": {"publicAccessCidrs": ["10.0.0.0/8"]}},
        "cluster.publicAccessCidrs",
        "private ranges",
    ),
    (
        "private-internet-facing",
        {"endpoint": {**PUBLIC, "certificateArn": CERT, "sourceRanges": ["172.16.0.0/12"]}},
        "endpoint",
        "private ranges, which no connection to an internet-facing NLB",
    ),
    # Settings the runtime would never act on.
    (
        "target-at-limit",
        {"autoscaling": {"prefill": {"targetOngoingRequests": 16, "maxOngoingRequests": 16}}},
        "autoscaling.prefill",
        "Serve never adds one",
    ),
    (
        "llm-signal-without-prometheus",
        {"autoscaling": {"signal": "llm"}, "observability": {"enabled": False}},
        "autoscaling.signal",
        "observability.enabled is false",
    ),
    (
        "kv-target-as-percent",
        {"autoscaling": {"signal": "llm", "decode": {"targetKvCacheUsage": 70}}},
        "autoscaling.decode.targetKvCacheUsage",
        "less than 1",
    ),
    (
        "signal-typo",
        {"autoscaling": {"signal": "tokens"}},
        "autoscaling.signal",
        "'requests', 'llm' or 'slo'",
    ),
    (
        "slo-signal-without-prometheus",
        {"autoscaling": {"signal": "slo"}, "observability": {"enabled": False}},
        "autoscaling.signal",
        "slo reads the engines' figures from the stack's Prometheus",
    ),
    (
        "ttft-target-beyond-vllms-buckets",
        {"autoscaling": {"signal": "slo", "prefill": {"ttftTargetSeconds": 3000}}},
        "autoscaling.prefill.ttftTargetSeconds",
        "less than 2560",
    ),
    (
        "itl-target-in-milliseconds",
        {"autoscaling": {"signal": "slo", "decode": {"itlTargetSeconds": 100}}},
        "autoscaling.decode.itlTargetSeconds",
        "less than 80",
    ),
    # The mutation run's survivors.
    (
        "desired-above-max",
        {"gpuNodes": {"minSize": 0, "desiredSize": 3, "maxSize": 2}},
        "gpuNodes",
        "minSize <= desiredSize <= maxSize (got 0 / 3 / 2)",
    ),
    (
        "zone-twice",
        {"network": {"availabilityZones": ["sa-east-1a", "sa-east-1a"]}},
        "network.availabilityZones",
        "lists a zone twice",
    ),
    (
        "cidrs-no-public-endpoint",
        {"cluster": {"endpointPublicAccess": False, "publicAccessCidrs": ["198.51.100.0/24"]}},
        "cluster",
        "publicAccessCidrs only applies with endpointPublicAccess: true",
    ),
    (
        "head-limit-below-request",
        {"serving": {"head": {"memoryRequest": "8Gi", "memoryLimit": "4Gi"}}},
        "serving.head",
        "memoryLimit 4Gi is below memoryRequest 8Gi",
    ),
    (
        "engine-kwargs-kv",
        {"model": {"extraEngineKwargs": {"kv_transfer_config": {"kv_connector": "X"}}}},
        "model.extraEngineKwargs",
        "['kv_transfer_config'] are set by their own model keys",
    ),
    (
        "parked-min-size",
        {"autoscaling": {"parked": True}, "gpuNodes": {"minSize": 1}},
        "autoscaling.parked",
        "set it to 0 to park",
    ),
]


@pytest.mark.parametrize(("overrides", "key", "says"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_value_that_cannot_work_is_refused_naming_its_key(overrides, key, says):
    message = refused(overrides)
    assert f"{P}:{key}" in message and says in message, message


def test_one_secret_for_two_clients_is_refused():
    secrets = {
        f"{P}:apiKeys": '{"app": "k3y-0123456789abcdefghijklmno", "batch": "k3y-0123456789abcdefghijklmno"}'
    }
    clients = {"endpoint": {"clients": {"app": {}, "batch": {}}}}
    message = refused(clients, secrets)
    assert f"{P}:apiKeys.app: the same secret is also {P}:apiKeys.batch" in message
    assert "k3y-0123456789" not in message  # a message never shows a secret


def test_an_api_key_that_is_also_the_hugging_face_token_is_refused():
    token = "hf_abcdefghijklmnopqrstuvwxyz0123"
    secrets = {f"{P}:apiKeys": f'{{"default": "{token}"}}', f"{P}:huggingFaceToken": token}
    message = refused({}, secrets)
    assert f"{P}:apiKeys.default: the same secret is also {P}:huggingFaceToken" in message
    assert token not in message


def test_an_instance_spec_ec2_contradicts_is_refused_with_ec2s_figures():
    spec = {"vcpu": 32, "memoryGib": 64, "gpus": 1, "gpuMemoryGib": 22.5, "efaInterfaces": 1}
    message = refused({"gpuNodes": {"instanceSpec": spec}})
    assert (
        f"{P}:gpuNodes.instanceSpec.memoryGib: 64 contradicts EC2, which describes g6.8xlarge with "
        "memoryGib 128" in message
    )


def test_an_instance_spec_ec2_agrees_with_is_used_for_what_ec2_does_not_say():
    spec = {
        "vcpu": 32,
        "memoryGib": 128,
        "gpus": 1,
        "gpuMemoryGib": 22.0,
        "efaInterfaces": 1,
        "gpudirectRdma": False,
    }
    run = run_stack(overrides={"gpuNodes": {"instanceSpec": spec}})
    assert run.registrations


def test_a_kms_key_of_another_account_is_a_warning_not_a_refusal():
    """Asked of the plan in the mocked account (plan_of; the program logs a plan's warnings at preview)."""
    plan = plan_of(cluster={"volumeKmsKeyArn": KEY.replace(ACCOUNT, "210987654321")})
    assert any("belongs to account 210987654321" in w and "key policy must grant" in w for w in plan.warnings)


def test_principals_of_another_account_are_fine_for_access_entries():
    run = run_stack(overrides={"cluster": {"adminPrincipalArns": [ROLE.replace(ACCOUNT, "210987654321")]}})
    assert run.registrations


def test_the_gpu_zone_default_is_the_first_cluster_zone_that_offers_the_type():
    settings = stack_settings("dev")
    record = StackRecord(zones=("sa-east-1a", "sa-east-1b"))
    assert plan_zones(settings, ["sa-east-1b"], record).gpu_zone == "sa-east-1b"
    assert plan_zones(settings, ["sa-east-1a", "sa-east-1b"], record).gpu_zone == "sa-east-1a"


def test_the_gpu_zone_default_never_lands_where_the_type_is_not_offered():
    run = run_stack(offerings={"sa-east-1": {"g6.8xlarge": ["sa-east-1b", "sa-east-1c"]}})
    gpu = run.one("eks:index:ManagedNodeGroup", "gpu-nodes")
    assert gpu.inputs["placementGroupAvailabilityZone"] == "sa-east-1b"


def test_the_namespaces_the_config_keeps_free_are_the_ones_the_charts_use():
    assert set(FIXED_NAMESPACES) == {
        MONITORING_NAMESPACE,
        NODE_AGENTS_NAMESPACE,
        GATEWAY_NAMESPACE,
        CONTROLLER_NAMESPACE,
    }
