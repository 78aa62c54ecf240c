"""Serving on an EKS cluster a team already runs (issue 30): the program reads the cluster and builds no
VPC, NAT or cluster; its GPU node group joins in a private subnet of the read VPC that offers the GPU
type, with EFA, a placement group and an EFA security group of its own; every add-on is installed only
where the cluster lacks it; nothing of the team's can be changed or deleted by the stack; and whatever
cannot work is refused at preview, naming the key and what to do.

The team's cluster is the offline world's (world/offline.py; its invoke answers in tests/fakes/existing.py),
which Pulumi.byo.example.yaml names.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pytest
import yaml

from config import ConfigError, load_settings
from manifests.observability.monitors import scraper
from planning.addons import GatewayTarget
from tests.chart_values import chart_name
from tests.fakes import pulumi as fakes
from tests.fakes.existing import CLUSTER_SG, TEAM_CLUSTER, TEAM_VPC, TEAM_WITH_GATEWAY, TeamCluster, _workload
from tests.fakes.pulumi import (
    EXISTING_CLUSTER_STACKS,
    AwsState,
    StackRun,
    deployed,
    plan_of,
    run_stack,
    stack_file_config,
    where_of,
)

if TYPE_CHECKING:
    from planning.where import Where

STACK = "byo.example"
NODE_GROUP = "aws:eks/nodeGroup:NodeGroup"
TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
RELEASE = "kubernetes:helm.sh/v3:Release"
NAMESPACE = "kubernetes:core/v1:Namespace"
PRIVATE_A = "subnet-0aa0000000000000a"

THE_TEAMS = {
    # What the team's cluster is made of: the stack may read these, never register one.
    "aws:ec2/vpc:Vpc",
    "aws:ec2/subnet:Subnet",
    "aws:ec2/routeTable:RouteTable",
    "aws:ec2/routeTableAssociation:RouteTableAssociation",
    "aws:ec2/route:Route",
    "aws:ec2/natGateway:NatGateway",
    "aws:ec2/internetGateway:InternetGateway",
    "aws:ec2/vpcEndpoint:VpcEndpoint",
    "aws:ec2/securityGroupRule:SecurityGroupRule",
    "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule",
    "aws:vpc/securityGroupEgressRule:SecurityGroupEgressRule",
    "aws:ec2/tag:Tag",
    "aws:eks/cluster:Cluster",
    "eks:index:Cluster",
    "eks:index:ManagedNodeGroup",
    "awsx:ec2:Vpc",
}


def byo(team: TeamCluster | None = None, **overrides: dict[str, Any]) -> StackRun:
    return run_stack(stack=STACK, overrides=overrides or None, aws=AwsState(team=team or TeamCluster()))


def refused(team: TeamCluster | None = None, **overrides: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as raised:
        byo(team, **overrides)
    assert fakes.LAST_RUN is not None and fakes.LAST_RUN.registrations == [], "refused before any resource"
    return str(raised.value)


def planned(
    team: TeamCluster | None = None,
    stack: str = STACK,
    aws: AwsState | None = None,
    **overrides: dict[str, Any],
) -> Where:
    """What the program's read step decides on `team` (or in the account `aws`, its record included) for
    the stack file with `overrides` (world/reads.py `where_it_serves`, as __main__.read calls it), with
    no stack run: for the questions planning answers. TestWhatIsBuilt and TestAddons tie what a run
    builds to it (the add-ons it installs, the NLB's subnets, the GPU subnet, the warnings)."""
    from tests.fakes.pulumi import stack_settings

    settings = stack_settings(stack, **overrides)
    return where_of(settings, (aws or AwsState(team=team or TeamCluster())).world(settings.region), stack)


@pytest.fixture(scope="module")
def team_run() -> StackRun:
    return byo()


BARE_TEAM = TeamCluster(deployments=(), prometheuses=(), crds=())
"""A team's cluster that runs none of the add-ons (no Load Balancer Controller, Prometheus, Cluster
Autoscaler or EBS CSI driver, none of their CRDs): the stack installs its own of each. The same world as
tests/helm_releases.py's `+own-addons` run, so the suite makes that run once."""


@pytest.fixture(scope="module")
def bare_run() -> StackRun:
    return byo(BARE_TEAM)


ADMIN = "arn:aws:iam::123456789012:role/platform-admins"
VIEWER = "arn:aws:iam::123456789012:role/ci-preview"
DRIFT = "arn:aws:iam::123456789012:role/ray-llm-eks-ci-drift-byo"
GIVEN_GPU_SUBNET = "subnet-0dd0000000000000d"
SET_UP_TEAM = replace(
    TEAM_WITH_GATEWAY,
    addons={
        k: v
        for k, v in {
            **TeamCluster().addons,
            "vpc-cni": {"configurationValues": json.dumps({"enableNetworkPolicy": "true"})},
        }.items()
        if k != "eks-pod-identity-agent"
    },
    access_entries={ADMIN: {"owner": "platform"}},
)
"""A team's cluster set up its own way: it runs Envoy Gateway (TEAM_WITH_GATEWAY), has no EKS Pod
Identity Agent add-on, a VPC CNI add-on without a role of its own, and an access entry of its own for
ADMIN."""
LISTED = {
    "cluster": {
        "existingClusterName": TEAM_CLUSTER,
        "adminPrincipalArns": [ADMIN],
        "viewerPrincipalArns": [VIEWER],
        "refreshPrincipalArns": [DRIFT],
    },
    "gpuNodes": {"subnetId": GIVEN_GPU_SUBNET},
}
"""The stack file's keys on SET_UP_TEAM: ADMIN (who has the team's entry), a viewer, a refresh principal,
and a GPU subnet outside the cluster's own."""


@pytest.fixture(scope="module")
def set_up_run() -> StackRun:
    """One run for seven independent questions, each decided from its own part of the cluster's answers
    or of the stack file and registering resources of its own: the team's Envoy Gateway (the Gateway's
    class and namespace: its workloads and GatewayClasses), the missing Pod Identity Agent (the stack's
    add-on: the add-on list), the CNI's role (a policy on the node role: the CNI add-on), the admin with
    the team's entry, the viewer and the refresh principal (planning/access.py gives each listed
    principal its own entry and policy, or none), and the given GPU subnet (planning/existing_cluster.py,
    the node group's subnet)."""
    return byo(SET_UP_TEAM, **LISTED)


def test_the_example_stack_file_serves_on_the_mocked_team_cluster():
    assert STACK in EXISTING_CLUSTER_STACKS
    cluster = stack_file_config(STACK)["ray-llm-eks:cluster"]
    assert cluster["existingClusterName"] == TEAM_CLUSTER


class TestWhatIsBuilt:
    def test_no_vpc_nat_or_cluster_only_the_stacks_node_groups_and_the_serving_layer(self, team_run):
        types = {r.type for r in team_run.registrations}
        assert not types & THE_TEAMS
        assert {g.name for g in team_run.of_type(NODE_GROUP)} == {"cluster-system", "gpu-nodes"}
        for kind in ("kubernetes:ray.io/v1:RayService", "kubernetes:gateway.networking.k8s.io/v1:Gateway"):
            assert team_run.of_type(kind)

    def test_the_gpu_nodes_join_a_private_subnet_of_the_read_vpc_in_a_zone_that_offers_the_type(
        self, team_run
    ):
        gpu = team_run.one(NODE_GROUP, "gpu-nodes").inputs
        assert gpu["subnetIds"] == [PRIVATE_A]  # private, the cluster's own, us-east-1a offers g6.8xlarge
        where = planned()  # what the tests of `planned` ask is what the run builds on
        assert where.existing is not None and where.existing.gpu_subnet.id == PRIVATE_A
        assert gpu["clusterName"] == TEAM_CLUSTER and gpu["version"] == "1.34"
        assert gpu["amiType"] == "AL2023_x86_64_NVIDIA"
        assert gpu["labels"]["role"] == "gpu-worker"  # its labels and taint: TestCoTenancy
        assert gpu["updateConfig"] == {"maxUnavailable": 1, "updateStrategy": "MINIMAL"}
        assert team_run.exports["gpuAvailabilityZone"] == "us-east-1a"
        system = team_run.one(NODE_GROUP, "cluster-system").inputs
        assert system["subnetIds"] == [
            "subnet-0aa0000000000000a",
            "subnet-0bb0000000000000b",
            "subnet-0cc0000000000000c",
        ]
        assert system["amiType"] == "AL2023_x86_64_STANDARD"

    def test_efa_as_pulumi_eks_builds_it_with_a_security_group_that_allows_all_to_and_from_itself(
        self, team_run
    ):
        template = team_run.one(TEMPLATE, "gpu-nodes-template").inputs
        (interface,) = template["networkInterfaces"]  # g6.8xlarge: one network card
        assert interface["interfaceType"] == "efa" and interface["deviceIndex"] == 0
        efa_group = team_run.one("aws:ec2/securityGroup:SecurityGroup", "gpu-efa")
        assert interface["securityGroups"] == [CLUSTER_SG, team_run.id_of(efa_group)]
        rules = efa_group.inputs
        assert rules["vpcId"] == TEAM_VPC
        for direction in ("ingress", "egress"):
            assert rules[direction] == [{"protocol": "-1", "fromPort": 0, "toPort": 0, "self": True}]
        placement = team_run.one("aws:ec2/placementGroup:PlacementGroup", "gpu-placement")
        assert placement.inputs["strategy"] == "cluster"
        depends = team_run.one(TEMPLATE, "gpu-nodes-template").property_dependencies["placement"]
        assert placement.urn in depends  # its name is AWS's (auto-named), so known only then

    # A p5's one EFA interface per network card, on a team's cluster: tests/test_side_reservation.py
    # (TestOnATeamsCluster), on the run of p5 node groups on a Capacity Block it makes anyway.

    def test_every_node_boots_hardened_as_on_the_stacks_own_cluster(self, team_run):
        key = team_run.id_of(team_run.one("aws:kms/key:Key", "cluster-volumes"))
        for template in team_run.of_type(TEMPLATE):
            (device,) = template.inputs["blockDeviceMappings"]
            ebs = device["ebs"]
            assert (ebs["encrypted"], ebs["volumeType"], device["deviceName"]) == ("true", "gp3", "/dev/xvda")
            assert ebs["kmsKeyId"].endswith("cluster-volumes") or ebs["kmsKeyId"] == key
            assert template.inputs["metadataOptions"]["httpTokens"] == "required"
            assert template.inputs["metadataOptions"]["httpPutResponseHopLimit"] == 1

    def test_the_kubernetes_provider_is_built_from_what_was_read(self, team_run):
        (provider,) = team_run.of_type("pulumi:providers:kubernetes")
        kubeconfig = json.loads(provider.inputs["kubeconfig"].value)
        (cluster,) = kubeconfig["clusters"]
        assert cluster["cluster"]["server"].startswith("https://PLATFORM-PROD")
        assert kubeconfig["users"][0]["user"]["exec"]["args"][-1] == TEAM_CLUSTER
        k8s = [r for r in team_run.registrations if r.type.startswith("kubernetes:") and r.custom]
        assert k8s and all(r.provider.startswith(provider.urn) for r in k8s)

    def test_the_preview_says_what_it_read_and_decided(self, team_run):
        infos = "\n".join(team_run.infos)
        assert f"existing cluster {TEAM_CLUSTER}: Kubernetes 1.34, VPC {TEAM_VPC}" in infos
        assert "addons.loadBalancerController: auto: the cluster's own AWS Load Balancer Controller" in infos
        assert (
            "addons.kuberay: auto: the stack installs the KubeRay operator (the cluster runs none)" in infos
        )

    def test_the_cost_leaves_out_the_teams_control_plane_and_nat(self, team_run):
        (cost,) = [m for m in team_run.infos if m.startswith("hourly on-demand cost")]
        assert "EKS control plane" not in cost and "NAT" not in cost and "GPU nodes" in cost


CHART_OF = {
    "nvidiaDevicePlugin": "nvidia-device-plugin",
    "efaDevicePlugin": "aws-efa-k8s-device-plugin",
    "kuberay": "kuberay-operator",
    "loadBalancerController": "aws-load-balancer-controller",
    "envoyGateway": "gateway-helm",
    "prometheus": "kube-prometheus-stack",
    "dcgmExporter": "dcgm-exporter",
    "clusterAutoscaler": "cluster-autoscaler",
}
"""The Helm chart of each `addons` key the stack installs as a release."""


def installed_charts(where: Where) -> set[str]:
    """The charts of the add-ons planning decided the stack installs."""
    return {CHART_OF[key] for key in where.context.addons.install}


class TestAddons:
    def test_the_teams_add_ons_are_used_and_the_rest_installed(self, team_run):
        releases = {r.inputs["chart"].rsplit("/", 1)[-1] for r in team_run.of_type(RELEASE)}
        assert releases == {
            "nvidia-device-plugin",
            "aws-efa-k8s-device-plugin",
            "kuberay-operator",
            "gateway-helm",
            "dcgm-exporter",
        }
        # The releases are the add-ons planning installs: the tests that ask `planned` which add-ons
        # are installed ask what a run makes.
        assert installed_charts(planned()) == releases
        names = {r.type for r in team_run.registrations}
        assert "ray-llm-eks:load_balancer_controller:LoadBalancerController" not in names
        assert "ray-llm-eks:cluster_autoscaler:ClusterAutoscaler" not in names

    def test_with_the_teams_prometheus_only_monitors_rules_and_dashboards_labelled_for_it(self, team_run):
        labels = {"release": "kube-prometheus-stack"}  # what its selectors match
        monitors = [
            r
            for r in team_run.registrations
            if r.type.startswith("kubernetes:monitoring.coreos.com/v1:")
            and r.name.startswith("observability-")
        ]
        kinds = {r.type.rsplit(":", 1)[-1] for r in monitors}
        assert kinds == {"PodMonitor", "PrometheusRule", "ServiceMonitor"}  # the stack's KubeRay operator
        for monitor in monitors:
            assert monitor.inputs["metadata"]["namespace"] == "monitoring"
            assert monitor.inputs["metadata"]["labels"] == labels
        pod_monitor = next(m for m in monitors if m.type.endswith("PodMonitor"))
        assert pod_monitor.inputs["spec"]["namespaceSelector"] == {"matchNames": ["inference"]}
        service_monitor = next(m for m in monitors if m.type.endswith("ServiceMonitor"))
        assert service_monitor.inputs["spec"]["namespaceSelector"] == {"matchNames": ["kuberay-operator"]}
        dashboards = [r for r in team_run.of_type("kubernetes:core/v1:ConfigMap") if "dashboard" in r.name]
        assert dashboards and {d.inputs["metadata"]["namespace"] for d in dashboards} == {"monitoring"}
        assert not [r for r in team_run.of_type(NAMESPACE) if r.inputs["metadata"]["name"] == "monitoring"]
        assert "grafanaAdminPassword" not in team_run.exports
        assert team_run.exports["prometheusService"] == "monitoring/prometheus-operated"  # what ops asks

    @pytest.mark.parametrize(
        ("selector", "labels", "selected"),
        [
            (None, {}, True),  # its own namespace only: where the monitors go
            ({}, {}, True),  # every namespace
            ({"matchLabels": {"monitoring": "on"}}, {"monitoring": "on"}, True),
            ({"matchLabels": {"monitoring": "on"}}, {}, False),
            (
                {
                    "matchExpressions": [
                        {
                            "key": "kubernetes.io/metadata.name",
                            "operator": "In",
                            "values": ["monitoring", "apps"],
                        }
                    ]
                },
                {},
                True,
            ),
            ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, {"tier": "x"}, False),
        ],
    )
    def test_the_teams_prometheus_must_look_in_its_own_namespace(self, selector, labels, selected):
        """The monitors go to the Prometheus's namespace; a namespace selector that does not match it
        would leave them unread: refused, naming the selector."""
        prometheus = json.loads(json.dumps(TeamCluster().prometheuses[0]))
        prometheus["spec"].pop("podMonitorNamespaceSelector")
        if selector is not None:
            prometheus["spec"]["ruleNamespaceSelector"] = selector
        team = replace(
            TeamCluster(),
            prometheuses=(prometheus,),
            namespaces={**TeamCluster().namespaces, "monitoring": labels},
        )
        if selected:
            # Decided in planning (planning/addons.py): the program exports the scraper its plan names
            # (`prometheusService`, held to the whole program's run by the test above).
            assert scraper(plan_of(STACK, team=team).cluster_context).ref == "monitoring/prometheus-operated"
        else:
            message = refused(team)
            assert "ruleNamespaceSelector does not match its own namespace monitoring" in message

    def test_the_teams_prometheus_may_scrape_the_ray_pods(self, team_run):
        workers = next(
            r
            for r in team_run.of_type("kubernetes:networking.k8s.io/v1:NetworkPolicy")
            if r.name.endswith("ray-workers-ingress")
        )
        peers = [p for rule in workers.inputs["spec"]["ingress"] for p in rule["from"]]
        assert {
            "podSelector": {
                "matchLabels": {
                    "app.kubernetes.io/name": "prometheus",
                    "operator.prometheus.io/name": "kube-prometheus-stack-prometheus",
                }
            },
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}},
        } in peers

    def test_the_nlb_is_named_its_subnets_and_admits_every_range_of_the_vpc(self, team_run):
        service = team_run.one("kubernetes:core/v1:Service", "endpoint-load-balancer").inputs
        annotations = service["metadata"]["annotations"]
        assert annotations["service.beta.kubernetes.io/aws-load-balancer-subnets"] == (
            "subnet-0aa0000000000000a,subnet-0bb0000000000000b,subnet-0cc0000000000000c,subnet-0dd0000000000000d"
        )
        assert service["spec"]["loadBalancerSourceRanges"] == ["10.20.0.0/16", "100.64.0.0/16"]
        # The annotation names the subnets planning chose (the context's), as the run above shows.
        assert (
            ",".join(planned().context.load_balancer_subnets)
            == (annotations["service.beta.kubernetes.io/aws-load-balancer-subnets"])
        )
        certificate = "arn:aws:acm:us-east-1:123456789012:certificate/0f1e2d3c-aaaa-bbbb-cccc-1234567890ab"
        internet = planned(
            endpoint={
                "scheme": "internet-facing",
                "sourceRanges": ["203.0.113.0/24"],
                "certificateArn": certificate,
                "hostname": "llm.example.com",
            }
        )
        assert internet.context.load_balancer_subnets == (
            "subnet-0ea0000000000000a",
            "subnet-0eb0000000000000b",
            "subnet-0ec0000000000000c",
        )

    def test_with_the_teams_envoy_gateway_its_class_and_namespace(self, set_up_run):
        run = set_up_run
        # What planning reads of the team's Envoy Gateway is what the run serves through.
        assert planned(SET_UP_TEAM, **LISTED).context.addons.gateway == GatewayTarget("eg", "gateways")
        assert not run.of_type("kubernetes:gateway.networking.k8s.io/v1:GatewayClass")
        assert (
            run.one("kubernetes:gateway.networking.k8s.io/v1:Gateway").inputs["spec"]["gatewayClassName"]
            == "eg"
        )
        service = run.one("kubernetes:core/v1:Service", "endpoint-load-balancer").inputs
        assert service["metadata"]["namespace"] == "gateways"  # where Envoy Gateway runs the proxies
        assert run.exports["loadBalancerService"] == "gateways/ray-llm-gateway"
        names = {r.inputs["metadata"]["name"] for r in run.of_type(NAMESPACE)}
        assert "envoy-gateway-system" not in names and "gateways" not in names
        assert "gateway-helm" not in {r.inputs["chart"].rsplit("/", 1)[-1] for r in run.of_type(RELEASE)}

    def test_a_teams_envoy_gateway_in_gateway_namespace_mode_is_refused(self):
        """In that (alpha) mode Envoy Gateway runs each Gateway's proxies in the Gateway's namespace, so the
        NLB Service the stack puts in the controller's namespace would select nothing."""
        config = {
            "metadata": {"namespace": "gateways", "name": "envoy-gateway-config"},
            "data": {
                "envoy-gateway.yaml": "provider:\n  type: Kubernetes\n  kubernetes:\n    deploy:\n"
                "      type: GatewayNamespace\n"
            },
        }
        message = refused(replace(TEAM_WITH_GATEWAY, gateway_configs=(config,)))
        assert "addons.envoyGateway" in message and "GatewayNamespace" in message
        assert "endpoint.enabled: false" in message
        default_mode = {**config, "data": {"envoy-gateway.yaml": "provider:\n  type: Kubernetes\n"}}
        # Not refused, and served through the team's gateway in its namespace (the test above holds a
        # run to what planning decides here).
        accepted = planned(replace(TEAM_WITH_GATEWAY, gateway_configs=(default_mode,)))
        assert accepted.context.addons.gateway == GatewayTarget("eg", "gateways")

    def test_what_the_stack_installed_stays_the_stacks_on_the_next_up(self, team_run):
        record = team_run.one("aws:ec2/securityGroup:SecurityGroup", "gpu-efa").inputs["tags"]
        assert record["ray-llm-eks/installed"].split() == sorted(
            ["dcgmExporter", "efaDevicePlugin", "envoyGateway", "kuberay", "nvidiaDevicePlugin"]
        )
        assert record["ray-llm-eks/gpu-subnet"] == PRIVATE_A
        # Next preview: the cluster now runs the stack's own KubeRay operator, which is not the team's.
        ours = _workload(
            "Deployment",
            "kuberay-operator",
            "kuberay-operator",
            "kuberay-operator",
            "quay.io/kuberay/operator:v1.7.0",
        )
        team = replace(TeamCluster(), deployments=(*TeamCluster().deployments, ours))
        after = deployed(team_run, AwsState(team=team))
        # Planning decides it from the record (the add-ons it installs are the releases a run makes:
        # test_the_teams_add_ons_are_used_and_the_rest_installed).
        again = planned(aws=after)
        assert again.context.addons.installs("kuberay")
        assert any("the stack's own KubeRay operator (installed by an earlier up)" in m for m in again.infos)

    def test_the_gpu_subnet_stays_whatever_subnets_the_team_adds(self, team_run):
        from tests.fakes.existing import DEFAULT_SUBNETS, Subnet

        earlier = Subnet(
            "subnet-0000000000000000a", "us-east-1a", "10.20.128.0/19", public=False, in_cluster=True
        )
        team = replace(TeamCluster(), subnets=(earlier, *DEFAULT_SUBNETS))
        # The GPU node group joins the subnet planning chose (held to a run in TestWhatIsBuilt).
        fresh = planned(team).existing
        assert fresh is not None and fresh.gpu_subnet.id == earlier.id  # a new stack: first
        after = deployed(team_run, AwsState(team=team))
        kept = planned(aws=after).existing
        assert kept is not None and kept.gpu_subnet.id == PRIVATE_A


