"""The policy pack as the Pulumi engine runs it: `python -m pulumi.policy <engine> <pack>` from the pack's
directory (the Python language host's RunPlugin), asked over gRPC what it holds and to analyze a
resource. Proves the pack starts, imports its rules from its own directory and reports violations
through the engine's protocol, not only that its functions work."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import grpc
import pytest
from google.protobuf import empty_pb2, struct_pb2
from pulumi.runtime.proto import analyzer_pb2, analyzer_pb2_grpc

from policy.rules import POLICIES
from tests.fakes.pulumi import ROOT


@pytest.fixture(scope="module")
def analyzer() -> Iterator[analyzer_pb2_grpc.AnalyzerStub]:
    pack = subprocess.Popen(
        [sys.executable, "-u", "-m", "pulumi.policy", "127.0.0.1:1", "."],
        cwd=ROOT / "policy",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert pack.stdout is not None
        port = pack.stdout.readline().strip()
        assert port.isdigit(), f"the pack did not start: {port!r} {pack.stderr.read() if pack.stderr else ''}"
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(channel).result(timeout=20)
        yield analyzer_pb2_grpc.AnalyzerStub(channel)
        channel.close()
    finally:
        pack.kill()
        pack.wait()


def analyze(stub: analyzer_pb2_grpc.AnalyzerStub, type_: str, props: dict) -> list[str]:
    properties = struct_pb2.Struct()
    properties.update(props)
    request = analyzer_pb2.AnalyzeRequest(
        type=type_, properties=properties, urn=f"urn:pulumi:dev::ray-llm-eks::{type_}::x", name="x"
    )
    return [d.policyName for d in stub.Analyze(request, timeout=20).diagnostics]


def test_the_pack_announces_every_rule_as_mandatory(analyzer):
    info = analyzer.GetAnalyzerInfo(empty_pb2.Empty(), timeout=20)
    assert info.name == "ray-llm-eks"
    assert sorted(p.name for p in info.policies) == sorted(p.name for p in POLICIES)
    mandatory = analyzer_pb2.EnforcementLevel.Value("MANDATORY")
    assert {p.enforcementLevel for p in info.policies} == {mandatory}


def test_it_reports_a_violation_over_the_protocol(analyzer):
    template = "aws:ec2/launchTemplate:LaunchTemplate"
    one_hop = {"httpPutResponseHopLimit": 1}
    assert analyze(analyzer, template, {"metadataOptions": {"httpTokens": "optional", **one_hop}}) == [
        "imdsv2-required"
    ]
    assert analyze(analyzer, template, {"metadataOptions": {"httpTokens": "required", **one_hop}}) == []
