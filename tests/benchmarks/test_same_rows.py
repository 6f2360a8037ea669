"""Two machines' rows compared bit for bit (benchmarks.tools.same_rows, issue 58), and whether
a comparison's systematic shift B is distinguishable from 0 (machine_moves.bias_p_value)."""

import math

import pytest

from benchmarks import report
from benchmarks.results.files import read_csv, write_csv
from benchmarks.results.machine_moves import bias_p_value, moves_of
from benchmarks.results.same_rows import read_same_rows, same_rows, same_rows_counts, same_rows_table
from benchmarks.tools import same_rows as same_rows_tool


def _rows(accuracies, method="soup", seeds=(0, 1)):
    """Result rows of one run: after each of 2 experiences, on each experience and the whole stream."""
    rows, values = [], iter(accuracies)
    for seed in seeds:
        for after in (1, 2):
            for stream in ("0", "1", "all"):
                rows.append(dict(dataset="d", scenario="class", tasks=2, backbone="b", method=method, model="composed",
                                 after_task=after, eval_exp=stream, accuracy=next(values), train_seconds=1.0,
                                 eval_seconds=1.0, regime="r", seed=seed, epochs=5))
    return rows


def test_rows_are_equal_only_to_the_last_bit():
    a = _rows([0.1 * i for i in range(12)])
    b = [dict(r) for r in a]
    b[3]["accuracy"] = math.nextafter(b[3]["accuracy"], 1.0)  # one bit off
    b[7]["accuracy"] += 0.05
    (group,) = same_rows(a, b, "A", "B")
    assert (group["rows"], group["equal"], group["seeds"]) == (12, 10, "0 1")
    assert group["max_difference"] == pytest.approx(0.05)
    assert same_rows_counts([group]) == (10, 12)


def test_only_rows_both_files_hold_are_compared():
    a, b = _rows([0.5] * 12), _rows([0.5] * 6, seeds=(1,))
    (group,) = same_rows(a, b + _rows([0.5] * 6, method="der", seeds=(1,)), "A", "B")
    assert (group["method"], group["rows"], group["equal"], group["seeds"]) == ("soup", 6, 6, "1")


def test_the_tool_writes_a_file_the_report_shows_and_exits_1_when_a_row_differs(tmp_path, capsys):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    write_csv(_rows([0.25] * 12), a)
    write_csv(_rows([0.25] * 11 + [0.5]), b)
    out = tmp_path / "same.csv"
    assert same_rows_tool.main([str(a), str(b), "--names", "one", "two", "--out", str(out)]) == 1
    assert read_same_rows(out)[0]["equal"] == 11
    block = report.generated_block(out)
    assert block == same_rows_table(read_same_rows(out)) and "11 of 12 rows equal bit for bit" in block
    assert "11/12 (seeds 0, 1), ≤ 25.0" in block and "one vs two" in block
    write_csv(read_csv(a), b)
    assert same_rows_tool.main([str(a), str(b), "--out", str(tmp_path / "same2.csv")]) == 0


def test_the_tool_refuses_an_out_that_is_an_input_and_files_with_nothing_in_common(tmp_path, capsys):
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    write_csv(_rows([0.25] * 12), a)
    write_csv(_rows([0.25] * 12, method="der"), b)
    for out in (a, tmp_path / "none.csv"):
        with pytest.raises(SystemExit) as stop:
            same_rows_tool.main([str(a), str(b) if out != a else str(a), "--out", str(out)])
        assert stop.value.code == 2
    err = capsys.readouterr().err
    assert "would replace an input" in err and "no row in common: nothing to write" in err
    assert not (tmp_path / "none.csv").exists()


def test_an_edited_file_with_more_equal_rows_than_rows_is_refused(tmp_path):
    a = tmp_path / "a.csv"
    write_csv(_rows([0.25] * 12), a)
    out = tmp_path / "same.csv"
    write_csv(_rows([0.25] * 12), tmp_path / "b.csv")
    same_rows_tool.main([str(a), str(tmp_path / "b.csv"), "--out", str(out)])
    out.write_text(out.read_text().replace(",12,12,", ",12,13,"))
    with pytest.raises(report.ReportFileError, match="13 equal rows of 12"):
        read_same_rows(out)


def test_the_shift_test_follows_the_chi_square_tail():
    """Σ k·D²/σ² is about χ² with one degree of freedom per row when rows do not shift
    together: the Wilson–Hilferty tail against SciPy's, and a clear shift is distinguished."""
    stats = pytest.importorskip("scipy.stats")
    for means, counts, variance in (([0.5, -0.3, 0.1], [5, 5, 5], 1.0), ([1.0] * 18, [5] * 18, 3.0),
                                    ([0.2, 0.1], [20, 20], 2.0)):
        statistic = sum(k * d * d for d, k in zip(means, counts)) / variance
        assert bias_p_value(means, counts, variance) == pytest.approx(stats.chi2.sf(statistic, len(means)), abs=0.01)
    assert bias_p_value([0.0, 0.0], [3, 3], 0.0) is None
    shifted = [dict(method="soup", seeds="0 1 2 3 4", mean_a=0.50, mean_b=0.53, seed_difference_std=0.01),
               dict(method="der", seeds="0 1 2 3 4", mean_a=0.50, mean_b=0.47, seed_difference_std=0.01)]
    assert moves_of(shifted).bias_p < 1e-6 and moves_of(shifted).bias > 2.5
    level = [dict(r, mean_b=r["mean_a"]) for r in shifted]
    assert moves_of(level).bias == 0.0 and moves_of(level).bias_p > 0.5
