"""The KV path proven on the running stack: a known buffer moved from one GPU worker to another through
NIXL, every block's bytes checked where they arrive, the transport that carried them named from NIXL's
and UCX's own logs, and the rate held to the plan's floor (planning/kv_path.py `transfer_floor`).

How (`run_probe`): jobs/nixl_probe.py runs by exec in two Ray worker pods on different GPU nodes, in
their `ray-worker` container, so it sees what vLLM sees: the same image, NIXL, EFA devices, GPU,
environment (`FI_PROVIDER`, `UCX_TCP_PORT_RANGE`) and network policies. Its source travels in the exec
request (nothing is installed or mounted). One pod serves: it fills the blocks with random bytes and
writes its NIXL metadata and each block's SHA-256 to `ready.json` in a directory of its own under /tmp.
The other reads them with NIXL's READ, as vLLM 0.26's decode worker reads the prefill worker's KV
blocks, and prints the SHA-256 of every block as it arrived. Both run with the plan's backends and
buffer memory (VRAM for `kv_buffer_device: cuda`, DRAM for `cpu`). The directory is removed
afterwards, and the server exits on its own deadline if `ops` is interrupted.

What the verdicts rest on (`judge`):
- integrity: each block's digest after the first and the last transfer against the server's; a block
  that reads as zeros never arrived (the reader zeroes its buffer before each checked transfer), the
  failure public reports describe for NIXL over libfabric (nixl#909);
- the transport: the backend NIXL chose for the transfer (`query_xfer_backend`); with LIBFABRIC the
  provider of its rails (`Created N rails using provider=efa`, NIXL's INFO log, which the probe turns
  on) and FI_HMEM for GPU buffers; with UCX the transport UCX_PROTO_INFO names for remote reads
  (`tcp/eth0`, or `srd/...`, UCX's own EFA transport);
- the rate: the bytes of the timed transfers (all but the first, which also connects) over their time,
  against the floor for the wire that carried them.
"""

from __future__ import annotations

import base64
import contextlib
import json
import re
import secrets
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from ops.kube import EXEC_TIMEOUT_S, ExecResult, KubeApi, OpsError, excerpt
from planning.kv_path import TransferFloor, Wire

PROBE = Path(__file__).resolve().parent.parent / "jobs" / "nixl_probe.py"
MARK = "NIXL-PROBE "
"""The line jobs/nixl_probe.py prints its result on (the same constant there; a test keeps them equal)."""
WORKER_CONTAINER = "ray-worker"
MIB = 2**20

BACKEND_PATTERN = "Backend (LIBFABRIC|UCX) was instantiated"
"""What NIXL logs when it creates a transfer backend (the seed's grep, an extended regex)."""
PROVIDER_PATTERN = "rails using provider=([A-Za-z0-9_;.-]+)"
"""NIXL 1.3.1 at INFO: "Created N rails using provider=efa"
(src/utils/libfabric/libfabric_rail_manager.cpp)."""
HMEM_PATTERN = "Using provider (with|without) FI_HMEM support"
"""Whether the rails can register GPU memory (libfabric_rail.cpp): without it GPU buffers fail."""
UCX_READ_HEADER = re.compile(
    r"\|\s*ucp_context_\d+ (?:intra|inter)-node cfg#\d+ \| remote memory read by ucp_get"
)
"""UCX_PROTO_INFO's table for remote reads (ucp/proto/proto_debug.c at 1.20/1.21): one row per message
size range, its last column the lanes that serve it."""
UCX_ROW = re.compile(r"\|\s*(\d+)\.\.(\d+|inf) \|.*\|\s*(.+?)\s*\|\s*$")
UCX_LANE = re.compile(r"\b([a-z][a-z0-9_]*)/[A-Za-z0-9_:.\-]+")
"""A lane: transport/device, e.g. tcp/eth0, srd/rdmap16s27:1, cuda_copy/cuda."""

SERVE_DEADLINE_S = 600.0
"""The server exits after this even if nobody reads (ops interrupted)."""
READY_TIMEOUT_S = 180.0
"""Waiting for ready.json: starting Python, importing NIXL (and torch), filling and registering."""
READ_TIMEOUT_S = 240.0
POLL_S = 2.0

