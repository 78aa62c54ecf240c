"""Config errors cost seconds, not a half-built cluster: every bad value is refused by
`load_settings` (or `plan_zones`, once AWS has said which zones offer the GPU type), before any
resource is registered, and the message names the key as the stack file spells it, the bad value and
what is allowed. Each test starts from the dev stack file and changes one thing."""

from __future__ import annotations

from typing import Any

import pytest

from config import ConfigError, Settings, load_settings
from config.base import quantity_value
from planning import Plan, plan_stack
from tests.fakes.pulumi import minimal_config, stack_file_config

P = "ray-llm-eks"


def settings_with(section: str | None = None, **changes: Any) -> Settings:
    config = stack_file_config("dev")
    if section:
        config[f"{P}:{section}"] = {**config.get(f"{P}:{section}", {}), **changes}
    return load_settings(config)


def plan_with(section: str | None = None, **changes: Any) -> Plan:
    return plan_stack(settings_with(section, **changes), stack="dev")


def error_of(section: str | None = None, **changes: Any) -> str:
    with pytest.raises(ConfigError) as caught:
        plan_with(section, **changes)
    return str(caught.value)


def test_dev_stack_file_holds_the_seed_values():
    s = settings_with()
    assert s.region == "sa-east-1"
    assert (s.cluster.name, s.cluster.kubernetes_version) == ("ray-llm-multinode", "1.35")
    # Not the seed's m7i.xlarge: the system node also holds the gateway and the metrics stack now.
    assert s.system_nodes.instance_type == "m7i.2xlarge" and s.system_nodes.desired_size == 1
    assert s.gpu_nodes.instance_type == "g6.8xlarge"
    # minSize 0: Cluster Autoscaler may remove idle GPU nodes (parking); the seed had a fixed 2.
    assert (s.gpu_nodes.min_size, s.gpu_nodes.desired_size, s.gpu_nodes.max_size) == (0, 2, 2)
    assert s.gpu_nodes.disk_size_gib == 200
    assert s.serving.namespace == "inference" and s.serving.name == "ray-llm"
    assert s.kuberay.namespace == "kuberay-operator" and s.kuberay.chart_version == "1.7.0"
    assert (s.model.id, s.model.source) == ("qwen3.5-9b", "Qwen/Qwen3.5-9B")
    assert (s.model.nixl_backends, s.model.kv_buffer_device) == (None, "auto")  # from the hardware
    assert (
        plan_stack(s, stack="dev").image
        == "763104351884.dkr.ecr.sa-east-1.amazonaws.com/ray:serve-llm-cuda-v1.0"
    )


def test_defaults_alone_are_the_seed_but_for_the_cluster_name():
    """A stack file with only a region gets the same system as the dev stack file spells out; only the
    cluster name, which dev pins to the seed's, derives from the stack."""
    defaults = load_settings(minimal_config("sa-east-1"))
    assert defaults.cluster.name is None
    assert defaults.model_copy(update={"cluster": settings_with().cluster}) == settings_with()


def test_engine_config_strings_are_parsed_like_yaml_values():
    """The Pulumi engine hands objects over as JSON strings; the stack file has YAML objects."""
    engine = {**minimal_config("sa-east-1"), f"{P}:model": '{"maxModelLen": 2048}'}
    assert load_settings(engine).model.max_model_len == 2048


