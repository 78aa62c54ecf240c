"""NIXL as jobs/nixl_probe.py uses it, in one process, and GPU worker pods that run the probe on it:
`ops verify`'s transfer check end to end without a cluster.

`ProbePods` answers the exec calls ops/kv_transfer.py makes (FakeKubeApi.exec_handler). Starting the
server runs jobs/nixl_probe.py's own `serve` in a thread, the reader runs its own `read`, and the shell
lines that poll and clean up run for real (`sh`), in a directory per pod under a temporary root. Both
"pods" live in this process, so `FakeAgent` moves the bytes between their buffers with memmove, and
can drop or spoil blocks, stall, fail a stage, or pick another backend, as real NIXL has been reported to
do. What each side logs comes from tests/fixtures/nixl/ (recorded with a real NIXL), edited where a
case needs what no machine here can record (an EFA provider), and each edit is named where it is made.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jobs import nixl_probe
from ops.kube import ExecResult
from ops.kv_transfer import ENDED_SCRIPT, MARK, PROBE, READY_SCRIPT, SERVE_DEADLINE_S, SERVE_SCRIPT
from tests.fakes.kube import FakeClock

RECORDINGS = Path(__file__).resolve().parent.parent / "fixtures" / "nixl"
SMALL_PROBE = ("--kv-probe-mib", "4")
"""`ops verify` options for tests about other checks: the probe runs, on 4 MiB instead of 256."""
SERVER_DEADLINE_S = 10.0
"""Real seconds a fake server waits for its reader (ops asks for 300; a reader here takes milliseconds)."""


def recording(case: str) -> dict[str, Any]:
    return json.loads((RECORDINGS / f"{case}.json").read_text())


def recorded_logs(case: str) -> tuple[str, str]:
    """(the server's log, the reader's) from a recording."""
    run = recording(case)
    pair = run["pair"]

    def without_result(text: str) -> str:  # the recording's own result line: the fake prints its own
        return "\n".join(line for line in text.splitlines() if not line.startswith(MARK))

    return without_result(run["logs"][pair["serve"]]), without_result(run["logs"][pair["read"]])


EMULATED_WARNING = (
    "libfabric:4242:1796220000::efa:core:efa_hmem_info_check_p2p_support_cuda():161<warn> Failed to "
    "register CUDA buffer with the EFA device, FI_HMEM transfers that require peer to peer support will fail."
)
"""What libfabric 2.x's EFA provider logs at FI_LOG_LEVEL=warn on a NIC that cannot register GPU memory
(prov/efa/src/efa_hmem.c:158-161 at v2.4.0, with src/log.c's prefix)."""


def efa_logs(*, hmem: bool, emulated: bool = False) -> tuple[str, str]:
    """The libfabric recording as a node with EFA would log it. Edited: `provider=tcp` becomes
    `provider=efa`; with `hmem` the rails have FI_HMEM (libfabric 2.x on every EFA type); with
    `emulated` libfabric adds its warning that the GPU buffers could not be registered with the NIC (no
    GPUDirect RDMA: g5, g6, g6e)."""
    logs = []
    for text in recorded_logs("libfabric-tcp"):
        text = text.replace("provider=tcp", "provider=efa")
        if hmem:
            text = text.replace(
                "Using provider without FI_HMEM support", "Using provider with FI_HMEM support"
            )
        if emulated:
            text = EMULATED_WARNING + "\n" + text
        logs.append(text)
    return logs[0], logs[1]


def ucx_logs(transport: str = "tcp") -> tuple[str, str]:
    """The UCX recording; `transport` srd edits its remote-read lanes to UCX's EFA transport."""
    serve, read = recorded_logs("ucx-tcp")
    if transport != "tcp":
        read = read.replace("tcp/lo", f"{transport}/rdmap16s27:1")
    return serve, read


@dataclass
class Faults:
    """What goes wrong, if anything."""

    stage: str | None = None
    """A stage that raises: agent, buffer, register, connect, transfer, notify."""
    message: str = "nixlBackendError: NIXL_ERR_BACKEND"
    zero_blocks: frozenset[int] = frozenset()
    """Blocks the transfer reports DONE without moving (they stay zero)."""
    zero_from: int = 0
    """The first transfer (0-based) that drops `zero_blocks`: a path can go bad after it starts."""
    corrupt_blocks: frozenset[int] = frozenset()
    stall: bool = False
    """The transfer never completes."""
    backend_used: str | None = None
    """What NIXL picks for the transfer (default: the first backend asked for)."""
    gbytes_per_s: float = 3.0
    """The rate the transfer advances the clock by."""
    efa_counters: dict[str, int] = field(default_factory=dict)
    """How the reader's EFA hardware counters move over the transfers (none: no EFA device seen)."""


@dataclass
class FakeNixl:
    faults: Faults
    clock: FakeClock
    agents: dict[str, FakeAgent] = field(default_factory=dict)

    def make_agent(self, name: str, backends: list[str]) -> FakeAgent:
        if self.faults.stage == "agent":
            raise RuntimeError(self.faults.message)
        agent = FakeAgent(name, list(backends), self)
        self.agents[name] = agent
        return agent


@dataclass
class _Xfer:
    pairs: list[tuple[int, int, int]]
    """(local address, remote address, length) per block."""
    state: str = "PROC"
    posted: int = 0


class FakeAgent:
    def __init__(self, name: str, backends: list[str], nixl: FakeNixl):
        self.name = name
        self.backends = {b: object() for b in backends}
        self.plugin_list = ["LIBFABRIC", "UCX"]
        self.nixl = nixl
        self.regions: list[tuple[int, int]] = []
        self.inbox: dict[str, list[bytes]] = {}

    def _fail(self, stage: str) -> None:
        if self.nixl.faults.stage == stage:
            raise RuntimeError(self.nixl.faults.message)

    def register_memory(self, reg_list: Any, mem_type: str | None = None, backends: list[str] = []) -> Any:  # noqa: B006
        self._fail("register")
        self.regions += [(address, length) for address, length, _, _ in reg_list]
        return reg_list

    def get_agent_metadata(self) -> bytes:
        return json.dumps({"name": self.name}).encode()

    def add_remote_agent(self, metadata: bytes) -> bytes:
        self._fail("connect")
        return json.loads(metadata)["name"].encode()

    def get_xfer_descs(self, descs: Any, mem_type: str | None = None) -> Any:
        return list(descs)

    def initialize_xfer(
        self,
        operation: str,
        local_descs: Any,
        remote_descs: Any,
        remote_agent: str,
        notif_msg: bytes = b"",
        backends: list[str] = [],  # noqa: B006
    ) -> _Xfer:
        assert operation == "READ"
        remote = self.nixl.agents[remote_agent]
        for address, length, _ in remote_descs:
            if not any(
                start <= address and address + length <= start + size for start, size in remote.regions
            ):
                raise RuntimeError("nixlInvalidParamError: NIXL_ERR_INVALID_PARAM")
        return _Xfer([(lo[0], re[0], lo[1]) for lo, re in zip(local_descs, remote_descs, strict=True)])

    def transfer(self, handle: _Xfer, notif_msg: bytes = b"") -> str:
        self._fail("transfer")
        faults = self.nixl.faults
        if faults.stall:
            handle.state = "PROC"
            return "PROC"
        handle.posted += 1
        for index, (local, remote, length) in enumerate(handle.pairs):
            if index in faults.zero_blocks and handle.posted > faults.zero_from:
                continue
            ctypes.memmove(local, remote, length)
            if index in faults.corrupt_blocks:
                ctypes.memset(local + length // 2, 0x5A, 1)
        total = sum(length for _, _, length in handle.pairs)
        self.nixl.clock.now += total / (faults.gbytes_per_s * 1e9)
        handle.state = "DONE"
        return "PROC"  # as a large real transfer answers; check_xfer_state then says DONE

    def check_xfer_state(self, handle: _Xfer) -> str:
        if handle.state == "PROC":
            self.nixl.clock.now += 1.0
        return handle.state

    def query_xfer_backend(self, handle: _Xfer) -> str:
        return self.nixl.faults.backend_used or next(iter(self.backends))

    def send_notif(self, remote_agent_name: str, notif_msg: bytes, backend: str | None = None) -> None:
        self._fail("notify")
        self.nixl.agents[remote_agent_name].inbox.setdefault(self.name, []).append(notif_msg)

    def get_new_notifs(self, backends: list[str] = []) -> dict[str, list[bytes]]:  # noqa: B006
        new, self.inbox = self.inbox, {}
        return new


class FakeGpuBuffer(nixl_probe.HostBuffer):
    """Host memory standing in for VRAM (what NIXL is told it is)."""

    memory = "VRAM"


def make_buffer(memory: str, size: int) -> nixl_probe.Buffer:
    return FakeGpuBuffer(size) if memory == "VRAM" else nixl_probe.HostBuffer(size)


@dataclass
class ProbePods:
    """The exec side of GPU worker pods running jobs/nixl_probe.py on FakeNixl (FakeKubeApi.exec_handler)."""

    clock: FakeClock
    faults: Faults = field(default_factory=Faults)
    logs: tuple[str, str] | None = None
    """(what the server logs, what the reader logs); None: a healthy path for the backend asked for
    (UCX over tcp; LIBFABRIC over EFA, with FI_HMEM for GPU buffers)."""
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="probe-pods-")))
    nixl: FakeNixl = field(init=False)
    servers: list[threading.Thread] = field(default_factory=list)
    commands: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.nixl = FakeNixl(self.faults, self.clock)

    def local(self, pod: str, path: str) -> Path:
        """A pod's path, under this pod's own directory of `root`."""
        return self.root / pod / path.lstrip("/")

    def __call__(self, pod: str, command: Sequence[str], timeout: float) -> ExecResult | None:
        command = tuple(command)
        if command[:2] == ("grep", "-rhoE"):
            return None  # the log grep: FakeKubeApi's recorded answer
        self.commands.append((pod, command))
        if command[:3] == ("sh", "-c", SERVE_SCRIPT):
            return self._serve(pod, command[3], command[4], command[5:])
        if command[:2] == ("python3", "-c") and command[3] == "read":
            return self._read(command[2], command[3:])
        if command[:2] == ("sh", "-c") and command[2] in (READY_SCRIPT, ENDED_SCRIPT):
            return self._shell(command[2], self.local(pod, command[4]))
        if command[:2] == ("rm", "-rf"):
            return self._shell('rm -rf "$1"', self.local(pod, command[2]))
        raise AssertionError(f"unexpected exec in {pod}: {command[:3]}")

    def _serve(self, pod: str, source: str, workdir: str, argv: Sequence[str]) -> ExecResult:
        assert source == PROBE.read_text(), "ops sends jobs/nixl_probe.py as it is"
        args = nixl_probe.parser().parse_args(list(argv))
        assert args.deadline == SERVE_DEADLINE_S
        args.deadline = SERVER_DEADLINE_S
        if self.logs is None:
            self.logs = ucx_logs() if args.backends[0] == "UCX" else efa_logs(hmem=args.memory == "VRAM")
        logs = self.logs
        directory = self.local(pod, workdir)
        directory.mkdir(parents=True)

        def server() -> None:
            code, lines = 0, []
            try:
                result = nixl_probe.serve(
                    args,
                    make_agent=self.nixl.make_agent,
                    make_buffer=make_buffer,
                    sleep=lambda _: time.sleep(0.001),
                    workdir=directory,
                    counters=dict,
                )
            except nixl_probe.ProbeError as error:
                code, result = 1, {"role": "serve", "stage": error.stage, "error": error.detail}
            nixl_probe.emit(result, lines.append)
            with contextlib.suppress(OSError):  # ops gave up and removed the directory first
                (directory / "serve.out").write_text("\n".join(lines) + "\n")
                (directory / "serve.log").write_text(logs[0])
                (directory / "serve.exit").write_text(f"{code}\n")

        (directory / "serve.log").write_text("")
        thread = threading.Thread(target=server, daemon=True)
        thread.start()
        self.servers.append(thread)
        return ExecResult("", "", 0)

    def _read(self, source: str, argv: Sequence[str]) -> ExecResult:
        assert source == PROBE.read_text()
        args = nixl_probe.parser().parse_args(list(argv))
        lines: list[str] = []
        try:
            nixl_probe.emit(
                nixl_probe.read(
                    args,
                    make_agent=self.nixl.make_agent,
                    make_buffer=make_buffer,
                    clock=self.clock,
                    counters=self._counters(),
                ),
                lines.append,
            )
            code = 0
        except nixl_probe.ProbeError as error:
            nixl_probe.emit({"role": "read", "stage": error.stage, "error": error.detail}, lines.append)
            code = 1
        assert self.logs is not None, "the server starts first"
        return ExecResult("\n".join(lines) + "\n", self.logs[1], code)

    def _counters(self) -> Callable[[], dict[str, int]]:
        """The reader's counters: zero before the transfers, `Faults.efa_counters` after."""
        readings = iter([dict.fromkeys(self.faults.efa_counters, 0), dict(self.faults.efa_counters)])
        return lambda: next(readings, dict(self.faults.efa_counters))

    def _shell(self, script: str, directory: Path) -> ExecResult:
        done = subprocess.run(["sh", "-c", script, "_", str(directory)], capture_output=True, text=True)
        return ExecResult(done.stdout, done.stderr, done.returncode)


def probe_sleep(clock: FakeClock) -> Callable[[float], None]:
    """ops' polling sleep: the fake clock moves on, and the server thread gets a moment."""

    def sleep(seconds: float) -> None:
        clock.now += seconds
        time.sleep(0.002)

    return sleep
