"""A Ray Serve LLM callback: start from the node's copy of the model instead of downloading it again.

Ray 2.58 downloads every object of an S3 model source on every replica start, even when the node's
Hugging Face cache already holds that snapshot (ray/llm/_internal/common/utils/download_utils.py has
no "already there" check). The worker pods keep that cache on the node's disk
(/var/lib/ray-llm/model-cache), so a replaced worker finds the weights there, and mostly in the page
cache too. This callback, built in the replica's process and in the node's download task (both on the
replica's node: a replica's GPUs are one pod), compares the node's copy with S3: when the snapshot S3's
`hash` names is there, with every file at its S3 size, it tells Ray not to download, and vLLM loads
the cached snapshot (Ray resolves it from `refs/main`). Anything else, including any error, leaves
Ray's own download in place.

Loaded by Ray as `ray_node_cache:ReuseNodeCache` (serveConfigV2's `callback_config`), from a ConfigMap
on the Ray pods' PYTHONPATH; boto3 is what Ray's S3 download itself uses.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ray.llm._internal.common.callbacks.base import CallbackBase
from ray.llm._internal.common.utils.download_utils import NodeModelDownloadable

logger = logging.getLogger(__name__)
HASH_FILE = "hash"


def hub_cache(env: Mapping[str, str] = os.environ) -> Path:
    """Where huggingface_hub (and so Ray) keeps models: HF_HUB_CACHE, else HF_HOME/hub."""
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"])
    return Path(env.get("HF_HOME") or Path.home() / ".cache" / "huggingface") / "hub"


def model_dir(hub: Path, model_id: str) -> Path:
    return hub / f"models--{model_id.replace('/', '--')}"


def node_copy_is_current(directory: Path, remote_hash: str, remote_files: Mapping[str, int]) -> bool:
    """The node holds the snapshot S3 names, whole: refs/main says it, and every file is there at its
    S3 size."""
    refs = directory / "refs" / "main"
    if not remote_files or not refs.is_file() or refs.read_text().strip() != remote_hash:
        return False
    snapshot = directory / "snapshots" / remote_hash
    return all(
        (snapshot / name).is_file() and (snapshot / name).stat().st_size == size
        for name, size in remote_files.items()
    )


def s3_listing(uri: str) -> tuple[str, dict[str, int]]:
    """(the `hash` file's content, relative key -> size of every object) under an s3:// prefix."""
    import boto3  # pyright: ignore[reportMissingImports]  (Ray's S3 download needs it too)

    bucket, _, prefix = uri.removeprefix("s3://").partition("/")
    prefix = prefix.strip("/")
    s3 = boto3.client("s3")
    remote_hash = s3.get_object(Bucket=bucket, Key=f"{prefix}/{HASH_FILE}")["Body"].read().decode().strip()
    files: dict[str, int] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/"):
        for item in page.get("Contents", []):
            files[item["Key"].removeprefix(f"{prefix}/")] = item["Size"]
    return remote_hash, files


class ReuseNodeCache(CallbackBase):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        try:
            if self._node_copy_is_current():
                self.ctx.worker_node_download_model = NodeModelDownloadable.NONE
                logger.info(
                    "the node's copy of %s is current: not downloading it again", self.llm_config.model_id
                )
        except Exception as error:  # never worse than Ray's own download
            logger.warning("could not compare the node's model copy with S3 (%s): downloading", error)

    def _node_copy_is_current(self) -> bool:
        # LLMConfig turns its model_loading_config into a ModelLoadingConfig when validated
        loading: Any = self.llm_config.model_loading_config
        uri = getattr(loading.model_source, "bucket_uri", None)
        if not uri or self.ctx.worker_node_download_model != NodeModelDownloadable.MODEL_AND_TOKENIZER:
            return False
        remote_hash, files = s3_listing(uri)
        return node_copy_is_current(model_dir(hub_cache(), self.llm_config.model_id), remote_hash, files)