# Shell lines run by exec in the worker container; $1 is the probe's directory. The server runs in the
# background with its output in files, so the exec that starts it returns at once.
SERVE_SCRIPT = (
    'd="$1"; shift; mkdir -p "$d" && cd "$d" && '
    '(python3 -c "$0" "$@" >serve.out 2>serve.log; echo $? >serve.exit) </dev/null >/dev/null 2>&1 &'
)
READY_SCRIPT = (
    'cd "$1" 2>/dev/null || exit 3; if [ -f ready.json ]; then cat ready.json; exit 0; fi; '
    "if [ -f serve.exit ]; then exit 4; fi; exit 5"
)
"""Exit 0 with ready.json on stdout; 4: the server ended first; 5: not yet; 3: no such directory."""
ENDED_SCRIPT = (
    'cd "$1" 2>/dev/null || exit 3; [ -f serve.exit ] || exit 5; cat serve.exit serve.out 2>/dev/null; '
    "tail -c 65536 serve.log >&2 2>/dev/null; exit 0"
)
"""Exit 0 once the server ended: its exit code and result on stdout, the end of its log on stderr."""

ADVICE_EFA_PATH = (
    "EFA needs the GPU nodes' security group to allow all traffic to and from itself (the EKS cluster "
    "security group does; a group of your own on the GPU nodes must too) and the pods to hold "
    "vpc.amazonaws.com/efa"
)
ADVICE_UCX_TCP = (
    "UCX's tcp transport needs UCX_TCP_PORT_RANGE on the workers and those ports open between the GPU "
    "workers (the ray-workers-ingress NetworkPolicy; manifests/ray_ports.py)"
)


@dataclass(frozen=True)
class ProbeSpec:
    """What to move: the plan's backends and buffer memory, and how much."""

    backends: tuple[str, ...]
    memory: Literal["DRAM", "VRAM"]
    blocks: int = 64
    block_bytes: int = 4 * MIB
    iterations: int = 5
    transfer_timeout_s: float = 30.0

    @property
    def total_bytes(self) -> int:
        return self.blocks * self.block_bytes


@dataclass(frozen=True)
class Pair:
    serve: str
    serve_node: str
    read: str
    read_node: str

    def describe(self) -> str:
        return f"from {self.serve} ({self.serve_node}) to {self.read} ({self.read_node})"


@dataclass(frozen=True)
class ProbeRun:
    """What the two pods said."""

    pair: Pair
    ready: dict[str, Any] | None = None
    serve_result: dict[str, Any] | None = None
    read_result: dict[str, Any] | None = None
    logs: dict[str, str] = field(default_factory=dict)
    """pod -> what NIXL and UCX printed there."""
    problem: str | None = None
    """The probe could not run to the end (a pod would not start it, the server never got ready)."""


@dataclass(frozen=True)
class Verdict:
    passed: bool
    reason: str


def pick_pair(pods: Sequence[Mapping[str, Any]]) -> Pair | str:
    """Two Running worker pods on different nodes, by name; a reason when there are none."""
    running = sorted(
        (p for p in pods if (p.get("status") or {}).get("phase") == "Running"),
        key=lambda p: p["metadata"]["name"],
    )
    if len(running) < 2:
        return f"needs two Running GPU worker pods, found {len(running)}"
    first = running[0]
    node = first["spec"].get("nodeName", "?")
    other = next((p for p in running[1:] if p["spec"].get("nodeName", "?") != node), None)
    if other is None:
        return f"all {len(running)} GPU worker pods run on {node}: the KV cache never leaves that node"
    return Pair(
        first["metadata"]["name"], node, other["metadata"]["name"], other["spec"].get("nodeName", "?")
    )


def serve_command(source: str, workdir: str, spec: ProbeSpec, nonce: str) -> list[str]:
    return [
        "sh",
        "-c",
        SERVE_SCRIPT,
        source,
        workdir,
        "serve",
        "--backends",
        ",".join(spec.backends),
        "--nonce",
        nonce,
        "--memory",
        spec.memory,
        "--blocks",
        str(spec.blocks),
        "--block-bytes",
        str(spec.block_bytes),
        "--deadline",
        f"{SERVE_DEADLINE_S:g}",
    ]


