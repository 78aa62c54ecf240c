"""`ops verify` proves the KV path on the running stack (issue 29): a known buffer from one GPU worker to
another through NIXL (jobs/nixl_probe.py, started and watched by ops/kv_transfer.py), every block's bytes
checked where they arrive, the backend and the transport that carried them named from NIXL's and UCX's
own logs, and the rate held to the plan's floor (planning/kv_path.py).

The pods are tests/fakes/nixl.py's: the probe's own code runs on a NIXL that moves bytes with memmove
and fails as real NIXL has been reported to; what each side logs was recorded with a real NIXL
(tests/fixtures/nixl/: 1.3.1 with host buffers; 1.3.0, 1.3.1 and 1.5.1 with GPU buffers on an H200). The
recordings themselves are also replayed through the verdicts as they are.
"""

from __future__ import annotations

import argparse
import base64
import json
from dataclasses import replace
from typing import Any

import pytest

from config.serving import ModelConfig
from jobs import nixl_probe
from ops import kv_transfer
from ops.kv_transfer import (
    ENDED_SCRIPT,
    MIB,
    PROBE,
    READY_SCRIPT,
    SERVE_SCRIPT,
    Pair,
    ProbeRun,
    ProbeSpec,
    judge,
    pick_pair,
    ucx_read_transports,
)
from ops.verify import CHECK_BANDWIDTH, CHECK_TRANSFER, VerifyTarget, check_kv_transfer
from planning.catalog import CATALOG
from planning.kv_path import Mechanism, TransferFloor, plan_kv_path, transfer_floor
from tests.fakes.kube import WORKERS, FakeKubeApi, healthy_cluster
from tests.fakes.nixl import Faults, ProbePods, efa_logs, probe_sleep, recorded_logs, recording, ucx_logs

ATTENTION_ONLY = {"source": "meta-llama/Llama-3.1-8B-Instruct", "kvCacheBytesPerToken": 131072}


def planned_floor(gpu: str, efa_per_worker: int = 1, **model: Any) -> TransferFloor:
    path, _ = plan_kv_path(ModelConfig.model_validate(model), CATALOG[gpu])
    return transfer_floor(path, CATALOG[gpu], efa_per_worker, tensor_parallel_size=1)


G6_FLOOR = planned_floor("g6.8xlarge")  # the dev stack: GPU buffers, emulated reads, 0.40 GB/s
G6_HOST_FLOOR = planned_floor("g6.8xlarge", **ATTENTION_ONLY)  # host buffers on EFA: 1.56 GB/s
G6_UCX_FLOOR = planned_floor("g6.8xlarge", nixlBackends=["UCX"])  # GPU buffers staged over TCP: 0.22
G6_UCX_HOST_FLOOR = planned_floor("g6.8xlarge", nixlBackends=["UCX"], kvBufferDevice="cpu", **ATTENTION_ONLY)
P5_FLOOR = planned_floor("p5.48xlarge", efa_per_worker=4)  # GPUDirect RDMA: half of 4 x 100 Gbit/s
SMALL = {"blocks": 8, "block_bytes": MIB}
SERVER, READER = WORKERS  # pick_pair: the first Running worker by name serves, one on another node reads


def probe(
    *,
    backends: tuple[str, ...] = ("LIBFABRIC",),
    memory: str = "DRAM",
    faults: Faults | None = None,
    logs: tuple[str, str] | None = None,
    floor: TransferFloor | None = G6_HOST_FLOOR,
    mechanism: Mechanism | None = None,
    floor_override: float | None = None,
    cluster: FakeKubeApi | None = None,
) -> tuple[dict[str, tuple[bool, str]], ProbePods, FakeKubeApi]:
    cluster = cluster or healthy_cluster()
    pods = ProbePods(cluster.clock, faults or Faults(), logs)
    cluster.exec_handler = pods
    target = VerifyTarget(
        "inference",
        "ray-llm",
        "qwen3.5-9b",
        kv_backends=backends,
        kv_buffer_device="cuda" if memory == "VRAM" else "cpu",
        kv_mechanism=mechanism or (floor.mechanism if floor else None),
        kv_probe=ProbeSpec(backends=backends, memory=memory, **SMALL),  # type: ignore[arg-type]
        kv_floor=floor,
        kv_floor_override=floor_override,
    )
    checks = check_kv_transfer(cluster, target, sleep=probe_sleep(cluster.clock), clock=cluster.clock)
    return {c.name: (c.passed, c.reason) for c in checks}, pods, cluster


