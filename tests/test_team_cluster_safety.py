"""Safe on a team's cluster (issue 38): nothing of the team's resized, taken over or left exposed.
What the stack looks for in the team's cluster (planning/addons.py, planning/existing_cluster.py) and
what its Cluster Autoscaler may touch there (manifests/cluster_autoscaler.py), each from the cluster's
own listings as the API gives them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from config import ConfigError
from manifests.cluster_autoscaler import cluster_autoscaler_chart, cluster_autoscaler_policy, discovery_tags
from planning.addons import (
    Inventory,
    inventory_from_api,
    network_policy_engines,
    other_node_autoscalers,
    self_managed_ebs_csi,
    tolerates,
)
from planning.where import Where
from tests.fakes.pulumi import stack_settings, where_of
from world.offline import TeamCluster


def deployment(namespace: str, name: str, image: str, **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "name": name, "labels": labels},
        "spec": {"template": {"spec": {"containers": [{"image": image}]}}},
    }


def daemonset(namespace: str, name: str, *containers: dict[str, Any], **labels: str) -> dict[str, Any]:
    return {
        "metadata": {"namespace": namespace, "name": name, "labels": labels},
        "spec": {"template": {"spec": {"containers": list(containers)}}},
    }


def listed(*items: dict[str, Any]) -> dict[str, Any]:
    return {"items": list(items)}


def inventory(deployments=(), daemonsets=(), crds=()) -> Inventory:
    return inventory_from_api(
        listed(*({"metadata": {"name": c}} for c in crds)),
        listed(*deployments),
        listed(*daemonsets),
        None,
        None,
    )


AWS_NODE_OFF = daemonset(
    "kube-system",
    "aws-node",
    {"name": "aws-node", "image": "602401143452.dkr.ecr.us-east-1.amazonaws.com/amazon-k8s-cni:v1.23.0"},
    {
        "name": "aws-eks-nodeagent",
        "image": "x/aws-network-policy-agent:v1.3.0",
        "args": ["--enable-network-policy=false"],
    },
)


class TestOtherNodeAutoscalers:
    def test_karpenter_by_its_crds_or_its_deployment(self):
        assert other_node_autoscalers(inventory(crds=["nodepools.karpenter.sh"])) == [
            "CRD nodepools.karpenter.sh"
        ]
        karpenter = deployment("kube-system", "karpenter", "public.ecr.aws/karpenter/controller:1.14.1")
        assert other_node_autoscalers(inventory([karpenter])) == [
            "Karpenter (Deployment kube-system/karpenter)"
        ]

    def test_a_cluster_autoscaler_under_another_name_by_its_image(self):
        renamed = deployment("ops", "node-scaler", "registry.k8s.io/autoscaling/cluster-autoscaler:v1.35.0")
        assert other_node_autoscalers(inventory([renamed])) == [
            "a Cluster Autoscaler under another name (Deployment ops/node-scaler)"
        ]
        named = deployment(
            "kube-system", "cluster-autoscaler", "registry.k8s.io/autoscaling/cluster-autoscaler:v1.35.0"
        )
        assert other_node_autoscalers(inventory([named])) == []  # the add-on detection finds that one

    def test_none_in_a_plain_cluster(self):
        assert other_node_autoscalers(inventory([], [AWS_NODE_OFF])) == []


class TestSelfManagedEbsCsi:
    def test_the_charts_controller_is_found_by_its_label_or_name(self):
        by_label = deployment(
            "storage",
            "ebs-ctrl",
            "public.ecr.aws/ebs-csi-driver/aws-ebs-csi-driver:v1.50.0",
            **{"app.kubernetes.io/name": "aws-ebs-csi-driver"},
        )
        found = self_managed_ebs_csi(inventory([by_label]))
        assert found is not None and found.where == "Deployment storage/ebs-ctrl"
        by_name = deployment("kube-system", "ebs-csi-controller", "x/aws-ebs-csi-driver:v1.50.0")
        assert self_managed_ebs_csi(inventory([by_name])) is not None
        assert self_managed_ebs_csi(inventory([])) is None


class TestNetworkPolicyEngines:
    def test_the_vpc_cni_agent_is_on_only_when_its_argument_says_so(self):
        assert network_policy_engines(inventory([], [AWS_NODE_OFF]), False) == []
        on = daemonset(
            "kube-system",
            "aws-node",
            {"name": "aws-eks-nodeagent", "image": "x", "args": ["--enable-network-policy=true"]},
        )
        assert network_policy_engines(inventory([], [on]), False) == [
            "the VPC CNI's network policy agent (DaemonSet kube-system/aws-node)"
        ]
        assert network_policy_engines(inventory([], [AWS_NODE_OFF]), True) == [
            "the VPC CNI add-on's network policy agent"
        ]

    @pytest.mark.parametrize("name", ["calico-node", "cilium"])
    def test_calico_and_cilium_enforce_too(self, name):
        engine = daemonset("kube-system", name, {"name": name, "image": "x"})
        assert network_policy_engines(inventory([], [AWS_NODE_OFF, engine]), False) == [
            f"{name} (DaemonSet kube-system/{name})"
        ]


class TestTheClusterAutoscalerOnATeamsCluster:
    def test_it_discovers_only_groups_with_the_stacks_tag_and_keeps_local_storage_protection(self):
        team = cluster_autoscaler_chart(
            stack_settings("byo.example"), cluster_name="platform-prod", stack="byo"
        )
        assert team.values["autoDiscovery"] == {
            "clusterName": "platform-prod",
            "tags": [
                "k8s.io/cluster-autoscaler/enabled",
                "k8s.io/cluster-autoscaler/platform-prod",
                "ray-llm-eks/cluster-autoscaler/byo",
            ],
        }
        assert "skip-nodes-with-local-storage" not in team.values["extraArgs"]  # the binary's default: true
        own = cluster_autoscaler_chart(stack_settings("dev"), cluster_name="ray-llm-multinode", stack="dev")
        assert own.values["autoDiscovery"] == {"clusterName": "ray-llm-multinode"}  # the chart's default tags
        assert discovery_tags("ray-llm-multinode", None) == [
            "k8s.io/cluster-autoscaler/enabled",
            "k8s.io/cluster-autoscaler/ray-llm-multinode",
        ]
        assert own.values["extraArgs"]["skip-nodes-with-local-storage"] == "false"

    def test_its_resize_and_terminate_rights_name_the_stacks_tag(self):
        write = cluster_autoscaler_policy("aws", "platform-prod", stack="byo")["Statement"][1]
        assert write["Action"] == [
            "autoscaling:SetDesiredCapacity",
            "autoscaling:TerminateInstanceInAutoScalingGroup",
        ]
        assert write["Condition"] == {
            "StringEquals": {"aws:ResourceTag/ray-llm-eks/cluster-autoscaler/byo": "owned"}
        }
        own = cluster_autoscaler_policy("aws", "ray-llm-multinode")["Statement"][1]
        assert own["Condition"] == {
            "StringEquals": {"aws:ResourceTag/k8s.io/cluster-autoscaler/ray-llm-multinode": "owned"}
        }


class TestTheKey:
    def test_accepting_unenforced_policies_needs_an_existing_cluster(self):
        with pytest.raises(
            ConfigError, match="acceptUnenforcedNetworkPolicies: only with existingClusterName"
        ):
            stack_settings("dev", cluster={"acceptUnenforcedNetworkPolicies": True})


def test_the_docs_list_what_the_stack_never_does_on_a_teams_cluster():
    """docs/operations.md "An existing cluster" states the promises these tests hold the code to."""
    from tests.fakes.pulumi import ROOT

    section = (
        (ROOT / "docs" / "operations.md").read_text().split("## An existing cluster")[1].split("\n## ")[0]
    )
    never = section.split("**Never, on a team's cluster**")[1].split("\n\n")[1]
    for promise in (
        "no resource of the team's is registered or imported",
        "no node group of the team's is resized or terminated",
        "no pod of the team's with local data is evicted",
        "no add-on of the team's is overwritten or taken over, EBS CSI driver included",
        "no serving on a cluster where NetworkPolicies go unenforced",
        "no pod of the team's is scheduled on the stack's nodes, and no pod of the stack's on the team's",
    ):
        assert promise in never.replace("\n  ", " "), promise
    assert "ray-llm-eks/cluster-autoscaler/<stack>=owned" in section.replace("\n", " ")


def test_ops_lists_the_stacks_own_gpu_nodes_on_a_teams_cluster():
    """ops status and ops verify ask for the stack's GPU label there, which no team node carries."""
    from ops.status import GPU_NODE_SELECTOR, gpu_node_selector

    assert gpu_node_selector(stack_settings("byo.example")) == "ray-llm-eks/inference=gpu"
    assert gpu_node_selector(stack_settings("dev")) == GPU_NODE_SELECTOR == "role=gpu-worker"
    assert gpu_node_selector(None) == "role=gpu-worker"


