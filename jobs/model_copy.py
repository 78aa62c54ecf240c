"""Copy a Hugging Face model into the stack's S3 model cache, and prove the copy complete.

Runs inside the cluster as a Kubernetes Job that `pulumi up` awaits before the RayService
(components/rayservice.py), named by the model's source and revision, so it runs again only when they
change. It runs in the serving image, which carries what it needs (huggingface_hub, vLLM's dependency,
and boto3, Ray Serve LLM's S3 loader), and installs nothing (manifests/model_cache.py); credentials
are the Job's EKS Pod Identity (write access to this model's prefix only) and, for gated models,
HF_TOKEN.

Ray Serve LLM downloads every object under the prefix before vLLM starts and only logs a file that
failed, so the copy must be whole: every file of the snapshot is compared, by size, with what S3 holds,
and the `hash` file (the snapshot's commit, which Ray uses to name it in the node's cache) is written
last. A file already in S3 at the right size is not uploaded again, so a rerun resumes.

Environment: SOURCE (`org/name`), REVISION, BUCKET, PREFIX, WORKDIR (local disk for the snapshot),
HF_TOKEN (optional).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

HASH_FILE = "hash"
SKIPPED = (".gitattributes", ".cache/")
"""Not part of the model: git metadata and huggingface_hub's own download bookkeeping."""


def snapshot_files(root: Path) -> dict[str, int]:
    """relative path -> size of every model file in a downloaded snapshot."""
    files = {}
    for path in sorted(root.rglob("*")):
        relative = path.relative_to(root).as_posix()
        if path.is_file() and not relative.startswith(SKIPPED):
            files[relative] = path.stat().st_size
    return files


def to_upload(local: Mapping[str, int], remote: Mapping[str, int]) -> list[str]:
    """Files S3 lacks or holds at another size."""
    return [name for name, size in local.items() if remote.get(name) != size]


def missing(local: Mapping[str, int], remote: Mapping[str, int]) -> list[str]:
    """What keeps the copy from being whole: files absent from S3, or of another size there."""
    gaps = []
    for name, size in local.items():
        if name not in remote:
            gaps.append(f"{name} (absent)")
        elif remote[name] != size:
            gaps.append(f"{name} ({remote[name]} of {size} bytes)")
    return gaps


def copy(
    local_root: Path,
    commit: str,
    list_remote: Callable[[], dict[str, int]],
    upload: Callable[[Path, str], None],
    write_hash: Callable[[str], None],
    say: Callable[[str], None] = print,
) -> tuple[bool, str]:
    local = snapshot_files(local_root)
    if not local:
        return False, "the snapshot is empty"
    pending = to_upload(local, list_remote())
    say(f"{len(local)} files, {len(pending)} to upload")
    for name in pending:
        upload(local_root / name, name)
    gaps = missing(local, {k: v for k, v in list_remote().items() if k != HASH_FILE})
    if gaps:
        return False, f"the copy is not whole: {', '.join(gaps[:10])}"
    write_hash(commit)
    return True, f"copied {len(local)} files of revision {commit}"


def main(env: Mapping[str, str] = os.environ) -> int:
    import boto3  # pyright: ignore[reportMissingImports]  (in the serving image)
    from huggingface_hub import HfApi, snapshot_download  # pyright: ignore[reportMissingImports]

    source, revision = env["SOURCE"], env.get("REVISION", "main")
    bucket, prefix = env["BUCKET"], env["PREFIX"].strip("/")
    token = env.get("HF_TOKEN") or None
    commit = HfApi().model_info(source, revision=revision, token=token).sha or revision
    root = Path(
        snapshot_download(source, revision=commit, token=token, local_dir=Path(env["WORKDIR"]) / "model")
    )
    s3 = boto3.client("s3")

    def list_remote() -> dict[str, int]:
        found: dict[str, int] = {}
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=f"{prefix}/"):
            for item in page.get("Contents", []):
                found[item["Key"].removeprefix(f"{prefix}/")] = item["Size"]
        return found

    ok, message = copy(
        root,
        commit,
        list_remote,
        lambda path, name: s3.upload_file(str(path), bucket, f"{prefix}/{name}"),
        lambda text: s3.put_object(Bucket=bucket, Key=f"{prefix}/{HASH_FILE}", Body=text.encode()),
    )
    print(message, flush=True)
    _termination_message(message)
    return 0 if ok else 1


def _termination_message(message: str, path: str = "/dev/termination-log") -> None:
    try:  # what the Job's failure in `pulumi up` shows
        with open(path, "w") as log:
            log.write(message[:4000])
    except OSError:
        pass


if __name__ == "__main__":
    sys.exit(main())
