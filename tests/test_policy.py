"""The policy pack (policy/rules.py): each rule rejects a violating resource and passes a good one, and
the stack itself, every stack file under mocks, passes every rule."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from pulumi_policy import (
    PolicyCustomTimeouts,
    PolicyResource,
    PolicyResourceOptions,
    ResourceValidationArgs,
    ResourceValidationPolicy,
    StackValidationArgs,
    StackValidationPolicy,
)

from policy.rules import POLICIES
from tests.fakes.pulumi import EXISTING_CLUSTER_STACKS, STACKS, Secret, StackRun, run_stack

POLICY = {p.name: p for p in POLICIES}
OPTS = PolicyResourceOptions(False, [], None, [], PolicyCustomTimeouts(0, 0, 0), [])


def resource(
    resource_type: str,
    props: Mapping[str, Any],
    name: str = "r",
    deps: Mapping[str, list[PolicyResource]] | None = None,
    depends_on: list[PolicyResource] | None = None,
) -> PolicyResource:
    deps = dict(deps or {})
    every = [*(d for ds in deps.values() for d in ds), *(depends_on or [])]
    return PolicyResource(
        resource_type,
        dict(props),
        f"urn:pulumi:t::p::{resource_type}::{name}",
        name,
        OPTS,
        None,
        None,
        every,
        deps,
    )


def violations(policy: str, *resources: PolicyResource, config: Mapping[str, Any] | None = None) -> list[str]:
    found: list[str] = []

    def report(message: str, urn: str | None = None) -> None:
        found.append(message)

    rule = POLICY[policy]
    if isinstance(rule, StackValidationPolicy):
        rule.validate(StackValidationArgs(list(resources), config), report)  # type: ignore[arg-type]
    else:
        assert isinstance(rule, ResourceValidationPolicy)
        for r in resources:
            args = ResourceValidationArgs(r.resource_type, r.props, r.urn, r.name, OPTS, None, config)
            rule.validate(args, report)  # type: ignore[arg-type]
    return found


def test_every_rule_is_mandatory_and_tested_here():
    assert {str(p.enforcement_level) for p in POLICIES} == {"EnforcementLevel.MANDATORY"}
    source = Path(__file__).read_text()
    for name in POLICY:
        assert f'"{name}"' in source.split("def test_every_rule", 1)[1], f"no test for {name}"


class TestGpuNodeGroupsInOneZone:
    def test_a_gpu_node_group_across_two_subnets_is_rejected(self):
        group = resource(
            "aws:eks/nodeGroup:NodeGroup", {"amiType": "AL2023_x86_64_NVIDIA", "subnetIds": ["a", "b"]}
        )
        (message,) = violations("gpu-node-groups-in-one-zone", group)
        assert "exactly one availability zone" in message and "it has 2" in message

    def test_an_efa_launch_template_makes_it_an_efa_group(self):
        template = resource(
            "aws:ec2/launchTemplate:LaunchTemplate",
            {"networkInterfaces": [{"interfaceType": "efa"}, {"interfaceType": "efa-only"}]},
            "lt",
        )
        group = resource(
            "aws:eks/nodeGroup:NodeGroup",
            {"amiType": "AL2023_x86_64_STANDARD", "subnetIds": ["a", "b"]},
            deps={"launchTemplate": [template]},
        )
        (message,) = violations("gpu-node-groups-in-one-zone", template, group)
        assert "GPU EFA node group" in message

    def test_pulumi_eks_component_inputs_count_too(self):
        component = resource("eks:index:ManagedNodeGroup", {"gpu": True, "subnetIds": ["a", "b", "c"]})
        assert violations("gpu-node-groups-in-one-zone", component)

    def test_one_subnet_passes_and_cpu_groups_are_not_concerned(self):
        gpu = resource("aws:eks/nodeGroup:NodeGroup", {"amiType": "AL2023_x86_64_NVIDIA", "subnetIds": ["a"]})
        cpu = resource(
            "aws:eks/nodeGroup:NodeGroup", {"amiType": "AL2023_x86_64_STANDARD", "subnetIds": ["a", "b"]}
        )
        assert violations("gpu-node-groups-in-one-zone", gpu, cpu) == []


class TestImdsv2Required:
    def test_optional_tokens_are_rejected(self):
        template = resource(
            "aws:ec2/launchTemplate:LaunchTemplate",
            {"metadataOptions": {"httpTokens": "optional", "httpPutResponseHopLimit": 1}},
        )
        instance = resource("aws:ec2/instance:Instance", {"metadataOptions": {"httpPutResponseHopLimit": 1}})
        assert len(violations("imdsv2-required", template, instance)) == 2

    def test_a_node_group_without_launch_template_and_a_component_without_imdsv2(self):
        group = resource("aws:eks/nodeGroup:NodeGroup", {"subnetIds": ["a"]})
        component = resource("eks:index:ManagedNodeGroup", {"enableIMDSv2": False})
        assert len(violations("imdsv2-required", group, component)) == 2

    def test_a_hop_limit_other_than_one_or_none_is_rejected(self):
        """Issue 39: a pulumi-eks bump that drops the stack's transform (its templates say 2) fails."""
        for hops in ({"httpPutResponseHopLimit": 2}, {}):
            template = resource(
                "aws:ec2/launchTemplate:LaunchTemplate",
                {"metadataOptions": {"httpTokens": "required", **hops}},
            )
            (violation,) = violations("imdsv2-required", template)
            assert "httpPutResponseHopLimit is" in violation and "not 1" in violation

    def test_required_passes(self):
        template = resource(
            "aws:ec2/launchTemplate:LaunchTemplate",
            {"metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 1}},
        )
        group = resource("aws:eks/nodeGroup:NodeGroup", {"launchTemplate": {"id": "lt-1", "version": "1"}})
        component = resource("eks:index:ManagedNodeGroup", {"enableIMDSv2": True})
        assert violations("imdsv2-required", template, group, component) == []


class TestNoNodesInPublicSubnets:
    @staticmethod
    def network() -> tuple[PolicyResource, PolicyResource, list[PolicyResource]]:
        igw = resource("aws:ec2/internetGateway:InternetGateway", {}, "igw")
        table = resource(
            "aws:ec2/routeTable:RouteTable", {"routes": [{"cidrBlock": "0.0.0.0/0"}]}, "rt", depends_on=[igw]
        )
        public = resource("aws:ec2/subnet:Subnet", {"mapPublicIpOnLaunch": False}, "public")
        private = resource(
            "aws:ec2/subnet:Subnet", {"tags": {"kubernetes.io/role/internal-elb": "1"}}, "private"
        )
        association = resource(
            "aws:ec2/routeTableAssociation:RouteTableAssociation",
            {},
            "assoc",
            deps={"subnetId": [public], "routeTableId": [table]},
        )
        return public, private, [igw, table, public, private, association]

    def test_a_subnet_routed_to_an_internet_gateway_is_public(self):
        public, _, network = self.network()
        group = resource("aws:eks/nodeGroup:NodeGroup", {}, "ng", deps={"subnetIds": [public]})
        (message,) = violations("no-nodes-in-public-subnets", *network, group)
        assert "ng: nodes in a public subnet" in message

    def test_a_subnet_tagged_for_internet_facing_load_balancers_or_mapping_public_ips_is_public(self):
        tagged = resource("aws:ec2/subnet:Subnet", {"tags": {"kubernetes.io/role/elb": "1"}}, "tagged")
        mapping = resource("aws:ec2/subnet:Subnet", {"mapPublicIpOnLaunch": True}, "mapping")
        instance = resource("aws:ec2/instance:Instance", {}, "i", deps={"subnetId": [mapping]})
        group = resource("eks:index:ManagedNodeGroup", {}, "ng", deps={"subnetIds": [tagged]})
        assert len(violations("no-nodes-in-public-subnets", tagged, mapping, instance, group)) == 2

    def test_private_subnets_pass(self):
        _, private, network = self.network()
        group = resource("aws:eks/nodeGroup:NodeGroup", {}, "ng", deps={"subnetIds": [private]})
        assert violations("no-nodes-in-public-subnets", *network, group) == []


class TestS3BucketsPrivateAndEncrypted:
    def test_a_bare_bucket_is_rejected_twice(self):
        bucket = resource("aws:s3/bucket:Bucket", {"bucket": "b"}, "b")
        found = violations("s3-buckets-private-and-encrypted", bucket)
        assert len(found) == 2 and "BucketPublicAccessBlock" in found[0] and "encryption" in found[1]

    def test_a_partial_block_and_a_public_acl_are_rejected(self):
        bucket = resource("aws:s3/bucket:Bucket", {"acl": "public-read"}, "b")
        block = resource(
            "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
            {
                "blockPublicAcls": True,
                "blockPublicPolicy": False,
                "ignorePublicAcls": True,
                "restrictPublicBuckets": True,
            },
            deps={"bucket": [bucket]},
        )
        sse = resource(
            "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
            {},
            deps={"bucket": [bucket]},
        )
        found = violations("s3-buckets-private-and-encrypted", bucket, block, sse)
        assert found == [
            "b: bucket ACL 'public-read' makes it public",
            "b: its public access block leaves blockPublicPolicy off",
        ]

    def test_blocked_and_encrypted_passes(self):
        bucket = resource("aws:s3/bucket:Bucket", {}, "b")
        block = resource(
            "aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock",
            dict.fromkeys(
                ["blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets"], True
            ),
            deps={"bucket": [bucket]},
        )
        sse = resource(
            "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration",
            {},
            deps={"bucket": [bucket]},
        )
        assert violations("s3-buckets-private-and-encrypted", bucket, block, sse) == []


SCHEME = "service.beta.kubernetes.io/aws-load-balancer-scheme"
CERT = "service.beta.kubernetes.io/aws-load-balancer-ssl-cert"


def lb_service(annotations: dict[str, str], ports: list[int]) -> PolicyResource:
    return resource(
        "kubernetes:core/v1:Service",
        {
            "metadata": {"name": "lb", "annotations": annotations},
            "spec": {"type": "LoadBalancer", "ports": [{"port": p} for p in ports]},
        },
        "lb",
    )


class TestInternetFacingLoadBalancersUseTls:
    def test_an_internet_facing_service_without_a_certificate_is_rejected(self):
        (message,) = violations(
            "internet-facing-load-balancers-use-tls", lb_service({SCHEME: "internet-facing"}, [80])
        )
        assert "without TLS" in message

    def test_a_plain_port_beside_tls_is_rejected(self):
        service = lb_service(
            {
                SCHEME: "internet-facing",
                CERT: "arn:cert",
                "service.beta.kubernetes.io/aws-load-balancer-ssl-ports": "443",
            },
            [443, 80],
        )
        (message,) = violations("internet-facing-load-balancers-use-tls", service)
        assert "ports 80" in message

    def test_an_aws_load_balancer_listener_on_http_is_rejected(self):
        lb = resource("aws:lb/loadBalancer:LoadBalancer", {"internal": False}, "alb")
        listener = resource(
            "aws:lb/listener:Listener", {"protocol": "HTTP"}, "l", deps={"loadBalancerArn": [lb]}
        )
        redirect = resource(
            "aws:lb/listener:Listener",
            {"protocol": "HTTP", "defaultActions": [{"type": "redirect"}]},
            "r",
            deps={"loadBalancerArn": [lb]},
        )
        assert len(violations("internet-facing-load-balancers-use-tls", lb, listener, redirect)) == 1

    def test_tls_and_internal_pass(self):
        tls = lb_service({SCHEME: "internet-facing", CERT: "arn:cert"}, [443])
        internal = lb_service({SCHEME: "internal"}, [80])
        assert violations("internet-facing-load-balancers-use-tls", tls, internal) == []


class TestNoPlaintextSecrets:
    def test_a_token_in_an_env_value_is_rejected(self):
        pod = resource(
            "kubernetes:apps/v1:Deployment",
            {"spec": {"template": {"spec": {"containers": [{"env": [{"name": "HF_TOKEN", "value": "x"}]}]}}}},
        )
        (message,) = violations("no-plaintext-secrets", pod)
        assert "env HF_TOKEN" in message

    def test_credential_shaped_values_anywhere_and_credential_keys_in_config_maps(self):
        release = resource("kubernetes:helm.sh/v3:Release", {"values": {"hub": {"auth": "hf_" + "a" * 34}}})
        config_map = resource("kubernetes:core/v1:ConfigMap", {"data": {"API_KEY": "x"}})
        key = resource("aws:ssm/parameter:Parameter", {"value": "AKIA" + "A" * 16})
        assert len(violations("no-plaintext-secrets", release, config_map, key)) == 3

    def test_secrets_references_and_locations_pass(self):
        secret = resource("kubernetes:core/v1:Secret", {"stringData": {"token": "hf_" + "a" * 34}})
        env = [
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}}},
            {"name": "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE", "value": "/var/run/token"},
        ]
        pod = resource("kubernetes:core/v1:Pod", {"spec": {"containers": [{"env": env}]}})
        assert violations("no-plaintext-secrets", secret, pod) == []


