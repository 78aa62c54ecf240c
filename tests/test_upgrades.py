"""Changes roll out safely and honestly: preview says when an update recreates the Ray cluster and for
about how long serving stops; the KubeRay CRDs are stack resources at the chart's version, applied
before the operator and never deleted by the stack; the GPU node group rolls without a surge node; the
coredns add-on follows the Kubernetes version after the nodes."""

from __future__ import annotations

import pulumi
import pytest

from tests.fakes.pulumi import AwsState, StackRun, deployed, plan_of, run_stack
from tests.preview_notices import OUTPUTS, SWITCH_AND_CLUSTER, deployment, preview_notices

CONFIG_GROUP = "kubernetes:yaml/v2:ConfigGroup"
RELEASE = "kubernetes:helm.sh/v3:Release"
RAYSERVICE = "kubernetes:ray.io/v1:RayService"
NODE_GROUP = "eks:index:ManagedNodeGroup"
SPARE = {"gpuNodes": {"desiredSize": 4, "maxSize": 4}, "systemNodes": {"desiredSize": 2}}
CLUSTER_CHANGE = {"head": {"cpuRequest": "1.5"}}
"""A `serving` change inside rayClusterConfig: a new Ray cluster."""
BUMPS = {"kuberay": {"chartVersion": "1.8.0"}, "cluster": {"kubernetesVersion": "1.34"}}
"""A KubeRay chart bump and a Kubernetes bump in one run: the CRDs and the operator's release follow
the chart's version, the coredns add-on the cluster's; neither reads the other."""


@pytest.fixture(scope="module")
def previous(dev_stack: StackRun) -> AwsState:
    """The dev stack as deployed: what the next `up` finds."""
    return deployed(dev_stack)


@pytest.fixture(scope="module")
def bumped() -> StackRun:
    """BUMPS, with the transforms its resources declared (made in this process)."""
    return run_stack(overrides=BUMPS, with_transforms=True)


def test_the_program_exports_and_warns_what_planning_says(dev_stack, previous):
    """One update run against the dev stack's outputs holds the program to tests/preview_notices.py: it
    exports the outputs `deployment` says, reads the last deployment's, and warns `preview_notices`."""
    run = run_stack(overrides=SWITCH_AND_CLUSTER, aws=previous)
    assert {k: dev_stack.exports[k] for k in OUTPUTS} == deployment()
    assert {k: run.exports[k] for k in OUTPUTS} == deployment(**SWITCH_AND_CLUSTER)
    said = [w for w in run.warnings if w.startswith("this update")]
    assert said == preview_notices(previous.outputs, **SWITCH_AND_CLUSTER)
    assert len(said) == 2
    assert set(plan_of("dev", None, **SWITCH_AND_CLUSTER).warnings) <= set(run.warnings)
    assert [w for w in dev_stack.warnings if w.startswith("this update")] == preview_notices({}) == []


class TestPreviewSaysWhenServingStops:
    def test_the_first_deployment_says_nothing(self, dev_stack):
        assert not [w for w in dev_stack.warnings if "Ray cluster" in w]
        assert preview_notices({}, **SWITCH_AND_CLUSTER) == []

    def test_a_serve_config_change_is_not_a_cluster_change(self, previous):
        notices = preview_notices(previous.outputs, model={"maxModelLen": 2048})
        assert not [w for w in notices if "Ray cluster" in w]

    def test_a_cluster_change_says_serving_stops_and_for_how_long(self, previous):
        notices = preview_notices(previous.outputs, serving=CLUSTER_CHANGE)
        (warning,) = [w for w in notices if "Ray cluster" in w]
        assert (
            "Pulumi deletes and recreates the RayService, so serving stops for about 3-5 minutes" in warning
        )
        assert "new image" not in warning

    def test_a_new_image_adds_the_pull(self, previous):
        notices = preview_notices(previous.outputs, serving={"imageDigest": "sha256:" + "ab" * 32})
        (warning,) = [w for w in notices if "Ray cluster" in w]
        assert "plus about 10-20 for the new image" in warning

    def test_with_room_for_a_second_cluster_there_is_no_downtime(self):
        notices = preview_notices(deployment(**SPARE), **SPARE, serving=CLUSTER_CHANGE)
        (warning,) = [w for w in notices if "Ray cluster" in w]
        assert "no downtime" in warning

    def test_the_fingerprint_covers_the_ray_cluster_and_nothing_else(self, dev_stack):
        serve_only = deployment(model={"maxModelLen": 2048})
        cluster = deployment(serving={"worker": {"shmSize": "8Gi"}})
        fingerprint = dev_stack.exports["rayClusterFingerprint"]
        assert serve_only["rayClusterFingerprint"] == fingerprint
        assert cluster["rayClusterFingerprint"] != fingerprint


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

    def test_a_chart_bump_updates_the_same_crds(self, dev_stack, bumped):
        before, after = dev_stack.one(CONFIG_GROUP, "kuberay-crds"), bumped.one(CONFIG_GROUP, "kuberay-crds")
        assert after.urn == before.urn  # the same resources, so Pulumi updates them in place
        assert all("/kuberay/v1.8.0/" in url for url in after.inputs["files"])
        (operator,) = [r for r in bumped.of_type(RELEASE) if r.inputs["chart"] == "kuberay-operator"]
        assert operator.inputs["version"] == "1.8.0"


class TestNodeUpdates:
    def test_the_gpu_node_group_rolls_without_a_surge_node(self, bumped):
        """pulumi-eks takes no update config, so a transform sets it on the node group it creates (as
        on any stack: the bumps change neither the group nor its transforms)."""
        no_surge, _root_volume = bumped.transforms["gpu-nodes"]
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

    def test_a_kubernetes_bump_moves_coredns_with_it(self, bumped):
        coredns = bumped.one("aws:eks/addon:Addon", "cluster-coredns")
        assert coredns.inputs["addonVersion"] == "v1.12.1-eksbuild.34"
