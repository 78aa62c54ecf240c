"""Move a known buffer between two GPU worker pods through NIXL, as vLLM's NixlConnector moves the KV
cache, and report what arrived, how fast, and which transport carried it.

`ops verify` runs it by exec in two Ray worker pods on different GPU nodes (ops/kv_transfer.py), with
the backend and the buffer memory the stack's plan chose (planning/kv_path.py):

    serve   in one pod, in the background: fills `--blocks` blocks of `--block-bytes` random bytes, in
            host memory (DRAM) or on the GPU (VRAM), registers them with NIXL and writes `ready.json`
            into the working directory: the agent's metadata, the blocks' address and each block's
            SHA-256. It then waits for the reader's notification and exits; it never outlives
            `--deadline` seconds.
    read    in the other pod, given `ready.json` (base64): zeroes a buffer of the same shape, READs every
            block from the server `--iterations` times (the direction vLLM 0.26 uses: the decode worker
            reads the prefill worker's blocks, then notifies it), and prints the SHA-256 of each block
            as it arrived after the first and the last transfer, the seconds each transfer took, the
            backend NIXL chose, and how the EFA device's hardware counters moved (`rdma_read_bytes`
            grows with reads the NIC serves, and stays at zero when libfabric emulates them). The
            buffer is zeroed before each checked transfer, so a block that never arrived reads as
            zeros.

Each prints one line `NIXL-PROBE <json>` on stdout (serve into `serve.out`); what NIXL and UCX log goes
to stderr and stdout beside it: NIXL_LOG_LEVEL=INFO makes the LIBFABRIC plugin name the libfabric
provider its rails use, FI_LOG_LEVEL=warn makes libfabric say when it cannot register GPU memory with the
EFA device (its reads are then emulated), and UCX_PROTO_INFO=y makes UCX print which transport serves
each operation.
The caller reads the transport from those lines; this program only moves and measures bytes.

The NIXL Python API used is nixl 1.3.1's (`nixl._api`, the import vLLM 0.26 uses), as pinned by the
serving image: nixl_agent(name, nixl_agent_config(backends=[...])), register_memory,
get_agent_metadata, add_remote_agent, get_xfer_descs, initialize_xfer("READ", ...), transfer,
check_xfer_state, query_xfer_backend, send_notif, get_new_notifs. Standard library otherwise; GPU
buffers need torch, which the image carries for vLLM.
"""

from __future__ import annotations

import argparse
import base64
import ctypes
import hashlib
import json
import mmap
import os
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

MARK = "NIXL-PROBE "
READY_FILE = "ready.json"
DONE = b"nixl-probe-done"
POLL_S = 0.001
LOG_ENV = {"NIXL_LOG_LEVEL": "INFO", "UCX_PROTO_INFO": "y", "FI_LOG_LEVEL": "warn"}
"""Set before NIXL loads: the LIBFABRIC plugin then logs its provider (`Created N rails using
provider=...`) and whether its rails have FI_HMEM, UCX its protocol table (which transport, e.g.
tcp/eth0 or srd/..., serves a read), and libfabric its warnings, among them the one that says a GPU
buffer could not be registered with the EFA device, so its reads are emulated through host memory."""
SYSFS_INFINIBAND = Path("/sys/class/infiniband")
"""Where the kernel's EFA driver publishes each device's hardware counters: device-wide under
`<device>/hw_counters/`, per port under `<device>/ports/<port>/hw_counters/` (rdma_read_bytes, send_bytes,
...)."""


class Buffer(Protocol):
    memory: str
    """NIXL's memory type: DRAM or VRAM."""
    address: int
    device_id: int
    size: int

    def write(self, offset: int, data: bytes) -> None: ...

    def read(self, offset: int, length: int) -> bytes: ...

    def zero(self) -> None: ...