@pytest.mark.parametrize(
    ("section", "changes", "expected"),
    [
        # unknown keys (typos) in a section and at the top of the namespace
        ("model", {"maxModelLenght": 4096}, "ray-llm-eks:model.maxModelLenght: unknown key; allowed here:"),
        ("serving", {"head": {"cpuLimt": "3"}}, "ray-llm-eks:serving.head.cpuLimt: unknown key"),
        # wrong types
        (
            "gpuNodes",
            {"desiredSize": "two"},
            "ray-llm-eks:gpuNodes.desiredSize: Input should be a valid integer",
        ),
        ("model", {"enforceEager": "sometimes"}, "ray-llm-eks:model.enforceEager"),
        # out of range numbers
        (
            "model",
            {"gpuMemoryUtilization": 1.2},
            "model.gpuMemoryUtilization: Input should be less than or equal to 1 (got 1.2)",
        ),
        (
            "model",
            {"gpuMemoryUtilization": 0},
            "model.gpuMemoryUtilization: Input should be greater than 0 (got 0)",
        ),
        ("model", {"maxModelLen": 0}, "model.maxModelLen: Input should be greater than 0 (got 0)"),
        ("model", {"maxModelLen": -4096}, "model.maxModelLen"),
        (
            "model",
            {"decodeReplicas": 0},
            "model.decodeReplicas: Input should be greater than or equal to 1 (got 0)",
        ),
        ("model", {"prefillReplicas": 0}, "model.prefillReplicas"),
        # a GPU type without EFA, without a GPU, or unknown
        ("gpuNodes", {"instanceType": "g6.xlarge"}, "'g6.xlarge' has no EFA"),
        ("gpuNodes", {"instanceType": "m7i.xlarge"}, "'m7i.xlarge' has no GPU"),
        (
            "gpuNodes",
            {"instanceType": "g9.mega"},
            "'g9.mega' is not in the instance catalog, and offline nobody asks EC2; describe it with",
        ),
        # more workers than the GPU nodes can host
        (
            "model",
            {"decodeReplicas": 2},
            "= 3 GPU workers at most, but ray-llm-eks:gpuNodes.maxSize 2 x 1 worker(s) per g6.8xlarge "
            "hosts only 2",
        ),
        # node group sizes out of order
        ("gpuNodes", {"minSize": 3}, "minSize <= desiredSize <= maxSize (got 3 / 2 / 2)"),
        # malformed versions, CIDRs, quantities, names
        (
            "kuberay",
            {"chartVersion": "latest"},
            "ray-llm-eks:kuberay.chartVersion: String should match pattern",
        ),
        ("serving", {"rayVersion": "2.58"}, "ray-llm-eks:serving.rayVersion"),
        ("cluster", {"kubernetesVersion": "1.35.0"}, "ray-llm-eks:cluster.kubernetesVersion"),
        ("network", {"vpcCidr": "10.0.0.0/33"}, "ray-llm-eks:network.vpcCidr"),
        ("network", {"vpcCidr": "8.8.0.0/16"}, "is not a private range"),
        ("network", {"vpcCidr": "10.0.0.0/20"}, "must be a /16 to /19"),
        ("cluster", {"publicAccessCidrs": ["10.0.0.300/32"]}, "ray-llm-eks:cluster.publicAccessCidrs[0]"),
        ("serving", {"head": {"memoryRequest": "8GB"}}, "'8GB' is not a Kubernetes quantity"),
        (
            "serving",
            {"worker": {"memory": "lots"}},
            "ray-llm-eks:serving.worker.memory: 'lots' is not a Kubernetes quantity",
        ),
        ("serving", {"head": {"cpuRequest": "4", "cpuLimit": "3"}}, "cpuLimit 3 is below cpuRequest 4"),
        ("serving", {"name": "Ray_LLM"}, "ray-llm-eks:serving.name"),
        ("cluster", {"adminPrincipalArns": ["arn:aws:iam::12:role/x"]}, "adminPrincipalArns[0]"),
        # zones must be in the region, and the GPU zone among the cluster's
        ("gpuNodes", {"availabilityZone": "us-east-1a"}, "['us-east-1a'] are not in aws:region sa-east-1"),
        (
            "model",
            {"extraEngineKwargs": {"max_model_len": 1}},
            "['max_model_len'] are set by their own model keys",
        ),
        ("serving", {"upgradeStrategy": "newCluster"}, "serving.upgradeStrategy: newCluster"),
        (
            "cluster",
            {"logRetentionDays": 10},
            "ray-llm-eks:cluster.logRetentionDays: Input should be 1, 3, 5",
        ),
        ("serving", {"upgradeStrategy": "rolling"}, "Input should be 'auto', 'recreate' or 'newCluster'"),
    ],
)
def test_bad_value_fails_naming_the_key(section, changes, expected):
    assert expected in error_of(section, **changes)


