"""The whole program under Pulumi mocks: what `pulumi up` on a stack would register, inside which
component, through which provider, and after what.

Mocks see only what we pass (pulumi-eks components are opaque), so these tests assert on the inputs
we hand to AWS, pulumi-eks and Kubernetes, and on the dependency graph the engine would follow.
"""

from __future__ import annotations

import json

import pytest

from config import ConfigError
from config.sides import gpu_instance_types
from manifests.charts import efa_device_plugin
from planning.nodes import placement
from tests.fakes import pulumi as harness
from tests.fakes.pulumi import (
    REFUSED_STACKS,
    STACK_FILES,
    STACKS,
    Registration,
    Secret,
    StackRun,
    minimal_config,
    plan_of,
    run_stack,
    stack_settings,
)

CLUSTER = "eks:index:Cluster"
NODE_GROUP = "eks:index:ManagedNodeGroup"
RELEASE = "kubernetes:helm.sh/v3:Release"
RAYSERVICE = "kubernetes:ray.io/v1:RayService"
COMPONENT_PREFIX = "ray-llm-eks:"
DEVICE_PLUGIN_CHARTS = {"nvidia-device-plugin", "aws-efa-k8s-device-plugin"}


def depends_on(run: StackRun, reg: Registration, other: Registration) -> bool:
    return other.urn in reg.dependencies or any(
        other.urn in urns for urns in reg.property_dependencies.values()
    )


