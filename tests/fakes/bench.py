"""`ops bench`'s recorded Job logs (tests/fixtures/bench, made by make_fixtures.py there: vLLM 0.26.0's
exact output format, invented figures) and the result files of the two sweeps they make."""

from __future__ import annotations

from typing import Any

from manifests.bench import BenchOptions
from ops.bench import BenchPoint, parse_result, run_document
from planning import plan_stack
from tests.fakes.pulumi import ROOT, stack_settings

FIXTURES = ROOT / "tests" / "fixtures" / "bench"
SWEEP = (1, 4, 16, 64)
MODES = {"disaggregated": "dev", "aggregated": "aggregated.example"}
"""The recorded sweeps' mode -> the stack file that serves it."""
WORKLOAD = BenchOptions(input_len=1024, output_len=256, requests=64)
"""The workload the fixtures were made with."""
HOURLY = 4.60


def fixture_log(mode: str, concurrency: int) -> str:
    return (FIXTURES / f"{mode}-c{concurrency}.log").read_text()


def sweep_document(mode: str, **workload: Any) -> dict[str, Any]:
    """The result file `ops bench --sweep 1,4,16,64` writes from the recorded logs of `mode`."""
    stack = MODES[mode]
    settings = stack_settings(stack)
    points = [BenchPoint(c, parse_result(fixture_log(mode, c))) for c in SWEEP]
    document = run_document(
        stack, settings, plan_stack(settings, stack=stack), WORKLOAD, points, HOURLY, "a fixed price"
    )
    document["workload"] |= workload
    return document