class TestNothingOfTheTeamsCanBeChangedOrDeleted:
    """`pulumi destroy` deletes what the stack registered: nothing registered may be the team's."""

    def test_the_stack_registers_and_imports_none_of_the_teams_resources(self, team_run):
        assert not {r.type for r in team_run.registrations} & THE_TEAMS
        assert [r.name for r in team_run.registrations if r.import_id] == []

    def test_every_node_group_is_the_stacks_own(self, team_run):
        for group in team_run.of_type(NODE_GROUP):
            template = team_run.one(TEMPLATE, f"{group.name}-template")
            assert team_run.id_of(template) == group.inputs["launchTemplate"]["id"]
            assert group.inputs["nodeRoleArn"].endswith("cluster-node")

    def test_an_add_on_the_stack_adds_survives_its_removal(self, set_up_run):
        run = set_up_run  # a team's cluster without the Pod Identity Agent add-on
        addon = run.one("aws:eks/addon:Addon", "cluster-pod-identity").inputs
        assert (addon["addonName"], addon["preserve"]) == ("eks-pod-identity-agent", True)
        assert addon["tags"] == {"ray-llm-eks/stack": "ray-llm-eks/byo.example"}

    def test_no_namespace_of_the_teams_is_created_or_deleted(self, team_run):
        created = {r.inputs["metadata"]["name"] for r in team_run.of_type(NAMESPACE)}
        team_namespaces = {"kube-system", "monitoring", "default"}
        assert created and not created & team_namespaces

    def test_no_helm_release_replaces_one_of_the_teams(self, team_run):
        """The team's releases in kube-system and monitoring keep their names: none of the stack's
        releases has a name and namespace of theirs."""
        theirs = {
            (d["metadata"]["namespace"], d["metadata"]["annotations"]["meta.helm.sh/release-name"])
            for d in TeamCluster().deployments
            if d["metadata"].get("annotations")
        }
        ours = {(r.inputs["namespace"], r.inputs["name"]) for r in team_run.of_type(RELEASE)}
        assert ours and not ours & theirs

    def test_a_listed_principal_with_the_teams_entry_keeps_it(self, set_up_run):
        run, admin = set_up_run, ADMIN
        entries = run.of_type("aws:eks/accessEntry:AccessEntry")
        # The admin has the team's entry: none of the stack's; the others listed get theirs.
        assert sorted(e.inputs["principalArn"] for e in entries) == sorted([VIEWER, DRIFT])
        for entry in entries:
            assert entry.inputs["tags"] == {"ray-llm-eks/stack": "ray-llm-eks/byo.example"}
        assert any(f"{admin} has an access entry on the cluster already" in m for m in run.infos)

    def test_a_refresh_principal_on_a_teams_cluster_is_told_it_reads_every_teams_secrets(
        self, team_run, set_up_run
    ):
        """Issue 47: `AmazonEKSAdminViewPolicy` at cluster scope reads every namespace's Secrets. A
        narrower grant cannot be verified offline (planning/access.py), so the preview says what it reads
        whenever one is listed on a team's cluster, and only then."""
        drift, run = DRIFT, set_up_run
        (warning,) = [w for w in run.warnings if "cluster.refreshPrincipalArns" in w]
        assert (
            f"on team cluster {TEAM_CLUSTER}: {drift} get AmazonEKSAdminViewPolicy at cluster scope"
            in warning
        )
        assert "every namespace's Secrets, the team's included" in warning
        assert "not only this stack's namespaces: " in warning and "inference" in warning
        assert "can change nothing" in warning and "without --refresh" in warning
        (association,) = [
            a
            for a in run.of_type("aws:eks/accessPolicyAssociation:AccessPolicyAssociation")
            if a.inputs["principalArn"] == drift
        ]
        assert association.inputs["policyArn"].endswith("/AmazonEKSAdminViewPolicy")
        assert association.inputs["accessScope"] == {"type": "cluster"}  # what the warning says
        assert not any("cluster.refreshPrincipalArns" in w for w in team_run.warnings)

    def test_a_refresh_principal_on_the_stacks_own_cluster_is_not_warned_about(self):
        drift = "arn:aws:iam::123456789012:role/ray-llm-eks-ci-drift-dev"
        where = planned(stack="dev", cluster={"refreshPrincipalArns": [drift]})
        assert not any("refreshPrincipalArns" in w for w in where.warnings)
        assert drift in [e.principal_arn for e in where.access.entries]