class TestTheProbeMovesKnownBytesBetweenTwoNodes:
    def test_a_healthy_efa_path_passes_both_checks_and_says_how_the_bytes_went(self):
        checks, _, _ = probe()
        transfer, bandwidth = checks[CHECK_TRANSFER], checks[CHECK_BANDWIDTH]
        assert transfer[0], transfer[1]
        assert "8 MiB in 8 blocks of 1 MiB from ray-llm-6mzvd-gpu-workers-worker-k2l8p" in transfer[1]
        assert "through NIXL LIBFABRIC, provider efa, by host buffers registered on EFA" in transfer[1]
        assert "(EFA; no EFA counters readable)" in transfer[1]
        assert "every block's SHA-256 matched after the first and the last of 5 transfers" in transfer[1]
        assert bandwidth[0], bandwidth[1]
        assert "3.00 GB/s over EFA" in bandwidth[1] and "floor 1.56 GB/s" in bandwidth[1]
        assert "g6.8xlarge" in bandwidth[1]

    def test_the_server_and_reader_run_in_worker_pods_on_different_nodes_and_leave_nothing(self):
        _, pods, cluster = probe()
        started = [(pod, c) for pod, c in pods.commands if c[:3] == ("sh", "-c", SERVE_SCRIPT)]
        reads = [(pod, c) for pod, c in pods.commands if c[:2] == ("python3", "-c")]
        assert [pod for pod, _ in started] == [SERVER] and [pod for pod, _ in reads] == [READER]
        assert (
            started[0][1][3] == reads[0][1][2] == PROBE.read_text()
        )  # the program itself, nothing installed
        workdir = started[0][1][4]
        assert workdir.startswith("/tmp/nixl-probe-")
        assert (SERVER, ("rm", "-rf", workdir)) == pods.commands[-1]
        assert not pods.local(SERVER, workdir).exists()
        containers = {c[3] for c in cluster.calls if c[0] == "exec"}
        assert containers == {"ray-worker"}

    def test_every_exec_is_bounded_and_the_server_has_a_deadline_of_its_own(self):
        _, pods, _ = probe()
        (serve,) = [c for _, c in pods.commands if c[:3] == ("sh", "-c", SERVE_SCRIPT)]
        args = nixl_probe.parser().parse_args(list(serve[5:]))
        assert args.deadline == kv_transfer.SERVE_DEADLINE_S
        assert args.deadline > kv_transfer.READY_TIMEOUT_S + kv_transfer.READ_TIMEOUT_S

    def test_the_reader_gets_the_servers_ready_file_and_nothing_else(self):
        _, pods, _ = probe()
        (read,) = [c for _, c in pods.commands if c[:2] == ("python3", "-c")]
        args = nixl_probe.parser().parse_args(list(read[3:]))
        peer = json.loads(base64.b64decode(args.peer))
        assert set(peer) == {
            "agent",
            "metadata",
            "address",
            "device_id",
            "memory",
            "blocks",
            "block_bytes",
            "sha256",
        }
        assert len(peer["sha256"]) == 8 and peer["memory"] == "DRAM" and args.iterations == 5


class TestWhatArrivesIsChecked:
    def test_blocks_nixl_calls_done_but_never_moved_fail_as_zeros(self):
        checks, _, _ = probe(faults=Faults(zero_blocks=frozenset({2, 5})))
        passed, reason = checks[CHECK_TRANSFER]
        assert not passed
        assert "2 of 8 blocks arrived as zeros after the first transfer (blocks 2, 5)" in reason
        assert "nixl#909" in reason and "model.kvBufferDevice: cpu" in reason
        assert not checks[CHECK_BANDWIDTH][0] and "the transfer check failed" in checks[CHECK_BANDWIDTH][1]

    def test_a_block_that_stops_arriving_later_is_caught_by_the_last_check(self):
        """The reader zeroes its buffer before the last transfer too: bytes left from an earlier one
        cannot pass for a block that no longer arrives."""
        checks, _, _ = probe(faults=Faults(zero_blocks=frozenset({3}), zero_from=4))
        passed, reason = checks[CHECK_TRANSFER]
        assert not passed and "1 of 8 blocks arrived as zeros after the last transfer (blocks 3)" in reason
        assert "after the first transfer" not in reason

    def test_blocks_with_other_bytes_fail_as_corruption(self):
        checks, _, _ = probe(faults=Faults(corrupt_blocks=frozenset({7})))
        passed, reason = checks[CHECK_TRANSFER]
        assert not passed and "1 of 8 blocks arrived with other bytes than were sent" in reason
        assert "(blocks 7)" in reason and "zeros" not in reason