class TestDevStackBuildsTheSeedSystem:
    def test_vpc_with_private_subnets_and_one_nat(self, dev_stack: StackRun):
        vpc = dev_stack.one("aws:ec2/vpc:Vpc")
        assert vpc.inputs["cidrBlock"] == "10.0.0.0/16"
        assert vpc.inputs["enableDnsHostnames"] is True
        subnets = dev_stack.of_type("aws:ec2/subnet:Subnet")
        private = [s for s in subnets if "private" in s.name]
        public = [s for s in subnets if "public" in s.name]
        assert sorted(s.inputs["availabilityZone"] for s in private) == ["sa-east-1a", "sa-east-1b"]
        assert all(s.inputs["tags"]["kubernetes.io/role/internal-elb"] == "1" for s in private)
        assert all(s.inputs["tags"]["kubernetes.io/role/elb"] == "1" for s in public)
        assert all(s.inputs["mapPublicIpOnLaunch"] is False for s in subnets)
        assert all(s.inputs["tags"]["kubernetes.io/cluster/ray-llm-multinode"] == "shared" for s in subnets)
        assert len(dev_stack.of_type("aws:ec2/natGateway:NatGateway")) == 1
        nat = dev_stack.one("aws:ec2/natGateway:NatGateway")
        assert nat.inputs["subnetId"] in {dev_stack.id_of(s) for s in public}
        private_routes = [
            r for r in dev_stack.of_type("aws:ec2/routeTable:RouteTable") if "private" in r.name
        ]
        assert len(private_routes) == 2
        for table in private_routes:
            assert table.inputs["routes"] == [
                {"cidrBlock": "0.0.0.0/0", "natGatewayId": dev_stack.id_of(nat)}
            ]

    def test_eks_cluster(self, dev_stack: StackRun):
        cluster = dev_stack.one(CLUSTER).inputs
        assert cluster["name"] == "ray-llm-multinode"
        assert cluster["version"] == "1.35"
        assert cluster["createOidcProvider"] is True
        assert cluster["skipDefaultNodeGroup"] is True
        assert cluster["authenticationMode"] == "API"
        assert cluster["endpointPrivateAccess"] is True and cluster["endpointPublicAccess"] is True
        assert cluster["privateSubnetIds"] == [
            "subnet/network-private-sa-east-1a",
            "subnet/network-private-sa-east-1b",
        ]
        assert "publicSubnetIds" not in cluster
        assert cluster["vpcId"] == "vpc/network-vpc"

    def test_core_addons_are_eks_managed(self, dev_stack: StackRun):
        """kube-proxy: pulumi-eks creates it as a managed add-on; vpc-cni: ours, with its own role
        (test_least_privilege); coredns: ours, after the system nodes exist."""
        cluster = dev_stack.one(CLUSTER)
        assert cluster.inputs["useDefaultVpcCni"] is True
        assert dev_stack.one("aws:eks/addon:Addon", "cluster-vpc-cni").inputs["addonName"] == "vpc-cni"
        assert cluster.inputs["corednsAddonOptions"]["enabled"] is False
        assert "kubeProxyAddonOptions" not in cluster.inputs
        coredns = dev_stack.one("aws:eks/addon:Addon", "cluster-coredns")
        assert coredns.inputs["addonName"] == "coredns"
        assert coredns.inputs["clusterName"] == "ray-llm-multinode"
        assert depends_on(dev_stack, coredns, dev_stack.one(NODE_GROUP, "cluster-system"))

    def test_system_node_group(self, dev_stack: StackRun):
        system = dev_stack.one(NODE_GROUP, "cluster-system").inputs
        assert system["instanceTypes"] == [
            "m7i.2xlarge"
        ]  # the seed's m7i.xlarge, grown for the gateway and metrics
        assert system["scalingConfig"] == {"minSize": 1, "desiredSize": 1, "maxSize": 2}
        assert system["labels"] == {"role": "system"}
        assert system["operatingSystem"] == "AL2023"
        assert system["subnetIds"] == [
            "subnet/network-private-sa-east-1a",
            "subnet/network-private-sa-east-1b",
        ]
        assert system["diskSize"] == 100  # the Ray head pulls the ~15 GiB image here too

    def test_gpu_node_group_is_efa_in_one_offering_zone(self, dev_stack: StackRun):
        gpu = dev_stack.one(NODE_GROUP, "gpu-nodes").inputs
        assert gpu["instanceTypes"] == ["g6.8xlarge"]
        # Cluster Autoscaler may take it down to 0 (parking); Pulumi leaves the desired size to it.
        assert gpu["scalingConfig"] == {"minSize": 0, "desiredSize": 2, "maxSize": 2}
        assert gpu["ignoreScalingChanges"] is True
        assert gpu["enableEfaSupport"] is True
        assert gpu["placementGroupAvailabilityZone"] == "sa-east-1a"
        assert gpu["subnetIds"] == ["subnet/network-private-sa-east-1a"]
        assert gpu["labels"] == {"role": "gpu-worker", "nvidia.com/gpu.present": "true"}
        assert gpu["taints"] == [{"key": "nvidia.com/gpu", "value": "true", "effect": "NO_SCHEDULE"}]
        assert gpu["diskSize"] == 200
        assert (gpu["operatingSystem"], gpu["gpu"]) == ("AL2023", True)
        assert dev_stack.exports["gpuAvailabilityZone"] == "sa-east-1a"

    def test_device_plugins_on_gpu_nodes_tolerating_their_taint(self, dev_stack: StackRun):
        releases = {r.inputs["chart"]: r.inputs for r in dev_stack.of_type(RELEASE)}
        nvidia = releases["nvidia-device-plugin"]
        efa = releases["aws-efa-k8s-device-plugin"]
        assert nvidia["repositoryOpts"]["repo"] == "https://nvidia.github.io/k8s-device-plugin"
        assert efa["repositoryOpts"]["repo"] == "https://aws.github.io/eks-charts"
        for release in (nvidia, efa):
            assert release["version"]  # pinned
            assert release["namespace"] == "kube-system"
            assert release["values"]["nodeSelector"] == {"role": "gpu-worker"}
            assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in release[
                "values"
            ]["tolerations"]
        assert efa["values"]["supportedInstanceLabels"]["values"] == ["g6.8xlarge"]

    def test_efa_plugin_allows_the_gpu_type_in_use(self):
        """The chart the program installs for the GPU type(s) (program/steps.py): dev's run above holds
        the program to it for one type, the hetero stack file's (tests/test_sides.py) for two."""
        settings = stack_settings("dev", gpuNodes={"instanceType": "g6e.8xlarge"})
        efa = efa_device_plugin(placement(settings), gpu_instance_types(settings))
        assert efa.values["supportedInstanceLabels"]["values"] == ["g6e.8xlarge"]

    def test_kuberay_operator_on_system_nodes(self, dev_stack: StackRun):
        kuberay = next(r for r in dev_stack.of_type(RELEASE) if r.inputs["chart"] == "kuberay-operator")
        assert kuberay.inputs["version"] == "1.7.0"
        assert kuberay.inputs["repositoryOpts"]["repo"] == "https://ray-project.github.io/kuberay-helm/"
        assert kuberay.inputs["namespace"] == "kuberay-operator"
        assert kuberay.inputs["values"]["nodeSelector"] == {"role": "system"}

    def test_outputs(self, dev_stack: StackRun):
        exports = dev_stack.exports
        assert exports["clusterName"] == "ray-llm-multinode"
        assert exports["namespace"] == "inference"
        assert exports["serviceName"] == "ray-llm-serve-svc"
        assert (
            exports["portForwardCommand"]
            == "kubectl port-forward -n inference svc/ray-llm-serve-svc 8000:8000"
        )
        assert exports["openaiBaseUrl"] == "http://127.0.0.1:8000/v1"
        assert exports["prometheusService"] == "monitoring/kps-prometheus"
        assert json.loads(exports["kubeconfig"])["kind"] == "Config"
        assert "kubeconfig" in dev_stack.secret_exports
        assert dev_stack.secret_exports == {"kubeconfig", "apiKeys", "grafanaAdminPassword"}