def read_command(source: str, ready: str, spec: ProbeSpec, nonce: str) -> list[str]:
    return [
        "python3",
        "-c",
        source,
        "read",
        "--backends",
        ",".join(spec.backends),
        "--nonce",
        nonce,
        "--peer",
        base64.b64encode(ready.encode()).decode(),
        "--iterations",
        str(spec.iterations),
        "--transfer-timeout",
        f"{spec.transfer_timeout_s:g}",
    ]


def result_line(stdout: str) -> dict[str, Any] | None:
    """The probe's result (its last `NIXL-PROBE` line), None when it printed none."""
    lines = [line for line in stdout.splitlines() if line.startswith(MARK)]
    if not lines:
        return None
    try:
        found = json.loads(lines[-1][len(MARK) :])
    except json.JSONDecodeError:
        return None
    return found if isinstance(found, dict) else None


def run_probe(
    api: KubeApi,
    namespace: str,
    pair: Pair,
    spec: ProbeSpec,
    progress: Callable[[str], None],
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    nonce: str | None = None,
    source: str | None = None,
) -> ProbeRun:
    nonce = nonce or secrets.token_hex(4)
    source = source if source is not None else PROBE.read_text()
    workdir = f"/tmp/nixl-probe-{nonce}"

    def run(pod: str, command: Sequence[str], timeout: float = EXEC_TIMEOUT_S) -> ExecResult:
        return api.exec_in_pod(namespace, pod, WORKER_CONTAINER, command, timeout=timeout)

    progress(f"NIXL transfer probe: {spec.total_bytes // MIB} MiB of {spec.memory} {pair.describe()}")
    try:
        run(pair.serve, serve_command(source, workdir, spec, nonce))
        ready_text, problem = _wait_ready(run, pair.serve, workdir, sleep, clock)
        if ready_text is None:
            ended = run(pair.serve, ["sh", "-c", ENDED_SCRIPT, "_", workdir])
            return ProbeRun(
                pair,
                serve_result=result_line(ended.stdout),
                logs={pair.serve: ended.stderr},
                problem=problem,
            )
        progress(f"reading it in {pair.read}")
        read = run(pair.read, read_command(source, ready_text, spec, nonce), READ_TIMEOUT_S)
        ended = _wait_ended(run, pair.serve, workdir, sleep, clock)
        read_result = result_line(read.stdout)
        return ProbeRun(
            pair,
            ready=json.loads(ready_text),
            serve_result=result_line(ended.stdout) if ended else None,
            read_result=read_result,
            logs={pair.serve: ended.stderr if ended else "", pair.read: read.stderr + "\n" + read.stdout},
            problem=None
            if read_result
            else (
                f"the reader in {pair.read} printed no result (exit {read.returncode}): "
                f"{excerpt(read.stderr or read.stdout, 400)}"
            ),
        )
    except OpsError as error:
        return ProbeRun(pair, problem=f"exec failed: {error}")
    finally:
        with contextlib.suppress(OpsError):  # the server exits on its deadline anyway
            run(pair.serve, ["rm", "-rf", workdir])


def _wait_ready(
    run: Callable[..., ExecResult],
    pod: str,
    workdir: str,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
) -> tuple[str | None, str]:
    deadline = clock() + READY_TIMEOUT_S
    while True:
        answer = run(pod, ["sh", "-c", READY_SCRIPT, "_", workdir])
        if answer.returncode == 0 and answer.stdout.strip():
            return answer.stdout, ""
        if answer.returncode == 3:
            return None, f"the probe did not start in {pod} (no {workdir})"
        if answer.returncode == 4:
            return None, f"the probe in {pod} ended before it was ready"
        if clock() >= deadline:
            return None, f"the probe in {pod} was not ready after {READY_TIMEOUT_S:g} s"
        sleep(POLL_S)


def _wait_ended(
    run: Callable[..., ExecResult],
    pod: str,
    workdir: str,
    sleep: Callable[[float], None],
    clock: Callable[[], float],
) -> ExecResult | None:
    """The server's end (it exits once notified, or on its deadline; after a failed read, soon)."""
    deadline = clock() + 30.0
    while True:
        answer = run(pod, ["sh", "-c", ENDED_SCRIPT, "_", workdir])
        if answer.returncode == 0:
            return answer
        if answer.returncode == 3 or clock() >= deadline:
            return None
        sleep(POLL_S)