class TestTheTransportIsNamedFromTheLogs:
    def test_libfabric_on_its_tcp_provider_fails_even_with_every_byte_intact(self):
        """Recorded with a real NIXL: the LIBFABRIC backend works, and its rails run on tcp."""
        checks, _, _ = probe(logs=recorded_logs("libfabric-tcp"))
        passed, reason = checks[CHECK_TRANSFER]
        assert not passed
        assert "provider tcp (TCP)" in reason
        assert "NIXL's rails use provider tcp, not efa" in reason and "security group" in reason

    def test_gpu_buffers_on_rails_without_fi_hmem_fail(self):
        checks, _, _ = probe(memory="VRAM", logs=efa_logs(hmem=False), floor=P5_FLOOR)
        passed, reason = checks[CHECK_TRANSFER]
        assert not passed and "no FI_HMEM, so GPU buffers cannot be registered" in reason
        assert probe(memory="VRAM", logs=efa_logs(hmem=True), floor=P5_FLOOR)[0][CHECK_TRANSFER][0]

    def test_nixl_choosing_ucx_where_the_plan_chose_libfabric_fails(self):
        checks, _, _ = probe(
            backends=("LIBFABRIC", "UCX"), faults=Faults(backend_used="UCX"), logs=ucx_logs()
        )
        passed, reason = checks[CHECK_TRANSFER]
        assert not passed and "NIXL moved the blocks with UCX" not in reason  # UCX was one of the two asked
        checks, _, _ = probe(faults=Faults(backend_used="UCX"), logs=ucx_logs())
        passed, reason = checks[CHECK_TRANSFER]
        assert not passed and "NIXL moved the blocks with UCX, not LIBFABRIC as planned" in reason

    def test_ucx_over_tcp_where_the_plan_says_tcp_passes_against_its_staging_floor(self):
        """A stack that chose UCX (model.nixlBackends: [UCX]): GPU buffers staged over TCP."""
        checks, _, _ = probe(
            backends=("UCX",), memory="VRAM", floor=G6_UCX_FLOOR, faults=Faults(gbytes_per_s=0.47)
        )
        assert checks[CHECK_TRANSFER][0], checks[CHECK_TRANSFER][1]
        assert "through NIXL UCX, transport tcp (TCP)" in checks[CHECK_TRANSFER][1]
        passed, reason = checks[CHECK_BANDWIDTH]
        assert passed and "0.47 GB/s over TCP" in reason and "floor 0.22 GB/s" in reason

    def test_ucx_on_its_own_efa_transport_is_named_and_said_to_beat_the_plan(self):
        checks, _, _ = probe(
            backends=("UCX",), floor=G6_UCX_FLOOR, logs=ucx_logs("srd"), faults=Faults(gbytes_per_s=0.9)
        )
        passed, reason = checks[CHECK_TRANSFER]
        assert passed and "transport srd (EFA)" in reason and "(the plan expected UCX over TCP)" in reason
        passed, reason = checks[CHECK_BANDWIDTH]
        assert passed and "0.90 GB/s over EFA" in reason and "floor 0.22 GB/s" in reason

    def test_ucx_that_printed_no_transport_fails_rather_than_guess(self):
        checks, _, _ = probe(backends=("UCX",), floor=G6_UCX_FLOOR, logs=("", ""))
        assert not checks[CHECK_TRANSFER][0] and "cannot tell EFA from TCP" in checks[CHECK_TRANSFER][1]


