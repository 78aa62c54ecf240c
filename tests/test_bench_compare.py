"""`ops bench compare` (issue 41): result files side by side with ratios and the better one marked,
runs of different workloads refused unless forced, and the picture (throughput against TTFT and ITL
over the sweep, one line per run) written with both runs in it; from the recorded sweeps
(tests/fixtures/bench: vLLM 0.26.0's format, invented figures)."""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from ops.bench_compare import best, compare_report, figure, load_runs, write_plot
from ops.cli import main
from ops.kube import OpsError
from tests.fakes.bench import SWEEP, sweep_document


@pytest.fixture(scope="module")
def documents() -> dict[str, dict[str, Any]]:
    return {mode: sweep_document(mode) for mode in ("disaggregated", "aggregated")}


@pytest.fixture
def files(tmp_path: Path, documents) -> list[Path]:
    paths = []
    for mode in ("disaggregated", "aggregated"):
        path = tmp_path / f"{mode}.json"
        path.write_text(json.dumps(documents[mode]))
        paths.append(path)
    return paths


def row(report: str, concurrency: int, metric: str) -> str:
    """The line of `metric` in the block of `concurrency`."""
    block = report.split(f"Concurrency {concurrency}:\n", 1)[1].split("\nConcurrency", 1)[0]
    (line,) = [line for line in block.splitlines() if re.match(rf"\s+{re.escape(metric)}\s\s", line)]
    return line


class TestSideBySide:
    def test_each_metric_with_its_ratio_and_the_better_run_marked(self, files):
        report = compare_report(load_runs(files))
        assert "A  dev (disaggregated): disaggregated.json, stack dev, disaggregated" in report
        assert "B  aggregated.example (aggregated): aggregated.json" in report
        assert "KV over NIXL LIBFABRIC (emulated)" in report and "no KV transfer (aggregated)" in report
        assert "Workload: 1024 tokens in, 256 out, 64 requests per point, request rate inf" in report
        # 64 in flight: aggregated's two decoders win throughput (479.6 / 453.3 = 1.06), disaggregated
        # keeps the tail of inter-token latency (650 / 170 = 3.82).
        assert re.fullmatch(
            r"\s+output tokens/s\s+453\.3\s+479\.6 \*\s+1\.06", row(report, 64, "output tokens/s")
        )
        assert re.fullmatch(
            r"\s+ITL p99 \(ms\)\s+170\.0 \*\s+650\.0\s+3\.82", row(report, 64, "ITL p99 (ms)")
        )
        assert re.fullmatch(
            r"\s+TTFT p50 \(ms\)\s+340\.0\s+260\.0 \*\s+0\.76", row(report, 1, "TTFT p50 (ms)")
        )
        # per GPU: both runs have 2
        assert re.fullmatch(
            r"\s+output tokens/s per GPU\s+226\.6\s+239\.8 \*\s+1\.06",
            row(report, 64, "output tokens/s per GPU"),
        )
        # no failures either side: nothing to mark, nothing to divide
        assert re.fullmatch(r"\s+failed requests\s+0\s+0\s+-", row(report, 4, "failed requests"))
        assert "Better (*) per metric and concurrency: A 42, B 10 of 56" in report

    def test_the_better_one_by_direction(self):
        assert best([1.0, 2.0], "higher") == {1} and best([1.0, 2.0], "lower") == {0}
        assert best([2.0, 2.0], "lower") == set() and best([None, 2.0], "lower") == set()
        assert best([1.0, 3.0, 1.0], "lower") == {0, 2}

    def test_only_common_concurrencies_are_compared(self, tmp_path, documents):
        short = dict(documents["aggregated"])
        short["points"] = [p for p in short["points"] if p["concurrency"] in (4, 16)]
        path = tmp_path / "short.json"
        path.write_text(json.dumps(short))
        pd = tmp_path / "pd.json"
        pd.write_text(json.dumps(documents["disaggregated"]))
        report = compare_report(load_runs([pd, path]))
        assert re.findall(r"^Concurrency (\d+):", report, re.M) == ["4", "16"]
        assert "Concurrency 1, 64 only in A: not compared" in report


class TestRefusals:
    @pytest.mark.parametrize(
        ("key", "value"), [("output_len", 128), ("input_len", 4000), ("requests", 200), ("request_rate", 2.0)]
    )
    def test_different_workloads_are_refused_unless_forced(self, tmp_path, documents, key, value):
        other = sweep_document("aggregated", **{key: value})
        a, b = tmp_path / "a.json", tmp_path / "b.json"
        a.write_text(json.dumps(documents["disaggregated"]))
        b.write_text(json.dumps(other))
        with pytest.raises(OpsError, match=rf"different workloads.*{key}: A .+, B {value}.*--force") as error:
            compare_report(load_runs([a, b]))
        assert error.value.exit_code == 2
        forced = compare_report(load_runs([a, b]), force=True)
        assert f"DIFFERENT WORKLOADS, compared with --force: {key}" in forced

    def test_another_model_or_mode_is_what_a_comparison_is_for(self, tmp_path, documents):
        other = json.loads(json.dumps(documents["aggregated"]))
        other["model"]["id"] = "another"
        a, b = tmp_path / "a.json", tmp_path / "b.json"
        a.write_text(json.dumps(documents["disaggregated"]))
        b.write_text(json.dumps(other))
        assert "model another" in compare_report(load_runs([a, b]))

    def test_no_common_point_one_file_or_not_a_result_file_are_refused(self, tmp_path, files, documents):
        disjoint = dict(
            documents["aggregated"], points=[dict(documents["aggregated"]["points"][0], concurrency=3)]
        )
        path = tmp_path / "disjoint.json"
        path.write_text(json.dumps(disjoint))
        with pytest.raises(OpsError, match="no concurrency in common"):
            compare_report(load_runs([files[0], path]))
        with pytest.raises(OpsError, match="two result files or more"):
            load_runs(files[:1])
        vllm = tmp_path / "vllm.json"
        vllm.write_text(json.dumps({"completed": 1}))  # vLLM's own result file, not ours
        with pytest.raises(OpsError, match="not an `ops bench` result file of format ray-llm-eks-bench/1"):
            load_runs([files[0], vllm])


