"""The cross-machine comparison of two results files (benchmarks.tools.spread) against numbers
worked out by hand, and its generated block."""

import pytest

from benchmarks.report import generated_block
from benchmarks.results.spread import read_spread_csv
from benchmarks.results.tables import spread_table
from benchmarks.tools.spread import machine_spread, write_spread_csv


def _rows(finals, scenario="class"):
    return [dict(dataset="d", scenario=scenario, tasks=2, regime="r", method=m, model="composed", after_task=2,
                 eval_exp="all", accuracy=a, seed=s) for m, accs in finals.items() for s, a in accs.items()]


def test_spread_over_the_seeds_both_machines_ran(tmp_path):
    here = _rows({"tmc": {0: 0.50, 1: 0.52, 2: 0.54}, "soup": {0: 0.40, 1: 0.44}, "joint": {3: 0.9}})
    there = _rows({"tmc": {0: 0.50, 1: 0.52}, "soup": {0: 0.43, 1: 0.42}})
    rows = {r["method"]: r for r in machine_spread(here, there, "here", "there")}
    assert set(rows) == {"tmc", "soup"}  # joint: no seed in common
    assert rows["tmc"]["seeds"] == "0 1" and rows["tmc"]["max_seed_difference"] == 0.0
    assert rows["soup"]["mean_a"] == pytest.approx(0.42) and rows["soup"]["mean_b"] == pytest.approx(0.425)
    assert rows["soup"]["max_seed_difference"] == pytest.approx(0.03)
    path = write_spread_csv(list(rows.values()), tmp_path / "spread.csv")
    table = spread_table(read_spread_csv(path))
    assert "| Soup | 42.0 vs 42.5 (≤ 3.0) |" in table and "on here vs there" in table
    assert generated_block(path) == table


@pytest.mark.parametrize("edit, message", [
    (lambda line: line.replace(",0.42,", ",nan,", 1), "line 3: mean_a is 'nan', not a fraction"),
    (lambda line: line.replace(",0.42,", ",4.2,", 1), "line 3: mean_a is '4.2', not a fraction"),
    (lambda line: line.replace(",0.42,", ",x,", 1), "line 3: mean_a is 'x', not a number"),
])
def test_a_spread_file_with_a_bad_accuracy_is_refused_naming_its_line(tmp_path, edit, message):
    """Issue 42, class 5: the report reads a machine comparison as strictly as a results file."""
    from benchmarks.results.files import ReportFileError

    here = _rows({"tmc": {0: 0.50}, "soup": {0: 0.42}})
    path = write_spread_csv(machine_spread(here, here, "here", "there"), tmp_path / "spread.csv")
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:2] + [edit(lines[2])] + lines[3:]))
    with pytest.raises(ReportFileError, match=message):
        generated_block(path)


def test_a_spread_file_with_a_duplicated_row_is_refused(tmp_path):
    from benchmarks.results.files import ReportFileError

    here = _rows({"tmc": {0: 0.50}})
    path = write_spread_csv(machine_spread(here, here, "here", "there"), tmp_path / "spread.csv")
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines + lines[1:]))
    with pytest.raises(ReportFileError, match="line 3: a duplicate of line 2"):
        generated_block(path)