class TestGraph:
    def test_every_resource_lives_in_one_of_our_components(self, dev_stack: StackRun):
        components = {r.urn: r for r in dev_stack.registrations if r.type.startswith(COMPONENT_PREFIX)}
        assert {c.type.split(":")[1] for c in components.values()} == {
            "network",
            "cluster",
            "gpu_node_group",
            "device_plugins",
            "kuberay",
            "model_cache",
            "rayservice",
            "load_balancer_controller",
            "endpoint",
            "observability",
            "cluster_autoscaler",
            "cost",
            "pod_identity",
        }
        for reg in dev_stack.registrations:
            if reg.type.startswith(COMPONENT_PREFIX):
                continue
            assert reg.parent in components, f"{reg.type} {reg.name} is not parented by a component"

    def test_children_are_named_after_their_component(self, dev_stack: StackRun):
        """`<component>-<part>`, or the component's own name for its parts (a PodIdentity's role, policy
        and association: one of each type)."""
        for reg in dev_stack.registrations:
            parent = next((r for r in dev_stack.registrations if r.urn == reg.parent), None)
            if parent is not None:
                assert reg.name == parent.name or reg.name.startswith(f"{parent.name}-"), reg.name

    def test_node_groups_wait_for_the_cluster_and_the_node_role(self, dev_stack: StackRun):
        """The cluster travels as a resource reference, which the SDK keeps out of the dependency
        list on purpose; inside pulumi-eks the node group reads the cluster's outputs, so the engine
        orders it after the cluster. The policies are explicit dependencies."""
        cluster = dev_stack.one(CLUSTER)
        policies = [
            p
            for p in dev_stack.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
            if p.name.startswith("cluster-node-")
        ]
        assert len(policies) == 2
        vpc_cni = dev_stack.one("aws:eks/addon:Addon", "cluster-vpc-cni")
        for name in ("cluster-system", "gpu-nodes"):
            group = dev_stack.one(NODE_GROUP, name)
            assert group.inputs["cluster"] == cluster.urn, name
            assert all(depends_on(dev_stack, group, p) for p in policies), name
            assert depends_on(dev_stack, group, vpc_cni), name  # pod networking from the first node

    def test_kuberay_waits_for_system_nodes_not_gpu_nodes(self, dev_stack: StackRun):
        kuberay = next(r for r in dev_stack.of_type(RELEASE) if r.inputs["chart"] == "kuberay-operator")
        assert depends_on(dev_stack, kuberay, dev_stack.one(NODE_GROUP, "cluster-system"))
        assert not depends_on(dev_stack, kuberay, dev_stack.one(NODE_GROUP, "gpu-nodes"))

    def test_device_plugins_wait_for_gpu_nodes(self, dev_stack: StackRun):
        gpu = dev_stack.one(NODE_GROUP, "gpu-nodes")
        plugins = [r for r in dev_stack.of_type(RELEASE) if r.inputs["chart"] in DEVICE_PLUGIN_CHARTS]
        assert len(plugins) == 2
        for release in plugins:
            assert depends_on(dev_stack, release, gpu)

    def test_rayservice_waits_for_kuberay_and_gpu_nodes_only(self, dev_stack: StackRun):
        """Its GPU pods pend until the device plugins advertise GPUs and EFA, and the readiness Job
        waits for the model to serve: waiting for the plugins' releases as well only lengthened the
        critical path (about a minute, docs/time-to-serving.md)."""
        ray = dev_stack.one(RAYSERVICE)
        for release in dev_stack.of_type(RELEASE):
            if release.inputs["chart"] == "kuberay-operator":
                assert depends_on(dev_stack, ray, release)
            if release.inputs["chart"] in DEVICE_PLUGIN_CHARTS:
                assert not depends_on(dev_stack, ray, release), release.inputs["chart"]
        assert depends_on(dev_stack, ray, dev_stack.one(NODE_GROUP, "gpu-nodes"))
        namespace = dev_stack.one("kubernetes:core/v1:Namespace", "ray-llm-ns")
        assert depends_on(dev_stack, ray, namespace)

    def test_every_kubernetes_object_uses_the_cluster_provider(self, dev_stack: StackRun):
        provider = dev_stack.one("pulumi:providers:kubernetes")
        assert provider.parent == dev_stack.one("ray-llm-eks:cluster:Cluster").urn
        assert isinstance(provider.inputs["kubeconfig"], Secret)
        kube_objects = [r for r in dev_stack.registrations if r.type.startswith("kubernetes:")]
        assert RAYSERVICE in {r.type for r in kube_objects}
        for reg in kube_objects:
            assert reg.provider.startswith(provider.urn + "::"), f"{reg.type} {reg.name}: {reg.provider!r}"


