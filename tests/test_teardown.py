"""Teardown and change without loss: every controller keeps all of its AWS access until what it made is
gone, the stack's KMS keys survive any config change and `destroy`, what destroy keeps is one explicit
choice per store, and every resource option the change table in docs/operations.md rests on is pinned."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from config import ConfigError
from planning.where import Where
from tests.fakes import pulumi as fakes
from tests.fakes.pulumi import (
    EXISTING_CLUSTER_STACKS,
    STACKS,
    AwsState,
    StackRun,
    deployed,
    run_stack,
    stack_settings,
    where_of,
)

ROOT = Path(__file__).resolve().parent.parent
IDENTITY = "ray-llm-eks:pod_identity:PodIdentity"
ROLE = "aws:iam/role:Role"
INLINE = "aws:iam/rolePolicy:RolePolicy"
ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
RAYSERVICE = ("kubernetes:ray.io/v1:RayService", "ray-llm-rayservice")
KEY = "aws:kms/key:Key"
STACK_KEY_ARN = "arn:aws:kms:sa-east-1:123456789012:key/11111111-2222-3333-4444-555555555555"
OTHER_KEY_ARN = "arn:aws:kms:sa-east-1:123456789012:key/66666666-7777-8888-9999-000000000000"


def identity_parts(run: StackRun, name: str) -> set[str]:
    """The URNs of a PodIdentity's role, policies and association."""
    component = run.one(IDENTITY, name)
    parts = {r.urn for r in run.registrations if r.parent == component.urn}
    types = {run.by_urn(u).type for u in parts}
    assert ROLE in types and len(parts) >= 2, types
    return parts


class TestControllersKeepTheirAccessUntilWhatTheyMadeIsGone:
    def test_the_nlb_service_waits_for_all_of_the_load_balancer_controllers_iam(self, dev_stack):
        service = dev_stack.one("kubernetes:core/v1:Service", "endpoint-load-balancer")
        parts = identity_parts(dev_stack, "load-balancer-controller-role")
        types = {dev_stack.by_urn(u).type for u in parts}
        assert types == {ROLE, INLINE, ASSOCIATION}
        release = dev_stack.one("kubernetes:helm.sh/v3:Release", "load-balancer-controller-release")
        system_nodes = dev_stack.one("eks:index:ManagedNodeGroup", "cluster-system")
        assert parts | {release.urn, system_nodes.urn} <= set(service.dependencies)
        # At create time too: the controller's pod starts with its permissions in place.
        assert parts <= set(release.dependencies)

    def test_prometheus_volume_outlives_none_of_the_ebs_csi_drivers_access(self, dev_stack):
        parts = identity_parts(dev_stack, "observability-ebs-csi")
        driver = dev_stack.one("aws:eks/addon:Addon", "observability-ebs-csi")
        assert {dev_stack.by_urn(u).type for u in parts} == {ROLE, ATTACHMENT}
        # Its claim goes with the monitoring namespace; the StatefulSet with the release.
        for owner in (
            dev_stack.one("kubernetes:core/v1:Namespace", "observability-ns"),
            dev_stack.one("kubernetes:helm.sh/v3:Release", "observability-kube-prometheus-stack"),
            dev_stack.one("kubernetes:storage.k8s.io/v1:StorageClass", "observability-gp3"),
        ):
            assert parts | {driver.urn} <= set(owner.dependencies), owner.name
        assert parts <= set(driver.dependencies)

    def test_cluster_autoscaler_runs_only_with_all_of_its_iam(self, dev_stack):
        release = dev_stack.one("kubernetes:helm.sh/v3:Release", "cluster-autoscaler-release")
        parts = identity_parts(dev_stack, "cluster-autoscaler-role")
        assert len(parts) == 3
        assert parts <= set(release.dependencies)

    def test_model_cache_pods_wait_for_both_roles_policies_and_associations(self, dev_stack):
        rayservice = dev_stack.one("kubernetes:ray.io/v1:RayService")
        parts = identity_parts(dev_stack, "model-cache-reader")
        parts |= identity_parts(dev_stack, "model-cache-writer")
        assert len(parts) == 6
        assert parts <= set(rayservice.dependencies)

    def test_existing_stacks_keep_their_roles_through_aliases(self, dev_stack):
        """The parts moved under a PodIdentity component; an alias to their old parent keeps their state."""
        role = dev_stack.one(ROLE, "load-balancer-controller-role")
        controller = dev_stack.one(
            "ray-llm-eks:load_balancer_controller:LoadBalancerController", "load-balancer-controller"
        )
        assert any(a.get("spec", {}).get("parentUrn") == controller.urn for a in role.aliases), role.aliases


