"""The regional model cache: the dev stack keeps a private, encrypted S3 copy of the model, copied once by
an awaited Job that proves the copy whole, read by the Ray pods through EKS Pod Identity scoped to the
model's prefix, over an S3 gateway endpoint on every private route table; the serve config loads from
the bucket; the copy runs again only when the model's source or revision changes."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml

from config import PROJECT, load_settings
from config.base import s3_bucket_problem
from jobs.model_copy import HASH_FILE, copy, snapshot_files
from manifests.rayservice import build_serving
from planning.model_cache import bucket_key, default_bucket, legacy_bucket
from planning.where import Where
from planning.zones import TAG_MODEL_BUCKET
from tests.fakes.pulumi import (
    OWN_CLUSTER_STACKS,
    AwsState,
    StackRun,
    deployed,
    plan_of,
    run_stack,
    stack_file_config,
    stack_settings,
    where_of,
)

JOB = "kubernetes:batch/v1:Job"
RAYSERVICE = "kubernetes:ray.io/v1:RayService"
ASSOCIATION = "aws:eks/podIdentityAssociation:PodIdentityAssociation"
BUCKET = "s3://ray-llm-multinode-models-895680ba-123456789012-sa-east-1/models/Qwen/Qwen3.5-9B/main"


def cache_associations(run: StackRun):
    """The model cache's Pod Identity associations (the load balancer controller has one too)."""
    return [a for a in run.of_type(ASSOCIATION) if a.name.startswith("model-cache-")]


def copy_job(run: StackRun):
    return run.one(JOB, "ray-llm-model-copy")


def planned(config: dict[str, Any], stack: str, aws: AwsState | None = None) -> Where:
    """Where the stack serves and the record it keeps, the bucket's kept name among it, as the program's
    read step decides them for `config` in `aws`'s account (the stack file's own by default):
    world/reads.py `where_it_serves`, as __main__.read calls it, with no stack run. The program names
    its bucket `where.record.model_bucket` and records it so: `test_a_deployed_stack_keeps_the_name_its_
    record_holds` (a kept name) and `test_the_dev_stacks_bucket_is_recorded_with_its_zones` hold a run
    to that."""
    settings = load_settings(config)
    return where_of(settings, (aws or AwsState.for_config(config)).world(settings.region), stack)


@pytest.fixture(scope="module")
def team_bucket_and_token() -> StackRun:
    """The dev stack with a bucket of the team's and a Hugging Face token: two independent things (the
    bucket replaces the one the stack would make; the token is a Secret the copy Job reads), one run."""
    return run_stack(
        overrides={"modelCache": {"bucket": "team-models"}},
        secrets={"ray-llm-eks:huggingFaceToken": "hf_x"},
    )


def copy_job_name(**sections: dict[str, Any]) -> str:
    """The copy Job's name for the dev stack file with some sections overridden, as build_serving makes
    it with the plan the program makes (a new name is a new Job: Kubernetes runs it again)."""
    made = build_serving(stack_settings("dev", **sections), plan_of("dev", None, **sections)).model_copy
    assert made is not None
    return made.job.metadata.name


