"""Record `ops verify`'s transfer probe with a real NIXL, for tests/fixtures/nixl/ (a tool, not a test).

    PATH=<a virtualenv with nixl>/bin:$PATH LD_LIBRARY_PATH=<libfabric> \\
        .venv/bin/python -m tests.record_nixl_probe tests/fixtures/nixl [--case NAME] [--label nixl-1.3.1]

It runs ops/kv_transfer.py's `run_probe` against two "pods" that are this machine: each exec runs here
(`python3` on PATH must import nixl), so the probe program, the shell lines that start and watch it,
and the orchestration are the ones a cluster runs, with a real NIXL on both sides, only without GPUs
or EFA. Each case writes `<case>.json`: what both sides printed and logged (`ProbeRun`), which the
tests replay (`<case>-<label>.json` with --label). tests/fixtures/nixl/README.md says when, where and
with what each was recorded. The `gpu-*` cases need a CUDA GPU and torch: their buffers are VRAM, at the
size `ops verify` moves by default (64 blocks of 4 MiB, 5 transfers).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from ops.kube import EXEC_TIMEOUT_S, ExecResult
from ops.kv_transfer import MIB, Pair, ProbeSpec, run_probe

SPEC = {"blocks": 8, "block_bytes": MIB, "iterations": 3}
"""Host-memory cases: small, the fixtures keep every digest."""
GPU_SPEC: dict[str, int] = {}
"""GPU cases: `ops verify`'s defaults (ProbeSpec)."""
CASES: dict[str, tuple[tuple[str, ...], str, dict[str, str]]] = {
    # UCX between two processes: UCX_TLS keeps it off shared memory, as two nodes are.
    "ucx-tcp": (("UCX",), "DRAM", {"UCX_TLS": "tcp,self"}),
    # libfabric without an EFA device picks its tcp provider: the path that must fail.
    "libfabric-tcp": (("LIBFABRIC",), "DRAM", {}),
    # FI_PROVIDER=efa (as the workers set it) without an EFA device: NIXL cannot start LIBFABRIC.
    "libfabric-no-efa": (("LIBFABRIC",), "DRAM", {"FI_PROVIDER": "efa"}),
    # GPU buffers over UCX's tcp transport, staged through host memory (cuda_copy), as two nodes are.
    "ucx-gpu-tcp": (("UCX",), "VRAM", {"UCX_TLS": "tcp,cuda_copy,self"}),
    # GPU buffers through libfabric's tcp provider, which has no FI_HMEM (prov/tcp registers system
    # memory only): what a LIBFABRIC path without FI_HMEM does with GPU buffers.
    "libfabric-gpu-tcp": (("LIBFABRIC",), "VRAM", {"FI_PROVIDER": "tcp"}),
    # GPU buffers through libfabric's shm provider, which has FI_HMEM (CUDA): NIXL registers the GPU
    # memory as FI_HMEM_CUDA without GPUDirect RDMA, as it does with the efa provider.
    "libfabric-gpu-shm": (("LIBFABRIC",), "VRAM", {"FI_PROVIDER": "shm"}),
}


class LocalPods:
    """Every pod is this machine: an exec is a local process."""

    def __init__(self, env: dict[str, str]):
        self.env = env

    def exec_in_pod(
        self,
        namespace: str,
        pod: str,
        container: str,
        command: Sequence[str],
        timeout: float = EXEC_TIMEOUT_S,
    ) -> ExecResult:
        done = subprocess.run(list(command), capture_output=True, text=True, timeout=timeout, env=self.env)
        return ExecResult(done.stdout, done.stderr, done.returncode)


def record(case: str, out: Path, label: str | None = None) -> None:
    backends, memory, extra = CASES[case]
    env = {k: v for k, v in os.environ.items() if k not in ("FI_PROVIDER", "UCX_TLS")} | extra
    pair = Pair("worker-a", "node-a", "worker-b", "node-b")
    spec = ProbeSpec(backends=backends, memory=memory, **(GPU_SPEC if memory == "VRAM" else SPEC))  # type: ignore[arg-type]
    run = run_probe(LocalPods(env), "inference", pair, spec, lambda m: print(f"  {m}", file=sys.stderr))  # type: ignore[arg-type]
    name = f"{case}-{label}" if label else case
    (out / f"{name}.json").write_text(json.dumps(asdict(run), indent=1, sort_keys=True) + "\n")
    print(
        f"{case}: problem={run.problem!r} read={bool(run.read_result)} serve={run.serve_result}",
        file=sys.stderr,
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("out", type=Path)
    parser.add_argument("--case", choices=sorted(CASES), action="append")
    parser.add_argument("--label", help="appended to each case's file name, e.g. nixl-1.3.1")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for case in args.case or sorted(CASES):
        record(case, args.out, args.label)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