def test_unknown_top_level_key_lists_the_known_ones():
    config = {**stack_file_config("dev"), f"{P}:gpuNode": {"minSize": 2}}
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    message = str(caught.value)
    assert "ray-llm-eks:gpuNode: unknown key" in message
    assert "ray-llm-eks:gpuNodes" in message


def test_section_that_is_not_an_object_is_refused():
    config = {**stack_file_config("dev"), f"{P}:model": "qwen"}
    with pytest.raises(ConfigError, match="ray-llm-eks:model: must be an object"):
        load_settings(config)


def test_missing_region_is_named():
    config = {k: v for k, v in stack_file_config("dev").items() if k != "aws:region"}
    with pytest.raises(ConfigError, match="aws:region: not set"):
        load_settings(config)


def test_the_pinned_regions_are_the_providers():
    """config/regions.py copies pulumi-aws' Region enum (config/ imports no Pulumi package): a bump of
    pulumi-aws that adds or drops a region fails here until the copy follows."""
    from pulumi_aws._enums import Region

    from config.regions import AWS_REGIONS

    assert list(AWS_REGIONS) == [region.value for region in Region]


def test_a_region_the_provider_does_not_know_is_refused_with_the_nearest():
    config = {**stack_file_config("dev"), "aws:region": "us-east-7"}
    with pytest.raises(ConfigError, match="aws:region: 'us-east-7' is not an AWS region; did you mean"):
        load_settings(config)


def test_other_namespaces_are_left_alone():
    """Keys of other packages (aws:, kubernetes:, pulumi:) are theirs to check."""
    config = {**stack_file_config("dev"), "aws:profile": "dev", "pulumi:tags": {"team": "ml"}}
    assert load_settings(config).region == "sa-east-1"


def test_every_problem_is_reported_at_once():
    config = {
        **stack_file_config("dev"),
        f"{P}:model": {"maxModelLen": 0, "gpuMemoryUtilization": 2},
        f"{P}:gpuNodes": {"desiredSize": "two"},
    }
    with pytest.raises(ConfigError) as caught:
        load_settings(config)
    assert len(caught.value.problems) == 3


def test_secret_token_is_accepted_encrypted_or_plain():
    config = {**stack_file_config("dev"), f"{P}:huggingFaceToken": {"secure": "v1:abc"}}
    assert load_settings(config).hugging_face_token is not None
    config[f"{P}:huggingFaceToken"] = "hf_plain"
    token = load_settings(config).hugging_face_token
    assert token is not None and token.get_secret_value() == "hf_plain"
    assert "hf_plain" not in repr(load_settings(config))


def test_quantities_have_their_kubernetes_meaning():
    assert quantity_value("8Gi") == 8 * 2**30
    assert quantity_value("500m") == 0.5
    assert quantity_value("1.5G") == 1.5e9
    assert quantity_value("3") == 3


def test_new_cluster_upgrades_need_room_for_a_second_head():
    config = {
        **stack_file_config("dev"),
        f"{P}:gpuNodes": {"desiredSize": 4, "maxSize": 4},
        f"{P}:serving": {"upgradeStrategy": "newCluster"},
        # One m7i.xlarge holds one head beside the gateway (without the metrics stack), not two.
        f"{P}:systemNodes": {"instanceType": "m7i.xlarge"},
        f"{P}:observability": {"enabled": False},
    }
    with pytest.raises(ConfigError, match="room for a second head"):
        plan_stack(load_settings(config), stack="dev")
    config[f"{P}:systemNodes"] = {"instanceType": "m7i.xlarge", "desiredSize": 2}
    assert plan_stack(load_settings(config), stack="dev").upgrade.zero_downtime