class TestThePicture:
    def test_throughput_per_gpu_against_ttft_and_itl_one_line_per_run(self, files):
        runs = load_runs(files)
        fig = figure(runs)
        traces = fig["data"]
        assert len(traces) == 4  # two runs x (TTFT, ITL)
        assert {t["name"] for t in traces} == {"A: dev (disaggregated)", "B: aggregated.example (aggregated)"}
        ttft_a, itl_a, ttft_b, itl_b = traces
        assert (ttft_a["xaxis"], itl_a["xaxis"]) == ("x", "x2")
        assert ttft_a["x"] == [340.0, 380.0, 450.0, 900.0] and itl_b["x"] == [64.0, 67.0, 78.0, 100.0]
        assert [round(y, 1) for y in ttft_b["y"]] == [7.5, 25.0, 81.9, 239.8]  # output tokens/s per GPU
        assert ttft_a["text"] == [f"c={c}" for c in SWEEP]
        assert ttft_a["showlegend"] and not itl_a["showlegend"]
        assert fig["layout"]["xaxis"]["title"]["text"] == "TTFT p50 (ms)"
        assert figure(runs, "p99")["layout"]["xaxis2"]["title"]["text"] == "ITL p99 (ms)"

    def test_the_page_is_written_with_both_runs_in_it(self, files, tmp_path, capsys):
        pytest.importorskip("plotly", reason="plotly is a development dependency (requirements-dev.txt)")
        page = tmp_path / "compare.html"
        assert main(["bench", "compare", *map(str, files), "--plot", str(page)]) == 0
        html = page.read_text()
        assert html.startswith("<html>") and "plotly" in html
        assert '"name":"A: dev (disaggregated)"' in html
        assert '"name":"B: aggregated.example (aggregated)"' in html
        assert "<script src=" not in html  # self-contained: opens offline
        assert f"wrote {page}" in capsys.readouterr().err

    def test_without_plotly_the_comparison_still_prints_and_the_picture_says_why(
        self, files, tmp_path, capsys, monkeypatch
    ):
        monkeypatch.setitem(sys.modules, "plotly", None)
        monkeypatch.setitem(sys.modules, "plotly.io", None)
        with pytest.raises(OpsError, match="--plot needs plotly"):
            write_plot(load_runs(files), tmp_path / "x.html")
        assert main(["bench", "compare", *map(str, files), "--plot", str(tmp_path / "x.html")]) == 2
        captured = capsys.readouterr()
        assert "Concurrency 64:" in captured.out and "pip install plotly" in captured.err


def test_the_command_line(files, capsys):
    assert main(["bench", "compare", *map(str, files)]) == 0
    assert "Better (*) per metric" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "compare", "--help"])
    assert exit_.value.code == 0
    assert "--force" in capsys.readouterr().out


def test_the_worked_example_in_the_docs_is_what_compare_prints_for_the_fixtures(files):
    """docs/operations.md quotes rows of `ops bench compare` for the recorded sweeps: each is the line
    the command prints for them, under the same concurrency."""
    from tests.fakes.pulumi import ROOT

    operations = (ROOT / "docs" / "operations.md").read_text()
    example = operations.split("**A worked example, from the recorded fixtures**", 1)[1]
    quoted = example.split("```text\n", 1)[1].split("```", 1)[0]
    report = compare_report(load_runs(files))
    blocks = re.split(r"^Concurrency (\d+):\n", quoted, flags=re.M)[1:]
    assert blocks, "the worked example quotes no concurrency"
    for concurrency, lines in zip(blocks[::2], blocks[1::2], strict=True):
        printed = report.split(f"Concurrency {concurrency}:\n", 1)[1].split("\nConcurrency", 1)[0]
        for line in lines.splitlines():
            assert line in printed.splitlines(), (concurrency, line)


def test_another_tokenizer_and_a_third_run_that_differs_are_refused_too(tmp_path, documents):
    """Issue 53's sweep: every workload key, not only the lengths and rates, and every run against the
    first: token counts under another tokenizer measure other prompts."""
    paths = []
    for name, document in (
        ("a", documents["disaggregated"]),
        ("b", documents["aggregated"]),
        ("c", sweep_document("aggregated", tokenizer="meta-llama/Llama-3.1-8B-Instruct")),
    ):
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(document))
        paths.append(path)
    with pytest.raises(OpsError, match=r"different workloads.*tokenizer: A .+, C meta-llama/Llama-3\.1-8B"):
        compare_report(load_runs(paths))
    assert compare_report(load_runs(paths[:2]))  # A and B alone compare
