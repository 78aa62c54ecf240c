"""`ops summary`: what a deploy writes to its job summary: the outputs, never a secret."""

from __future__ import annotations

import json
import subprocess
from typing import Any

from ops.cli import main

OUTPUTS = {
    "clusterName": "ray-llm-multinode",
    "endpointUrl": "http://internal-x.elb.amazonaws.com/v1",
    "apiKeys": "[secret]",
    "kubeconfig": "[secret]",
    "clusterZones": ["sa-east-1a", "sa-east-1b"],
}


def fake_pulumi(outputs: dict[str, Any], calls: list[list[str]]):
    def run(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(command)
        return subprocess.CompletedProcess(command, 0, json.dumps(outputs), "")

    return run


def test_outputs_as_a_table_endpoint_first_secrets_masked(capsys):
    calls: list[list[str]] = []
    assert main(["summary", "--stack", "dev"], run=fake_pulumi(OUTPUTS, calls)) == 0
    out = capsys.readouterr().out
    assert calls == [["pulumi", "stack", "output", "--json", "--stack", "dev"]]  # no --show-secrets
    rows = [line for line in out.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert rows[0] == "| endpointUrl | `http://internal-x.elb.amazonaws.com/v1` |"
    assert "| apiKeys | secret: `pulumi stack output apiKeys --show-secrets --stack dev` |" in rows
    assert '| clusterZones | `["sa-east-1a", "sa-east-1b"]` |' in rows


def test_a_failing_pulumi_is_a_failed_summary(capsys):
    def run(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(command, 255, "", "error: no stack named 'x' found")

    assert main(["summary", "--stack", "x"], run=run) == 2  # it could not start: exit 2, as every command
    assert "no stack named" in capsys.readouterr().err


def test_no_pulumi_cli_says_so_as_every_command_does(capsys):
    def run(command: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        raise FileNotFoundError(2, "No such file or directory", command[0])

    assert main(["summary", "--stack", "dev"], run=run) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "ops: error: the pulumi CLI is not installed (or not on PATH), so stack dev's outputs"
    )
    assert "https://www.pulumi.com/docs/iac/download-install/" in err and "Errno" not in err
