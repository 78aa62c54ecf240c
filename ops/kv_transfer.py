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
- what moved the bytes: the backend NIXL chose for the transfer (`query_xfer_backend`); with LIBFABRIC
  the provider of its rails (`Created N rails using provider=efa`, NIXL's INFO log, which the probe
  turns on), FI_HMEM for GPU buffers, and whether the reads were emulated through host bounce buffers
  (libfabric's warning at FI_LOG_LEVEL=warn, the EFA device's `rdma_read_bytes` counter unmoved) or
  served by the NIC (GPUDirect RDMA); with UCX the transport UCX_PROTO_INFO names for remote reads
  (`tcp/eth0`, or `srd/...`, UCX's own EFA transport), in UCX 1.21's table layout and 1.22's. Where it
  is not the mechanism the plan chose (planning/kv_path.py), the verdict says what to change;
- the rate: the bytes of the timed transfers (all but the first, which also connects) over their time,
  against the plan's floor, a share of what the planned path carries.
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
from typing import TYPE_CHECKING, Any, Literal

from ops.kube import EXEC_TIMEOUT_S, ExecResult, KubeApi, OpsError, excerpt

if TYPE_CHECKING:  # the recorder (tests/record_nixl_probe.py) runs this module where only NIXL is
    from planning.kv_path import Mechanism, TransferFloor, Wire

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
EMULATED_PATTERN = "Failed to register CUDA buffer with the EFA device"
"""libfabric's EFA provider at FI_LOG_LEVEL=warn when the NIC cannot register GPU memory (no GPUDirect
RDMA): it then registers GPU buffers under a software key and emulates every read of them with send
packets bounced through host memory (prov/efa/src/efa_hmem.c:158-161 at v2.4.0)."""
NO_CUDA_PATTERN = "FI_HMEM cannot be supported because no compatible libraries were found"
"""libfabric's EFA provider at FI_LOG_LEVEL=warn when it could not load the CUDA runtime (efa_user_info.c
at v2.4.0, L234-236); the dlopen's own error it logs at INFO only (src/hmem_cuda.c L483-487)."""
UCX_READ_OPERATION = "remote memory read by ucp_get"
UCX_TABLE_TITLE = re.compile(r"cfg#\d+")
"""UCX_PROTO_INFO prints a table per operation and endpoint configuration (ucp/proto/proto_debug.c).
UCX 1.21 (NIXL 1.3.x) puts both on one line, `| ucp_context_0 inter-node cfg#2 | remote memory read by
ucp_get*(multi) into cuda/GPU0 from cuda |`; UCX 1.22 and later (NIXL 1.5.x: 1.23) on two, `| <agent>
inter-node cfg#2 |` then `| remote memory read by ucp_get*(multi) into ... |`, then a `Range |
Description | Config` heading. Either way each row is one message size range, its last column the lanes
that serve it."""
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


RAY_GROUP_LABEL = "ray.io/group"
"""KubeRay's label of a pod's worker group (ray-operator/controllers/ray/utils/constant.go:21 at v1.7.0)."""


def pick_pair(pods: Sequence[Mapping[str, Any]]) -> Pair | str:
    """Two Running worker pods on different nodes, by name; a reason when there are none. Where the
    sides have worker groups of their own (on two GPU types), a pair across the two groups: the path the
    KV cache takes between the types."""
    running = sorted(
        (p for p in pods if (p.get("status") or {}).get("phase") == "Running"),
        key=lambda p: p["metadata"]["name"],
    )
    if len(running) < 2:
        return f"needs two Running GPU worker pods, found {len(running)}"
    first = running[0]
    node = first["spec"].get("nodeName", "?")
    elsewhere = [p for p in running[1:] if p["spec"].get("nodeName", "?") != node]
    group = _group(first)
    other = next((p for p in elsewhere if _group(p) != group), elsewhere[0] if elsewhere else None)
    if other is None:
        return f"all {len(running)} GPU worker pods run on {node}: the KV cache never leaves that node"
    return Pair(
        first["metadata"]["name"], node, other["metadata"]["name"], other["spec"].get("nodeName", "?")
    )


def _group(pod: Mapping[str, Any]) -> str:
    return (pod["metadata"].get("labels") or {}).get(RAY_GROUP_LABEL, "")


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
    emulated_reads: bool = False
    """libfabric said it could not register a GPU buffer with the EFA device: reads of GPU memory are
    emulated through host bounce buffers."""


def ucx_read_transports(text: str, message_bytes: int) -> set[str]:
    """The transports UCX_PROTO_INFO names for remote reads of `message_bytes` (its row covering that
    size; every row of the table when none does), in UCX 1.21's table format and 1.22's."""
    lines = text.splitlines()
    found: set[str] = set()
    for i, line in enumerate(lines):
        if UCX_READ_OPERATION not in line:
            continue
        if not (UCX_TABLE_TITLE.search(line) or (i and UCX_TABLE_TITLE.search(lines[i - 1]))):
            continue
        rows: list[tuple[int, float, set[str]]] = []
        for row in lines[i + 1 :]:
            if UCX_TABLE_TITLE.search(row):
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
        emulated_reads=EMULATED_PATTERN in text,
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


NO_HMEM_ADVICE = (
    "libfabric found no CUDA support for them: its EFA provider has FI_HMEM from 2.0 on (the EFA "
    "installer's), with or without GPUDirect RDMA, if it can load the CUDA runtime; a libfabric built with "
    "--enable-cuda-dlopen loads it as `libcudart.so`, by that unversioned name (src/hmem_cuda.c), so an "
    "image that has only libcudart.so.N needs the link (or the CUDA runtime's -dev package). Otherwise set "
    "model.nixlBackends: [UCX]"
)


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
        cause = f' (libfabric: "{NO_CUDA_PATTERN}")' if NO_CUDA_PATTERN in text else ""
        problems.append(
            f"{where}: NIXL's rails have no FI_HMEM{cause}, so GPU buffers cannot be registered: "
            + NO_HMEM_ADVICE
        )
    return problems


RDMA_READ_COUNTER = "rdma_read_bytes"
"""The EFA device's bytes read by RDMA (the kernel driver's port counters, efa_verbs.c): it grows with
GPUDirect RDMA reads and host-memory reads the NIC serves, and stays at zero with emulated reads."""


def counter_total(counters: Mapping[str, int] | None, name: str) -> int | None:
    """One counter summed over the EFA devices and ports a pod sees; None where none was read (no EFA
    device, or /sys/class/infiniband not visible)."""
    values = [value for key, value in (counters or {}).items() if key.rsplit("/", 1)[-1] == name]
    return sum(values) if values else None


def observed_mechanism(used: str, seen: Transport, memory: str, reader_counters: Mapping[str, int] | None):
    """What moved the bytes, from the logs and the reader's EFA counters (planning/kv_path.py's
    mechanisms); None where they do not say, or for UCX on its own EFA transport (srd)."""
    wire = wire_of(used, seen)
    if wire == "tcp":
        return "tcp"
    if wire is None or used != "LIBFABRIC":
        return None
    if memory == "DRAM":
        return "host"
    if seen.emulated_reads or counter_total(reader_counters, RDMA_READ_COUNTER) == 0:
        return "emulated"
    return "gpudirect"


def counters_words(counters: Mapping[str, int] | None) -> str:
    """The reader's EFA traffic counters as they moved, e.g. "rdma_read_bytes +0, recv_bytes +268435456"."""
    if not counters:
        return "no EFA counters readable"
    names = ("rdma_read_bytes", "rdma_read_resp_bytes", "recv_bytes", "send_bytes", "rx_bytes", "tx_bytes")
    shown = [f"{name} +{total}" for name in names if (total := counter_total(counters, name)) is not None]
    return ", ".join(shown) or "no traffic counters among them"


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
        if memory == "VRAM" and backend == "LIBFABRIC":
            return (
                "NIXL's LIBFABRIC backend took no GPU memory (NIXL logs `no available backends for mem "
                "type 'VRAM_SEG'`, and `Using provider without FI_HMEM support` at INFO): its rails need "
                f"FI_HMEM, and {NO_HMEM_ADVICE}"
            )
        if memory == "VRAM":
            return (
                "NIXL could not register GPU memory with UCX: UCX needs its CUDA transports (UCX_TLS, if "
                "set, must name cuda_copy) and the image's UCX its CUDA modules"
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
    reported = run.read_result.get("sha256") or {}
    if not reported:
        problems.append("the reader reported no digests")
    elif len(run.read_result.get("seconds") or []) > 1 and "last" not in reported:
        # jobs/nixl_probe.py checks the first and the last of its transfers (one only when it makes one).
        problems.append("the reader reported no digests after the last transfer")
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
    planned: Mechanism | None,
    floor: TransferFloor | None,
    floor_override: float | None = None,
) -> tuple[Verdict, Verdict]:
    """(the transfer: bytes, backend, transport, mechanism; the rate against the floor). `planned` is the
    plan's mechanism (planning/kv_path.py); None: no plan, EFA by any mechanism expected."""
    from planning.kv_path import MECHANISM_NAMES as MECHANISMS

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
    counters = run.read_result.get("efa_counters")
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
    observed = observed_mechanism(used, seen, spec.memory, counters)
    if used == "UCX" and wire is None:
        problems.append(
            "UCX printed no transport for remote reads (UCX_PROTO_INFO): cannot tell EFA from TCP; "
            "is the UCX in the image older than 1.15?"
        )
    if wire == "tcp" and planned != "tcp":
        problems.append(
            "the plan expected EFA, and TCP carried the bytes: the KV cache would cross at TCP speed. "
            + (
                ADVICE_EFA_PATH
                if used == "LIBFABRIC"
                else "NIXL chose UCX over LIBFABRIC: " + ADVICE_EFA_PATH
            )
        )
    if planned == "gpudirect" and observed == "emulated":
        problems.append(
            f"the plan expected {MECHANISMS['gpudirect']}, and libfabric emulated the reads through host "
            f"bounce buffers ({_emulation_evidence(seen, counters)}): the KV cache crosses at about 1 GB/s, "
            "not the link's rate. GPUDirect RDMA needs the node's NVIDIA driver to export GPU memory to the "
            "EFA device (dma-buf, or the nvidia-peermem module; the EKS-optimized GPU AMIs have both) and "
            "FI_EFA_USE_DEVICE_RDMA=1 (the stack sets it on P-series types)"
        )
    size = f"{spec.total_bytes // MIB} MiB in {spec.blocks} blocks of {spec.block_bytes // MIB} MiB"
    how = f"{size} {run.pair.describe()} through NIXL {_wire_words(used, seen, wire, observed, counters)}"
    if problems:
        rate, _ = gbytes_per_s(run.read_result)
        return Verdict(False, "\n".join([f"{how}:", *problems])), Verdict(
            False, f"{rate:.2f} GB/s measured, not held to a floor: the transfer check failed"
        )
    transfers = len(run.read_result.get("seconds") or [])
    better = planned is not None and observed != planned and (wire == "efa" or planned == "tcp")
    transfer = Verdict(
        True,
        f"{how}; every block's SHA-256 matched after the first and the last of {transfers} transfers"
        + (f"\n(the plan expected {MECHANISMS[planned]})" if better and planned else ""),
    )
    return transfer, _bandwidth(run, wire, observed or planned, floor, floor_override)


def _emulation_evidence(seen: Transport, counters: Mapping[str, int] | None) -> str:
    said = [f'"{EMULATED_PATTERN}"'] if seen.emulated_reads else []
    if counter_total(counters, RDMA_READ_COUNTER) == 0:
        said.append("rdma_read_bytes did not move")
    return " and ".join(said)


def _wire_words(
    used: str, seen: Transport, wire: Wire | None, observed: str | None, counters: Mapping[str, int] | None
) -> str:
    """How the bytes went, e.g. "LIBFABRIC, provider efa, GPU buffers by EFA emulated reads through host
    bounce buffers (EFA; rdma_read_bytes +0, recv_bytes +...)" or "UCX, transport tcp (TCP)"."""
    from planning.kv_path import MECHANISM_NAMES as MECHANISMS

    if used == "LIBFABRIC":
        what = f"provider {', '.join(sorted(seen.providers)) or 'not logged'}"
        if observed and observed != "tcp":
            what += f", by {MECHANISMS[observed]}"  # type: ignore[index]
    else:
        what = f"transport {', '.join(sorted(seen.ucx_read_lanes)) or 'not printed'}"
    where = wire.upper() if wire else ""
    if used == "LIBFABRIC" and wire == "efa":
        where += f"; {counters_words(counters)}"
    return f"{used}, {what}" + (f" ({where})" if where else "")


def _bandwidth(
    run: ProbeRun,
    wire: Wire | None,
    mechanism: str | None,
    floor: TransferFloor | None,
    floor_override: float | None,
) -> Verdict:
    assert run.read_result is not None
    rate, each = gbytes_per_s(run.read_result)
    spread = f" (each {min(each):.2f}-{max(each):.2f}, median {statistics.median(each):.2f})" if each else ""
    over = f" over {wire.upper()}" if wire else ""
    measured = f"{rate:.2f} GB/s{over}{spread} across {len(each)} timed transfers"
    if floor_override is not None:
        limit, basis = floor_override, "--kv-floor"
    elif floor is not None and floor.gbytes_s is not None:
        limit, basis = floor.gbytes_s, floor.basis
    else:
        why = floor.basis if floor else "no stack plan (--stack) and no --kv-floor"
        return Verdict(True, f"{measured}; no floor to hold it to: {why}")
    verdict = f"{measured}; floor {limit:.2f} GB/s ({basis})"
    if rate >= limit:
        return Verdict(True, verdict)
    if mechanism == "emulated":
        advice = (
            "emulated reads are bounded by one cudaMemcpy per packet: a GPU busy with other copies or a "
            "slow CPU lowers them (gdrcopy in the image lifts them); for the link's rate, a type with "
            "GPUDirect RDMA (p4d, p5)"
        )
    elif mechanism == "tcp":
        advice = (
            "TCP carries it: for EFA, NIXL's LIBFABRIC backend (model.nixlBackends unset), which moves "
            "GPU buffers over EFA on every GPU type (planning/kv_path.py)"
        )
    else:
        advice = (
            "NIXL stripes a transfer over the EFA devices it finds near the buffer: check the worker's "
            "vpc.amazonaws.com/efa and NIXL's `Created N rails` line in the worker log (one rail of "
            "several halves the rate or worse); with host buffers the rate also depends on the NUMA "
            "node of the memory"
        )
    return Verdict(False, f"{verdict}: below it. {advice}")


def _log_hint(run: ProbeRun) -> str:
    tails = []
    for pod, text in sorted(run.logs.items()):
        lines = [line for line in text.splitlines() if line.strip() and not line.startswith(MARK)]
        if lines:
            tails.append(f"{pod} logged: " + excerpt(" | ".join(lines[-3:]), 400))
    return "".join(f"\n{t}" for t in tails)
