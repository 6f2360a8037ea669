"""What a paper preset runs by default and costs (issue 52, item 4): the seeds a verdict
needs, one GPU-hours figure from the tool that computes it, one ``--data-root`` form."""

import re
from pathlib import Path

import pytest

from benchmarks.results.claims import MIN_SEEDS
from benchmarks.results.files import ReportFileError
from benchmarks.results.readme_blocks import generated_block
from benchmarks.runner.arguments import parse_args, resolve_runs
from benchmarks.runner.presets import PAPER_SEEDS, PRESETS
from benchmarks.tools import gpu_hours

ROOT = Path(__file__).resolve().parents[2]
PAPER = [name for name in PRESETS if name[:2] in ("c-", "t-", "d-")]
CSV = ROOT / "docs" / "results" / "pipeline" / "gpu-hours.csv"


def test_paper_presets_run_the_seeds_a_verdict_needs_and_seeds_overrides():
    assert len(PAPER) == 29 and PAPER_SEEDS == (0, 1, 2) and len(PAPER_SEEDS) == MIN_SEEDS
    for name in PAPER:
        assert [run.seeds for run in resolve_runs(parse_args(["--preset", name]))] == [PAPER_SEEDS], name
    assert resolve_runs(parse_args(["--preset", "c-caltech256-10", "--seeds", "1"]))[0].seeds == (0,)
    assert resolve_runs(parse_args(["--preset", "d-mit67-5", "--seed", "4"]))[0].seeds == (4,)


def test_the_committed_gpu_hours_are_what_the_tool_computes_now():
    """The page's table comes from this file; the file is the tool's output at its defaults
    (stale when a preset's rows, epochs or seeds change)."""
    rows = gpu_hours.read_gpu_hours(CSV)
    assert [{k: v for k, v in r.items() if k != "kind"} for r in rows] == gpu_hours.csv_rows(gpu_hours.estimates())
    assert {r["preset"] for r in rows} == set(PAPER) and {r["seeds"] for r in rows} == {str(len(PAPER_SEEDS))}
    total = sum(float(r["hours"]) for r in rows)
    block = generated_block(CSV)
    assert f"{len(PAPER)} presets at their {len(PAPER_SEEDS)} seeds: {total:.0f} GPU-hours" in block
    for row in rows:
        assert float(row["hours"]) == pytest.approx(float(row["hours_per_seed"]) * len(PAPER_SEEDS), abs=0.021)


def test_a_gpu_hours_file_with_a_bad_cell_is_refused(tmp_path):
    path = tmp_path / "gpu-hours.csv"
    gpu_hours.write_gpu_hours(gpu_hours.estimates(presets=["c-mit67-5"]), path)
    assert gpu_hours.read_gpu_hours(path)[0]["preset"] == "c-mit67-5"
    path.write_text(path.read_text(encoding="utf-8").replace(",3,", ",-3,"), encoding="utf-8")
    with pytest.raises(ReportFileError, match="gpu-hours.csv"):
        gpu_hours.read_gpu_hours(path)


def test_the_pages_state_seeds_gpu_hours_and_one_data_root_form():
    page = (ROOT / "docs" / "paper-benchmarks.md").read_text(encoding="utf-8")
    marker = ("<!-- generated from results/pipeline/gpu-hours.csv by: python -m benchmarks.report "
              "docs/results/pipeline/gpu-hours.csv --readme docs/paper-benchmarks.md -->")
    assert marker in page and "3 seeds" in page
    documents = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for doc in documents:
        text = doc.read_text(encoding="utf-8")
        assert "benchmarks.gpu_hours" not in text, doc.name  # the tool is benchmarks.tools.gpu_hours
        for command in re.findall(r"--preset [cdt]-\S+ --data-root \S+", text):  # the folder of the folders
            assert command.endswith("--data-root ~/data"), (doc.name, command)
    assert not (ROOT / "docs" / "results" / "pipeline" / "gpu-hours.md").exists()