class TestWhatMovedTheBytes:
    """GPU buffers over EFA: by GPUDirect RDMA reads (p4d, p5), or by reads libfabric emulates through host
    bounce buffers (g5, g6, g6e), told apart by libfabric's warning and the EFA device's
    rdma_read_bytes counter."""

    EMULATED = Faults(
        gbytes_per_s=0.8, efa_counters={"rdmap0/1/rdma_read_bytes": 0, "rdmap0/1/recv_bytes": 9}
    )
    RDMA = Faults(gbytes_per_s=30.0, efa_counters={"rdmap0/1/rdma_read_bytes": 8 * MIB * 5})

    def test_the_seeds_path_on_g6_passes_naming_emulated_reads_and_the_counters(self):
        checks, _, _ = probe(
            memory="VRAM", floor=G6_FLOOR, logs=efa_logs(hmem=True, emulated=True), faults=self.EMULATED
        )
        passed, reason = checks[CHECK_TRANSFER]
        assert passed, reason
        assert "provider efa, by EFA emulated reads through host bounce buffers" in reason
        assert "rdma_read_bytes +0, recv_bytes +9" in reason
        passed, reason = checks[CHECK_BANDWIDTH]
        assert (
            passed and "0.80 GB/s over EFA" in reason and "floor 0.40 GB/s (40% of the bounce copy" in reason
        )

    def test_emulated_reads_where_the_plan_expected_gpudirect_fail_with_the_fix(self):
        checks, _, _ = probe(
            memory="VRAM", floor=P5_FLOOR, logs=efa_logs(hmem=True, emulated=True), faults=self.EMULATED
        )
        passed, reason = checks[CHECK_TRANSFER]
        assert not passed
        assert "the plan expected GPUDirect RDMA reads" in reason and "emulated the reads" in reason
        assert (
            "Failed to register CUDA buffer with the EFA device" in reason
            and "rdma_read_bytes did not move" in reason
        )
        assert "nvidia-peermem" in reason and "FI_EFA_USE_DEVICE_RDMA=1" in reason

    def test_a_counter_that_did_not_move_is_enough_to_tell_emulated_reads(self):
        checks, _, _ = probe(memory="VRAM", floor=P5_FLOOR, logs=efa_logs(hmem=True), faults=self.EMULATED)
        assert not checks[CHECK_TRANSFER][0] and "rdma_read_bytes did not move" in checks[CHECK_TRANSFER][1]

    def test_gpudirect_reads_pass_with_the_bytes_the_nic_read(self):
        checks, _, _ = probe(memory="VRAM", floor=P5_FLOOR, logs=efa_logs(hmem=True), faults=self.RDMA)
        passed, reason = checks[CHECK_TRANSFER]
        assert passed and "by GPUDirect RDMA reads" in reason and f"rdma_read_bytes +{8 * MIB * 5}" in reason
        assert checks[CHECK_BANDWIDTH][0] and "floor 25.00 GB/s" in checks[CHECK_BANDWIDTH][1]

    def test_gpudirect_where_emulated_reads_were_planned_passes_and_says_so(self):
        checks, _, _ = probe(memory="VRAM", floor=G6_FLOOR, logs=efa_logs(hmem=True), faults=self.RDMA)
        passed, reason = checks[CHECK_TRANSFER]
        assert passed and "(the plan expected EFA emulated reads" in reason

    def test_emulated_reads_far_under_the_bounce_copy_fail_saying_why(self):
        faults = replace(self.EMULATED, gbytes_per_s=0.1)
        checks, _, _ = probe(
            memory="VRAM", floor=G6_FLOOR, logs=efa_logs(hmem=True, emulated=True), faults=faults
        )
        passed, reason = checks[CHECK_BANDWIDTH]
        assert not passed and "below it" in reason and "one cudaMemcpy per packet" in reason


class TestTheRateIsHeldToTheFloor:
    def test_below_the_floor_fails_saying_what_to_look_at(self):
        checks, _, _ = probe(faults=Faults(gbytes_per_s=0.4))
        assert checks[CHECK_TRANSFER][0]
        passed, reason = checks[CHECK_BANDWIDTH]
        assert not passed and "0.40 GB/s over EFA" in reason and "below it" in reason
        assert "vpc.amazonaws.com/efa" in reason and "Created N rails" in reason

    def test_a_floor_given_on_the_command_line_wins(self):
        checks, _, _ = probe(faults=Faults(gbytes_per_s=2.0), floor_override=2.5)
        passed, reason = checks[CHECK_BANDWIDTH]
        assert not passed and "floor 2.50 GB/s (--kv-floor)" in reason

    def test_without_a_plan_the_rate_is_reported_and_not_judged(self):
        checks, _, _ = probe(floor=None)
        passed, reason = checks[CHECK_BANDWIDTH]
        assert passed and "3.00 GB/s" in reason and "no floor to hold it to" in reason

    def test_the_first_transfer_which_also_connects_is_not_timed(self):
        result = {"blocks": 4, "block_bytes": MIB, "seconds": [10.0, 0.004, 0.004]}
        rate, each = kv_transfer.gbytes_per_s(result)
        assert rate == pytest.approx(4 * MIB / 0.004 / 1e9) and len(each) == 2


class TestAFailedStepSaysWhatToChange:
    @pytest.mark.parametrize(
        ("stage", "memory", "advice"),
        [
            ("agent", "DRAM", "the pod needs an EFA device (vpc.amazonaws.com/efa"),
            ("register", "VRAM", "its rails need FI_HMEM"),
            ("register", "DRAM", "IPC_LOCK"),
            ("connect", "DRAM", "do both pods run the same image?"),
            ("transfer", "DRAM", "security group to allow all traffic to and from itself"),
        ],
    )
    def test_each_stage(self, stage, memory, advice):
        checks, _, _ = probe(memory=memory, faults=Faults(stage=stage))
        passed, reason = checks[CHECK_TRANSFER]
        assert not passed and f"the probe stopped at {stage}" in reason and advice in reason
        assert checks[CHECK_BANDWIDTH] == (False, "not measured: the transfer did not complete")

    def test_a_server_that_fails_before_it_is_ready_is_noticed_at_once(self):
        cluster = healthy_cluster()
        pods = ProbePods(cluster.clock, Faults(stage="agent"))
        cluster.exec_handler = pods
        pair = Pair(SERVER, "n1", READER, "n2")
        spec = ProbeSpec(backends=("LIBFABRIC",), memory="DRAM", **SMALL)
        run = kv_transfer.run_probe(
            cluster, "inference", pair, spec, lambda _: None, probe_sleep(cluster.clock), cluster.clock
        )
        assert run.problem == f"the probe in {SERVER} ended before it was ready"
        assert run.serve_result and run.serve_result["stage"] == "agent"
        assert cluster.clock.now < kv_transfer.READY_TIMEOUT_S / 2  # not waited out
        assert not [c for _, c in pods.commands if c[:2] == ("python3", "-c")]  # no reader started

    def test_a_transfer_that_never_completes_times_out(self):
        checks, _, _ = probe(faults=Faults(stall=True))
        passed, reason = checks[CHECK_TRANSFER]
        assert not passed and "transfer 1 of 5 timed out" in reason and "security group" in reason

    def test_over_ucx_the_advice_is_the_tcp_ports(self):
        checks, _, _ = probe(backends=("UCX",), faults=Faults(stage="transfer"), logs=ucx_logs())
        assert "UCX_TCP_PORT_RANGE" in checks[CHECK_TRANSFER][1]