class TestRefusedAtPreview:
    def test_a_cluster_that_does_not_exist(self):
        said = refused(cluster={"existingClusterName": "nope"})
        assert "ray-llm-eks:cluster.existingClusterName: EKS in us-east-1 has no cluster 'nope'" in said

    def test_a_kubernetes_version_the_charts_do_not_support(self):
        said = refused(replace(TeamCluster(), version="1.31"))
        assert "runs Kubernetes 1.31: the stack's pinned charts and controllers support 1.33 to 1.35" in said

    def test_authentication_without_access_entries(self):
        said = refused(replace(TeamCluster(), authentication_mode="CONFIG_MAP"))
        assert "authenticationMode=API_AND_CONFIG_MAP" in said

    def test_no_pod_identity_agent_says_both_ways_to_add_it(self):
        team = TeamCluster(
            addons={k: v for k, v in TeamCluster().addons.items() if k != "eks-pod-identity-agent"}
        )
        said = refused(team, cluster={"existingClusterName": TEAM_CLUSTER, "installPodIdentityAgent": False})
        assert "cluster.installPodIdentityAgent: true" in said
        assert "aws eks create-addon --cluster-name platform-prod --addon-name eks-pod-identity-agent" in said

    def test_no_private_subnet_in_a_zone_that_offers_the_gpu_type(self):
        from tests.fakes.existing import DEFAULT_SUBNETS

        public_only_where_offered = tuple(s for s in DEFAULT_SUBNETS if s.public or s.zone == "us-east-1d")
        said = refused(
            replace(TeamCluster(), subnets=public_only_where_offered),
            gpuNodes={"availabilityZone": "us-east-1a"},
        )
        assert "has no private subnet in ray-llm-eks:gpuNodes.availabilityZone us-east-1a" in said

    @pytest.mark.parametrize(
        ("subnet", "says"),
        [
            ("subnet-0ea0000000000000a", "is public"),
            ("subnet-0123456789abcdef0", f"is not a subnet of VPC {TEAM_VPC}"),
        ],
    )
    def test_a_given_gpu_subnet_that_cannot_work(self, subnet, says):
        said = refused(gpuNodes={"subnetId": subnet})
        assert "ray-llm-eks:gpuNodes.subnetId" in said and says in said

    def test_a_given_gpu_subnet_is_used(self, set_up_run):
        """Also the tie between `planned` and the program: what it warns of, the preview says."""
        run = set_up_run  # gpuNodes.subnetId: subnet-0dd0000000000000d
        assert run.one(NODE_GROUP, "gpu-nodes").inputs["subnetIds"] == ["subnet-0dd0000000000000d"]
        assert any("outside cluster platform-prod's own" in w for w in run.warnings)
        where = planned(gpuNodes={"subnetId": "subnet-0dd0000000000000d"})
        assert where.warnings and set(where.warnings) <= set(run.warnings)

    def test_installing_what_the_team_runs_already(self):
        said = refused(addons={"loadBalancerController": "install"})
        assert "ray-llm-eks:addons.loadBalancerController: install, but the cluster runs" in said
        assert "Deployment kube-system/aws-load-balancer-controller" in said

    def test_using_what_the_team_does_not_run(self):
        said = refused(addons={"kuberay": "existing"})
        assert "ray-llm-eks:addons.kuberay: existing, but the cluster runs no KubeRay operator" in said

    def test_a_teams_device_plugin_that_would_never_run_on_the_gpu_nodes(self):
        plugin = _workload(
            "DaemonSet", "kube-system", "efa-plugin", "aws-efa-k8s-device-plugin", "efa:v0.5.6"
        )
        said = refused(replace(TeamCluster(), daemonsets=(plugin,)))
        assert (
            "addons.efaDevicePlugin: the cluster's EFA device plugin (DaemonSet kube-system/efa-plugin)"
            in said
        )
        assert "does not tolerate the GPU nodes' taint ray-llm-eks/inference=gpu:NoSchedule" in said
        tolerating = _workload(
            "DaemonSet",
            "kube-system",
            "efa-plugin",
            "aws-efa-k8s-device-plugin",
            "efa:v0.5.6",
            tolerations=[{"operator": "Exists"}],
        )
        # The cluster's plugin is used: the stack installs none (what planning decides is what a run
        # installs: test_the_teams_add_ons_are_used_and_the_rest_installed).
        assert not planned(replace(TeamCluster(), daemonsets=(tolerating,))).context.addons.installs(
            "efaDevicePlugin"
        )

    def test_a_kuberay_older_than_the_stacks(self):
        old = _workload(
            "Deployment",
            "ray-system",
            "kuberay-operator",
            "kuberay-operator",
            "quay.io/kuberay/operator:v1.4.2",
        )
        said = refused(replace(TeamCluster(), deployments=(*TeamCluster().deployments, old)))
        assert "KubeRay operator (Deployment ray-system/kuberay-operator) is 1.4.2" in said

    def test_an_unreadable_cluster_leaves_auto_undecided(self):
        said = refused(replace(TeamCluster(), readable=False))
        assert "ray-llm-eks:addons.kuberay: auto, but the cluster's workloads could not be read" in said
        explicit = {
            k: "install"
            for k in ("nvidiaDevicePlugin", "efaDevicePlugin", "kuberay", "envoyGateway", "dcgmExporter")
        }
        explicit |= {
            "loadBalancerController": "existing",
            "prometheus": "install",
            "clusterAutoscaler": "existing",
        }
        where = planned(replace(TeamCluster(), readable=False), addons=explicit)
        assert any("existing, unchecked" in w for w in where.warnings)

    def test_network_keys_describe_a_vpc_the_stack_does_not_make(self):
        said = refused(network={"vpcCidr": "10.1.0.0/16"})
        assert "ray-llm-eks:network.vpcCidr: the stack creates no VPC" in said