@dataclass(frozen=True)
class Transport:
    """What the logs of both pods say about how the bytes travelled."""

    instantiated: frozenset[str]
    providers: frozenset[str]
    """libfabric providers of NIXL's rails."""
    hmem: frozenset[str]
    """"with" / "without" FI_HMEM."""
    ucx_read_lanes: frozenset[str]
    """UCX transports serving remote reads of the probe's block size (tcp, srd, ...)."""


def ucx_read_transports(text: str, message_bytes: int) -> set[str]:
    """The transports UCX_PROTO_INFO names for remote reads of `message_bytes` (its row covering that
    size; every row of the table when none does)."""
    lines = text.splitlines()
    found: set[str] = set()
    for i, line in enumerate(lines):
        if not UCX_READ_HEADER.search(line):
            continue
        rows: list[tuple[int, float, set[str]]] = []
        for row in lines[i + 1 :]:
            if "ucp_context_" in row:
                break
            match = UCX_ROW.search(row)
            if match:
                low, high = int(match[1]), float("inf") if match[2] == "inf" else int(match[2])
                rows.append((low, high, {m[1] for m in UCX_LANE.finditer(match[3])}))
        covering = [lanes for low, high, lanes in rows if low <= message_bytes <= high]
        for lanes in covering or [lanes for _, _, lanes in rows]:
            found |= lanes
    return found


def transport(logs: Mapping[str, str], message_bytes: int) -> Transport:
    text = "\n".join(logs.values())
    return Transport(
        instantiated=frozenset(re.findall(BACKEND_PATTERN, text)),
        providers=frozenset(re.findall(PROVIDER_PATTERN, text)),
        hmem=frozenset(re.findall(HMEM_PATTERN, text)),
        ucx_read_lanes=frozenset(ucx_read_transports(text, message_bytes)),
    )


def wire_of(backend: str, seen: Transport) -> Wire | None:
    """The wire the bytes crossed, where the logs say: EFA (libfabric's efa provider, UCX's srd) or TCP."""
    if backend == "LIBFABRIC":
        if not seen.providers:
            return None
        return "efa" if seen.providers == {"efa"} else "tcp"
    if "srd" in seen.ucx_read_lanes:
        return "efa"
    if "tcp" in seen.ucx_read_lanes:
        return "tcp"
    return None


def libfabric_problems(where: str, text: str, buffer_device: str) -> list[str]:
    """What NIXL's log says against a LIBFABRIC path: the provider must be efa (never tcp or sockets),
    and GPU buffers need rails with FI_HMEM."""
    providers = set(re.findall(PROVIDER_PATTERN, text))
    if not providers:
        return [
            f"{where}: NIXL logged no libfabric provider: the workers need NIXL_LOG_LEVEL=INFO (the stack "
            "sets it with LIBFABRIC; a pod from before that change says nothing)"
        ]
    problems = []
    if providers != {"efa"}:
        problems.append(
            f"{where}: NIXL's rails use provider {', '.join(sorted(providers))}, not efa: the KV cache does "
            "not cross EFA. Check FI_PROVIDER=efa, the pod's vpc.amazonaws.com/efa, and the security "
            "group (EFA needs all traffic to and from itself)"
        )
    hmem = set(re.findall(HMEM_PATTERN, text))
    if buffer_device == "cuda" and "without" in hmem:
        problems.append(
            f"{where}: NIXL's rails have no FI_HMEM, so GPU buffers cannot be registered: set "
            "model.kvBufferDevice cpu (attention-only models) or use a type with GPUDirect RDMA"
        )
    return problems


def _stage_advice(stage: str, backend: str, memory: str) -> str:
    """What to change when the probe stopped at `stage` (jobs/nixl_probe.py ProbeError)."""
    if stage == "agent":
        if backend == "LIBFABRIC":
            return (
                "NIXL could not start its LIBFABRIC backend: the pod needs an EFA device "
                "(vpc.amazonaws.com/efa in its limits, the EFA device plugin running on its node) and "
                "libfabric's efa provider in the image; FI_PROVIDER=efa refuses any other"
            )
        return "NIXL could not start its UCX backend: is NIXL in the image the one vLLM uses?"
    if stage == "buffer":
        return f"the probe could not allocate its {memory} buffer: a smaller one (--kv-probe-mib)"
    if stage == "register":
        if memory == "VRAM":
            return (
                f"NIXL could not register GPU memory with {backend}: without GPUDirect RDMA keep the KV "
                "buffers in host memory (model.kvBufferDevice: cpu, attention-only models) or use UCX"
            )
        return (
            "NIXL could not register host memory: pinning it needs IPC_LOCK (serving.worker.privileges: "
            "ipc-lock, the default)"
        )
    if stage == "connect":
        return "the reader could not load the server's NIXL metadata: do both pods run the same image?"
    return ADVICE_EFA_PATH if backend == "LIBFABRIC" else ADVICE_UCX_TCP