class HostBuffer:
    """Anonymous, page-aligned host memory (what NIXL registers as DRAM)."""

    memory = "DRAM"
    device_id = 0

    def __init__(self, size: int):
        self.size = size
        self._map = mmap.mmap(-1, size)
        self.address = ctypes.addressof(ctypes.c_char.from_buffer(self._map))

    def write(self, offset: int, data: bytes) -> None:
        self._map[offset : offset + len(data)] = data

    def read(self, offset: int, length: int) -> bytes:
        return self._map[offset : offset + length]

    def zero(self) -> None:
        ctypes.memset(self.address, 0, self.size)


class GpuBuffer:
    """Memory on the pod's GPU (VRAM), through torch."""

    memory = "VRAM"

    def __init__(self, size: int):
        import torch  # pyright: ignore[reportMissingImports]

        self._torch = torch
        self.size = size
        self._tensor = torch.zeros(size, dtype=torch.uint8, device="cuda")
        self.address = self._tensor.data_ptr()
        self.device_id = self._tensor.get_device()

    def write(self, offset: int, data: bytes) -> None:
        source = self._torch.frombuffer(bytearray(data), dtype=self._torch.uint8)
        self._tensor[offset : offset + len(data)].copy_(source)
        self._torch.cuda.synchronize()

    def read(self, offset: int, length: int) -> bytes:
        return bytes(self._tensor[offset : offset + length].cpu().numpy().tobytes())

    def zero(self) -> None:
        self._tensor.zero_()
        self._torch.cuda.synchronize()


def new_buffer(memory: str, size: int) -> Buffer:
    return GpuBuffer(size) if memory == "VRAM" else HostBuffer(size)


class Agent(Protocol):
    """The part of nixl._api.nixl_agent this program uses."""

    name: str

    def register_memory(
        self, reg_list: Any, mem_type: str | None = None, backends: list[str] = ...
    ) -> Any: ...

    def get_agent_metadata(self) -> bytes: ...

    def add_remote_agent(self, metadata: bytes) -> str | bytes: ...

    def get_xfer_descs(self, descs: Any, mem_type: str | None = None) -> Any: ...

    def initialize_xfer(
        self,
        operation: str,
        local_descs: Any,
        remote_descs: Any,
        remote_agent: str,
        notif_msg: bytes = b"",
        backends: list[str] = ...,
    ) -> Any: ...

    def transfer(self, handle: Any, notif_msg: bytes = b"") -> str: ...

    def check_xfer_state(self, handle: Any) -> str: ...

    def query_xfer_backend(self, handle: Any) -> str: ...

    def send_notif(self, remote_agent_name: str, notif_msg: bytes, backend: str | None = None) -> None: ...

    def get_new_notifs(self, backends: list[str] = ...) -> dict[str, list[bytes]]: ...


def nixl_agent(name: str, backends: list[str]) -> Agent:
    """A NIXL agent with the plan's backends, as vLLM creates its own (no listener thread)."""
    for key, value in LOG_ENV.items():
        os.environ.setdefault(key, value)
    from nixl import _api as nixl  # pyright: ignore[reportMissingImports]

    agent = nixl.nixl_agent(name, nixl.nixl_agent_config(backends=backends))
    # nixl_agent only warns when a backend's plugin is missing, and goes on without it.
    missing = [b for b in backends if b not in agent.backends]
    if missing:
        have = ", ".join(agent.plugin_list)
        raise ProbeError("agent", f"NIXL has no {'/'.join(missing)} plugin (it has {have})")
    return agent


class ProbeError(Exception):
    """A step that failed; `stage` says which (the caller maps it to what to change)."""

    def __init__(self, stage: str, error: BaseException | str):
        detail = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        super().__init__(f"{stage}: {detail}")
        self.stage = stage
        self.detail = detail


def step(stage: str, call: Callable[[], Any]) -> Any:
    try:
        return call()
    except ProbeError:
        raise
    except Exception as error:  # NIXL raises its own exception types (nixlBackendError, ...)
        raise ProbeError(stage, error) from None


