"""The independent security review's findings, each pinned: the API endpoint's exposure is a choice the
stack file writes out, Pod Identity roles trust only this cluster's pods of one service account, IMDS is
one hop from the nodes, VPC flow logs, and API keys never cross a network unannounced."""

from __future__ import annotations

import json

import pytest

from config import ConfigError
from tests.fakes.pulumi import (
    EXISTING_CLUSTER_STACKS,
    STACKS,
    Secret,
    StackRun,
    minimal_config,
    plan_of,
    run_stack,
    stack_settings,
)

ROLE = "aws:iam/role:Role"
RAYSERVICE = "kubernetes:ray.io/v1:RayService"
SECRET = "kubernetes:core/v1:Secret"
ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
IDENTITY = "ray-llm-eks:pod_identity:PodIdentity"
ACCOUNT = "123456789012"
CERT_ID = "12345678-1234-1234-1234-123456789012"


def trust_of(run: StackRun, role_name: str) -> dict:
    (statement,) = json.loads(run.one(ROLE, role_name).inputs["assumeRolePolicy"])["Statement"]
    return statement


class TestPodIdentityTrust:
    @pytest.mark.parametrize("stack", STACKS)
    def test_every_role_trusts_only_its_clusters_pods_of_one_service_account(self, stack):
        run = run_stack(stack=stack)
        cluster = plan_of(stack).cluster_name  # the stack's own, or the team's it serves on
        region = stack_settings(stack).region
        identities = run.of_type(IDENTITY)
        # the model cache's two, the EBS CSI driver's, and the controllers' the stack installs (on the
        # mocked team's cluster, not its load balancer controller or Cluster Autoscaler)
        assert len(identities) >= (2 if stack in EXISTING_CLUSTER_STACKS else 4)
        for identity in identities:
            statement = trust_of(run, identity.name)
            assert statement["Principal"] == {"Service": "pods.eks.amazonaws.com"}
            assert sorted(statement["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
            condition = statement["Condition"]
            assert condition["ArnEquals"] == {
                "aws:SourceArn": f"arn:aws:eks:{region}:{ACCOUNT}:cluster/{cluster}"
            }
            equals = condition["StringEquals"]
            assert (
                equals["aws:SourceAccount"] == ACCOUNT
                and equals["aws:RequestTag/eks-cluster-name"] == cluster
            )
            associations = [r for r in run.of_type(ASSOCIATION) if r.parent == identity.urn]
            for association in associations:  # the EBS CSI add-on makes its own, for the same account
                assert equals["aws:RequestTag/kubernetes-namespace"] == association.inputs["namespace"]
                assert (
                    equals["aws:RequestTag/kubernetes-service-account"]
                    == association.inputs["serviceAccount"]
                )

    def test_the_ebs_csi_role_trusts_the_add_ons_service_account(self, dev_stack):
        equals = trust_of(dev_stack, "observability-ebs-csi")["Condition"]["StringEquals"]
        assert equals["aws:RequestTag/kubernetes-namespace"] == "kube-system"
        addon = dev_stack.one("aws:eks/addon:Addon", "observability-ebs-csi")
        (association,) = addon.inputs["podIdentityAssociations"]
        assert equals["aws:RequestTag/kubernetes-service-account"] == association["serviceAccount"]


class TestTheApiEndpointIsAChoice:
    def test_a_stack_file_that_does_not_say_who_may_reach_it_is_refused(self):
        config = minimal_config("sa-east-1")
        del config["ray-llm-eks:cluster"]
        with pytest.raises(ConfigError, match=r"ray-llm-eks:cluster.publicAccessCidrs: required"):
            run_stack(config=config)

    def test_everyone_written_out_is_accepted_and_warned_about(self, dev_stack):
        assert dev_stack.one("eks:index:Cluster").inputs["publicAccessCidrs"] == ["0.0.0.0/0"]
        assert any(
            "0.0.0.0/0: the Kubernetes API endpoint answers the whole internet" in w
            for w in dev_stack.warnings
        )

    def test_a_documentation_range_left_in_is_warned_about(self):
        run = run_stack(stack="prod")
        assert any("['203.0.113.0/24'] are documentation ranges" in w for w in run.warnings)

    def test_private_only_needs_no_ranges(self):
        config = minimal_config("sa-east-1", cluster={"endpointPublicAccess": False})
        del config["ray-llm-eks:cluster"]["publicAccessCidrs"]
        run = run_stack(config=config)
        assert run.one("eks:index:Cluster").inputs["endpointPublicAccess"] is False


class TestCleartext:
    def test_keys_over_plain_http_are_a_preview_warning(self, dev_stack):
        assert any("API keys cross the VPC" in w and "clear text" in w for w in dev_stack.warnings)

    def test_tls_silences_it(self):
        tls = {
            "certificateArn": f"arn:aws:acm:sa-east-1:{ACCOUNT}:certificate/{CERT_ID}",
            "hostname": "llm.example.com",
        }
        run = run_stack(overrides={"endpoint": tls})
        assert not [w for w in run.warnings if "clear text" in w]


class TestFlowLogs:
    def test_prod_records_every_enis_traffic_with_retention(self):
        run = run_stack(stack="prod")
        flow = run.one("aws:ec2/flowLog:FlowLog").inputs
        group = run.one("aws:cloudwatch/logGroup:LogGroup", "network-flow-logs").inputs
        assert flow["trafficType"] == "ALL" and flow["logDestinationType"] == "cloud-watch-logs"
        assert group["retentionInDays"] == 90 and group["name"] == "/aws/vpc/ray-llm-prod/flow-logs"
        statement = trust_of(run, "network-flow-logs")
        assert statement["Principal"] == {"Service": "vpc-flow-logs.amazonaws.com"}
        assert statement["Condition"]["StringEquals"] == {"aws:SourceAccount": ACCOUNT}
        (grant,) = json.loads(run.one("aws:iam/rolePolicy:RolePolicy", "network-flow-logs").inputs["policy"])[
            "Statement"
        ]
        group_arn = "arn:aws:logs:us-east-1:123456789012:log-group:/aws/vpc/ray-llm-prod/flow-logs"
        assert grant["Resource"] == [group_arn, f"{group_arn}:*"]  # the group's own streams only

    def test_off_unless_asked_for(self, dev_stack):
        assert dev_stack.of_type("aws:ec2/flowLog:FlowLog") == []


class TestRayTokenAuth:
    """Ray's dashboard, Jobs API and GCS want a token (manifests/ray_auth.py), not only a policy."""

    @pytest.mark.parametrize("stack", STACKS)
    def test_every_ray_cluster_runs_with_the_stacks_token(self, stack):
        run = run_stack(stack=stack)
        if not run.of_type(RAYSERVICE):
            pytest.skip("parked: no RayService")
        ray = run.one(RAYSERVICE)
        assert ray.inputs["spec"]["rayClusterConfig"]["authOptions"] == {
            "mode": "token",
            "secretName": "ray-auth-token",
        }
        secret = run.one(SECRET, "ray-llm-ray-auth")
        assert secret.urn in ray.dependencies
        assert secret.inputs["metadata"] == {"name": "ray-auth-token", "namespace": "inference"}
        data = secret.inputs["stringData"]
        assert isinstance(data, Secret) or isinstance(data["auth_token"], Secret)

    def test_the_token_is_generated_once_and_shown_nowhere(self, dev_stack: StackRun):
        (token,) = [
            r for r in dev_stack.of_type("random:index/randomPassword:RandomPassword") if "ray" in r.name
        ]
        assert token.inputs["length"] >= 32 and token.inputs["special"] is False
        assert "ray-auth-token" not in dev_stack.exports

    def test_a_ray_without_token_auth_is_refused(self):
        with pytest.raises(ConfigError, match=r"serving\.rayVersion.*2\.52"):
            run_stack(overrides={"serving": {"rayVersion": "2.51.0"}})