class TestTheTeamsSettings:
    def test_the_vpc_cni_without_a_role_of_its_own_gets_its_policy_on_the_stacks_node_role(self, set_up_run):
        run = set_up_run  # its vpc-cni add-on: enableNetworkPolicy, no serviceAccountRoleArn
        assert SET_UP_TEAM.addons["vpc-cni"] == {
            "configurationValues": json.dumps({"enableNetworkPolicy": "true"})
        }
        policies = {
            r.inputs["policyArn"].rsplit("/", 1)[-1]
            for r in run.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
            if r.name.startswith("cluster-node-")
        }
        assert "AmazonEKS_CNI_Policy" in policies

    def test_a_cluster_that_enforces_no_network_policy_is_refused_unless_accepted(self):
        """Without enforcement every team pod reaches Ray Serve on :8000 without a key (issue 38)."""
        unenforced = TeamCluster(
            addons={
                **TeamCluster().addons,
                "vpc-cni": {"serviceAccountRoleArn": "arn:aws:iam::123456789012:role/cni"},
            }
        )
        said = refused(unenforced)
        assert "cluster platform-prod enforces no NetworkPolicy" in said
        assert '--configuration-values \'{"enableNetworkPolicy": "true"}\'' in said
        assert "ray-llm-eks:cluster.acceptUnenforcedNetworkPolicies: true" in said
        accepted = planned(unenforced, cluster={"acceptUnenforcedNetworkPolicies": True})
        assert any("acceptUnenforcedNetworkPolicies: accepted" in w for w in accepted.warnings)
        calico = _workload(
            "DaemonSet", "calico-system", "calico-node", "calico-node", "quay.io/calico/node:v3.30.0"
        )
        assert not any(
            "NetworkPolicy" in w for w in planned(replace(unenforced, daemonsets=(calico,))).warnings
        )