def _integrity(run: ProbeRun) -> list[str]:
    """Blocks whose digest on arrival is not the server's, per checked transfer."""
    assert run.ready is not None and run.read_result is not None
    expected: list[str] = run.ready["sha256"]
    zero = run.read_result.get("zero_sha256")
    problems = []
    for which, arrived in sorted((run.read_result.get("sha256") or {}).items()):
        zeroed = [i for i, (a, e) in enumerate(zip(arrived, expected, strict=False)) if a != e and a == zero]
        other = [i for i, (a, e) in enumerate(zip(arrived, expected, strict=False)) if a != e and a != zero]
        if len(arrived) != len(expected):
            problems.append(f"the {which} transfer returned {len(arrived)} of {len(expected)} blocks")
        if zeroed:
            problems.append(
                f"{len(zeroed)} of {len(expected)} blocks arrived as zeros after the {which} transfer "
                f"(blocks {_ranges(zeroed)}): NIXL said DONE without moving them, the zeroed-KV-blocks "
                "failure reported for NIXL over libfabric (nixl#909); the decode side would compute on "
                "zeros and answer gibberish. Compare host buffers (model.kvBufferDevice: cpu, attention-"
                "only models) or UCX, and the image's NIXL version"
            )
        if other:
            problems.append(
                f"{len(other)} of {len(expected)} blocks arrived with other bytes than were sent after the "
                f"{which} transfer (blocks {_ranges(other)}): the path corrupts data; compare another "
                "backend (model.nixlBackends) and report it with both pods' logs"
            )
    if not run.read_result.get("sha256"):
        problems.append("the reader reported no digests")
    return problems


def _ranges(indices: Sequence[int]) -> str:
    shown = ", ".join(str(i) for i in indices[:8])
    return shown + (f" and {len(indices) - 8} more" if len(indices) > 8 else "")


def gbytes_per_s(result: Mapping[str, Any]) -> tuple[float, list[float]]:
    """GB/s (decimal) over the timed transfers (all but the first, which also connects), and each one's."""
    seconds: list[float] = list(result.get("seconds") or [])
    size = result["blocks"] * result["block_bytes"]
    timed = seconds[1:] if len(seconds) > 1 else seconds
    each = [size / s / 1e9 for s in timed if s > 0]
    total = sum(timed)
    return (size * len(timed) / total / 1e9 if total > 0 else 0.0), each