def workers(privileged_head: bool = False, gpu: str = "1") -> PolicyResource:
    def pod(privileged: bool, limits: dict[str, str]) -> dict[str, Any]:
        return {
            "containers": [
                {
                    "name": "ray",
                    "securityContext": {"privileged": privileged},
                    "resources": {"limits": limits},
                }
            ]
        }

    return resource(
        "kubernetes:ray.io/v1:RayService",
        {
            "metadata": {"name": "ray-llm", "namespace": "inference"},
            "spec": {
                "rayClusterConfig": {
                    "headGroupSpec": {"template": {"spec": pod(privileged_head, {})}},
                    "workerGroupSpecs": [
                        {"groupName": "gpu-workers", "template": {"spec": pod(True, {"nvidia.com/gpu": gpu})}}
                    ],
                }
            },
        },
    )


class TestServingPodsNotPrivileged:
    def test_a_privileged_deployment_in_the_serving_namespace_is_rejected(self):
        deployment = resource(
            "kubernetes:apps/v1:Deployment",
            {
                "metadata": {"namespace": "inference"},
                "spec": {
                    "template": {
                        "spec": {"containers": [{"name": "x", "securityContext": {"privileged": True}}]}
                    }
                },
            },
        )
        assert violations("serving-pods-not-privileged", deployment)

    def test_a_privileged_head_or_worker_without_gpus_is_rejected(self):
        assert len(violations("serving-pods-not-privileged", workers(privileged_head=True))) == 1
        assert len(violations("serving-pods-not-privileged", workers(gpu="0"))) == 1

    def test_privileged_gpu_workers_and_other_namespaces_pass(self):
        elsewhere = resource(
            "kubernetes:apps/v1:DaemonSet",
            {
                "metadata": {"namespace": "kube-system"},
                "spec": {
                    "template": {
                        "spec": {"containers": [{"name": "x", "securityContext": {"privileged": True}}]}
                    }
                },
            },
        )
        assert violations("serving-pods-not-privileged", workers(), elsewhere) == []

    def test_the_serving_namespace_is_configurable(self):
        assert (
            violations(
                "serving-pods-not-privileged", workers(privileged_head=True), config={"servingNamespace": "x"}
            )
            == []
        )