class TestNothingOfTheTeamsIsTakenOver:
    """Issue 38: against a mocked team cluster, what the stack does and never does there."""

    def test_cluster_scoped_objects_stand_apart_and_the_crds_left_behind_are_named(self, bare_run):
        run = bare_run
        names = {
            r.inputs["metadata"]["name"]
            for kind in ("storage.k8s.io/v1:StorageClass", "gateway.networking.k8s.io/v1:GatewayClass")
            for r in run.of_type(f"kubernetes:{kind}")
        }
        assert {"ray-llm-eks-inference-gp3", "ray-llm-eks-inference-envoy"} <= names and not {
            "gp3",
            "envoy",
        } & names
        (crds,) = [i for i in run.infos if i.startswith("CRDs: `destroy` leaves")]
        for group in (
            "ray.io",
            "gateway.networking.k8s.io",
            "gateway.envoyproxy.io",
            "monitoring.coreos.com",
        ):
            assert group in crds
        assert "xargs kubectl delete" in crds

    def test_karpenter_makes_auto_refuse_the_stacks_cluster_autoscaler(self):
        no_ca = tuple(
            d for d in TeamCluster().deployments if "cluster-autoscaler" not in d["metadata"]["name"]
        )
        karpenter = replace(
            TeamCluster(), deployments=no_ca, crds=(*TeamCluster().crds, "nodepools.karpenter.sh")
        )
        said = refused(karpenter)
        assert "ray-llm-eks:addons.clusterAutoscaler: auto, but another node autoscaler runs" in said
        assert "CRD nodepools.karpenter.sh" in said
        # Told to install, it does (an add-on planning installs is a release of the run: the tests
        # of the bare team cluster's run below and test_the_teams_add_ons_are_used_and_the_rest_installed).
        told = planned(karpenter, addons={"clusterAutoscaler": "install"})
        assert told.context.addons.installs("clusterAutoscaler")

    def test_the_stacks_cluster_autoscaler_manages_the_stacks_gpu_group_alone(self, bare_run):
        run = bare_run  # the team runs no Cluster Autoscaler (nor the other add-ons: independent here)
        assert planned(BARE_TEAM).context.addons.installs("clusterAutoscaler")
        (release,) = [r for r in run.of_type(RELEASE) if r.inputs["chart"].endswith("cluster-autoscaler")]
        tags = release.inputs["values"]["autoDiscovery"]["tags"]
        assert tags[-1] == f"ray-llm-eks/cluster-autoscaler/{STACK}"
        assert "skip-nodes-with-local-storage" not in release.inputs["values"]["extraArgs"]
        (asg_tag,) = run.of_type("aws:autoscaling/tag:Tag")
        assert asg_tag.inputs["tag"] == {
            "key": f"ray-llm-eks/cluster-autoscaler/{STACK}",
            "value": "owned",
            "propagateAtLaunch": False,
        }
        (policy,) = [
            json.loads(r.inputs["policy"])
            for r in run.of_type("aws:iam/rolePolicy:RolePolicy")
            if "SetDesiredCapacity" in r.inputs["policy"]
        ]
        (write,) = [st for st in policy["Statement"] if "autoscaling:SetDesiredCapacity" in st["Action"]]
        assert write["Condition"] == {
            "StringEquals": {f"aws:ResourceTag/ray-llm-eks/cluster-autoscaler/{STACK}": "owned"}
        }

    def test_a_self_managed_ebs_csi_driver_is_left_alone(self):
        driver = _workload(
            "Deployment",
            "kube-system",
            "ebs-csi-controller",
            "aws-ebs-csi-driver",
            "public.ecr.aws/ebs-csi-driver/aws-ebs-csi-driver:v1.50.0",
        )
        # Planning decides whether the stack adds the EBS CSI add-on (`installs_ebs_csi`); the test
        # below holds a run that installs it to that decision.
        where = planned(
            replace(TeamCluster(), deployments=(*TeamCluster().deployments, driver), prometheuses=())
        )
        assert not where.installs_ebs_csi
        assert any(
            "EBS CSI: the cluster's own, self-managed (Deployment kube-system/ebs-csi-controller)" in i
            for i in where.infos
        )

    def test_an_ebs_csi_add_on_the_stack_adds_overwrites_nothing_and_stays(self, bare_run):
        run = bare_run  # the team runs no Prometheus (the stack's needs a volume) and no EBS CSI driver
        assert planned(BARE_TEAM).installs_ebs_csi
        (addon,) = [
            r for r in run.of_type("aws:eks/addon:Addon") if r.inputs["addonName"] == "aws-ebs-csi-driver"
        ]
        assert (addon.inputs["resolveConflictsOnCreate"], addon.inputs["resolveConflictsOnUpdate"]) == (
            "NONE",
            "PRESERVE",
        )
        assert addon.inputs["preserve"] is True


