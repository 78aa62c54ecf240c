"""Changes roll out safely and honestly: preview says when an update recreates the Ray cluster and for
about how long serving stops; the KubeRay CRDs are stack resources at the chart's version, applied
before the operator and never deleted by the stack; the GPU node group rolls without a surge node; the
coredns add-on follows the Kubernetes version after the nodes."""

from __future__ import annotations

import pulumi
import pytest

from tests.fakes.pulumi import AwsState, StackRun, deployed, run_stack

CONFIG_GROUP = "kubernetes:yaml/v2:ConfigGroup"
RELEASE = "kubernetes:helm.sh/v3:Release"
RAYSERVICE = "kubernetes:ray.io/v1:RayService"
NODE_GROUP = "eks:index:ManagedNodeGroup"
SPARE = {"gpuNodes": {"desiredSize": 4, "maxSize": 4}, "systemNodes": {"desiredSize": 2}}


@pytest.fixture(scope="module")
def previous(dev_stack: StackRun) -> AwsState:
    """The dev stack as deployed: what the next `up` finds."""
    return deployed(dev_stack)


class TestPreviewSaysWhenServingStops:
    def test_the_first_deployment_says_nothing(self, dev_stack):
        assert not [w for w in dev_stack.warnings if "Ray cluster" in w]

    def test_a_serve_config_change_is_not_a_cluster_change(self, previous):
        run = run_stack(overrides={"model": {"maxModelLen": 2048}}, aws=previous)
        assert not [w for w in run.warnings if "Ray cluster" in w]

    def test_a_cluster_change_says_serving_stops_and_for_how_long(self, previous):
        run = run_stack(overrides={"serving": {"head": {"cpuRequest": "1.5"}}}, aws=previous)
        (warning,) = [w for w in run.warnings if "Ray cluster" in w]
        assert (
            "Pulumi deletes and recreates the RayService, so serving stops for about 3-5 minutes" in warning
        )
        assert "new image" not in warning

    def test_a_new_image_adds_the_pull(self, previous):
        run = run_stack(overrides={"serving": {"imageDigest": "sha256:" + "ab" * 32}}, aws=previous)
        (warning,) = [w for w in run.warnings if "Ray cluster" in w]
        assert "plus about 10-20 for the new image" in warning

    def test_with_room_for_a_second_cluster_there_is_no_downtime(self):
        before = deployed(run_stack(overrides=SPARE))
        run = run_stack(overrides={**SPARE, "serving": {"head": {"cpuRequest": "1.5"}}}, aws=before)
        (warning,) = [w for w in run.warnings if "Ray cluster" in w]
        assert "no downtime" in warning

    def test_the_fingerprint_covers_the_ray_cluster_and_nothing_else(self, dev_stack):
        serve_only = run_stack(overrides={"model": {"maxModelLen": 2048}})
        cluster = run_stack(overrides={"serving": {"worker": {"shmSize": "8Gi"}}})
        fingerprint = dev_stack.exports["rayClusterFingerprint"]
        assert serve_only.exports["rayClusterFingerprint"] == fingerprint
        assert cluster.exports["rayClusterFingerprint"] != fingerprint


class TestKubeRayCrds:
    def test_applied_at_the_charts_version_before_the_operator_which_skips_them(self, dev_stack):
        crds = dev_stack.one(CONFIG_GROUP, "kuberay-crds")
        assert crds.inputs["files"] == [
            f"https://raw.githubusercontent.com/ray-project/kuberay/v1.7.0/helm-chart/kuberay-operator/crds/ray.io_{p}.yaml"
            for p in ("rayclusters", "rayjobs", "rayservices", "raycronjobs")
        ]
        (operator,) = [r for r in dev_stack.of_type(RELEASE) if r.inputs["chart"] == "kuberay-operator"]
        assert operator.inputs["skipCrds"] is True
        assert crds.urn in operator.dependencies
        assert crds.urn in dev_stack.one(RAYSERVICE).dependencies

    def test_never_deleted_by_the_stack(self, dev_stack):
        """Deleting a CRD deletes every object of it: no update or destroy of ours may."""
        assert dev_stack.one(CONFIG_GROUP, "kuberay-crds").retain_on_delete is True

    def test_a_chart_bump_updates_the_same_crds(self, dev_stack):
        bumped = run_stack(overrides={"kuberay": {"chartVersion": "1.8.0"}})
        before, after = dev_stack.one(CONFIG_GROUP, "kuberay-crds"), bumped.one(CONFIG_GROUP, "kuberay-crds")
        assert after.urn == before.urn  # the same resources, so Pulumi updates them in place
        assert all("/kuberay/v1.8.0/" in url for url in after.inputs["files"])
        (operator,) = [r for r in bumped.of_type(RELEASE) if r.inputs["chart"] == "kuberay-operator"]
        assert operator.inputs["version"] == "1.8.0"


class TestNodeUpdates:
    def test_the_gpu_node_group_rolls_without_a_surge_node(self, dev_stack):
        """pulumi-eks takes no update config, so a transform sets it on the node group it creates."""
        no_surge, _root_volume = run_stack(with_transforms=True).transforms["gpu-nodes"]
        child = pulumi.ResourceTransformArgs(
            custom=True,
            type_="aws:eks/nodeGroup:NodeGroup",
            name="gpu-nodes",
            props={"amiType": "x"},
            opts=pulumi.ResourceOptions(),
        )
        result = no_surge(child)
        assert result is not None
        assert result.props == {
            "amiType": "x",
            "updateConfig": {"maxUnavailable": 1, "updateStrategy": "MINIMAL"},
        }
        other = pulumi.ResourceTransformArgs(
            custom=True,
            type_="aws:ec2/launchTemplate:LaunchTemplate",
            name="lt",
            props={},
            opts=pulumi.ResourceOptions(),
        )
        assert no_surge(other) is None

    def test_coredns_follows_the_kubernetes_version_after_the_nodes(self, dev_stack):
        coredns = dev_stack.one("aws:eks/addon:Addon", "cluster-coredns")
        assert coredns.inputs["addonVersion"] == "v1.12.1-eksbuild.35"  # resolved for 1.35 by EKS
        assert dev_stack.one(NODE_GROUP, "cluster-system").urn in coredns.dependencies
        calls = [
            args for token, args in dev_stack.calls if token == "aws:eks/getAddonVersion:getAddonVersion"
        ]
        assert {"addonName": "coredns", "kubernetesVersion": "1.35", "mostRecent": True} in calls

    def test_a_kubernetes_bump_moves_coredns_with_it(self):
        run = run_stack(overrides={"cluster": {"kubernetesVersion": "1.34"}})
        assert (
            run.one("aws:eks/addon:Addon", "cluster-coredns").inputs["addonVersion"] == "v1.12.1-eksbuild.34"
        )