class TestVolumesEncrypted:
    def test_unencrypted_template_volume_and_storage_class_are_rejected(self):
        template = resource(
            "aws:ec2/launchTemplate:LaunchTemplate",
            {"blockDeviceMappings": [{"ebs": {"encrypted": "false"}}]},
        )
        volume = resource("aws:ebs/volume:Volume", {"encrypted": False})
        storage = resource(
            "kubernetes:storage.k8s.io/v1:StorageClass",
            {"provisioner": "ebs.csi.aws.com", "parameters": {"type": "gp3", "encrypted": "false"}},
        )
        assert len(violations("volumes-encrypted", template, volume, storage)) == 3

    def test_encrypted_passes(self):
        template = resource(
            "aws:ec2/launchTemplate:LaunchTemplate",
            {"blockDeviceMappings": [{"ebs": {"encrypted": "true", "kmsKeyId": "arn:key"}}]},
        )
        storage = resource(
            "kubernetes:storage.k8s.io/v1:StorageClass",
            {"provisioner": "ebs.csi.aws.com", "parameters": {"encrypted": "true"}},
        )
        assert violations("volumes-encrypted", template, storage) == []


def _plain(value: Any) -> Any:
    """What the engine hands a policy: secrets in plaintext."""
    if isinstance(value, Secret):
        return _plain(value.value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def as_policy_resources(run: StackRun) -> list[PolicyResource]:
    """Every resource the program registered under mocks (pulumi-eks's children never register there),
    as the engine would hand them to the pack."""
    by_urn: dict[str, PolicyResource] = {}
    for reg in run.registrations:
        by_urn[reg.urn] = PolicyResource(
            reg.type, _plain(reg.inputs), reg.urn, reg.name, OPTS, None, None, [], {}
        )
    for reg in run.registrations:
        r = by_urn[reg.urn]
        r.dependencies = [by_urn[u] for u in reg.dependencies if u in by_urn]
        r.property_dependencies = {
            k: [by_urn[u] for u in urns if u in by_urn] for k, urns in reg.property_dependencies.items()
        }
    return list(by_urn.values())


class TestNamespacesGuarded:
    NS = "kubernetes:core/v1:Namespace"
    NP = "kubernetes:networking.k8s.io/v1:NetworkPolicy"
    LABELS = {"pod-security.kubernetes.io/enforce": "baseline"}
    DENY = {"podSelector": {}, "policyTypes": ["Ingress"]}

    def test_a_namespace_without_a_default_deny_or_a_level_is_rejected(self):
        ns = resource(self.NS, {"metadata": {"name": "added-later"}}, "added")
        allow = resource(
            self.NP,
            {"metadata": {"namespace": "added-later"}, "spec": {**self.DENY, "ingress": [{"from": []}]}},
        )
        found = violations("namespaces-deny-ingress-and-enforce-pod-security", ns, allow)
        assert len(found) == 2
        assert "no pod-security.kubernetes.io/enforce label" in found[0]
        assert "no NetworkPolicy denying all ingress" in found[1]

    def test_a_default_deny_elsewhere_does_not_count(self):
        ns = resource(self.NS, {"metadata": {"name": "a", "labels": self.LABELS}})
        deny = resource(self.NP, {"metadata": {"namespace": "b"}, "spec": self.DENY})
        assert len(violations("namespaces-deny-ingress-and-enforce-pod-security", ns, deny)) == 1

    def test_a_guarded_namespace_passes(self):
        ns = resource(self.NS, {"metadata": {"name": "a", "labels": self.LABELS}})
        deny = resource(self.NP, {"metadata": {"namespace": "a"}, "spec": self.DENY})
        assert violations("namespaces-deny-ingress-and-enforce-pod-security", ns, deny) == []


@pytest.mark.parametrize("stack", STACKS)
def test_every_stack_file_passes_every_rule(stack: str):
    run = run_stack(stack=stack)
    resources = as_policy_resources(run)
    for name in POLICY:
        assert violations(name, *resources) == [], name
    # and the rules saw what they are about: node groups, subnets (the team's are not resources of the
    # stack: planning refuses a public one), launch templates, the Ray pods
    types = {r.resource_type for r in resources}
    if stack in EXISTING_CLUSTER_STACKS:
        seen = {"aws:eks/nodeGroup:NodeGroup", "aws:ec2/launchTemplate:LaunchTemplate"}
    else:
        seen = {"eks:index:ManagedNodeGroup", "aws:ec2/subnet:Subnet"}
    assert seen | {"kubernetes:ray.io/v1:RayService"} <= types


def test_the_program_would_fail_the_pack_with_a_gpu_group_over_two_zones():
    """The rule is about the program's own inputs: a GPU group over the private subnets of every zone."""
    run = run_stack()
    resources = as_policy_resources(run)
    (gpu,) = [r for r in resources if r.resource_type == "eks:index:ManagedNodeGroup" and r.props.get("gpu")]
    gpu.props = {**gpu.props, "subnetIds": [*gpu.props["subnetIds"], "subnet/another-zone"]}
    assert violations("gpu-node-groups-in-one-zone", *resources)


def test_a_public_subnet_in_the_program_is_recognised():
    run = run_stack()
    resources = as_policy_resources(run)
    system = next(r for r in resources if r.name == "cluster-system")
    public = [
        r for r in resources if r.resource_type == "aws:ec2/subnet:Subnet" and re.search("public", r.name)
    ]
    assert public
    system.property_dependencies = {"subnetIds": public}
    assert violations("no-nodes-in-public-subnets", *resources)