EXPLICIT_ADDONS = {
    **{
        k: "install"
        for k in ("nvidiaDevicePlugin", "efaDevicePlugin", "kuberay", "envoyGateway", "dcgmExporter")
    },
    "loadBalancerController": "existing",
    "prometheus": "install",
    "clusterAutoscaler": "existing",
}
"""Every add-on decided in the stack file: what an unreadable cluster leaves the stack to plan with."""


def planned_on(team: TeamCluster, **sections: dict[str, Any]) -> Where:
    """What a preview plans on `team` (world/offline.py TeamCluster): world/reads.py `where_it_serves`
    against the offline world, no stack run; every add-on decided where its workloads cannot be read."""
    from world.offline import OfflineWorld

    if not team.readable:
        sections = {"addons": EXPLICIT_ADDONS, **sections}
    settings = stack_settings("byo.example", **sections)
    return where_of(settings, OfflineWorld(region=team.region, team=team), "byo.example")


def cni_configured(configuration: str | None) -> TeamCluster:
    """The default team cluster with the VPC CNI add-on's configuration values `configuration`."""
    given = {"serviceAccountRoleArn": "arn:aws:iam::123456789012:role/cni"}
    if configuration is not None:
        given["configurationValues"] = configuration
    return replace(TeamCluster(), addons={**TeamCluster().addons, "vpc-cni": given})


