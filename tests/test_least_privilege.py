"""Least privilege (issue 15): the node role lends nothing to pods, the VPC CNI has its own role, nothing
is created that is not used, every EBS volume is encrypted with a KMS key."""

from __future__ import annotations

import json
from typing import Any

import pulumi
import pytest

from components.cluster import encrypted_root_volume
from config import ConfigError, load_settings
from manifests.rayservice import build_rayservice
from planning import plan_stack
from tests.fakes.pulumi import AwsState, StackRun, minimal_config, run_stack, stack_settings
from tests.validators import pod_errors
from world.offline import ACCOUNT_ID
from world.reads import instance_types

CLUSTER = "eks:index:Cluster"
ADDON = "aws:eks/addon:Addon"
ROLE = "aws:iam/role:Role"
ATTACHMENT = "aws:iam/rolePolicyAttachment:RolePolicyAttachment"
KEY = "aws:kms/key:Key"
NODE_GROUP = "eks:index:ManagedNodeGroup"
RAYSERVICE = "kubernetes:ray.io/v1:RayService"


class TestVpcCni:
    def test_has_its_own_role_through_irsa(self, dev_stack: StackRun):
        role = dev_stack.one(ROLE, "cluster-vpc-cni")
        (statement,) = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
        assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
        assert statement["Principal"] == {
            "Federated": "arn:aws:iam::123456789012:oidc-provider/oidc.eks.example/id/cluster-eks"
        }
        assert statement["Condition"]["StringEquals"] == {
            "oidc.eks.example/id/cluster-eks:sub": "system:serviceaccount:kube-system:aws-node",
            "oidc.eks.example/id/cluster-eks:aud": "sts.amazonaws.com",
        }
        cni_policy = [
            a
            for a in dev_stack.of_type(ATTACHMENT)
            if a.inputs["policyArn"].endswith("/AmazonEKS_CNI_Policy")
        ]
        assert [a.inputs["role"] for a in cni_policy] == ["cluster-vpc-cni"]  # and not the node role

    def test_the_addon_takes_the_role_and_enforces_network_policies(self, dev_stack: StackRun):
        addon = dev_stack.one(ADDON, "cluster-vpc-cni")
        assert addon.inputs["addonName"] == "vpc-cni"
        assert addon.inputs["serviceAccountRoleArn"] == "arn:aws:iam::123456789012:role/cluster-vpc-cni"
        assert json.loads(addon.inputs["configurationValues"]) == {"enableNetworkPolicy": "true"}
        assert addon.inputs["resolveConflictsOnCreate"] == "OVERWRITE"  # EKS's bootstrapped aws-node
        assert addon.inputs["preserve"] is True
        # pulumi-eks's own add-on would have a role it cannot be given (a cycle through the OIDC provider)
        assert dev_stack.one(CLUSTER).inputs["useDefaultVpcCni"] is True
        assert "vpcCniOptions" not in dev_stack.one(CLUSTER).inputs

    def test_takes_over_the_state_of_pulumi_eks_addon_on_existing_stacks(self, dev_stack: StackRun):
        addon = dev_stack.one(ADDON, "cluster-vpc-cni")
        cluster = dev_stack.one(CLUSTER)
        # pulumi-eks: Cluster > VpcCniAddon `<cluster>-vpc-cni` > aws.eks.Addon of the same name
        # (nodejs/eks/cluster/cluster.ts, addons/cni-addon.ts)
        types, name = cluster.urn.rsplit("::", 1)
        assert name == "cluster-eks"
        (alias,) = addon.aliases
        spec = alias.get("spec", alias)
        assert spec["name"] == "cluster-eks-vpc-cni"
        assert spec["parentUrn"] == f"{types}$eks:index:VpcCniAddon::cluster-eks-vpc-cni"


class TestNothingUnused:
    def test_no_default_security_groups(self, dev_stack: StackRun):
        assert dev_stack.one(CLUSTER).inputs["skipDefaultSecurityGroups"] is True

    def test_the_name_tag_names_the_cluster_only(self, dev_stack: StackRun):
        cluster = dev_stack.one(CLUSTER).inputs
        assert "tags" not in cluster  # pulumi-eks copies `tags` onto its children, Name included
        assert cluster["clusterTags"] == {"Name": "ray-llm-multinode"}