class TestWhichPods:
    def pods(self, *placements: tuple[str, str, str]) -> list[dict[str, Any]]:
        return [
            {"metadata": {"name": n}, "spec": {"nodeName": node}, "status": {"phase": phase}}
            for n, node, phase in placements
        ]

    def test_two_running_workers_on_different_nodes(self):
        pods = self.pods(("w2", "n1", "Running"), ("w1", "n1", "Running"), ("w3", "n2", "Running"))
        assert pick_pair(pods) == Pair("w1", "n1", "w3", "n2")

    def test_workers_that_share_one_node_have_nothing_to_probe_and_pass(self):
        reason = pick_pair(self.pods(("w1", "n1", "Running"), ("w2", "n1", "Running")))
        assert isinstance(reason, str) and "never leaves that node" in reason
        cluster = healthy_cluster()
        for pod in cluster.pods:
            pod["spec"]["nodeName"] = "ip-10-0-1-23.sa-east-1.compute.internal"
        checks, _, _ = probe(cluster=cluster)
        assert checks[CHECK_TRANSFER][0] and "nothing to probe" in checks[CHECK_TRANSFER][1]

    def test_fewer_than_two_running_workers_fail(self):
        reason = pick_pair(self.pods(("w1", "n1", "Running"), ("w2", "n2", "Pending")))
        assert reason == "needs two Running GPU worker pods, found 1"
        cluster = healthy_cluster()
        cluster.pods[0]["status"]["phase"] = "Pending"
        checks, _, _ = probe(cluster=cluster)
        assert not checks[CHECK_TRANSFER][0]