class TestTheBucketsName:
    """S3 names are global and a bucket is never renamed: a new default name replaces the bucket and its
    copy. So the default is what makes a stack its own (stack, cluster, namespace: a hash), and a
    deployed stack keeps the name its record holds, as it keeps its zones (planning/zones.py)."""

    ACCOUNT = "123456789012"
    BUCKET = "aws:s3/bucket:Bucket"

    def test_stacks_whose_cluster_names_once_cut_alike_get_buckets_of_their_own(self):
        a, b = (
            default_bucket(s, f"ray-llm-eks-{s}", "inference", self.ACCOUNT, "us-east-1")
            for s in ("analytics-team-a", "analytics-team-b")
        )
        assert a != b
        # The names they got before: one bucket for both.
        assert legacy_bucket("ray-llm-eks-analytics-team-a", self.ACCOUNT, "us-east-1") == legacy_bucket(
            "ray-llm-eks-analytics-team-b", self.ACCOUNT, "us-east-1"
        )

    def test_two_stacks_on_one_teams_cluster_get_buckets_of_their_own(self):
        byo = stack_file_config("byo.example")
        serving = byo.get(f"{PROJECT}:serving", {})
        other = {**byo, f"{PROJECT}:serving": {**serving, "namespace": "team-b"}}
        ours, theirs = (planned(byo, "byo.example"), planned(other, "team-b"))
        names = {ours.record.model_bucket, theirs.record.model_bucket}
        assert len(names) == 2 and all(n and n.startswith("platform-prod-models-") for n in names), names
        # The example stack file's run (every stack file's, shared) makes the bucket so named.
        assert run_stack(stack="byo.example").one(self.BUCKET).inputs["bucket"] == ours.record.model_bucket

    @pytest.mark.parametrize(
        "cluster",
        ["ray-llm-multinode", "c" * 100, "Team_GPUs--Prod", "sthree-gpus", "9-lives", "a"],
    )
    @pytest.mark.parametrize("region", ["us-east-1", "ap-southeast-2", "us-gov-west-1"])
    def test_every_default_is_a_name_s3_takes(self, cluster: str, region: str):
        name = default_bucket("a-stack.name_x", cluster, "inference", self.ACCOUNT, region)
        assert s3_bucket_problem(name) is None and "." not in name, name
        key = bucket_key("a-stack.name_x", cluster, "inference")
        assert name.endswith(f"-models-{key}-{self.ACCOUNT}-{region}")

    def test_the_dev_stacks_bucket_is_recorded_with_its_zones(self, dev_stack: StackRun):
        tags = dev_stack.one("aws:ec2/vpc:Vpc").inputs["tags"]
        assert tags[TAG_MODEL_BUCKET] == dev_stack.one(self.BUCKET).inputs["bucket"]

    def test_a_deployed_stack_keeps_the_name_its_record_holds(self, dev_stack: StackRun):
        before = deployed(dev_stack)
        assert before.vpc_tags is not None
        kept = replace(before, vpc_tags={**before.vpc_tags, TAG_MODEL_BUCKET: "models-chosen-long-ago"})
        # Another namespace would give a first up another name; the record wins.
        run = run_stack(aws=kept, overrides={"serving": {"namespace": "serving"}})
        assert run.one(self.BUCKET).inputs["bucket"] == "models-chosen-long-ago"
        assert run.one("aws:ec2/vpc:Vpc").inputs["tags"][TAG_MODEL_BUCKET] == "models-chosen-long-ago"

    def test_a_stack_deployed_before_the_name_was_kept_keeps_the_name_it_was_given(self, dev_stack: StackRun):
        before = deployed(dev_stack)
        assert before.vpc_tags is not None
        older = replace(before, vpc_tags={k: v for k, v in before.vpc_tags.items() if k != TAG_MODEL_BUCKET})
        where = planned(stack_file_config("dev"), "dev", older)
        legacy = "ray-llm-multinode-models-123456789012-sa-east-1"
        assert where.record.model_bucket == legacy
        assert where.record.tags(f"{PROJECT}/dev")[TAG_MODEL_BUCKET] == legacy  # recorded from now on

    def test_on_a_teams_cluster_the_record_on_the_efa_group_keeps_it(self):
        first = run_stack(stack="byo.example")
        after = deployed(first, AwsState.for_stack("byo.example"))
        assert after.efa_group_tags is not None
        assert after.efa_group_tags[TAG_MODEL_BUCKET] == first.one(self.BUCKET).inputs["bucket"]
        kept = replace(after, efa_group_tags={**after.efa_group_tags, TAG_MODEL_BUCKET: "team-models-kept"})
        where = planned(stack_file_config("byo.example"), "byo.example", kept)
        assert where.record.model_bucket == "team-models-kept"