STACK_KEY = "ray-llm-eks/inference"
"""The byo example's label and taint key on the team's cluster: the project and its serving namespace."""
TOLERATES = {
    role: {"key": STACK_KEY, "operator": "Equal", "value": role, "effect": "NoSchedule"}
    for role in ("system", "gpu")
}


def pod_specs(tree: Any, where: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], dict[str, Any]]]:
    """Every pod spec in a rendered object or a chart's values: each map that names containers or a
    node selector, with where it is."""
    if isinstance(tree, dict):
        if "containers" in tree or "nodeSelector" in tree:
            yield where, tree
        for key, value in tree.items():
            yield from pod_specs(value, (*where, str(key)))
    elif isinstance(tree, list):
        for i, value in enumerate(tree):
            yield from pod_specs(value, (*where, str(i)))


def placed(spec: dict[str, Any]) -> str | None:
    """`system` or `gpu` where the pod selects exactly that kind of the stack's nodes and tolerates
    their taint and nothing else (but `CriticalAddonsOnly`, which the NVIDIA plugin keeps); else None."""
    tolerations = spec.get("tolerations") or []
    for role, toleration in TOLERATES.items():
        others = [t for t in tolerations if t != toleration and t.get("key") != "CriticalAddonsOnly"]
        if spec.get("nodeSelector") == {STACK_KEY: role} and toleration in tolerations and not others:
            return role
    return None


ON_NODES = {
    "kuberay-operator": {(): "system"},
    "aws-load-balancer-controller": {(): "system"},
    "cluster-autoscaler": {(): "system"},
    "gateway-helm": {("deployment", "pod"): "system", ("certgen", "job"): "system"},
    "kube-prometheus-stack": {
        ("prometheusOperator",): "system",
        ("prometheusOperator", "admissionWebhooks", "patch"): "system",
        ("prometheus", "prometheusSpec"): "system",
        ("alertmanager", "alertmanagerSpec"): "system",
        ("grafana",): "system",
        ("kube-state-metrics",): "system",
    },
    "nvidia-device-plugin": {(): "gpu"},
    "aws-efa-k8s-device-plugin": {(): "gpu"},
    "dcgm-exporter": {(): "gpu"},
}
"""Where each chart the stack installs takes its pods' node selector and tolerations, and which of the
stack's nodes they go to (kube-prometheus-stack's node exporter selects none: it runs on every node and
its chart tolerates every NoSchedule taint)."""


class TestCoTenancy:
    """Issue 38: on a team's cluster the stack's nodes carry labels and NoSchedule taints of the stack's
    own, so no team pod lands there (a team GPU job tolerates `nvidia.com/gpu`, not the stack's key), and
    the stack's pods select and tolerate those alone (a team node labelled `role=system` draws none)."""

    def test_the_stacks_nodes_carry_its_labels_and_taints(self, team_run):
        gpu = team_run.one(NODE_GROUP, "gpu-nodes").inputs
        assert gpu["labels"] == {
            "role": "gpu-worker",
            "nvidia.com/gpu.present": "true",
            STACK_KEY: "gpu",
        }
        assert gpu["taints"] == [{"key": STACK_KEY, "value": "gpu", "effect": "NO_SCHEDULE"}]
        system = team_run.one(NODE_GROUP, "cluster-system").inputs
        assert system["labels"] == {"role": "system", STACK_KEY: "system"}
        assert system["taints"] == [{"key": STACK_KEY, "value": "system", "effect": "NO_SCHEDULE"}]

    def test_every_pod_the_stack_applies_itself_selects_and_tolerates_its_nodes(self, capsys):
        from ops.cli import main

        ranges = ["--vpc-cidr", "10.20.0.0/16", "--vpc-cidr", "100.64.0.0/16"]
        assert main(["render", "--stack", STACK, *ranges]) == 0
        objects = [o for o in yaml.safe_load_all(capsys.readouterr().out) if o]
        found = {
            (o["kind"], o["metadata"]["name"], where): spec for o in objects for where, spec in pod_specs(o)
        }
        assert {kind for kind, _, _ in found} >= {"RayService", "Job", "DaemonSet", "EnvoyProxy"}
        assert {k: placed(spec) for k, spec in found.items() if not placed(spec)} == {}
        gpu = {(kind, name) for (kind, name, _), spec in found.items() if placed(spec) == "gpu"}
        assert gpu == {("RayService", "ray-llm"), ("DaemonSet", "ray-image-prepull")}

    def test_every_chart_the_stack_installs_selects_and_tolerates_its_nodes(self, bare_run):
        """On the team's cluster that runs none of the add-ons, so the stack installs every one of its
        own (tests/helm_releases.py's `+own-addons` run: the same world, the same run)."""
        assert AwsState(team=BARE_TEAM) == AwsState.for_stack(STACK).without_team_addons()
        seen = {}
        for release in bare_run.of_type(RELEASE):
            values = release.inputs.get("values") or {}
            seen[chart_name(release.inputs["chart"])] = {
                tuple(where): placed(spec) for where, spec in pod_specs(values)
            }
        assert seen == ON_NODES
        assert installed_charts(planned(BARE_TEAM)) == set(seen)  # every add-on, as planning decides

    def test_the_bench_job_selects_and_tolerates_the_system_nodes(self):
        from manifests.bench import BenchOptions, bench_job

        job = bench_job(load_settings(stack_file_config(STACK)), "bench:1", BenchOptions())
        assert [placed(spec) for _, spec in pod_specs(job)] == ["system"]

    def test_a_teams_device_plugin_that_tolerates_only_nvidias_taint_is_refused(self):
        plugin = _workload(
            "DaemonSet",
            "kube-system",
            "nvidia-device-plugin-daemonset",
            "nvidia-device-plugin",
            "nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
            tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        )
        said = refused(replace(TeamCluster(), daemonsets=(plugin,)))
        assert "addons.nvidiaDevicePlugin: the cluster's NVIDIA device plugin" in said
        assert "{key: ray-llm-eks/inference, operator: Equal, value: gpu, effect: NoSchedule}" in said
        tolerating = _workload(
            "DaemonSet",
            "kube-system",
            "nvidia-device-plugin-daemonset",
            "nvidia-device-plugin",
            "nvcr.io/nvidia/k8s-device-plugin:v0.17.0",
            tolerations=[TOLERATES["gpu"]],
        )
        # Used, none installed (an add-on planning installs is a release of the run:
        # test_the_teams_add_ons_are_used_and_the_rest_installed).
        assert not planned(replace(TeamCluster(), daemonsets=(tolerating,))).context.addons.installs(
            "nvidiaDevicePlugin"
        )