def judge(
    run: ProbeRun,
    spec: ProbeSpec,
    buffer_device: str,
    planned_over_efa: bool,
    floor: TransferFloor | None,
    floor_override: float | None = None,
) -> tuple[Verdict, Verdict]:
    """(the transfer: bytes, backend, transport; the rate against the floor)."""
    not_measured = Verdict(False, "not measured: the transfer did not complete")
    backend = spec.backends[0]
    failed = next(
        (r for r in (run.read_result, run.serve_result) if r and r.get("error")),
        None,
    )
    if failed:
        stage = failed.get("stage", "?")
        pod = run.pair.read if failed is run.read_result else run.pair.serve
        advice = _stage_advice(stage, backend, spec.memory)
        reason = f"{pod}: the probe stopped at {stage}: {failed['error']}\n{advice}"
        return Verdict(False, reason + _log_hint(run)), not_measured
    if run.problem or run.ready is None or run.read_result is None:
        return Verdict(False, (run.problem or "the probe did not finish") + _log_hint(run)), not_measured
    used = str(run.read_result.get("backend", "?"))
    seen = transport(run.logs, spec.block_bytes)
    problems = _integrity(run)
    if used not in spec.backends:
        problems.append(
            f"NIXL moved the blocks with {used}, not {'/'.join(spec.backends)} as planned: it could not use "
            "the planned backend. " + (ADVICE_EFA_PATH if backend == "LIBFABRIC" else "")
        )
    if used == "LIBFABRIC":
        for pod, text in sorted(run.logs.items()):
            problems += libfabric_problems(pod, text, buffer_device)
    wire = wire_of(used, seen)
    if used == "UCX" and wire is None:
        problems.append(
            "UCX printed no transport for remote reads (UCX_PROTO_INFO): cannot tell EFA from TCP; "
            "is the UCX in the image older than 1.15?"
        )
    if wire == "tcp" and planned_over_efa:
        problems.append(
            "the plan expected EFA, and TCP carried the bytes: the KV cache would cross at TCP speed. "
            + (
                ADVICE_EFA_PATH
                if used == "LIBFABRIC"
                else "NIXL chose UCX over LIBFABRIC: " + ADVICE_EFA_PATH
            )
        )
    size = f"{spec.total_bytes // MIB} MiB in {spec.blocks} blocks of {spec.block_bytes // MIB} MiB"
    how = f"{size} {run.pair.describe()} through NIXL {_wire_words(used, seen, wire)}"
    if problems:
        rate, _ = gbytes_per_s(run.read_result)
        return Verdict(False, "\n".join([f"{how}:", *problems])), Verdict(
            False, f"{rate:.2f} GB/s measured, not held to a floor: the transfer check failed"
        )
    transfers = len(run.read_result.get("seconds") or [])
    transfer = Verdict(
        True,
        f"{how}; every block's SHA-256 matched after the first and the last of {transfers} transfers"
        + ("\n(the plan expected TCP)" if wire == "efa" and not planned_over_efa else ""),
    )
    return transfer, _bandwidth(
        run, spec, wire or ("efa" if planned_over_efa else "tcp"), floor, floor_override
    )


def _wire_words(used: str, seen: Transport, wire: Wire | None) -> str:
    """How the bytes went, e.g. "LIBFABRIC, provider efa (EFA)" or "UCX, transport tcp (TCP)"."""
    if used == "LIBFABRIC":
        what = f"provider {', '.join(sorted(seen.providers)) or 'not logged'}"
    else:
        what = f"transport {', '.join(sorted(seen.ucx_read_lanes)) or 'not printed'}"
    return f"{used}, {what}" + (f" ({wire.upper()})" if wire else "")


def _bandwidth(
    run: ProbeRun, spec: ProbeSpec, wire: Wire, floor: TransferFloor | None, floor_override: float | None
) -> Verdict:
    assert run.read_result is not None
    rate, each = gbytes_per_s(run.read_result)
    spread = f" (each {min(each):.2f}-{max(each):.2f}, median {statistics.median(each):.2f})" if each else ""
    measured = f"{rate:.2f} GB/s over {wire.upper()}{spread} across {len(each)} timed transfers"
    if floor_override is not None:
        limit, basis = floor_override, "--kv-floor"
    elif floor is not None and floor.on(wire) is not None:
        limit, basis = floor.on(wire), floor.basis
    else:
        why = floor.basis if floor else "no stack plan (--stack) and no --kv-floor"
        return Verdict(True, f"{measured}; no floor to hold it to: {why}")
    assert limit is not None
    verdict = f"{measured}; floor {limit:.2f} GB/s ({basis})"
    if rate >= limit:
        return Verdict(True, verdict)
    advice = (
        "NIXL stripes a transfer over the EFA devices it finds near the buffer: check the worker's "
        "vpc.amazonaws.com/efa and NIXL's `Created N rails` line in the worker log; with host buffers "
        "the rate also depends on the NUMA node of the memory"
        if wire == "efa"
        else "TCP carries it: for EFA, LIBFABRIC with host buffers (an attention-only model) or a GPU type "
        "with GPUDirect RDMA (planning/kv_path.py)"
    )
    return Verdict(False, f"{verdict}: below it. {advice}")


def _log_hint(run: ProbeRun) -> str:
    tails = []
    for pod, text in sorted(run.logs.items()):
        lines = [line for line in text.splitlines() if line.strip() and not line.startswith(MARK)]
        if lines:
            tails.append(f"{pod} logged: " + excerpt(" | ".join(lines[-3:]), 400))
    return "".join(f"\n{t}" for t in tails)