def blocks_of(buffer: Buffer, blocks: int, block_bytes: int) -> list[tuple[int, int, int]]:
    """NIXL transfer descriptors: (address, length, device) of each block."""
    return [(buffer.address + i * block_bytes, block_bytes, buffer.device_id) for i in range(blocks)]


def digests(buffer: Buffer, blocks: int, block_bytes: int) -> list[str]:
    return [hashlib.sha256(buffer.read(i * block_bytes, block_bytes)).hexdigest() for i in range(blocks)]


def efa_counters(root: Path = SYSFS_INFINIBAND) -> dict[str, int]:
    """Every hardware counter of every RDMA device the pod sees, as `<device>/<port>/<name>` (port `-`
    for device-wide ones); empty where there is none (no EFA device, or sysfs not visible)."""
    found: dict[str, int] = {}
    for path in sorted([*root.glob("*/hw_counters/*"), *root.glob("*/ports/*/hw_counters/*")]):
        device = path.relative_to(root).parts[0]
        port = path.parent.parent.name if path.parent.parent.parent.name == "ports" else "-"
        try:
            found[f"{device}/{port}/{path.name}"] = int(path.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
    return found


def counter_deltas(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    """How much each counter moved (those read both times)."""
    return {name: after[name] - before[name] for name in sorted(after) if name in before}


def emit(result: dict[str, Any], out: Callable[[str], None] = print) -> None:
    out(MARK + json.dumps(result, sort_keys=True))


def serve(
    args: argparse.Namespace,
    make_agent: Callable[[str, list[str]], Agent] = nixl_agent,
    make_buffer: Callable[[str, int], Buffer] = new_buffer,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    workdir: Path = Path("."),
    counters: Callable[[], dict[str, int]] = efa_counters,
) -> dict[str, Any]:
    """Hold the blocks until the reader says it is done, or until the deadline."""
    deadline = clock() + args.deadline
    agent = step("agent", lambda: make_agent(f"nixl-probe-serve-{args.nonce}", args.backends))
    buffer = step("buffer", lambda: make_buffer(args.memory, args.blocks * args.block_bytes))
    expected = []
    for i in range(args.blocks):
        data = os.urandom(args.block_bytes)
        buffer.write(i * args.block_bytes, data)
        expected.append(hashlib.sha256(data).hexdigest())
    step(
        "register",
        lambda: agent.register_memory([(buffer.address, buffer.size, buffer.device_id, "")], buffer.memory),
    )
    ready = {
        "agent": agent.name,
        "metadata": base64.b64encode(agent.get_agent_metadata()).decode(),
        "address": buffer.address,
        "device_id": buffer.device_id,
        "memory": buffer.memory,
        "blocks": args.blocks,
        "block_bytes": args.block_bytes,
        "sha256": expected,
    }
    pending = workdir / f".{READY_FILE}"
    before = counters()
    pending.write_text(json.dumps(ready))
    pending.rename(workdir / READY_FILE)  # atomic: a reader never sees half a file
    while clock() < deadline:
        for sender, messages in step("notify", agent.get_new_notifs).items():
            if any(m.startswith(DONE) for m in messages):
                return {
                    "role": "serve",
                    "notified_by": _text(sender),
                    "efa_counters": counter_deltas(before, counters()),
                }
        sleep(0.05)
    raise ProbeError("wait", f"no reader notified within {args.deadline:g} s")


def read(
    args: argparse.Namespace,
    make_agent: Callable[[str, list[str]], Agent] = nixl_agent,
    make_buffer: Callable[[str, int], Buffer] = new_buffer,
    clock: Callable[[], float] = time.perf_counter,
    counters: Callable[[], dict[str, int]] = efa_counters,
) -> dict[str, Any]:
    """READ the server's blocks `--iterations` times; the first and last arrivals are hashed."""
    peer = json.loads(base64.b64decode(args.peer))
    blocks, block_bytes = peer["blocks"], peer["block_bytes"]
    agent = step("agent", lambda: make_agent(f"nixl-probe-read-{args.nonce}", args.backends))
    buffer = step("buffer", lambda: make_buffer(peer["memory"], blocks * block_bytes))
    step(
        "register",
        lambda: agent.register_memory([(buffer.address, buffer.size, buffer.device_id, "")], buffer.memory),
    )
    remote = step("connect", lambda: _text(agent.add_remote_agent(base64.b64decode(peer["metadata"]))))
    remote_blocks = [
        (peer["address"] + i * block_bytes, block_bytes, peer["device_id"]) for i in range(blocks)
    ]
    handle = step(
        "transfer",
        lambda: agent.initialize_xfer(
            "READ",
            agent.get_xfer_descs(blocks_of(buffer, blocks, block_bytes), buffer.memory),
            agent.get_xfer_descs(remote_blocks, peer["memory"]),
            remote,
        ),
    )
    seconds: list[float] = []
    arrived: dict[str, list[str]] = {}
    last = args.iterations - 1
    before = counters()
    for i in range(args.iterations):
        if i in (0, last):
            buffer.zero()
        start = clock()
        state = step("transfer", lambda: agent.transfer(handle))
        while state == "PROC" and clock() - start < args.transfer_timeout:
            state = step("transfer", lambda: agent.check_xfer_state(handle))
        if state != "DONE":
            why = "timed out" if state == "PROC" else f"ended {state}"
            raise ProbeError(
                "transfer", f"transfer {i + 1} of {args.iterations} {why} after {clock() - start:.1f} s"
            )
        seconds.append(clock() - start)
        if i in (0, last):
            arrived["first" if i == 0 else "last"] = digests(buffer, blocks, block_bytes)
    moved = counter_deltas(before, counters())
    backend = step("transfer", lambda: agent.query_xfer_backend(handle))
    step("notify", lambda: agent.send_notif(remote, DONE))
    return {
        "role": "read",
        "backend": backend,
        "memory": buffer.memory,
        "blocks": blocks,
        "block_bytes": block_bytes,
        "seconds": seconds,
        "sha256": arrived,
        "zero_sha256": hashlib.sha256(bytes(block_bytes)).hexdigest(),
        "efa_counters": moved,
    }


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def backends(text: str) -> list[str]:
    names = [name for name in text.split(",") if name]
    if not names or set(names) - {"LIBFABRIC", "UCX"}:
        raise argparse.ArgumentTypeError(f"{text!r}: LIBFABRIC and/or UCX, comma-separated")
    return names


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="nixl_probe", description="Move a known buffer through NIXL.")
    roles = top.add_subparsers(dest="role", required=True)
    for name in ("serve", "read"):
        role = roles.add_parser(name)
        role.add_argument("--backends", required=True, type=backends, help="NIXL backends, comma-separated")
        role.add_argument("--nonce", required=True, help="names the agents (one probe run)")
    roles.choices["serve"].add_argument("--memory", required=True, choices=("DRAM", "VRAM"))
    roles.choices["serve"].add_argument("--blocks", type=int, required=True)
    roles.choices["serve"].add_argument("--block-bytes", type=int, required=True)
    roles.choices["serve"].add_argument("--deadline", type=float, required=True, help="seconds at most")
    roles.choices["read"].add_argument("--peer", required=True, help="the server's ready.json, base64")
    roles.choices["read"].add_argument("--iterations", type=int, required=True)
    roles.choices["read"].add_argument("--transfer-timeout", type=float, required=True, help="seconds each")
    return top


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        result = serve(args) if args.role == "serve" else read(args)
    except ProbeError as error:
        emit({"role": args.role, "stage": error.stage, "error": error.detail})
        return 1
    emit(result)
    return 0


if __name__ == "__main__":
    sys.stdout.reconfigure(line_buffering=True)  # pyright: ignore[reportAttributeAccessIssue]
    raise SystemExit(main())