class TestCrossSectionRules:
    def test_gpu_zone_outside_the_configured_cluster_zones_is_an_error(self):
        with pytest.raises(
            ConfigError, match=r"availabilityZone: sa-east-1c must be one of ray-llm-eks:network\."
        ):
            load_settings(
                {
                    **stack_file_config("dev"),
                    f"{P}:network": {"availabilityZones": ["sa-east-1a", "sa-east-1b"]},
                    f"{P}:gpuNodes": {"availabilityZone": "sa-east-1c"},
                }
            )


class TestNoDeadEnds:
    def test_an_uncatalogued_type_can_be_described_in_the_stack_file(self):
        spec = {"vcpu": 32, "memoryGib": 128, "gpus": 1, "gpuMemoryGib": 44.7, "efaInterfaces": 1}
        plan = plan_with("gpuNodes", instanceType="g7.8xlarge", instanceSpec=spec)
        assert (plan.gpu.name, plan.gpu.gpu_memory_gib, plan.worker.cpu) == ("g7.8xlarge", 44.7, "30")
        assert plan.fit.budget_gib == pytest.approx(44.7 * 0.9)

    def test_the_fit_check_can_warn_and_says_how_far_off_it_is(self):
        assert "GiB above the 20.2 GiB budget" in error_of("model", maxModelLen=200_000)
        plan = plan_with("model", maxModelLen=200_000, fitCheck="warn")
        (warning,) = [w for w in plan.warnings if ":model:" in w and "fitCheck" in w]
        assert "GiB above the 20.2 GiB budget" in warning and "fitCheck is warn" in warning

    @pytest.mark.parametrize(
        ("section", "changes"),
        [("cluster", {"kubernetesVersion": 1.30}), ("kuberay", {"chartVersion": 1.7}), ("model", {"id": 7})],
    )
    def test_a_yaml_number_where_text_is_expected_says_quote_it(self, section, changes):
        message = error_of(section, **changes)
        key = next(iter(changes))
        assert f"ray-llm-eks:{section}.{key}: YAML read this as the number" in message
        assert "quote it" in message

    def test_a_yaml_number_for_a_quantity_is_that_quantity(self):
        head = settings_with("serving", head={"cpuRequest": 2, "cpuLimit": 2.5}).serving.head
        assert (head.cpu_request, head.cpu_limit) == ("2", "2.5")
        engine = {**minimal_config("sa-east-1"), f"{P}:serving": '{"worker": {"cpu": 8}}'}
        assert load_settings(engine).serving.worker.cpu == "8"

    def test_an_unknown_top_level_key_does_not_hide_the_others(self):
        config = {**stack_file_config("dev"), f"{P}:gpuNode": {}, f"{P}:model": {"maxModelLen": 0}}
        with pytest.raises(ConfigError) as caught:
            load_settings(config)
        problems = caught.value.problems
        assert any(p.startswith("ray-llm-eks:gpuNode: unknown key") for p in problems)
        assert any(p.startswith("ray-llm-eks:model.maxModelLen:") for p in problems)

    def test_a_missing_region_does_not_hide_the_others(self):
        with pytest.raises(ConfigError) as caught:
            load_settings({f"{P}:model": {"maxModelLen": 0}})
        region, *sections = caught.value.problems
        assert region.startswith("aws:region: not set")
        assert sorted(p.split(":")[1].split(" ")[0] for p in sections) == [
            "cluster.publicAccessCidrs",
            "model.maxModelLen",
        ]

    def test_a_rule_across_sections_names_its_keys(self):
        message = error_of("gpuNodes", availabilityZone="us-east-1a")
        assert (
            "ray-llm-eks:gpuNodes.availabilityZone: ['us-east-1a'] are not in aws:region sa-east-1" in message
        )
        assert "across sections" not in message


