"""The cross-machine comparison of two results files (benchmarks.machines) against numbers
worked out by hand, and its generated block."""

import pytest

from benchmarks.machines import machine_spread, read_spread_csv, spread_table, write_spread_csv
from benchmarks.report import generated_block


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