class TestRecordedWithARealNixl:
    """tests/fixtures/nixl/, replayed through the verdicts as recorded."""

    def replay(self, case: str) -> ProbeRun:
        found = recording(case)
        return ProbeRun(pair=Pair(**found.pop("pair")), **found)

    GPU_SPEC = ProbeSpec(backends=("UCX",), memory="VRAM")

    def test_ucx_over_tcp_passes_its_floor(self):
        spec = ProbeSpec(backends=("UCX",), memory="DRAM", blocks=8, block_bytes=MIB, iterations=3)
        transfer, bandwidth = judge(self.replay("ucx-tcp"), spec, "cpu", "tcp", G6_UCX_HOST_FLOOR)
        assert transfer.passed and "transport tcp (TCP)" in transfer.reason, transfer.reason
        assert bandwidth.passed and "over TCP" in bandwidth.reason, bandwidth.reason

    def test_libfabric_on_tcp_fails(self):
        spec = ProbeSpec(backends=("LIBFABRIC",), memory="DRAM", blocks=8, block_bytes=MIB, iterations=3)
        transfer, _ = judge(self.replay("libfabric-tcp"), spec, "cpu", "host", G6_HOST_FLOOR)
        assert not transfer.passed and "provider tcp, not efa" in transfer.reason
        # Every byte did arrive: what fails is the transport, not the data.
        run = self.replay("libfabric-tcp")
        assert run.read_result and run.ready
        assert run.read_result["sha256"]["first"] == run.read_result["sha256"]["last"] == run.ready["sha256"]

    def test_libfabric_without_an_efa_device_fails_naming_the_device(self):
        spec = ProbeSpec(backends=("LIBFABRIC",), memory="DRAM", blocks=8, block_bytes=MIB, iterations=3)
        transfer, bandwidth = judge(self.replay("libfabric-no-efa"), spec, "cpu", "host", G6_HOST_FLOOR)
        assert not transfer.passed and "the probe stopped at agent" in transfer.reason
        assert (
            "vpc.amazonaws.com/efa" in transfer.reason and "no suitable network providers" in transfer.reason
        )
        assert not bandwidth.passed

    def test_the_ucx_table_names_the_transport_per_message_size(self):
        _, read = recorded_logs("ucx-tcp")
        assert ucx_read_transports(read, MIB) == {"tcp"}
        table = (
            "| ucp_context_0 inter-node cfg#2 | remote memory read by ucp_get* into host memory from host |\n"
            "|                    0..8184 | short                  | tcp/eth0 |\n"
            "|                  8185..inf | zero-copy      | 50% on srd/rdmap0:1 and 50% on srd/rdmap1:1 |\n"
        )
        assert ucx_read_transports(table, 100) == {"tcp"} and ucx_read_transports(table, MIB) == {"srd"}

    @pytest.mark.parametrize("nixl", ["1.3.0", "1.3.1", "1.5.1"])
    def test_gpu_buffers_over_ucx_pass_the_floor_of_a_stack_that_chose_ucx(self, nixl):
        """Recorded on an H200 at `ops verify`'s defaults (256 MiB of VRAM, 5 transfers); NIXL 1.3.x
        bundles UCX 1.21, whose protocol table is one header line, 1.5.1 UCX 1.23, whose is two."""
        run = self.replay(f"ucx-gpu-tcp-nixl-{nixl}")
        transfer, bandwidth = judge(run, self.GPU_SPEC, "cuda", "tcp", G6_UCX_FLOOR)
        assert transfer.passed and "through NIXL UCX, transport tcp (TCP)" in transfer.reason, transfer.reason
        assert "256 MiB in 64 blocks of 4 MiB" in transfer.reason
        assert bandwidth.passed and "floor 0.22 GB/s" in bandwidth.reason, bandwidth.reason
        rate, _ = kv_transfer.gbytes_per_s(run.read_result or {})
        assert 0.22 < rate < 0.62  # under the old TCP floor every healthy UCX deploy failed

    @pytest.mark.parametrize("nixl", ["1.3.1", "1.5.1"])
    def test_gpu_buffers_over_tcp_fail_a_stack_that_planned_efa(self, nixl):
        transfer, bandwidth = judge(
            self.replay(f"ucx-gpu-tcp-nixl-{nixl}"), self.GPU_SPEC, "cuda", "emulated", G6_FLOOR
        )
        assert not transfer.passed and "the plan expected EFA, and TCP carried the bytes" in transfer.reason
        assert not bandwidth.passed

    def test_the_ucx_1_23_table_is_read_as_the_1_21_one(self):
        _, read = recorded_logs("ucx-gpu-tcp-nixl-1.5.1")
        assert "nixl-probe-read-" in read and "| Range  |    Description     |" in read  # the new layout
        assert ucx_read_transports(read, 4 * MIB) == {"tcp"}
        # The table ends where the next one's title begins, whatever that one's lanes.
        table = (
            "| 5f1c2e9a-agent inter-node cfg#3                                  |\n"
            "| remote memory read by ucp_get*(multi) into cuda/GPU0 from cuda |\n"
            "| Range  |    Description     |              Config              |\n"
            "| 0..inf | zero-copy          | srd/rdmap16s27:1                 |\n"
            "| 5f1c2e9a-agent inter-node cfg#3                          |\n"
            "| active message by ucp_am_send*(egr) from host memory     |\n"
            "| 0..inf | zero-copy          | tcp/eth0                         |\n"
        )
        assert ucx_read_transports(table, 4 * MIB) == {"srd"}

    def test_gpu_buffers_on_libfabric_without_fi_hmem_stop_at_registration_with_the_fix(self):
        """Recorded on an H200, libfabric 2.4.0 built with CUDA: its tcp provider has no FI_HMEM (prov/tcp
        registers system memory only), so NIXL's LIBFABRIC backend takes no VRAM."""
        run = self.replay("libfabric-gpu-tcp-nixl-1.3.1")
        assert "Using provider without FI_HMEM support" in run.logs[run.pair.serve]
        spec = ProbeSpec(backends=("LIBFABRIC",), memory="VRAM")
        transfer, bandwidth = judge(run, spec, "cuda", "emulated", G6_FLOOR)
        assert not transfer.passed and "the probe stopped at register" in transfer.reason
        assert "no available backends for mem type 'VRAM_SEG'" in transfer.reason
        assert "libcudart.so" in transfer.reason and "model.nixlBackends: [UCX]" in transfer.reason
        assert not bandwidth.passed