class TestOffline:
    def test_ops_render_needs_the_vpcs_ranges_and_renders_with_them(self, capsys):
        from ops.cli import main

        assert main(["render", "--stack", STACK]) == 2
        assert "--vpc-cidr" in capsys.readouterr().err
        assert main(["render", "--stack", STACK, "--vpc-cidr", "10.20.0.0/16"]) == 0
        out = capsys.readouterr().out
        assert "kind: RayService" in out and "cidr: 10.20.0.0/16" in out

    def test_ops_plan_runs_it_under_the_mocks(self, capsys):
        from ops.cli import main

        assert main(["plan", "--stack", STACK]) == 0
        out = capsys.readouterr().out
        assert "existing cluster platform-prod" in out

    def test_ops_finds_the_nlb_service_where_the_stack_says(self):
        """With the team's Envoy Gateway the NLB Service is in its namespace, which the stack's
        `loadBalancerService` output names; a stack that has not run `up` has no such output, and ops
        says so rather than looking in the wrong namespace."""
        import argparse

        from ops.cli import _gateway_namespace
        from ops.kube import OpsError
        from tests.fakes.ops import pulumi_outputs
        from tests.fakes.pulumi import ROOT, stack_settings

        args = argparse.Namespace(stack=STACK, root=ROOT)
        settings = stack_settings(STACK)
        found = pulumi_outputs(loadBalancerService="gateways/ray-llm-gateway")
        assert _gateway_namespace(args, settings, found) == "gateways"
        with pytest.raises(OpsError, match="loadBalancerService"):
            _gateway_namespace(args, settings, pulumi_outputs())
        dev = argparse.Namespace(stack="dev", root=ROOT)
        assert _gateway_namespace(dev, stack_settings("dev"), pulumi_outputs()) == "envoy-gateway-system"

    def test_ops_status_and_dashboards_ask_the_teams_prometheus(self, capsys):
        """Where the stack uses the team's Prometheus, `ops status` queries it (through the
        `prometheus-operated` Service its operator makes, named by the `prometheusService` output) and
        `ops dashboards` forwards it, and no Grafana: the team's is theirs to reach."""
        from ops.cli import main
        from ops.kube import ServiceEndpoint
        from tests.fakes.kube import connect_with, healthy_cluster
        from tests.fakes.ops import KUBECONFIG, FakeProcess, no_wait, prometheus_answers, pulumi_outputs
        from tests.fakes.pulumi import ROOT

        placed = {
            "loadBalancerService": "gateways/ray-llm-gateway",
            "prometheusService": "monitoring/prometheus-operated",
        }
        run = pulumi_outputs(kubeconfig=KUBECONFIG, **placed)
        cluster = healthy_cluster()
        cluster.prometheus = prometheus_answers()
        cluster.prometheus_at = ServiceEndpoint("monitoring", "prometheus-operated", 9090)
        argv = ["--stack", STACK, "--root", str(ROOT)]
        assert main(["status", *argv], connect=connect_with(cluster, []), run=run) == 0
        assert "Serving metrics (Prometheus, last 5 minutes)" in capsys.readouterr().out

        started: list[FakeProcess] = []

        def popen(command):
            started.append(FakeProcess(list(command), exits_after=1))
            return started[-1]

        main(["dashboards", *argv], run=run, popen=popen, sleep=no_wait)
        out = capsys.readouterr().out
        forwarded = {(p.command[p.command.index("--namespace") + 1], p.command[-2]) for p in started}
        assert forwarded == {("monitoring", "svc/prometheus-operated"), ("inference", "svc/ray-llm-head-svc")}
        assert "grafana_dashboard=1 in monitoring" in out

    @pytest.mark.parametrize(
        ("described", "line"),
        [
            (
                (
                    0,
                    json.dumps(
                        {
                            "cluster": {
                                "status": "ACTIVE",
                                "version": "1.34",
                                "accessConfig": {"authenticationMode": "API"},
                            }
                        }
                    ),
                    "",
                ),
                "ok    EKS cluster platform-prod: Kubernetes 1.34, ACTIVE, authentication API",
            ),
            (
                (0, json.dumps({"cluster": {"status": "UPDATING", "version": "1.34"}}), ""),
                "FAIL  EKS cluster platform-prod: Kubernetes 1.34, UPDATING, authentication ?: wait",
            ),
            (
                (
                    254,
                    "",
                    "\nAn error occurred (ResourceNotFoundException): No cluster found for name: "
                    "platform-prod.\n",
                ),
                "FAIL  EKS cluster platform-prod: An error occurred (ResourceNotFoundException)",
            ),
        ],
    )
    def test_preflight_finds_the_cluster(self, described, line):
        from ops.preflight import format_findings, preflight
        from tests.fakes.ops import IDENTITY, ZONES, answers, quota
        from tests.fakes.pulumi import stack_settings

        run = answers(
            {
                "pulumi version": (0, "v3.200.0\n", ""),
                "aws --version": (0, "aws-cli/2.31.0 Python/3.13\n", ""),
                "aws sts": (0, IDENTITY, ""),
                "aws ec2 describe-availability-zones": (0, ZONES, ""),
                "aws eks describe-cluster --name platform-prod --region us-east-1": described,
                "aws service-quotas": quota(1000),
            }
        )
        report, code = format_findings(preflight(stack_settings(STACK), run))
        assert line in report
        assert code == (0 if line.startswith("ok") else 2)


