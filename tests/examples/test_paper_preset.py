"""``python -m examples.paper_preset`` as a user runs it: the paper preset runs the authors'
recipe end to end on a generated folder, and the accuracy the example prints is the one in
the runner's results file."""

import csv
import re

import pytest

from tests.helpers import run_example


@pytest.mark.integration
def test_a_paper_preset_runs_on_a_generated_folder(tmp_path):
    out = run_example("-m", "examples.paper_preset", "--workdir", str(tmp_path))
    assert "-m benchmarks.run --preset c-caltech256-5" in out  # the command, printed as a user types it
    assert "linearized from after-stem" in out and "authors transforms" in out  # the preset's recipe
    printed = re.search(r"(\d+) result rows; tmc composed accuracy after task 5: ([0-9.]+)", out)
    assert printed, out
    with open(tmp_path / "results" / "results.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    final = [float(r["accuracy"]) for r in rows if r["method"] == "tmc" and r["model"] == "composed"
             and r["eval_exp"] == "all" and r["after_task"] == "5"]
    assert int(printed[1]) == len(rows) and len(final) == 1
    assert float(printed[2]) == pytest.approx(final[0], abs=5e-5) and 0 <= final[0] <= 1