class TestTheBucket:
    def test_private_encrypted_and_tls_only(self, dev_stack: StackRun):
        bucket = dev_stack.one("aws:s3/bucket:Bucket")
        assert bucket.inputs["bucket"] == "ray-llm-multinode-models-895680ba-123456789012-sa-east-1"
        assert bucket.inputs["forceDestroy"] is False  # destroy stops at a bucket that is not empty
        block = dev_stack.one("aws:s3/bucketPublicAccessBlock:BucketPublicAccessBlock").inputs
        assert all(
            block[k] is True
            for k in ("blockPublicAcls", "blockPublicPolicy", "ignorePublicAcls", "restrictPublicBuckets")
        )
        (rule,) = dev_stack.one(
            "aws:s3/bucketServerSideEncryptionConfiguration:BucketServerSideEncryptionConfiguration"
        ).inputs["rules"]
        assert rule["applyServerSideEncryptionByDefault"]["sseAlgorithm"] == "AES256"
        policy = json.loads(dev_stack.one("aws:s3/bucketPolicy:BucketPolicy").inputs["policy"])
        (deny,) = policy["Statement"]
        assert deny["Effect"] == "Deny" and deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}

    def test_a_bucket_you_name_is_used_not_created(self, team_bucket_and_token: StackRun):
        run = team_bucket_and_token
        assert run.of_type("aws:s3/bucket:Bucket") == []
        env = {
            e["name"]: e.get("value")
            for e in copy_job(run).inputs["spec"]["template"]["spec"]["containers"][0]["env"]
        }
        assert env["BUCKET"] == "team-models"

    def test_off_means_hugging_face_and_no_cache_at_all(self):
        run = run_stack(overrides={"modelCache": {"enabled": False}})
        assert run.of_type("aws:s3/bucket:Bucket") == [] and cache_associations(run) == []
        assert [j.name for j in run.of_type(JOB)] == ["ray-llm-ready-check"]
        app = yaml.safe_load(run.one(RAYSERVICE).inputs["spec"]["serveConfigV2"])["applications"][0]
        assert app["args"]["prefill_config"]["model_loading_config"]["model_source"] == "Qwen/Qwen3.5-9B"


class TestLoading:
    def test_the_serve_config_loads_from_the_bucket(self, dev_stack: StackRun):
        app = yaml.safe_load(dev_stack.one(RAYSERVICE).inputs["spec"]["serveConfigV2"])["applications"][0]
        for side in ("prefill_config", "decode_config"):
            assert app["args"][side]["model_loading_config"]["model_source"] == {"bucket_uri": BUCKET}

    def test_the_ray_pods_run_as_the_service_account_with_read_access(self, dev_stack: StackRun):
        spec = dev_stack.one(RAYSERVICE).inputs["spec"]["rayClusterConfig"]
        pods = [spec["headGroupSpec"]["template"]["spec"], spec["workerGroupSpecs"][0]["template"]["spec"]]
        assert {p["serviceAccountName"] for p in pods} == {"ray-llm"}

    @pytest.mark.parametrize("stack", OWN_CLUSTER_STACKS)  # a team's route tables are the team's
    def test_an_s3_gateway_endpoint_on_every_private_route_table(self, stack: str):
        run = run_stack(stack=stack)
        endpoint = run.one("aws:ec2/vpcEndpoint:VpcEndpoint").inputs
        region = run.exports["clusterZones"][0][:-1]
        assert (endpoint["serviceName"], endpoint["vpcEndpointType"]) == (
            f"com.amazonaws.{region}.s3",
            "Gateway",
        )
        private = {run.id_of(t) for t in run.of_type("aws:ec2/routeTable:RouteTable") if "private" in t.name}
        assert set(endpoint["routeTableIds"]) == private

    def test_your_own_s3_prefix_is_read_not_copied(self):
        qwen = {"parametersBillions": 9.653, "kvCacheBytesPerToken": 32768}
        run = run_stack(overrides={"model": {"source": "s3://team-models/qwen/v3", **qwen}})
        assert run.of_type("aws:s3/bucket:Bucket") == []
        assert [j.name for j in run.of_type(JOB)] == ["ray-llm-ready-check"]
        (reader,) = cache_associations(run)
        assert reader.inputs["serviceAccount"] == "ray-llm"
        policy = json.loads(run.one("aws:iam/rolePolicy:RolePolicy", "model-cache-reader").inputs["policy"])
        assert policy["Statement"][0]["Resource"] == "arn:aws:s3:::team-models/qwen/v3/*"