class TestEnforcementWhereTheWorkloadsCannotBeRead:
    """Issue 53 (1): no access entry yet, the API refused. No Calico or aws-node argument can be seen, so
    the VPC CNI add-on's own configuration decides; an unenforced cluster is refused all the same, or
    every team pod reaches Ray Serve on :8000 without an API key."""

    def test_an_add_on_that_enforces_nothing_is_refused(self):
        unreadable = replace(cni_configured(None), readable=False)
        with pytest.raises(ConfigError) as raised:
            planned_on(unreadable)
        assert "cluster platform-prod enforces no NetworkPolicy" in str(raised.value)
        accepted = planned_on(unreadable, cluster={"acceptUnenforcedNetworkPolicies": True})
        assert any("acceptUnenforcedNetworkPolicies: accepted" in w for w in accepted.warnings)

    def test_an_add_on_that_enforces_serves(self):
        unreadable = replace(cni_configured('{"enableNetworkPolicy": "true"}'), readable=False)
        where = planned_on(unreadable)
        assert not any("NetworkPolicy" in w for w in where.warnings)


class TestTheVpcCniConfiguration:
    """Issue 53 (2): only "true" (in any case) turns the add-on's network policy agent on; "false", a
    JSON false, an empty or unparsable configuration all read as off, and the cluster is refused."""

    @pytest.mark.parametrize(
        "configuration",
        [
            '{"enableNetworkPolicy": "false"}',
            '{"enableNetworkPolicy": "False"}',
            '{"enableNetworkPolicy": false}',
            '{"enableNetworkPolicy": ""}',
            '{"env": {"ENABLE_PREFIX_DELEGATION": "true"}}',
            "",
            "not json",
            None,
        ],
    )
    def test_anything_but_true_is_off_and_refused(self, configuration):
        team = cni_configured(configuration)
        assert not team.description().enforces_network_policies
        with pytest.raises(ConfigError, match="cluster platform-prod enforces no NetworkPolicy"):
            planned_on(team)

    @pytest.mark.parametrize(
        "configuration", ['{"enableNetworkPolicy": "true"}', '{"enableNetworkPolicy": "TRUE"}']
    )
    def test_true_is_on(self, configuration):
        team = cni_configured(configuration)
        assert team.description().enforces_network_policies
        planned_on(team)


GPU_TAINT = {"key": "ray-llm-eks/inference", "value": "gpu", "effect": "NoSchedule"}


class TestWhichTolerationLetsATeamsPluginOnTheGpuNodes:
    """Issue 53's sweep: planning/addons.py `tolerates`, which decides whether a team's device plugin
    would run on the stack's GPU nodes (if not, the stack refuses it: the GPUs or EFA devices would never
    be advertised and no worker would schedule). The scheduler's rules, each shape of toleration."""

    @pytest.mark.parametrize(
        "toleration",
        [
            {"operator": "Exists"},
            {"key": "ray-llm-eks/inference", "operator": "Exists"},
            {"key": "ray-llm-eks/inference", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "ray-llm-eks/inference", "operator": "Equal", "value": "gpu"},
            {"key": "ray-llm-eks/inference", "value": "gpu"},  # Equal is the default operator
        ],
    )
    def test_these_tolerate_it(self, toleration):
        assert tolerates([toleration], GPU_TAINT)

    @pytest.mark.parametrize(
        "toleration",
        [
            {"key": "nvidia.com/gpu", "operator": "Exists"},
            {"operator": "Equal", "value": "gpu"},  # an empty key needs Exists
            {"key": "ray-llm-eks/inference", "operator": "Exists", "effect": "NoExecute"},
            {"operator": "Exists", "effect": "PreferNoSchedule"},
            {"key": "ray-llm-eks/inference", "operator": "Equal", "value": "system"},
            {"key": "ray-llm-eks/inference"},  # Equal to the empty value
        ],
    )
    def test_these_do_not(self, toleration):
        assert not tolerates([toleration], GPU_TAINT)
        assert tolerates([toleration, {"operator": "Exists"}], GPU_TAINT)  # any one toleration is enough


