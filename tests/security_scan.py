"""An independent scan of what the stack renders: checkov's Kubernetes checks over `ops render` of every
stack file, with the RayService's pod templates as Pods (checkov does not read custom resources, and
those are the pods that matter most).

Every finding is either fixed or listed in SKIPS with the reason it stands, for the resources it
applies to. A finding not listed fails the scan, and so does a skip that matches nothing any more (a
fixed finding takes its justification with it). Run by .ci/run with checkov from its own virtualenv:

    python -m tests.security_scan [--checkov PATH]
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

from config import load_settings
from ops.render import manifests
from ops.stack import load_stack_config
from tests.fakes.pulumi import STACK_ROOT, plan_of

ROOT = Path(__file__).resolve().parent.parent
CHECKOV_VERSION = "3.3.30"
"""Pinned in .ci/run too; the skips are reviewed against this version's checks."""

WORKERS = "Pod.*.*-workers"
"""The GPU workers: `gpu-workers`, or each side's own group (`prefill-workers`, `decode-workers`)."""
HEAD = "Pod.*.*-head"
RAY = "Pod.*.*-*"
PREPULL = "DaemonSet.*.ray-image-prepull"

SKIPS: dict[str, dict[str, str]] = {
    "CKV_K8S_15": {
        "*": "Image pull policy IfNotPresent on purpose: the Ray image is ~15 GiB, pulled once per node "
        "(and by the prepull DaemonSet before the workers need it); every image is pinned by version tag "
        "(config/versions.py), the Ray image by digest with serving.imageDigest.",
    },
    "CKV_K8S_43": {
        "*": "Images by version tag, pinned in config/versions.py; the AWS DLC's tag can be pinned by "
        "digest with serving.imageDigest (recommended for prod), and the readiness check runs that image "
        "too.",
    },
    "CKV_K8S_8": {
        RAY: "KubeRay adds the liveness probe (HTTP /api/healthz on the dashboard agent port, Ray >= "
        "2.53; ray-operator/controllers/ray/common/pod.go) to every Ray container it creates.",
        PREPULL: "`sleep infinity` holds the image in the node's cache; there is nothing to probe.",
    },
    "CKV_K8S_9": {
        RAY: "KubeRay adds the readiness probe (the raylet, and the Serve proxy on workers) itself.",
        PREPULL: "`sleep infinity` serves nothing; nothing waits for it to be ready.",
    },
    "CKV_K8S_22": {
        RAY: "Ray writes its session, logs, sockets and spill files under /tmp/ray and the image's home; "
        "a read-only root would need every such path found and mounted, unproven here.",
    },
    "CKV_K8S_23": {
        WORKERS: "Root on purpose: CAP_IPC_LOCK (memory pinning for EFA) is effective for root only.",
        HEAD: "The AWS Ray LLM image runs as root and owns its paths as root; not changed unproven.",
    },
    "CKV_K8S_40": {
        WORKERS: "Root on purpose (see CKV_K8S_23): IPC_LOCK for NIXL over EFA.",
        HEAD: "The image's own user (root); see CKV_K8S_23.",
    },
    "CKV_K8S_25": {
        WORKERS: "IPC_LOCK, the one capability NIXL and libfabric need to pin host memory for EFA, in place "
        "of the seed's privileged: true (docs/design.md, Worker privileges).",
    },
    "CKV_K8S_37": {
        WORKERS: "Adds IPC_LOCK (see CKV_K8S_25) and drops NET_RAW; dropping ALL is unproven for CUDA, "
        "NCCL and vLLM as root.",
        HEAD: "Drops NET_RAW; dropping ALL would take DAC_OVERRIDE and CHOWN from the image's root user, "
        "unproven for Ray.",
    },
    "CKV_K8S_29": {
        WORKERS: "The container has its security context (IPC_LOCK, no escalation); the pod's would only "
        "add a seccomp profile (see CKV_K8S_31).",
    },
    "CKV_K8S_31": {
        WORKERS: "No seccomp profile (Unconfined, EKS's default) for the GPU workers: CUDA, NCCL and EFA "
        "verbs under the runtime's default profile are unproven on this hardware; the head has it.",
    },
}
"""check id -> {resource pattern (kind.namespace.name, fnmatch): why it stands}."""