class TestPodIdentity:
    def test_each_service_account_gets_its_prefix_and_nothing_more(self, dev_stack: StackRun):
        grants = {a.inputs["serviceAccount"]: a for a in cache_associations(dev_stack)}
        assert set(grants) == {"ray-llm", "model-copy"}
        assert all(
            a.inputs["namespace"] == "inference" and a.inputs["clusterName"] == "ray-llm-multinode"
            for a in grants.values()
        )
        policies = {
            p.name: json.loads(p.inputs["policy"])
            for p in dev_stack.of_type("aws:iam/rolePolicy:RolePolicy")
            if p.name.startswith("model-cache-")
        }
        prefix = f"arn:aws:s3:::{BUCKET.removeprefix('s3://')}/*"
        read, write = policies["model-cache-reader"]["Statement"], policies["model-cache-writer"]["Statement"]
        assert read[0] == {"Effect": "Allow", "Action": ["s3:GetObject"], "Resource": prefix}
        assert "s3:PutObject" in write[0]["Action"] and write[0]["Resource"] == prefix
        for statements in (read, write):
            assert statements[1]["Condition"] == {
                "StringLike": {"s3:prefix": ["models/Qwen/Qwen3.5-9B/main/*"]}
            }

    def test_roles_trust_only_eks_pod_identity(self, dev_stack: StackRun):
        for role in dev_stack.of_type("aws:iam/role:Role"):
            if role.name.startswith("model-cache-"):
                (statement,) = json.loads(role.inputs["assumeRolePolicy"])["Statement"]
                assert statement["Principal"] == {"Service": "pods.eks.amazonaws.com"}
                assert statement["Action"] == ["sts:AssumeRole", "sts:TagSession"]

    def test_the_agent_runs_after_the_system_nodes(self, dev_stack: StackRun):
        agent = dev_stack.one("aws:eks/addon:Addon", "cluster-pod-identity")
        assert agent.inputs["addonName"] == "eks-pod-identity-agent"
        assert dev_stack.one("eks:index:ManagedNodeGroup", "cluster-system").urn in agent.dependencies