class TestViewersOfTheTeamsCluster:
    """A viewer's preview lists what world/kubernetes.py reads of the team's cluster; the view policy
    lacks CRDs and the custom kinds, so the stack binds exactly those, and no Secret, to its viewers."""

    VIEWER = VIEWER

    @pytest.fixture(scope="class")
    def run(self, set_up_run) -> StackRun:
        return set_up_run  # a viewer listed (LISTED)

    def test_the_viewer_joins_the_stacks_group_bound_to_the_reads_a_preview_makes(self, run: StackRun):
        (entry,) = [
            e for e in run.of_type("aws:eks/accessEntry:AccessEntry") if e.inputs["principalArn"] == VIEWER
        ]
        (group,) = entry.inputs["kubernetesGroups"]
        (binding,) = run.of_type("kubernetes:rbac.authorization.k8s.io/v1:ClusterRoleBinding")
        assert binding.inputs["subjects"] == [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}
        ]
        (role,) = run.of_type("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole")
        assert binding.inputs["roleRef"]["name"] == role.inputs["metadata"]["name"]
        granted = {
            (g, r) for rule in role.inputs["rules"] for g in rule["apiGroups"] for r in rule["resources"]
        }
        assert granted == set(self.reader_lists())
        assert all(set(rule["verbs"]) == {"get", "list"} for rule in role.inputs["rules"])

    @staticmethod
    def reader_lists() -> list[tuple[str, str]]:
        """(group, resource) of every path world/kubernetes.py lists, read from its source."""
        import re
        from pathlib import Path

        source = Path(__file__).parent.parent.joinpath("world", "kubernetes.py").read_text()
        found = []
        for path in re.findall(r'"(/apis?/[^"]+)"', source):
            parts = path.strip("/").split("/")
            found.append(("", parts[2]) if parts[0] == "api" else (parts[1], parts[3]))
        assert found, "world/kubernetes.py lists nothing?"
        return found

    def test_no_secret_is_ever_granted(self, run: StackRun):
        (role,) = run.of_type("kubernetes:rbac.authorization.k8s.io/v1:ClusterRole")
        assert not any("secrets" in rule["resources"] for rule in role.inputs["rules"])


class TestWhereTheNodesGoPlannedAlone:
    """Issue 53's sweep: planning/existing_cluster.py `plan_existing` on layouts the default team cluster
    does not have (no stack run: the plan alone decides, before any resource)."""

    OFFERED = ("us-east-1a", "us-east-1b", "us-east-1c", "us-east-1d")

    @staticmethod
    def subnet(id: str, zone: str, *, private: bool = True, in_cluster: bool = True) -> Any:
        from planning.existing_cluster import Subnet

        return Subnet(id, f"us-east-1{zone}", "10.20.0.0/24", private=private, in_cluster=in_cluster)

    def plan(self, team: TeamCluster | None = None, *, subnets=None, record=None, **sections):
        from planning.existing_cluster import plan_existing
        from tests.fakes.pulumi import stack_settings

        cluster = (team or TeamCluster()).description()
        if subnets is not None:
            cluster = replace(cluster, subnets=tuple(subnets))
        return plan_existing(stack_settings(STACK, **sections), cluster, self.OFFERED, record)

    def refused(self, **given: Any) -> str:
        with pytest.raises(ConfigError) as raised:
            self.plan(**given)
        return str(raised.value)

    def test_a_recorded_gpu_subnet_that_is_gone_is_refused_not_replaced(self):
        """Choosing another subnet would replace the GPU node group: every GPU node drained at once."""
        from planning.zones import StackRecord

        record = StackRecord(("us-east-1b",), "us-east-1b", gpu_subnet="subnet-0bb0000000000000b")
        assert self.plan(record=record).gpu_subnet.id == "subnet-0bb0000000000000b"
        gone = "subnet-0990000000000000f"
        said = self.refused(record=replace(record, gpu_subnet=gone))
        assert f"ray-llm-eks:gpuNodes.subnetId: {gone}, where this stack's GPU nodes run, is gone" in said

    def test_a_recorded_gpu_subnet_that_no_longer_works_is_refused_saying_moving_replaces(self):
        from planning.zones import StackRecord

        record = StackRecord(("us-east-1b",), "us-east-1b", gpu_subnet="subnet-0bb0000000000000b")
        now_public = [
            self.subnet("subnet-0bb0000000000000b", "b", private=False),
            self.subnet("subnet-0aa0000000000000a", "a"),
        ]
        said = self.refused(subnets=now_public, record=record)
        assert "subnet-0bb0000000000000b is public" in said and "replaces the GPU node group" in said
        other_zone = self.refused(record=record, gpuNodes={"availabilityZone": "us-east-1a"})
        assert "is in us-east-1b, not ray-llm-eks:gpuNodes.availabilityZone us-east-1a" in other_zone

    @pytest.mark.parametrize("status", ["CREATING", "UPDATING", "FAILED", "DELETING"])
    def test_a_cluster_that_is_not_active_is_refused(self, status):
        said = self.refused(team=replace(TeamCluster(), status=status))
        assert f"cluster platform-prod is {status}, not ACTIVE" in said

    def test_the_clusters_own_private_subnets_come_first_whatever_their_zone(self):
        """A private subnet outside the cluster's in an earlier zone: the GPU nodes and the system nodes
        still go to the cluster's own (nodes elsewhere reach the control plane only through the VPC)."""
        layout = [
            self.subnet("subnet-0a0", "a", in_cluster=False),
            self.subnet("subnet-0c0", "c"),
            self.subnet("subnet-0b1", "b", private=False, in_cluster=False),
            self.subnet("subnet-0d1", "d", private=False),
        ]
        plan = self.plan(subnets=layout)
        assert plan.gpu_subnet.id == "subnet-0c0" and not plan.warnings
        assert [s.id for s in plan.system_subnets] == ["subnet-0c0"]
        assert plan.load_balancer_subnets(public=True) == ("subnet-0b1", "subnet-0d1")
        same_zone = [*layout, self.subnet("subnet-0d0", "d", private=False, in_cluster=False)]
        assert self.plan(subnets=same_zone).load_balancer_subnets(public=True) == ("subnet-0b1", "subnet-0d1")

    def test_a_cluster_whose_own_subnets_are_all_public_uses_the_vpcs_private_ones(self):
        layout = [
            self.subnet("subnet-0a1", "a", private=False),
            self.subnet("subnet-0b0", "b", in_cluster=False),
        ]
        plan = self.plan(subnets=layout)
        assert [s.id for s in plan.system_subnets] == ["subnet-0b0"]
        assert plan.gpu_subnet.id == "subnet-0b0"
        assert any("outside cluster platform-prod's own" in w for w in plan.warnings)


@pytest.mark.parametrize("key", ["adminPrincipalArns", "viewerPrincipalArns", "refreshPrincipalArns"])
def test_a_principal_of_every_list_with_the_teams_entry_keeps_it(key):
    """Issue 53's sweep: EKS refuses a second access entry for a principal (ResourceInUseException at
    `up`), so a listed principal that already has the team's entry is left as the team made it, whichever
    list names it; the refresh list had been left out of what the program asks EKS about."""
    from tests.fakes.pulumi import stack_settings

    principal = "arn:aws:iam::123456789012:role/platform-drift"
    world = AwsState(team=TeamCluster(access_entries={principal: {"owner": "platform"}})).world(
        TeamCluster().region
    )
    where = where_of(stack_settings(STACK, cluster={key: [principal]}), world, STACK)
    assert principal not in [e.principal_arn for e in where.access.entries]
    assert any(f"{principal} has an access entry on the cluster already" in i for i in where.infos)