class TestTheGpuNodesOutliveWhatRunsOnThem:
    def test_the_rayservice_and_the_device_plugins_go_before_the_gpu_node_group(self, dev_stack):
        """`destroy` deletes a resource's dependents first. The RayService no longer waits for the device
        plugins (its pods pend until they advertise GPUs), so the two may go in either order; both
        still depend on the GPU node group, so neither outlives the nodes its pods run on."""
        group = dev_stack.one("eks:index:ManagedNodeGroup", "gpu-nodes").urn
        plugins = [
            r
            for r in dev_stack.of_type("kubernetes:helm.sh/v3:Release")
            if r.inputs["chart"] in {"nvidia-device-plugin", "aws-efa-k8s-device-plugin"}
        ]
        assert len(plugins) == 2
        for reg in (*plugins, dev_stack.one(*RAYSERVICE)):
            assert group in reg.dependencies, reg.name
        rayservice = dev_stack.one(*RAYSERVICE)
        assert not {p.urn for p in plugins} & set(rayservice.dependencies)


class TestKeysThatMustNotVanish:
    @pytest.mark.parametrize("stack", STACKS)
    def test_the_stacks_keys_are_retained_never_protected(self, stack):
        run = run_stack(stack=stack)
        keys = run.of_type(KEY)
        # a team's cluster encrypts its own secrets: the stack's key is its nodes' volumes'
        owned = (
            {"cluster-volumes"}
            if stack in EXISTING_CLUSTER_STACKS
            else {"cluster-secrets", "cluster-volumes"}
        )
        assert {k.name for k in keys} == owned
        assert all(k.retain_on_delete and not k.protect for k in keys)
        # what `make destroy` prints to delete afterwards: every key the stack made, and only those
        assert sorted(arn.rsplit("/", 1)[1] for arn in run.exports["keptKeyArns"]) == sorted(owned)

    def test_the_vpc_records_which_keys_the_stack_uses(self, dev_stack):
        tags = dev_stack.one("aws:ec2/vpc:Vpc").inputs["tags"]
        assert tags["ray-llm-eks/secrets-key"] == "stack" and tags["ray-llm-eks/volume-key"] == "stack"
        given = run_stack(overrides={"cluster": {"secretsKmsKeyArn": STACK_KEY_ARN}})
        assert given.one("aws:ec2/vpc:Vpc").inputs["tags"]["ray-llm-eks/secrets-key"] == STACK_KEY_ARN
        assert {k.name for k in given.of_type(KEY)} == {"cluster-volumes"}
        # a key the stack file names is not one `make destroy` says to delete
        assert given.exports["secretsKeyArn"] == STACK_KEY_ARN
        assert given.exports["keptKeyArns"] == [given.exports["volumeKeyArn"]]

    @pytest.mark.parametrize(
        ("before", "after", "says"),
        [
            (None, STACK_KEY_ARN, "encrypted with the stack's own key"),
            (STACK_KEY_ARN, None, f"encrypted with {STACK_KEY_ARN}"),
            (STACK_KEY_ARN, OTHER_KEY_ARN, f"Set it back to {STACK_KEY_ARN}"),
        ],
    )
    def test_changing_the_secrets_key_of_a_deployed_stack_is_refused_before_any_resource(
        self, before, after, says
    ):
        first = run_stack(overrides={"cluster": {"secretsKmsKeyArn": before}} if before else None)
        with pytest.raises(ConfigError) as refused:
            run_stack(
                overrides={"cluster": {"secretsKmsKeyArn": after}} if after else None, aws=deployed(first)
            )
        message = str(refused.value)
        assert "ray-llm-eks:cluster.secretsKmsKeyArn" in message and "EKS cannot change" in message
        assert says in message
        assert fakes.LAST_RUN is not None and fakes.LAST_RUN.registrations == []

    @staticmethod
    def where(aws: AwsState, **sections: dict) -> Where:
        """What the program reads of the deployed dev stack in `aws` (its record on the VPC, the key
        choices it checks against it: planning/where.py) and warns with, for dev's stack file with some
        sections' keys overridden: __main__.read's step, with no stack run (that the program logs
        `Where.warnings` is held by full runs elsewhere, e.g. tests/test_existing_cluster.py)."""
        settings = stack_settings("dev", **sections)
        return where_of(settings, aws.world(settings.region))

    def test_changing_the_volume_key_warns_and_keeps_the_old_key(self, dev_stack):
        changed = self.where(deployed(dev_stack), cluster={"volumeKmsKeyArn": OTHER_KEY_ARN})
        (warning,) = [w for w in changed.warnings if "volumeKmsKeyArn changes" in w]
        assert "from the stack's own key to " + OTHER_KEY_ARN in warning and "retained" in warning

    def test_a_record_from_before_keys_were_recorded_refuses_nothing(self, dev_stack):
        old = deployed(dev_stack)
        old.vpc_tags = {k: v for k, v in (old.vpc_tags or {}).items() if not k.endswith("-key")}
        again = self.where(old, cluster={"secretsKmsKeyArn": STACK_KEY_ARN})  # raises if refused
        assert again.record.secrets_key == STACK_KEY_ARN  # and the record takes the key from now on