class TestTheCopyJob:
    def test_awaited_before_the_rayservice_after_its_pod_identity(self, dev_stack: StackRun):
        job = copy_job(dev_stack)
        ray = dev_stack.one(RAYSERVICE)
        assert job.urn in ray.dependencies
        agent = dev_stack.one("aws:eks/addon:Addon", "cluster-pod-identity").urn
        # without the agent running, a pod of a Pod Identity service account gets no credentials
        for waiting in (job, ray):
            assert {agent, *(a.urn for a in cache_associations(dev_stack))} <= set(waiting.dependencies)
        pod = job.inputs["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == "model-copy" and pod["nodeSelector"] == {"role": "system"}
        # From the serving image, installing nothing: no package index is trusted by a pod holding S3
        # write credentials and the Hugging Face token.
        (container,) = pod["containers"]
        assert container["command"] == ["python3", "/program/model_copy.py"]
        assert (
            container["image"]
            == ray.inputs["spec"]["rayClusterConfig"]["headGroupSpec"]["template"]["spec"]["containers"][0][
                "image"
            ]
        )
        assert "pip" not in json.dumps(container)

    @pytest.mark.parametrize(
        ("overrides", "again"),
        [
            ({"model": {"revision": "0123abc"}}, True),
            ({"modelCache": {"bucket": "team-models"}}, True),
            ({"model": {"maxModelLen": 2048}}, False),
            ({"serving": {"imageDigest": "sha256:" + "ab" * 32}}, False),
        ],
    )
    def test_runs_again_only_when_the_model_or_its_destination_changes(self, dev_stack, overrides, again):
        before = copy_job(dev_stack).inputs["metadata"]["name"]
        assert copy_job_name() == before  # the program registers the Job build_serving makes
        assert (copy_job_name(**overrides) != before) == again

    def test_the_hugging_face_token_reaches_the_copy(self, team_bucket_and_token: StackRun):
        env = {
            e["name"]: e
            for e in copy_job(team_bucket_and_token).inputs["spec"]["template"]["spec"]["containers"][0][
                "env"
            ]
        }
        assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf-token", "key": "token"}}


class FakeS3:
    def __init__(self, objects: dict[str, int] | None = None, lose: set[str] = frozenset()):  # type: ignore[assignment]
        self.objects = dict(objects or {})
        self.lose = lose
        self.uploads: list[str] = []
        self.hash: str | None = None

    def upload(self, path: Path, name: str) -> None:
        self.uploads.append(name)
        if name not in self.lose:
            self.objects[name] = path.stat().st_size

    def write_hash(self, text: str) -> None:
        assert all(name in self.objects for name in self.uploads), "hash written before the files"
        self.hash = text


@pytest.fixture
def snapshot(tmp_path: Path) -> Path:
    files = {
        "config.json": b"{}",
        "model-00001-of-00002.safetensors": b"x" * 100,
        "model-00002-of-00002.safetensors": b"y" * 50,
    }
    for name, content in {**files, ".gitattributes": b"*", ".cache/huggingface/download/x.lock": b""}.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_bytes(content)
    return tmp_path


def test_the_snapshot_is_the_model_files_only(snapshot: Path):
    assert snapshot_files(snapshot) == {
        "config.json": 2,
        "model-00001-of-00002.safetensors": 100,
        "model-00002-of-00002.safetensors": 50,
    }


def test_a_whole_copy_ends_with_the_hash_file(snapshot: Path):
    s3 = FakeS3()
    ok, message = copy(snapshot, "abc123", lambda: dict(s3.objects), s3.upload, s3.write_hash, lambda _: None)
    assert ok and s3.hash == "abc123" and message == "copied 3 files of revision abc123"
    assert HASH_FILE not in s3.uploads


def test_a_rerun_uploads_only_what_is_missing_or_wrong(snapshot: Path):
    s3 = FakeS3({"config.json": 2, "model-00001-of-00002.safetensors": 7})
    ok, _ = copy(snapshot, "abc123", lambda: dict(s3.objects), s3.upload, s3.write_hash, lambda _: None)
    assert ok and sorted(s3.uploads) == [
        "model-00001-of-00002.safetensors",
        "model-00002-of-00002.safetensors",
    ]


def test_a_copy_that_is_not_whole_fails_without_the_hash_file(snapshot: Path):
    """Ray would only log the missing file and start vLLM on a partial model."""
    s3 = FakeS3(lose={"model-00002-of-00002.safetensors"})
    ok, message = copy(snapshot, "abc123", lambda: dict(s3.objects), s3.upload, s3.write_hash, lambda _: None)
    assert not ok and s3.hash is None
    assert message == "the copy is not whole: model-00002-of-00002.safetensors (absent)"


class TestImagePrepull:
    """The ~15 GiB image is pulled as soon as a GPU node joins, not once a worker lands there."""

    def test_a_daemon_set_holds_the_ray_image_on_every_gpu_node(self, dev_stack: StackRun):
        import kubernetes_validate

        prepull = dev_stack.one("kubernetes:apps/v1:DaemonSet")
        pod = prepull.inputs["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        ray = dev_stack.one(RAYSERVICE).inputs["spec"]["rayClusterConfig"]["workerGroupSpecs"][0]["template"][
            "spec"
        ]
        assert container["image"] == ray["containers"][0]["image"]
        assert pod["nodeSelector"] == ray["nodeSelector"] and pod["tolerations"] == ray["tolerations"]
        assert prepull.inputs["metadata"]["annotations"]["pulumi.com/skipAwait"] == "true"
        kubernetes_validate.validate(
            {k: prepull.inputs[k] for k in ("apiVersion", "kind", "metadata", "spec")}, "1.35", strict=True
        )

    def test_it_waits_for_nothing_but_its_namespace(self, dev_stack: StackRun):
        prepull = dev_stack.one("kubernetes:apps/v1:DaemonSet")
        namespace = dev_stack.one("kubernetes:core/v1:Namespace", "ray-llm-ns")
        assert prepull.dependencies == [namespace.urn]