def stacks() -> list[str]:
    return sorted(
        p.name.removeprefix("Pulumi.").removesuffix(".yaml") for p in STACK_ROOT.glob("Pulumi.*.yaml")
    )


def ray_pods(rayservice: dict[str, Any]) -> list[dict[str, Any]]:
    """The head's and each worker group's pod template as the Pod KubeRay creates from it."""
    meta = rayservice["metadata"]
    cluster = rayservice["spec"]["rayClusterConfig"]
    groups = [("head", cluster["headGroupSpec"])] + [(g["groupName"], g) for g in cluster["workerGroupSpecs"]]
    return [
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": f"{meta['name']}-{group}",
                "namespace": meta["namespace"],
                **(
                    {"annotations": spec["template"]["metadata"]["annotations"]}
                    if spec["template"].get("metadata", {}).get("annotations")
                    else {}
                ),
            },
            "spec": spec["template"]["spec"],
        }
        for group, spec in groups
    ]


def scan_input(stack: str) -> list[dict[str, Any]]:
    settings = load_settings(load_stack_config(STACK_ROOT, stack))
    objects = manifests(settings, plan_of(stack))
    extra = [pod for o in objects if o["kind"] == "RayService" for pod in ray_pods(o)]
    return objects + extra


def findings(checkov: str, directory: Path) -> list[tuple[str, str, str]]:
    """(check id, resource, check name) of every failed check."""
    result = subprocess.run(
        [checkov, "--directory", str(directory), "--framework", "kubernetes", "--output", "json", "--quiet"],
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode not in (0, 1):
        raise SystemExit(f"checkov failed ({result.returncode}): {result.stderr[-2000:]}")
    report = json.loads(result.stdout or "{}")
    reports = report if isinstance(report, list) else [report]
    failed = []
    for r in reports:
        for check in r.get("results", {}).get("failed_checks", []):
            failed.append((check["check_id"], check["resource"], check["check_name"]))
    return failed


def evaluate(
    failed: list[tuple[str, str, str]], skips: dict[str, dict[str, str]] = SKIPS
) -> tuple[list[str], list[str], int]:
    """(unjustified findings, stale skips, justified skips used)."""
    unjustified, used = [], set()
    for check_id, resource, name in sorted(set(failed)):
        match = next((p for p in skips.get(check_id, {}) if fnmatch.fnmatchcase(resource, p)), None)
        if match is None:
            unjustified.append(f"{check_id} {resource}: {name}")
        else:
            used.add((check_id, match))
    stale = [f"{c} {p}" for c, patterns in skips.items() for p in patterns if (c, p) not in used]
    return unjustified, stale, len(used)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="checkov over what the stack renders, with justified skips")
    parser.add_argument("--checkov", default=str(ROOT / ".cache/checkov/bin/checkov"))
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        for stack in stacks():
            text = yaml.safe_dump_all(scan_input(stack), sort_keys=False)
            (Path(tmp) / f"{stack}.yaml").write_text(text)
        failed = findings(args.checkov, Path(tmp))
    unjustified, stale, used = evaluate(failed)
    for line in unjustified:
        print(f"UNJUSTIFIED {line}")
    for line in stale:
        print(f"STALE SKIP {line} (matches no finding: remove it)")
    print(
        f"checkov {CHECKOV_VERSION}: {len(failed)} finding(s) over {len(stacks())} stack(s), "
        f"{used} justified skip(s), {len(unjustified)} unjustified, {len(stale)} stale"
    )
    return 1 if unjustified or stale else 0


if __name__ == "__main__":
    sys.exit(main())