class TestTheProbeProgram:
    def test_it_marks_its_result_as_ops_reads_it(self):
        assert nixl_probe.MARK == kv_transfer.MARK
        assert kv_transfer.result_line('x\nNIXL-PROBE {"role": "read"}\ny') == {"role": "read"}
        assert kv_transfer.result_line("NIXL-PROBE not json") is None

    def test_it_accepts_only_nixls_kv_backends(self):
        with pytest.raises(SystemExit):
            nixl_probe.parser().parse_args(
                [
                    "read",
                    "--backends",
                    "GDS",
                    "--nonce",
                    "n",
                    "--peer",
                    "e30=",
                    "--iterations",
                    "1",
                    "--transfer-timeout",
                    "1",
                ]
            )

    def test_a_server_nobody_reads_gives_up_at_its_deadline(self, tmp_path):
        times = iter(range(0, 1000, 10))
        args = argparse.Namespace(
            nonce="n", backends=["UCX"], memory="DRAM", blocks=2, block_bytes=4096, deadline=30.0
        )
        pods = ProbePods(FakeKubeApi(None, [], [], {}, None, []).clock)  # type: ignore[arg-type]
        with pytest.raises(nixl_probe.ProbeError, match="no reader notified within 30 s"):
            nixl_probe.serve(
                args,
                make_agent=pods.nixl.make_agent,
                make_buffer=nixl_probe.new_buffer,
                clock=lambda: float(next(times)),
                sleep=lambda _: None,
                workdir=tmp_path,
            )
        ready = json.loads((tmp_path / nixl_probe.READY_FILE).read_text())
        assert len(ready["sha256"]) == 2 and not (tmp_path / ".ready.json").exists()

    def test_the_shell_lines_mean_what_ops_reads_from_them(self, tmp_path):
        import subprocess

        def status(script: str) -> int:
            return subprocess.run(
                ["sh", "-c", script, "_", str(tmp_path / "d")], capture_output=True
            ).returncode

        assert status(READY_SCRIPT) == 3 and status(ENDED_SCRIPT) == 3  # not started
        (tmp_path / "d").mkdir()
        assert status(READY_SCRIPT) == 5 and status(ENDED_SCRIPT) == 5  # running
        (tmp_path / "d" / "serve.exit").write_text("1\n")
        assert status(READY_SCRIPT) == 4 and status(ENDED_SCRIPT) == 0  # ended before it was ready


class TestTheEfaCounters:
    def test_the_probe_reads_every_counter_of_every_device_and_port(self, tmp_path):
        for where, value in (
            ("rdmap0/ports/1/hw_counters/rdma_read_bytes", "42\n"),
            ("rdmap0/hw_counters/reg_mr_err", "0\n"),
        ):
            (tmp_path / where).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / where).write_text(value)
        (tmp_path / "rdmap0/ports/1/hw_counters/lifespan").write_text("not a number\n")
        assert nixl_probe.efa_counters(tmp_path) == {"rdmap0/1/rdma_read_bytes": 42, "rdmap0/-/reg_mr_err": 0}
        assert nixl_probe.efa_counters(tmp_path / "absent") == {}
        assert nixl_probe.counter_deltas({"a": 1, "b": 2}, {"a": 5, "c": 1}) == {"a": 4}

    def test_a_counter_is_summed_over_devices_and_only_where_read(self):
        counters = {"rdmap0/1/rdma_read_bytes": 3, "rdmap1/1/rdma_read_bytes": 4, "rdmap0/1/recv_bytes": 1}
        assert kv_transfer.counter_total(counters, "rdma_read_bytes") == 7
        assert kv_transfer.counter_total({}, "rdma_read_bytes") is None


class TestTheCommand:
    def test_verify_moves_256_mib_by_default_in_4_mib_blocks_and_0_skips_it(self, tmp_path):
        from ops.cli import _kv_target, build_parser

        def spec(*argv: str) -> ProbeSpec | None:
            args = build_parser().parse_args(["verify", *argv])
            return _kv_target(args, None)["kv_probe"]

        default = spec()
        assert default and (default.blocks, default.block_bytes, default.iterations) == (64, 4 * MIB, 5)
        odd = spec("--kv-probe-mib", "10")
        assert odd and odd.total_bytes == 10 * MIB
        assert spec("--kv-probe-mib", "0") is None
        with pytest.raises(SystemExit):
            spec("--kv-probe-mib", "5000")

    def test_a_failed_probe_fails_verify_with_exit_1(self, capsys, kubeconfig):
        from ops.cli import main

        cluster = healthy_cluster()
        cluster.exec_handler = ProbePods(cluster.clock, Faults(zero_blocks=frozenset({0})))
        code = main(
            ["verify", "--kubeconfig", str(kubeconfig), "--kv-probe-mib", "4"],
            connect=lambda _: cluster,
            clock=cluster.clock,
            sleep=probe_sleep(cluster.clock),
        )
        out = capsys.readouterr().out
        assert code == 1 and f"FAIL  {CHECK_TRANSFER}" in out and "arrived as zeros" in out

    def test_the_floor_in_the_plan_is_what_the_preview_states(self):
        from planning import plan_stack
        from tests.fakes.pulumi import stack_settings

        plan = plan_stack(stack_settings("dev"), stack="dev")
        assert plan.kv_floor == G6_FLOOR
        assert "floor for `ops verify`: 0.40 GB/s" in plan.kv_floor.summary()


