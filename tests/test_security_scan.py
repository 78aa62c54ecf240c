"""The scan's own rules (tests/security_scan.py; CI runs the scan itself with checkov): what it reads,
and that an unlisted finding or a stale skip fails it."""

from __future__ import annotations

import pytest

from tests.fakes.pulumi import STACK_FILES
from tests.security_scan import SKIPS, evaluate, scan_input, stacks


@pytest.mark.every_stack_file
def test_every_stack_file_is_scanned_with_the_ray_pods_as_pods():
    assert set(STACK_FILES) <= set(stacks())
    for stack in stacks():
        objects = scan_input(stack)
        pods = {o["metadata"]["name"] for o in objects if o["kind"] == "Pod"}
        split = {"ray-llm-head", "ray-llm-prefill-workers", "ray-llm-decode-workers"}
        assert pods in ({"ray-llm-head", "ray-llm-gpu-workers"}, split), stack
        assert any(o["kind"] == "NetworkPolicy" for o in objects)


def test_a_finding_without_a_justification_fails():
    unjustified, _, _ = evaluate([("CKV_K8S_16", "Pod.inference.ray-llm-gpu-workers", "privileged")], SKIPS)
    assert unjustified == ["CKV_K8S_16 Pod.inference.ray-llm-gpu-workers: privileged"]


def test_a_justification_covers_only_the_resources_it_names():
    skips = {"CKV_K8S_23": {"Pod.*.*-gpu-workers": "root for IPC_LOCK"}}
    unjustified, stale, used = evaluate(
        [
            ("CKV_K8S_23", "Pod.inference.ray-llm-gpu-workers", "root"),
            ("CKV_K8S_23", "Job.inference.ray-llm-ready-x", "root"),
        ],
        skips,
    )
    assert unjustified == ["CKV_K8S_23 Job.inference.ray-llm-ready-x: root"]
    assert (stale, used) == ([], 1)


def test_a_skip_that_matches_nothing_is_stale():
    _, stale, _ = evaluate([], {"CKV_K8S_22": {"Pod.*.*-head": "writes /tmp/ray"}})
    assert stale == ["CKV_K8S_22 Pod.*.*-head"]


def test_every_skip_says_why():
    for check, patterns in SKIPS.items():
        for pattern, why in patterns.items():
            assert len(why) > 40, (check, pattern)