class TestEncryptedVolumes:
    def test_the_volume_key_rotates_and_lets_ec2_of_this_account_use_it(self, dev_stack: StackRun):
        key = dev_stack.one(KEY, "cluster-volumes").inputs
        assert key["enableKeyRotation"] is True
        admin, ebs = json.loads(key["policy"])["Statement"]
        assert admin["Principal"] == {"AWS": "arn:aws:iam::123456789012:root"}
        assert ebs["Condition"] == {
            "StringEquals": {
                "kms:CallerAccount": "123456789012",
                "kms:ViaService": "ec2.sa-east-1.amazonaws.com",
            }
        }
        assert "kms:CreateGrant" in ebs["Action"]  # the Auto Scaling role attaches volumes by grant

    @pytest.mark.parametrize("group", ["cluster-system", "gpu-nodes"])
    def test_every_node_group_encrypts_its_root_volume(self, dev_stack: StackRun, group: str):
        transforms = run_stack(with_transforms=True).transforms[group]
        assert [t for t in transforms if t.__qualname__.startswith("encrypted_root_volume")], group
        assert dev_stack.one(NODE_GROUP, group).inputs["diskSize"] > 0  # what the template's volume gets

    def test_the_transform_completes_pulumi_eks_launch_template(self):
        transform = encrypted_root_volume("arn:aws:kms:sa-east-1:123456789012:key/k")
        template = pulumi.ResourceTransformArgs(
            custom=True,
            type_="aws:ec2/launchTemplate:LaunchTemplate",
            name="gpu-nodes-launchTemplate",
            props={
                "metadataOptions": {"httpTokens": "required", "httpPutResponseHopLimit": 2},
                "blockDeviceMappings": [{"deviceName": "/dev/xvda", "ebs": {"volumeSize": 200}}],
            },
            opts=pulumi.ResourceOptions(),
        )
        result = transform(template)
        assert result is not None
        assert result.props["blockDeviceMappings"] == [
            {
                "deviceName": "/dev/xvda",
                "ebs": {
                    "volumeSize": 200,
                    "encrypted": "true",
                    "kmsKeyId": "arn:aws:kms:sa-east-1:123456789012:key/k",
                    "volumeType": "gp3",
                },
            }
        ]
        # IMDS one hop away: the node and hostNetwork pods reach it, pods behind the CNI never do.
        assert result.props["metadataOptions"] == {"httpTokens": "required", "httpPutResponseHopLimit": 1}
        node_group = pulumi.ResourceTransformArgs(
            custom=True,
            type_="aws:eks/nodeGroup:NodeGroup",
            name="x",
            props={},
            opts=pulumi.ResourceOptions(),
        )
        assert transform(node_group) is None

    def test_bring_your_own_volume_key(self):
        arn = "arn:aws:kms:sa-east-1:123456789012:key/0f1e2d3c-aaaa-bbbb-cccc-1234567890ab"
        # In the world of tests/test_teardown.py's destroy choices (one run for both): what destroy keeps
        # of the bucket, the Prometheus volume and the logs is independent of which key the volumes use.
        run = run_stack(
            overrides={
                "cluster": {"volumeKmsKeyArn": arn, "keepLogsOnDestroy": True},
                "modelCache": {"forceDestroy": True},
                "observability": {"keepVolumeOnDestroy": False},
            }
        )
        assert [k.name for k in run.of_type(KEY)] == ["cluster-secrets"]
        storage = run.one("kubernetes:storage.k8s.io/v1:StorageClass")
        assert storage.inputs["parameters"]["kmsKeyId"] == arn