class TestOtherEnginesAndAutoscalersUnderOtherNames:
    """Issue 53's sweep: what finds Karpenter and a NetworkPolicy engine where name or image do not say."""

    def test_karpenter_from_a_mirrored_image_by_its_label(self):
        mirrored = deployment(
            "kube-system",
            "node-provisioner",
            "123456789012.dkr.ecr.us-east-1.amazonaws.com/mirror/controller:1.14.1",
            **{"app.kubernetes.io/name": "karpenter"},
        )
        assert other_node_autoscalers(inventory([mirrored])) == [
            "Karpenter (Deployment kube-system/node-provisioner)"
        ]

    @pytest.mark.parametrize("app", ["calico-node", "cilium"])
    def test_calico_and_cilium_by_their_k8s_app_label(self, app):
        renamed = daemonset("kube-system", "cni-agent", {"name": "agent", "image": "x"}, **{"k8s-app": app})
        assert network_policy_engines(inventory([], [AWS_NODE_OFF, renamed]), False) == [
            "cni-agent (DaemonSet kube-system/cni-agent)"
        ]
        assert network_policy_engines(inventory([renamed]), False) == []  # a DaemonSet, not a Deployment


class TestTheTeamsEnvoyGatewayClass:
    """Issue 53's sweep: on a cluster running Envoy Gateway, the stack's Gateway takes a GatewayClass of
    Envoy Gateway's controller that the controller accepted, never another controller's or one not
    accepted (its Gateway would never be programmed, and the endpoint never answer)."""

    @staticmethod
    def planned(*classes: dict[str, Any]) -> Any:
        from planning.addons import plan_addons
        from tests.fakes.existing import TEAM_WITH_GATEWAY

        team = replace(TEAM_WITH_GATEWAY, gateway_classes=classes)
        return plan_addons(stack_settings("byo.example"), team.inventory())

    @staticmethod
    def gateway_class(name: str, controller: str, accepted: str) -> dict[str, Any]:
        return {
            "metadata": {"name": name},
            "spec": {"controllerName": controller},
            "status": {"conditions": [{"type": "Accepted", "status": accepted}]},
        }

    ENVOY = "gateway.envoyproxy.io/gatewayclass-controller"

    def test_an_accepted_class_of_envoy_gateway_is_used_whatever_else_is_there(self):
        plan = self.planned(
            self.gateway_class("a-istio", "istio.io/gateway-controller", "True"),
            self.gateway_class("b-pending", self.ENVOY, "False"),
            self.gateway_class("c-eg", self.ENVOY, "True"),
        )
        assert plan.gateway is not None and plan.gateway.class_name == "c-eg"

    @pytest.mark.parametrize(
        ("controller", "accepted"),
        [("istio.io/gateway-controller", "True"), (ENVOY, "False"), (ENVOY, "Unknown")],
    )
    def test_no_usable_class_is_refused(self, controller, accepted):
        with pytest.raises(ConfigError, match="has accepted no GatewayClass of controller"):
            self.planned(self.gateway_class("eg", controller, accepted))


def test_a_teams_kuberay_whose_image_names_no_version_is_warned():
    """Issue 53's sweep: a KubeRay operator by digest or `latest` may be older than the RayService's
    fields need; the preview says so rather than nothing (an older one by version is refused)."""
    from planning.addons import plan_addons
    from world.offline import workload

    for image in ("quay.io/kuberay/operator:latest", "quay.io/kuberay/operator@sha256:" + "0" * 64):
        operator = workload("Deployment", "ray-system", "kuberay-operator", "kuberay-operator", image)
        team = replace(TeamCluster(), deployments=(*TeamCluster().deployments, operator))
        plan = plan_addons(stack_settings("byo.example"), team.inventory())
        assert any(
            "addons.kuberay: the cluster's operator (Deployment ray-system/kuberay-operator) names no "
            "version in its image" in w
            for w in plan.warnings
        ), plan.warnings
