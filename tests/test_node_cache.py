"""Restarts do not reload from the network: the node-cache callback (jobs/ray_node_cache.py), driven by
Ray 2.58's own classes: Ray loads it by the name our serve config gives, builds it from our serve
config's LLMConfig, and when the node holds the snapshot S3's `hash` names, whole, it tells Ray not to
download, and Ray resolves the cached snapshot for vLLM. Anything else leaves Ray's download in place."""

from __future__ import annotations

import io
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fakes.pulumi import ROOT, StackRun

sys.path.insert(0, str(ROOT / "jobs"))  # as PYTHONPATH puts it on the Ray pods

from ray.llm._internal.common.utils.download_utils import NodeModelDownloadable, get_model_location_on_disk
from ray.llm._internal.common.utils.import_utils import load_class
from ray.llm._internal.serve.core.configs.llm_config import LLMConfig

FILES = {"config.json": b"{}", "model.safetensors": b"w" * 100, "tokenizer.json": b"t" * 10}
COMMIT = "0a1b2c3d4e5f"


class FakeS3:
    def __init__(self, files: dict[str, bytes], commit: str, fail: bool = False):
        self.objects = {**{k: len(v) for k, v in files.items()}, "hash": len(commit)}
        self.commit, self.fail = commit, fail

    def get_object(self, Bucket: str, Key: str) -> dict[str, Any]:  # noqa: N803 (boto3's names)
        if self.fail:
            raise RuntimeError("AccessDenied")
        assert Key.endswith("/hash")
        return {"Body": io.BytesIO(self.commit.encode())}

    def get_paginator(self, _: str):
        objects = self.objects

        class Paginator:
            def paginate(self, Bucket: str, Prefix: str):  # noqa: N803
                yield {"Contents": [{"Key": Prefix + k, "Size": v} for k, v in objects.items()]}

        return Paginator()


@pytest.fixture
def s3(monkeypatch) -> FakeS3:
    fake = FakeS3(FILES, COMMIT)
    monkeypatch.setitem(sys.modules, "boto3", types.SimpleNamespace(client=lambda _: fake))
    return fake


@pytest.fixture
def hub(tmp_path: Path, monkeypatch) -> Path:
    import huggingface_hub.constants

    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))  # what Ray reads
    return tmp_path


def node_copy(hub: Path, model_id: str, commit: str, files: dict[str, bytes]) -> Path:
    """The node's cache as Ray's S3 download leaves it (the `hash` object is copied in too)."""
    directory = hub / f"models--{model_id.replace('/', '--')}"
    snapshot = directory / "snapshots" / commit
    snapshot.mkdir(parents=True)
    for name, content in {**files, "hash": commit.encode()}.items():
        (snapshot / name).write_bytes(content)
    (directory / "refs").mkdir()
    (directory / "refs" / "main").write_text(commit)
    return snapshot


@pytest.fixture(scope="module")
def side(dev_stack: StackRun) -> dict[str, Any]:
    serve = yaml.safe_load(dev_stack.one("kubernetes:ray.io/v1:RayService").inputs["spec"]["serveConfigV2"])
    return serve["applications"][0]["args"]["decode_config"]


def callback(side: dict[str, Any]):
    config = LLMConfig.model_validate(side)
    name = config.callback_config.callback_class
    assert isinstance(name, str)
    cls = load_class(name)  # as Ray loads it
    return config, cls(
        llm_config=config,
        ctx_kwargs={"worker_node_download_model": NodeModelDownloadable.MODEL_AND_TOKENIZER},
    )


def test_the_serve_config_names_the_callback_and_an_s3_source(side):
    assert side["callback_config"] == {"callback_class": "ray_node_cache:ReuseNodeCache"}
    assert side["model_loading_config"]["model_source"]["bucket_uri"].startswith("s3://")


def test_a_whole_current_node_copy_is_not_downloaded_again(side, s3, hub):
    config, cache = callback(side)
    snapshot = node_copy(hub, config.model_id, COMMIT, FILES)
    config, cache = callback(side)
    assert cache.ctx.worker_node_download_model == NodeModelDownloadable.NONE
    assert get_model_location_on_disk(config.model_id) == str(snapshot)  # what Ray hands vLLM


@pytest.mark.parametrize(
    "node",
    [
        "nothing",  # a node that never held the model
        "another revision",  # the model moved on: S3 names another commit
        "partial",  # a download cut short
        "refs elsewhere",  # the snapshot is there, but Ray would resolve refs/main to another one
    ],
)
def test_anything_else_is_downloaded(side, s3, hub, node):
    config, _ = callback(side)
    if node == "another revision":
        node_copy(hub, config.model_id, "ffffffffffff", FILES)
    elif node == "partial":
        node_copy(hub, config.model_id, COMMIT, {**FILES, "model.safetensors": b"w" * 40})
    elif node == "refs elsewhere":
        node_copy(hub, config.model_id, COMMIT, FILES)
        (hub / f"models--{config.model_id}" / "refs" / "main").write_text("ffffffffffff")
    _, cache = callback(side)
    assert cache.ctx.worker_node_download_model == NodeModelDownloadable.MODEL_AND_TOKENIZER


def test_when_s3_cannot_be_asked_ray_downloads_as_usual(side, s3, hub):
    config, _ = callback(side)
    node_copy(hub, config.model_id, COMMIT, FILES)
    s3.fail = True
    _, cache = callback(side)
    assert cache.ctx.worker_node_download_model == NodeModelDownloadable.MODEL_AND_TOKENIZER


def test_the_ray_pods_load_the_callback_from_the_stacks_config_map(dev_stack: StackRun):
    workers = dev_stack.one("kubernetes:ray.io/v1:RayService").inputs["spec"]["rayClusterConfig"][
        "workerGroupSpecs"
    ]
    pod = workers[0]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert env["PYTHONPATH"] == mounts["plugins"] == "/opt/ray-llm-eks"
    plugins = dev_stack.one("kubernetes:core/v1:ConfigMap", "ray-llm-plugins")
    assert volumes["plugins"]["configMap"]["name"] == plugins.inputs["metadata"]["name"]
    assert plugins.inputs["data"]["ray_node_cache.py"] == (ROOT / "jobs" / "ray_node_cache.py").read_text()
    assert plugins.urn in dev_stack.one("kubernetes:ray.io/v1:RayService").dependencies