class TestWorkerPrivileges:
    """Privileged only where it cannot hurt: a privileged container sees every GPU of its node."""

    @staticmethod
    def config(instance_type: str, tp: int, privileges: str | None = None) -> dict[str, Any]:
        serving = {"serving": {"worker": {"privileges": privileges}}} if privileges else {}
        return {
            **minimal_config("us-east-1"),
            "ray-llm-eks:gpuNodes": {"instanceType": instance_type},
            "ray-llm-eks:model": {"tensorParallelSize": tp},
            **{f"ray-llm-eks:{k}": v for k, v in serving.items()},
        }

    @classmethod
    def workers(cls, instance_type: str, tp: int, privileges: str | None = None) -> dict[str, Any]:
        """The worker pod of the RayService the program registers for the type (build_rayservice of the
        plan with EC2's answer; tests/test_hardware.py holds a run of a hardware class to it)."""
        settings = load_settings(cls.config(instance_type, tp, privileges))
        world = AwsState().world("us-east-1", {"us-east-1": {instance_type: ["us-east-1a", "us-east-1b"]}})
        plan = plan_stack(settings, stack="hw", ec2=instance_types(settings, world), account_id=ACCOUNT_ID)
        spec = build_rayservice(settings, plan).to_dict()["spec"]
        return spec["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"]

    @pytest.mark.parametrize("instance_type,tp", [("g6.8xlarge", 1), ("g6e.48xlarge", 2), ("p5.48xlarge", 8)])
    def test_by_default_root_with_ipc_lock_and_nothing_privileged(self, instance_type: str, tp: int):
        pod = self.workers(instance_type, tp)
        (container,) = pod["containers"]
        assert container["securityContext"] == {
            "runAsUser": 0,  # CAP_IPC_LOCK is effective for root only
            "allowPrivilegeEscalation": False,
            "capabilities": {"add": ["IPC_LOCK"], "drop": ["NET_RAW"]},
        }
        assert pod["automountServiceAccountToken"] is False  # workers never call the Kubernetes API
        # the EFA devices come from the device plugin's request, not from a hostPath of /dev
        assert int(container["resources"]["limits"]["vpc.amazonaws.com/efa"]) >= 1
        assert not [v for v in pod["volumes"] if v.get("hostPath", {}).get("path", "").startswith("/dev")]
        assert pod_errors(pod) == []

    def test_privileged_where_a_worker_owns_its_node(self):
        (container,) = self.workers("g6.8xlarge", 1, "privileged")["containers"]
        assert container["securityContext"] == {"privileged": True}

    def test_privileged_refused_where_workers_share_a_node(self):
        with pytest.raises(ConfigError) as caught:  # by the program, before any resource
            run_stack(
                config=self.config("g6e.48xlarge", 2, "privileged"),
                stack="hw",
                offerings={"us-east-1": {"g6e.48xlarge": ["us-east-1a", "us-east-1b"]}},
            )
        message = str(caught.value)
        assert "ray-llm-eks:serving.worker.privileges is privileged" in message
        assert "4 workers share a g6e.48xlarge" in message
        assert "use ipc-lock" in message


class TestKubernetesApiTokens:
    def test_the_head_mounts_a_token_only_for_kuberay_autoscaler(self):
        fixed = run_stack().one(RAYSERVICE).inputs["spec"]["rayClusterConfig"]
        # What the program registers for dev with room to grow: build_rayservice of its plan
        # (tests/test_rayservice.py holds the dev stack's run to it).
        settings = stack_settings("dev", autoscaling={"decode": {"maxReplicas": 2}}, gpuNodes={"maxSize": 3})
        grows = build_rayservice(settings, plan_stack(settings, stack="dev", account_id=ACCOUNT_ID))
        autoscaled = grows.to_dict()["spec"]["rayClusterConfig"]
        assert fixed["headGroupSpec"]["template"]["spec"]["automountServiceAccountToken"] is False
        assert autoscaled["enableInTreeAutoscaling"] is True
        assert autoscaled["headGroupSpec"]["template"]["spec"]["automountServiceAccountToken"] is True

    def test_helper_pods_mount_none(self, dev_stack: StackRun):
        jobs = dev_stack.of_type("kubernetes:batch/v1:Job")
        prepull = dev_stack.one("kubernetes:apps/v1:DaemonSet", "ray-llm-prepull")
        assert jobs
        for pod in [j.inputs["spec"]["template"]["spec"] for j in jobs] + [
            prepull.inputs["spec"]["template"]["spec"]
        ]:
            assert pod["automountServiceAccountToken"] is False
            assert pod["securityContext"]["runAsNonRoot"] is True
            assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
            (container,) = pod["containers"]
            assert container["securityContext"]["readOnlyRootFilesystem"] is True