class TestNeverSchedulable:
    """`pulumi up` would wait out the whole ready timeout for these pods: refuse them at preview."""

    @pytest.mark.parametrize(
        ("section", "changes", "expected"),
        [
            (
                "serving",
                {"worker": {"cpu": "31"}},
                "serving.worker.cpu: 31 is more than a node offers a worker (30",
            ),
            (
                "serving",
                {"worker": {"memory": "120Gi"}},
                "serving.worker.memory: 120Gi is more than a node offers",
            ),
            (
                "serving",
                {"worker": {"shmSize": "113Gi"}},
                "serving.worker.shmSize: 113Gi of memory-backed /dev/shm",
            ),
            (
                "serving",
                {"head": {"cpuRequest": "7.5", "cpuLimit": "8"}},
                "serving.head.cpuRequest: 7.5 does not fit",
            ),
            (
                "serving",
                {"head": {"memoryRequest": "30Gi", "memoryLimit": "30Gi"}},
                "serving.head.memoryRequest: 30Gi does not fit a ray-llm-eks:systemNodes.instanceType m7i",
            ),
            ("model", {"tensorParallelSize": 2}, "model.tensorParallelSize: 2 needs 2 GPUs in one pod"),
        ],
    )
    def test_refused_naming_the_key(self, section, changes, expected):
        assert expected in error_of(section, **changes)

    def test_overrides_within_the_node_pass(self):
        plan = plan_with("serving", worker={"cpu": "30", "memory": "113Gi", "shmSize": "32Gi"})
        assert (plan.worker.cpu, plan.worker.memory) == ("30", "113Gi")

    @pytest.mark.parametrize("name", ["1llm", "-llm", "Llm", "a" * 48])
    def test_a_rayservice_name_kuberay_rejects_is_refused(self, name):
        assert "ray-llm-eks:serving.name" in error_of("serving", name=name)

    def test_an_uncatalogued_system_type_warns_that_the_head_is_unchecked(self):
        plan = plan_with("systemNodes", instanceType="m8g.xlarge")
        assert any("systemNodes.instanceSpec" in w for w in plan.warnings)


class TestImage:
    DIGEST = "sha256:" + "0123456789abcdef" * 4

    def test_the_default_image_can_be_pinned_by_digest(self):
        image = plan_with("serving", imageDigest=self.DIGEST).image
        assert image == f"763104351884.dkr.ecr.sa-east-1.amazonaws.com/ray@{self.DIGEST}"

    @pytest.mark.parametrize("region", ["af-south-1", "ap-northeast-3", "cn-north-1", "us-gov-west-1"])
    def test_a_region_without_a_known_image_is_refused_naming_serving_image(self, region):
        with pytest.raises(ConfigError) as caught:
            plan_stack(load_settings(minimal_config(region)), stack="dev")
        message = str(caught.value)
        assert f"ray-llm-eks:serving.image: aws:region {region} has no known Ray LLM DLC registry" in message
        assert "public.ecr.aws/deep-learning-containers/ray:serve-llm-cuda-v1.0" in message
        given = {**minimal_config(region), f"{P}:serving": {"image": f"public.ecr.aws/x/ray@{self.DIGEST}"}}
        assert plan_stack(load_settings(given), stack="dev").image == f"public.ecr.aws/x/ray@{self.DIGEST}"

    @pytest.mark.parametrize(
        "image", ["ray:latest", "763104351884.dkr.ecr.sa-east-1.amazonaws.com/ray@sha256:abc"]
    )
    def test_a_malformed_image_reference_is_refused(self, image):
        assert "ray-llm-eks:serving.image" in error_of("serving", image=image)

    def test_a_digest_and_an_image_together_are_refused(self):
        message = error_of("serving", image="public.ecr.aws/x/ray:1", imageDigest=self.DIGEST)
        assert "put the digest in it" in message
