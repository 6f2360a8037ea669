"""The premise figures (tangent gap, composition loss, fine-tuning gain) against a hand
computation from per-seed rows, and the premise's status at its thresholds."""

import math

import pytest

from benchmarks.results.intervals import PairedDifference
from benchmarks.results.premise import (
    MET,
    NOT_MET,
    UNRESOLVED,
    map_rows,
    map_table,
    premise_figures,
    premise_status,
    premise_table,
    write_map_csv,
)

T_975_2 = 4.302652729911275  # Student's t, 97.5% quantile, 2 degrees of freedom (tables)


def _rows(finals, scenario="class", regime="from blocks.5", seconds=10.0):
    """Result rows of the final accuracy on the whole test stream, per method and seed."""
    return [dict(dataset="d", scenario=scenario, tasks=5, backbone="b", method=method, model="composed", after_task=5,
                 eval_exp="all", accuracy=acc, seed=seed, regime=regime, train_seconds=seconds, eval_seconds=1.0)
            for method, by_seed in finals.items() for seed, acc in enumerate(by_seed)]


FINALS = {"joint": [0.80, 0.84, 0.82], "joint-tangent": [0.79, 0.80, 0.81], "tmc": [0.50, 0.46, 0.48],
          "tmc-fc": [0.70, 0.70, 0.73]}


def test_the_figures_are_the_paired_differences_of_the_hand_computation():
    (run, figures), = premise_figures(_rows(FINALS)).items()
    assert run == ("d", "class", 5, "from blocks.5")
    for name, (a, b) in {"tangent gap": ("joint", "joint-tangent"), "composition loss": ("joint-tangent", "tmc"),
                         "fine-tuning gain": ("joint", "tmc-fc")}.items():
        d = [x - y for x, y in zip(FINALS[a], FINALS[b])]
        mean = sum(d) / 3
        std = math.sqrt(sum((v - mean) ** 2 for v in d) / 2)
        got = figures[name]
        assert (got.mean, got.std, got.n) == (pytest.approx(mean), pytest.approx(std), 3), name
        assert got.half_width == pytest.approx(T_975_2 * std / math.sqrt(3), rel=1e-4), name  # t from a table
    # tangent gap: differences 0.01, 0.04, 0.01 -> mean 2.0 points
    assert figures["tangent gap"].mean == pytest.approx(0.02)


def _d(mean, half, n=3):
    return PairedDifference(mean / 100, 0.0, half / 100, n)


@pytest.mark.parametrize("gap, gain, expected", [
    (_d(2.0, 0.9), _d(20.0, 5.0), MET),  # gap up to 2.9, gain from 15
    (_d(2.0, 1.0), _d(20.0, 5.0), MET),  # the gap's upper end exactly at 3 counts as within
    (_d(2.0, 1.5), _d(20.0, 5.0), UNRESOLVED),  # the mean within, the interval reaches 3.5
    (_d(2.0, 0.5), _d(6.0, 2.0), UNRESOLVED),  # the gain's interval reaches down to 4
    (_d(3.5, 0.5), _d(20.0, 5.0), NOT_MET),  # the gap's mean beyond 3
    (_d(1.0, 0.5), _d(4.0, 0.5), NOT_MET),  # fine-tuning beyond the head does not pay
    (_d(1.0, math.nan, 1), _d(20.0, math.nan, 1), UNRESOLVED),  # one seed: no interval, never met
])
def test_the_status_reads_the_intervals_against_the_thresholds(gap, gain, expected):
    assert premise_status({"tangent gap": gap, "fine-tuning gain": gain}) == expected


def test_a_run_without_a_figure_s_rows_is_unresolved_and_a_file_without_any_gives_no_table():
    rows = _rows({"joint": [0.8, 0.8, 0.8], "joint-tangent": [0.79, 0.78, 0.8]})
    (figures,) = premise_figures(rows).values()
    assert set(figures) == {"tangent gap"} and premise_status(figures) == UNRESOLVED
    assert premise_table(_rows({"tmc": [0.5, 0.5, 0.5]})) == ""


def test_the_table_and_the_map_show_the_means_the_intervals_and_the_status(tmp_path):
    table = premise_table(_rows(FINALS))
    assert "| C-d (5 tasks, from blocks.5) | 82.0 ± 2.0 | 80.0 ± 1.0 | 48.0 ± 2.0 | 71.0 ± 1.7 |" in table
    half = 100 * T_975_2 * math.sqrt(0.0003) / math.sqrt(3)  # the gap's differences 1, 4, 1 points: std sqrt(3)
    assert f"+2.0 [{2.0 - half:+.1f}, {2.0 + half:+.1f}]" in table and table.rstrip().endswith("not resolved |")
    from benchmarks.report import generated_block
    from benchmarks.results.files import write_csv

    for name in ("32px", "64px"):
        write_csv(_rows(FINALS, seconds=12.0), tmp_path / name / "results.csv")
    rows = map_rows([tmp_path / "32px", tmp_path / "64px"])
    assert [r["input"] for r in rows] == ["32px", "64px"] and rows[0]["seconds_per_seed"] == 48.0  # 4 rows x 12 s
    assert rows[0]["gap"] == 2.0 and rows[0]["gap_high"] == pytest.approx(2.0 + half, abs=0.01)
    assert rows[0]["joint"] == 82.0 and rows[0]["premise"] == "not resolved" and rows[0]["seeds"] == 3
    path = write_map_csv(rows, tmp_path / "map.csv")
    rendered = generated_block(path)  # the README's block, from the file's own kind
    assert rendered == map_table(rows) and rendered.count("| C-d (5 tasks, from blocks.5) | 3 | 82.0 |") == 2
    assert f"| +2.0 [{2.0 - half:+.1f}, {2.0 + half:+.1f}] |" in rendered and "| not resolved | 48 |" in rendered


def test_the_committed_map_is_what_its_folders_give():
    """docs/results/premise-map/map.csv, which the README and docs/premise-map.md render, is
    recomputed from the committed results folders it names: no figure of it by hand."""
    from pathlib import Path

    from benchmarks.results.premise import read_map_csv

    root = Path(__file__).resolve().parents[2] / "docs" / "results" / "premise-map"
    committed = read_map_csv(root / "map.csv")
    folders = list(dict.fromkeys(r["input"] for r in committed))
    again = map_rows([root / name for name in folders])
    assert [{k: str(v) for k, v in r.items()} for r in again] == [
        {k: v for k, v in r.items() if k != "kind"} for r in committed]


def test_the_order_line_says_per_run_whether_the_order_varied_with_the_seed():
    from benchmarks.results.tables import markdown_table

    varied = [dict(r, data_seed=r["seed"]) for r in _rows(FINALS)]
    fixed = [dict(r, data_seed=7, scenario="data") for r in _rows(FINALS)]
    md = markdown_table(varied + fixed)
    assert "- Class order, C-d (5 tasks, from blocks.5): drawn per seed (data seeds 0, 1, 2)" in md
    assert "- Shards, D-d (5 tasks, from blocks.5): the same for every seed (data seed 7)" in md
    both = markdown_table(varied + [dict(r, scenario="data") for r in varied])
    assert "- Class order (class-IL) and shards (data-IL), every run: drawn per seed (data seeds 0, 1, 2)" in both
    assert "Class order, C-d" not in both
    assert "Class order" not in markdown_table(_rows(FINALS))  # a file that does not record data seeds: no line
