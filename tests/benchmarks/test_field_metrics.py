"""Issue 59, item 5: the field's metrics (final average accuracy, average incremental accuracy,
forgetting, backward transfer) from a run's rows, against a hand computation."""

import pytest

from benchmarks.results.field_metrics import accuracy_matrices, field_metrics, field_metrics_table
from benchmarks.results.tables import write_markdown

# a[i][j]: accuracy on experience j after training experience i (3 experiences)
A = [[0.90, 0.00, 0.00],
     [0.60, 0.80, 0.00],
     [0.30, 0.50, 0.70]]


def _rows(matrix, method="tmc", seed=0):
    tasks = len(matrix)
    rows = [dict(dataset="d", scenario="class", tasks=tasks, backbone="b", method=method, model="composed",
                 after_task=i + 1, eval_exp=str(j), accuracy=matrix[i][j], train_seconds=1.0, eval_seconds=1.0,
                 regime="r", seed=seed, epochs=5) for i in range(tasks) for j in range(tasks)]
    return rows + [dict(rows[-1], eval_exp="all", accuracy=sum(matrix[-1]) / tasks)]


def test_each_metric_against_the_hand_computation():
    metrics = field_metrics(A)
    assert metrics["final average accuracy"] == pytest.approx((0.30 + 0.50 + 0.70) / 3)
    # seen so far: after 1: 0.90; after 2: (0.60 + 0.80) / 2; after 3: (0.30 + 0.50 + 0.70) / 3
    assert metrics["average incremental accuracy"] == pytest.approx((0.90 + 0.70 + 0.50) / 3)
    # right after training minus at the end, experiences 0 and 1: (0.90 - 0.30 + 0.80 - 0.50) / 2
    assert metrics["forgetting"] == pytest.approx(0.45)
    assert metrics["backward transfer"] == pytest.approx(-0.45)
    assert field_metrics([[0.7]]) == dict(zip(metrics, (0.7, 0.7, 0.0, -0.0)))


def test_matrices_come_from_the_rows_and_incomplete_ones_are_left_out():
    rows = _rows(A) + _rows(A, seed=1)
    joint = [dict(r, method="joint", after_task=3) for r in _rows(A)[-4:]]  # trained once: evaluated after step 3 only
    matrices = accuracy_matrices(rows + joint)
    assert set(matrices) == {(("d", "class", 3, "r"), "tmc", 0), (("d", "class", 3, "r"), "tmc", 1)}
    assert matrices[(("d", "class", 3, "r"), "tmc", 0)] == A


def test_the_report_shows_them_with_their_definitions(tmp_path):
    other = [[0.90, 0.00, 0.00], [0.70, 0.80, 0.00], [0.50, 0.60, 0.70]]  # forgetting 0.3
    rows = _rows(A) + _rows(other, seed=1)
    table = field_metrics_table(rows)
    # A: 50.0 and 60.0; Ā: 70.0 and 75.0; F: 45.0 and 30.0
    assert "| TMC | 55.0 ± 7.1 | 72.5 ± 3.5 | 37.5 ± 10.6 | -37.5 ± 10.6 |" in table
    assert "over 2 seed(s)" in table and "Avalanche's StreamForgetting" in table
    write_markdown(rows, tmp_path / "results.md")
    assert table in (tmp_path / "results.md").read_text(encoding="utf-8")


def test_the_curves_plot_the_accuracy_on_the_experiences_seen_so_far_and_say_their_bands(tmp_path):
    from benchmarks.results.plots import _seen_so_far, plot_accuracy_curves

    rows = _rows(A) + _rows([[0.70, 0.0, 0.0], [0.50, 0.60, 0.0], [0.30, 0.40, 0.50]], seed=1)
    (points,) = _seen_so_far(rows).values()
    # seed 0: 90, 70, 50; seed 1: 70, 55, 40
    assert [(t, round(m, 6)) for t, m, _ in points] == [(1, 80.0), (2, 62.5), (3, 45.0)]
    svg = plot_accuracy_curves(rows, tmp_path / "curves.png", formats=("svg",)).read_text()
    assert "average accuracy, experiences seen" in svg and "Lines: mean over 2 seed(s)" in svg
    assert "bands: ± one standard deviation over the seeds" in svg


def test_results_csv_holds_them_on_each_seeds_final_row(tmp_path):
    """In results.csv (written by the report, as the runner writes it): the four metrics as
    fractions on the composed whole-stream row after the last experience, empty elsewhere."""
    from benchmarks.report import write_report
    from benchmarks.results.files import read_csv

    rows = [dict(r, trained_params=1, lr=0.1, tuned="no", setting="", trained_in="", data_seed=0, arithmetic="avx2",
                 replay_fraction="", loss_rose="", model="composed") for r in _rows(A)]
    write_report(rows, tmp_path, formats=("svg",))
    written = read_csv(tmp_path / "results.csv")
    (final,) = [r for r in written if r["final_average_accuracy"] != ""]
    assert (final["eval_exp"], final["after_task"]) == ("all", 3)
    assert final["final_average_accuracy"] == pytest.approx(0.5) and final["forgetting"] == pytest.approx(0.45)
    assert final["average_incremental_accuracy"] == pytest.approx(0.7)
    assert final["backward_transfer"] == pytest.approx(-0.45)
    assert all(r["forgetting"] == "" for r in written if r is not final)


def test_the_forgetting_curves_follow_avalanches_stream_forgetting_after_each_step(tmp_path):
    """Issue 59, item 5: forgetting in the curves. After step t: the mean over experiences
    j < t of a[j][j] - a[t-1][j] (points), averaged over seeds."""
    from benchmarks.results.plots import _forgetting_so_far, plot_forgetting_curves

    other = [[0.70, 0.0, 0.0], [0.50, 0.60, 0.0], [0.30, 0.40, 0.50]]
    rows = _rows(A) + _rows(other, seed=1)
    (points,) = _forgetting_so_far(rows).values()
    # seed 0: step 2: 0.90-0.60 = 30; step 3: ((0.90-0.30) + (0.80-0.50)) / 2 = 45
    # seed 1: step 2: 0.70-0.50 = 20; step 3: ((0.70-0.30) + (0.60-0.40)) / 2 = 30
    assert [(t, round(m, 6)) for t, m, _ in points] == [(2, 25.0), (3, 37.5)]
    final = (field_metrics(A)["forgetting"] + field_metrics(other)["forgetting"]) / 2
    assert points[-1][1] == pytest.approx(100 * final)
    svg = plot_forgetting_curves(rows, tmp_path / "forgetting.png", formats=("svg",)).read_text()
    assert "StreamForgetting" in svg and "mean over 2 seed(s)" in svg