class TestWhatDestroyKeeps:
    """Each store's choice, in the code, the config's default and docs/operations.md's table."""

    TABLE = re.compile(r"^\| (?P<what>[^|]+?) \| (?P<default>kept|deleted) \| `(?P<key>[\w.]+)`", re.M)

    def documented(self) -> dict[str, str]:
        teardown = (ROOT / "docs" / "operations.md").read_text().split("## Teardown", 1)[1]
        return {m["key"]: m["default"] for m in self.TABLE.finditer(teardown)}

    def test_the_docs_table_says_what_the_defaults_do(self, dev_stack):
        documented = self.documented()
        bucket = dev_stack.one("aws:s3/bucket:Bucket")
        storage = dev_stack.one("kubernetes:storage.k8s.io/v1:StorageClass")
        logs = dev_stack.one("aws:cloudwatch/logGroup:LogGroup")
        keys = dev_stack.of_type(KEY)
        actual = {
            # destroy stops at a bucket with copies in it, leaving bucket and copies.
            "modelCache.forceDestroy": "deleted" if bucket.inputs.get("forceDestroy") else "kept",
            "observability.keepVolumeOnDestroy": (
                "kept" if storage.inputs["reclaimPolicy"] == "Retain" else "deleted"
            ),
            "cluster.keepLogsOnDestroy": "kept" if logs.retain_on_delete else "deleted",
            "retain_on_delete": "kept" if all(k.retain_on_delete for k in keys) else "deleted",
        }
        assert documented == actual

    def test_each_choice_follows_its_key(self):
        # The world tests/test_least_privilege.py gives its own volume key in (one run for both): which
        # key encrypts the volumes is independent of what destroy keeps of the bucket, volume and logs.
        volume_key = "arn:aws:kms:sa-east-1:123456789012:key/0f1e2d3c-aaaa-bbbb-cccc-1234567890ab"
        run = run_stack(
            overrides={
                "modelCache": {"forceDestroy": True},
                "observability": {"keepVolumeOnDestroy": False},
                "cluster": {"keepLogsOnDestroy": True, "volumeKmsKeyArn": volume_key},
            }
        )
        assert run.one("aws:s3/bucket:Bucket").inputs["forceDestroy"] is True
        assert run.one("kubernetes:storage.k8s.io/v1:StorageClass").inputs["reclaimPolicy"] == "Delete"
        assert run.one("aws:cloudwatch/logGroup:LogGroup").retain_on_delete


EXPECTED_OPTIONS = {
    # (type, name): what the change table and the teardown rest on.
    (KEY, "cluster-secrets"): {"retain_on_delete"},
    (KEY, "cluster-volumes"): {"retain_on_delete"},
    ("kubernetes:yaml/v2:ConfigGroup", "kuberay-crds"): {"retain_on_delete"},
    ("kubernetes:yaml/v2:ConfigGroup", "load-balancer-controller-crds"): {"retain_on_delete"},
    ("kubernetes:yaml/v2:ConfigGroup", "endpoint-crds"): {"retain_on_delete"},
    ("kubernetes:yaml/v2:ConfigGroup", "observability-crds"): {"retain_on_delete"},
}


def options_of(run: StackRun) -> dict[tuple[str, str], set[str]]:
    found = {}
    for reg in run.registrations:
        options = {
            name
            for name, on in (
                ("retain_on_delete", reg.retain_on_delete),
                ("protect", reg.protect),
                ("delete_before_replace", reg.delete_before_replace),
                ("replace_on_changes", bool(reg.replace_on_changes)),
                ("ignore_changes", bool(reg.ignore_changes)),
            )
            if on
        }
        if options:
            found[(reg.type, reg.name)] = options
    return found


class TestTheOptionsTheChangeTableRestsOn:
    def test_prod_sets_exactly_these_and_nothing_is_protected(self):
        """prod: three GPU nodes, one Ray cluster: a Ray cluster change replaces the RayService."""
        run = run_stack(stack="prod")
        expected = {
            **EXPECTED_OPTIONS,
            RAYSERVICE: {"replace_on_changes", "delete_before_replace"},
        }
        assert options_of(run) == expected
        rayservice = run.one("kubernetes:ray.io/v1:RayService")
        assert rayservice.replace_on_changes == ["spec.rayClusterConfig"]

    def test_dev_adds_only_what_its_autoscaler_needs(self, dev_stack):
        found = options_of(dev_stack)
        for key, options in EXPECTED_OPTIONS.items():
            assert found.pop(key) == options
        # The group's desired size is Cluster Autoscaler's (pulumi-eks ignores scalingConfig.desiredSize).
        gpu = dev_stack.one("eks:index:ManagedNodeGroup", "gpu-nodes")
        assert gpu.inputs["ignoreScalingChanges"] is True
        assert set(found) <= {RAYSERVICE}

    def test_node_groups_are_auto_named_so_a_replacement_starts_the_new_group_first(self, dev_stack):
        for group in dev_stack.of_type("eks:index:ManagedNodeGroup"):
            assert "nodeGroupName" not in group.inputs and not group.delete_before_replace