class TestSecureDefaults:
    def test_imdsv2_required_on_every_node_group(self, dev_stack: StackRun):
        for group in dev_stack.of_type(NODE_GROUP):
            assert group.inputs["enableIMDSv2"] is True, group.name

    def test_secrets_encrypted_with_a_rotating_kms_key(self, dev_stack: StackRun):
        key = dev_stack.one("aws:kms/key:Key", "cluster-secrets")
        assert key.inputs["enableKeyRotation"] is True
        assert (
            dev_stack.one(CLUSTER).inputs["encryptionConfigKeyArn"]
            == "arn:aws:kms:sa-east-1:123456789012:key/cluster-secrets"
        )

    def test_control_plane_logging(self, dev_stack: StackRun):
        cluster = dev_stack.one(CLUSTER)
        assert cluster.inputs["enabledClusterLogTypes"] == ["api", "audit", "authenticator"]
        logs = dev_stack.one("aws:cloudwatch/logGroup:LogGroup")
        assert logs.inputs["name"] == "/aws/eks/ray-llm-multinode/cluster"  # the group EKS writes to
        assert logs.inputs["retentionInDays"] == 30
        assert depends_on(dev_stack, cluster, logs)  # exists before EKS would create its own

    def test_public_endpoint_is_restricted_by_configured_cidrs(self):
        cluster = run_stack(stack="prod").one(CLUSTER).inputs  # prod's stack file names its ranges
        assert cluster["endpointPublicAccess"] is True
        assert cluster["publicAccessCidrs"] == ["203.0.113.0/24"]

    def test_private_only_endpoint(self):
        """A private endpoint needs no ranges (the run test_hardening's test of it makes, shared)."""
        private = minimal_config("sa-east-1", cluster={"endpointPublicAccess": False})
        del private["ray-llm-eks:cluster"]["publicAccessCidrs"]
        cluster = run_stack(config=private).one(CLUSTER).inputs
        assert cluster["endpointPublicAccess"] is False
        assert "publicAccessCidrs" not in cluster

    def test_no_node_in_a_public_subnet(self, dev_stack: StackRun):
        public_ids = {
            dev_stack.id_of(s) for s in dev_stack.of_type("aws:ec2/subnet:Subnet") if "public" in s.name
        }
        for group in dev_stack.of_type(NODE_GROUP):
            assert not public_ids & set(group.inputs["subnetIds"]), group.name

    def test_node_role_has_only_what_a_node_needs(self, dev_stack: StackRun):
        role = dev_stack.one("aws:iam/role:Role", "cluster-node")
        policies = sorted(
            r.inputs["policyArn"]
            for r in dev_stack.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
            if r.name.startswith("cluster-node-")
        )
        # No AmazonEKS_CNI_Policy: pods could borrow the node role (IMDS hop limit 2); the VPC CNI
        # has its own role (test_least_privilege).
        assert policies == [
            "arn:aws:iam::aws:policy/AmazonEC2ContainerRegistryReadOnly",
            "arn:aws:iam::aws:policy/AmazonEKSWorkerNodePolicy",
        ]
        assert "ec2.amazonaws.com" in role.inputs["assumeRolePolicy"]
        assert all(g.inputs["nodeRole"] == role.urn for g in dev_stack.of_type(NODE_GROUP))

    @pytest.mark.parametrize("stack", STACKS)
    def test_every_namespace_enforces_the_strictest_level_its_pods_allow(self, stack):
        levels = {
            r.inputs["metadata"]["name"]: (
                r.inputs["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
                r.inputs["metadata"]["labels"]["pod-security.kubernetes.io/audit"],
            )
            for r in run_stack(stack=stack).of_type("kubernetes:core/v1:Namespace")
        }
        expected = {
            # the operators and the proxies run non-root, no capabilities, RuntimeDefault seccomp
            "kuberay-operator": ("restricted", "restricted"),
            "envoy-gateway-system": ("restricted", "restricted"),
            # nothing needs the host; not every chart pod was read against restricted, audit shows it
            "monitoring": ("baseline", "restricted"),
            # node-exporter (host network, PID, paths) and dcgm-exporter (pod-resources, SYS_ADMIN)
            "node-agents": ("privileged", "baseline"),
            # the GPU workers add IPC_LOCK and mount a hostPath (NIXL + EFA, the node's model cache),
            # both beyond baseline; audit flags anything above baseline
            "inference": ("privileged", "baseline"),
        }
        # On a team's cluster, namespaces only for what the stack installs (the mocked team runs Prometheus).
        installed = plan_of(stack).cluster_context.addons
        if not installed.installs("prometheus"):
            del expected["monitoring"]
        assert levels == expected

    def test_bring_your_own_kms_key(self):
        # the key tests/test_teardown.py gives (STACK_KEY_ARN): one run for both
        arn = "arn:aws:kms:sa-east-1:123456789012:key/11111111-2222-3333-4444-555555555555"
        run = run_stack(overrides={"cluster": {"secretsKmsKeyArn": arn}})
        assert [k.name for k in run.of_type("aws:kms/key:Key")] == ["cluster-volumes"]
        assert run.one(CLUSTER).inputs["encryptionConfigKeyArn"] == arn


class TestHuggingFaceToken:
    def test_token_travels_as_a_secret_into_a_kubernetes_secret(self):
        # tests/test_model_cache.py's world (one run for both): its team bucket replaces the stack's
        # model bucket, independent of where the token goes
        run = run_stack(
            overrides={"modelCache": {"bucket": "team-models"}},
            secrets={"ray-llm-eks:huggingFaceToken": "hf_x"},
        )
        secret = run.one("kubernetes:core/v1:Secret", "ray-llm-hf-token")
        assert secret.inputs["metadata"]["name"] == "hf-token"
        data = secret.inputs["stringData"]
        assert isinstance(data, Secret) or isinstance(data.get("token"), Secret)
        token = data.value["token"] if isinstance(data, Secret) else data["token"].value
        assert token == "hf_x"
        ray = run.one(RAYSERVICE)
        assert "hf_x" not in json.dumps(ray.inputs, default=str)
        env = ray.inputs["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][
            0
        ]["env"]
        assert {
            "name": "HF_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "hf-token", "key": "token"}},
        } in env
        assert depends_on(run, ray, secret)

    def test_no_token_no_secret(self, dev_stack: StackRun):
        assert sorted(s.name for s in dev_stack.of_type("kubernetes:core/v1:Secret")) == [
            "endpoint-api-keys",
            "observability-grafana-admin",
            "ray-llm-ray-auth",
        ]


class TestStacksAndDeterminism:
    @pytest.mark.parametrize("stack", STACK_FILES)
    def test_every_stack_file_is_a_config_the_program_accepts(self, stack: str):
        """One failure per refused stack file, with the loader's own message (the other stack tests
        leave it out rather than each failing on it)."""
        if stack in REFUSED_STACKS:
            pytest.fail(
                f"Pulumi.{stack}.yaml is refused, so no other stack test runs it:\n{REFUSED_STACKS[stack]}"
            )

    @pytest.mark.parametrize("stack", STACKS)
    def test_every_stack_file_runs(self, stack: str):
        run = run_stack(stack=stack)
        assert run.one(RAYSERVICE)
        assert run.exports["gpuAvailabilityZone"] in run.exports["clusterZones"]

    def test_prod_example_is_production_shaped(self):
        run = run_stack(stack="prod")
        assert len(run.of_type("aws:ec2/natGateway:NatGateway")) == 3
        assert run.one(CLUSTER).inputs["publicAccessCidrs"] == ["203.0.113.0/24"]
        workers = run.one(RAYSERVICE).inputs["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]
        assert workers["replicas"] == 3
        assert run.one(NODE_GROUP, "gpu-nodes").inputs["scalingConfig"]["desiredSize"] == 3

    def test_two_runs_register_identical_resources(self):
        def snapshot(run: StackRun):
            return sorted(
                (
                    r.type,
                    r.name,
                    r.parent,
                    sorted(r.dependencies),
                    json.dumps(r.inputs, sort_keys=True, default=repr),
                )
                for r in run.registrations
            )

        assert snapshot(run_stack()) == snapshot(run_stack(fresh=True))

    @pytest.mark.parametrize(
        ("overrides", "message"),
        [
            ({"model": {"gpuMemoryUtilization": 1.5}}, "gpuMemoryUtilization"),
            ({"gpuNodes": {"availabilityZone": "sa-east-1c"}}, "sa-east-1c does not offer g6.8xlarge"),
            ({"gpuNodes": {"instanceType": "g6.xlarge"}}, "'g6.xlarge' has no EFA"),
        ],
    )
    def test_bad_config_fails_before_any_resource(self, overrides, message):
        with pytest.raises(ConfigError, match=message):
            run_stack(overrides=overrides)
        assert harness.LAST_RUN is not None
        assert harness.LAST_RUN.registrations == []


class TestCoreAddonsAndPartitions:
    def test_coredns_takes_over_the_bootstrapped_one(self, dev_stack: StackRun):
        """EKS runs a self-managed coredns before our add-on exists; without OVERWRITE the add-on's
        creation fails on the conflicting fields."""
        coredns = dev_stack.one("aws:eks/addon:Addon", "cluster-coredns")
        assert coredns.inputs["resolveConflictsOnCreate"] == "OVERWRITE"
        assert coredns.inputs["resolveConflictsOnUpdate"] == "OVERWRITE"

    @pytest.mark.parametrize(
        ("region", "partition"), [("cn-north-1", "aws-cn"), ("us-gov-west-1", "aws-us-gov")]
    )
    def test_arns_name_the_regions_partition(self, region: str, partition: str):
        viewer = f"arn:{partition}:iam::123456789012:role/viewer"
        run = run_stack(
            config=minimal_config(
                region,
                cluster={"viewerPrincipalArns": [viewer]},
                serving={"image": "registry.example.com/ray:serve-llm-cuda-v1.0"},
            ),
            stack="far",
            offerings={region: {"g6.8xlarge": [f"{region}a", f"{region}b"]}},
        )
        policies = [
            r.inputs["policyArn"] for r in run.of_type("aws:iam/rolePolicyAttachment:RolePolicyAttachment")
        ]
        assert policies and all(p.startswith(f"arn:{partition}:iam::aws:policy/") for p in policies)
        (entry,) = run.one(CLUSTER).inputs["accessEntries"].values()
        (policy,) = entry["accessPolicies"].values()
        assert policy["policyArn"].startswith(f"arn:{partition}:eks::aws:cluster-access-policy/")
