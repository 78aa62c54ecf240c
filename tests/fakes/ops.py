"""What the `ops` commands meet outside the cluster, faked: the Pulumi CLI's stack outputs, the AWS
CLI's and other tools' answers, a port-forward process, Prometheus's answers. Shared by every test
module that runs a command (no test module imports another)."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from manifests.pd_dashboard import status_queries

KEY = "k3yk3yk3yk3yk3yk3yk3yk3yk3yk3yk3"
KEYS = {"batch": "b" * 48, "default": KEY}
"""The stack's `apiKeys` output: one key a client."""
KUBECONFIG = {"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "eks"}]}


def pulumi_outputs(**outputs: Any):
    """`pulumi stack output NAME --show-secrets --json`, answered per output name."""

    def run(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        name = command[3]
        if name not in outputs:
            return subprocess.CompletedProcess(
                command, 255, "", f"error: current stack does not have output {name!r}"
            )
        return subprocess.CompletedProcess(command, 0, json.dumps(outputs[name]) + "\n", "")

    return run


KUBECONFIG = {"apiVersion": "v1", "kind": "Config", "clusters": [{"name": "eks"}]}


def answers(table: dict[str, tuple[int, str, str] | None]):
    """A fake runner: the first word(s) of a command -> (exit, stdout, stderr); None: not installed."""

    def run(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        for prefix, answer in table.items():
            if " ".join(command).startswith(prefix):
                if answer is None:
                    raise FileNotFoundError(command[0])
                return subprocess.CompletedProcess(command, *answer)
        raise AssertionError(f"unexpected command {command}")

    return run


IDENTITY = json.dumps({"Account": "123456789012", "Arn": "arn:aws:sts::123456789012:assumed-role/dev/me"})
ZONES = json.dumps({"AvailabilityZones": [{"ZoneName": "sa-east-1a"}, {"ZoneName": "sa-east-1b"}]})


def quota(value: float) -> tuple[int, str, str]:
    return 0, json.dumps({"Quota": {"Value": value}}), ""


PREFILL, DECODE = "Prefill:qwen3_5-9b", "Decode:qwen3_5-9b"


def vector(value: float, **labels: str) -> dict[str, Any]:
    return {"metric": labels, "value": [1764600000.0, str(value)]}


def prometheus_answers() -> dict[str, list[dict[str, Any]]]:
    queries = status_queries()
    return {
        queries["ttft_p50"]: [vector(0.21, deployment=PREFILL), vector(0.23, deployment=DECODE)],
        queries["ttft_p95"]: [vector(0.48, deployment=PREFILL), vector(0.52, deployment=DECODE)],
        queries["itl_p50"]: [vector(0.019, deployment=DECODE)],
        queries["itl_p95"]: [vector(0.031, deployment=DECODE)],
        queries["nixl_latency"]: [vector(0.0031)],
        queries["nixl_throughput"]: [vector(1.2e9)],
        queries["nixl_failures"]: [vector(0)],
        queries["nixl_expired"]: [vector(0)],
        queries["nixl_done"]: [vector(412)],
    }


class FakeProcess:
    def __init__(self, command: list[str], exits_after: int | None):
        self.command = command
        self.polls = 0
        self.exits_after = exits_after
        self.terminated = False

    def poll(self) -> int | None:
        self.polls += 1
        if self.terminated:
            return -15
        return 1 if self.exits_after is not None and self.polls > self.exits_after else None

    def terminate(self) -> None:
        self.terminated = True

    def wait(self, timeout: float | None = None) -> int:
        return -15


def no_wait(_: float) -> None:
    """The command's poll interval, without the wait."""