def test_probe_spec_sizes():
    spec = ProbeSpec(backends=("UCX",), memory="DRAM")
    assert spec.total_bytes == 256 * MIB and replace(spec, blocks=1).total_bytes == 4 * MIB


def replayed(case: str) -> ProbeRun:
    found = recording(case)
    return ProbeRun(pair=Pair(**found.pop("pair")), **found)


UCX_HOST_SPEC = ProbeSpec(backends=("UCX",), memory="DRAM", blocks=8, block_bytes=MIB, iterations=3)


class TestWhatTheLastWaveLeftUnheld:
    """Issue 53 (8, 9), on the real NIXL recording of UCX over TCP (host buffers), which passes as
    recorded where the plan chose it."""

    @pytest.mark.parametrize(
        ("which", "keep", "said"),
        [
            ("last", 7, "the last transfer returned 7 of 8 blocks"),
            ("first", 1, "the first transfer returned 1 of 8 blocks"),
            ("first", 0, "the first transfer returned 0 of 8 blocks"),
            ("last", 9, "the last transfer returned 9 of 8 blocks"),
        ],
    )
    def test_a_probe_that_returns_another_number_of_digests_than_it_sent_is_not_intact(
        self, which, keep, said
    ):
        """Every digest it did return matches: only the count says blocks went missing."""
        run = replayed("ucx-tcp")
        assert run.read_result and run.ready
        sent = run.ready["sha256"]
        assert judge(run, UCX_HOST_SPEC, "cpu", "tcp", G6_UCX_HOST_FLOOR)[0].passed
        returned = (sent * 2)[:keep]
        run.read_result["sha256"] = {**run.read_result["sha256"], which: returned}
        transfer, bandwidth = judge(run, UCX_HOST_SPEC, "cpu", "tcp", G6_UCX_HOST_FLOOR)
        assert not transfer.passed and said in transfer.reason, transfer.reason
        assert not bandwidth.passed

    def test_without_a_plan_a_transfer_over_tcp_fails(self):
        """`ops verify` without a stack expects EFA by any mechanism: UCX over TCP, every byte intact and
        UCX among the backends asked for, still fails."""
        transfer, bandwidth = judge(replayed("ucx-tcp"), UCX_HOST_SPEC, "cpu", None, None)
        assert not transfer.passed
        assert "the plan expected EFA, and TCP carried the bytes" in transfer.reason
        assert not bandwidth.passed
        checks, _, _ = probe(
            backends=("LIBFABRIC", "UCX"), faults=Faults(backend_used="UCX"), logs=ucx_logs(), floor=None
        )
        passed, reason = checks[CHECK_TRANSFER]
        assert not passed and "the plan expected EFA, and TCP carried the bytes" in reason

    @pytest.mark.parametrize("reported", [{}, None])
    def test_a_reader_that_reports_no_digests_is_not_intact(self, reported):
        """Nothing to compare is not a match: the verdict must not say every block's SHA-256 matched."""
        run = replayed("ucx-tcp")
        assert run.read_result
        if reported is None:
            del run.read_result["sha256"]
        else:
            run.read_result["sha256"] = reported
        transfer, bandwidth = judge(run, UCX_HOST_SPEC, "cpu", "tcp", G6_UCX_HOST_FLOOR)
        assert not transfer.passed and "the reader reported no digests" in transfer.reason
        assert not bandwidth.passed

    def test_a_reader_that_reports_the_first_transfers_digests_only_is_not_intact(self):
        """The verdict says every block matched after the first and the last transfer: a reader that
        reported the first alone has not shown the last (the check that catches blocks that stop
        arriving, nixl#909)."""
        run = replayed("ucx-tcp")
        assert run.read_result and len(run.read_result["seconds"]) > 1
        del run.read_result["sha256"]["last"]
        transfer, _ = judge(run, UCX_HOST_SPEC, "cpu", "tcp", G6_UCX_HOST_FLOOR)
        assert not transfer.passed and "no digests after the last transfer" in transfer.reason
        once = replayed("ucx-tcp")
        assert once.read_result
        once.read_result["seconds"] = once.read_result["seconds"][:1]  # one transfer: first and last alike
        del once.read_result["sha256"]["last"]
        assert judge(once, UCX_HOST_SPEC, "cpu", "tcp", G6_UCX_HOST_FLOOR)[0].passed
