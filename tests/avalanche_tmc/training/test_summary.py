"""``summary_table`` / ``plot_stream`` / ``accuracy_matrix`` over hand-built ``strategy.eval``
dictionaries (the numbers are Avalanche's, placed in the right cells), and once over a real
tiny TMC run (the cells equal the run's own metric values)."""

import pytest

import avalanche_tmc
from avalanche_tmc.training.summary import accuracy_matrix, plot_stream, summary_table

E = "Top1_Acc_Exp/eval_phase/test_stream/Task{t:03d}/Exp{e:03d}"
S = "Top1_Acc_Stream/eval_phase/test_stream/Task{t:03d}"


def _class_il():
    """Two evaluations of a 3-experience stream (one task label), with unrelated metrics beside."""
    first = {E.format(t=0, e=0): 0.9, E.format(t=0, e=1): 0.1, E.format(t=0, e=2): 0.0, S.format(t=0): 1 / 3,
             "Loss_Stream/eval_phase/test_stream/Task000": 2.5,
             "Top1_Acc_Exp/eval_phase/valid_stream/Task000/Exp000": 0.5}
    second = {E.format(t=0, e=0): 0.8, E.format(t=0, e=1): 0.95, E.format(t=0, e=2): 0.05, S.format(t=0): 0.6}
    return [first, second]


def test_summary_table_places_each_value_in_its_cell():
    table = summary_table(_class_il())
    assert table.splitlines() == [
        "| after step | exp 0 | exp 1 | exp 2 | stream |",
        "|---|---:|---:|---:|---:|",
        "| 1 | 0.9000 | 0.1000 | 0.0000 | 0.3333 |",
        "| 2 | 0.8000 | 0.9500 | 0.0500 | 0.6000 |",
    ]


def test_labels_digits_one_result_and_missing_values():
    only = {E.format(t=0, e=3): 0.25}  # an evaluation of one experience, no stream metric
    assert summary_table([_class_il()[0], only], steps=["exp 0", "exp 3"], digits=2).splitlines()[2:] == [
        "| exp 0 | 0.90 | 0.10 | 0.00 | – | 0.33 |",
        "| exp 3 | – | – | – | 0.25 | – |",
    ]
    assert summary_table(_class_il()[1]).splitlines()[2] == "| 1 | 0.8000 | 0.9500 | 0.0500 | 0.6000 |"
    with pytest.raises(ValueError, match="2 labels for 1 results"):
        summary_table(only, steps=[0, 1])


def test_task_incremental_streams_get_a_column_per_task():
    result = {E.format(t=0, e=0): 1.0, E.format(t=1, e=1): 0.5, S.format(t=0): 1.0, S.format(t=1): 0.5}
    acc = accuracy_matrix([result])
    assert (acc.experiences, acc.tasks, acc.per_experience, acc.stream) == ([0, 1], [0, 1], [[1.0, 0.5]],
                                                                             [[1.0, 0.5]])
    assert summary_table(result).splitlines()[0] == "| after step | exp 0 | exp 1 | stream, task 0 | stream, task 1 |"


def test_other_streams_and_metrics():
    results = _class_il()
    assert accuracy_matrix(results, stream="valid_stream").per_experience == [[0.5], [None]]
    top5 = {"Top5_Acc_Exp/eval_phase/test_stream/Task000/Exp000": 0.99}
    assert accuracy_matrix(top5, metric="Top5_Acc").per_experience == [[0.99]]


def test_results_without_accuracies_are_refused_saying_what_to_pass():
    with pytest.raises(ValueError, match=r"accuracy_metrics\(experience=True, stream=True\)") as error:
        summary_table([{"Loss_Stream/eval_phase/test_stream/Task000": 2.0}])
    assert "Loss_Stream" in str(error.value)  # the names it found
    with pytest.raises(TypeError, match="strategy.eval"):
        summary_table([[0.5, 0.6]])


def test_plot_stream_writes_the_figure(tmp_path):
    pytest.importorskip("matplotlib")
    path = plot_stream(_class_il(), tmp_path / "accuracy.png", title="digits")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    svg = plot_stream(_class_il(), tmp_path / "accuracy.svg", steps=["a", "b"]).read_text()
    assert "exp 2" in svg and "stream" in svg


def test_public_names():
    assert avalanche_tmc.summary_table is summary_table and avalanche_tmc.plot_stream is plot_stream
    from avalanche_tmc.training.metrics import loss_metrics

    assert avalanche_tmc.loss_metrics is loss_metrics


def test_a_real_run_reads_back_its_own_metrics():
    from tests.helpers import small_benchmark, tmc

    bm = small_benchmark(n_experiences=2)
    strategy = tmc()
    results = []
    for exp in bm.train_stream:
        strategy.train(exp)
        results.append(strategy.eval(bm.test_stream))
    acc = accuracy_matrix(results)
    assert acc.experiences == [0, 1] and acc.tasks == [0]
    for row, streams, result in zip(acc.per_experience, acc.stream, results):
        assert row == [result[E.format(t=0, e=e)] for e in (0, 1)]
        assert streams == [result[S.format(t=0)]]


def test_a_benchmark_without_task_labels_reads_back_its_own_metrics():
    """Avalanche's current generators (class_incremental_benchmark) give no task labels, and
    name the values without ``/TaskTTT``: the same cells, one stream column."""
    from avalanche.benchmarks import class_incremental_benchmark
    from avalanche.benchmarks.utils import as_classification_dataset

    from tests.helpers import tensor_dataset, tmc

    bm = class_incremental_benchmark({"train": as_classification_dataset(tensor_dataset()),
                                      "test": as_classification_dataset(tensor_dataset(16, seed=1))},
                                     num_experiences=2, seed=0)
    strategy = tmc()
    results = []
    for exp in bm.train_stream:
        strategy.train(exp)
        results.append(strategy.eval(bm.test_stream))
    assert not any("/Task" in name for name in results[0])  # the names this case is about
    acc = accuracy_matrix(results)
    assert acc.experiences == [0, 1] and acc.tasks == [None]
    for row, streams, result in zip(acc.per_experience, acc.stream, results):
        assert row == [result[f"Top1_Acc_Exp/eval_phase/test_stream/Exp{e:03d}"] for e in (0, 1)]
        assert streams == [result["Top1_Acc_Stream/eval_phase/test_stream"]]
    assert summary_table(results).splitlines()[0] == "| after step | exp 0 | exp 1 | stream |"


def test_the_documented_example_numbers_steps_as_plot_stream_and_the_runner_do():
    """Issue 52: one step numbering. The usage page's example (run here as written) labels
    its rows 1..n, as ``plot_stream`` and the runner's curves do (step t: after training t
    experiences), with the experiences by their ids (``exp 0``...); it once passed the
    experiences' ids as ``steps``, so its table said 0..n-1 where the plot said 1..n."""
    import re
    from pathlib import Path

    page = (Path(__file__).resolve().parents[3] / "docs" / "usage.md").read_text(encoding="utf-8")
    section = page.split("## Results at a glance", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "docs/usage.md", "exec"), namespace)  # noqa: S102  (the project's own page)
    rows = namespace["table"].splitlines()[2:]
    assert [row.split(" | ")[0] for row in rows] == ["| 1", "| 2"]
    assert namespace["table"].splitlines()[0].startswith("| after step | exp 0 | exp 1 |")
