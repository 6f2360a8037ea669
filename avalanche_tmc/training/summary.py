"""A stream's accuracies at a glance, from what Avalanche's ``strategy.eval`` returns.

What it is for: the usual Avalanche loop keeps the metrics dictionary of each evaluation::

    results = []
    for experience in benchmark.train_stream:
        strategy.train(experience)
        results.append(strategy.eval(benchmark.test_stream))
    print(summary_table(results))          # markdown: accuracy per experience after each step
    plot_stream(results, "accuracy.png")   # the same as curves (needs matplotlib)

:func:`accuracy_matrix` reads the numbers (``Top1_Acc_Exp/eval_phase/<stream>/TaskTTT/ExpEEE``
and ``Top1_Acc_Stream/eval_phase/<stream>/TaskTTT``, or without ``/TaskTTT`` for a benchmark
without task labels, as ``accuracy_metrics(experience=True,
stream=True)`` logs them: the tangent strategies' default evaluator does); :func:`summary_table`
and :func:`plot_stream` show them. Nothing is computed again: an experience's cell is
Avalanche's value, the stream column Avalanche's (sample-weighted) stream accuracy, one per
task label. The benchmark runner's tables (``benchmarks/report.py``) compare methods across
runs; these helpers show one run.
"""

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Union

__all__ = ["StreamAccuracies", "accuracy_matrix", "summary_table", "plot_stream"]

Results = Union[Mapping[str, float], Sequence[Mapping[str, float]]]


@dataclass
class StreamAccuracies:
    """The accuracies of a stream after each evaluation (row ``i``: the ``i``-th result).

    ``per_experience[i][j]``: accuracy on ``experiences[j]``; ``stream[i][k]``: Avalanche's
    stream accuracy of the samples of task ``tasks[k]`` (``tasks == [None]``: a benchmark
    without task labels, one stream accuracy); None where that evaluation has no value.
    """

    experiences: List[int]
    tasks: List[Optional[int]]
    per_experience: List[List[Optional[float]]]
    stream: List[List[Optional[float]]]


def _as_list(results: Results) -> List[Mapping[str, float]]:
    if isinstance(results, Mapping):
        return [results]
    results = list(results)
    for i, result in enumerate(results):
        if not isinstance(result, Mapping):
            raise TypeError(f"results[{i}] is a {type(result).__name__}: pass the dictionaries strategy.eval(...) "
                            "returns (a list of them, one per evaluation, or one of them).")
    return results


def accuracy_matrix(results: Results, stream: str = "test_stream", metric: str = "Top1_Acc") -> StreamAccuracies:
    """The per-experience and stream accuracies of ``stream`` in ``results`` (a list of
    ``strategy.eval`` dictionaries, or one). ``metric``: the metric's prefix (``Top1_Acc``;
    e.g. ``Top5_Acc`` for ``topk_acc_metrics(top_k=5, ...)``). Raises ``ValueError`` when no
    result has that stream's per-experience values, saying which names it found."""
    results = _as_list(results)
    # Avalanche names a value by its task label when the benchmark has task labels
    # (nc_benchmark, task_incremental_benchmark), and without it when not (class_incremental_benchmark)
    exp_name = re.compile(rf"^{re.escape(metric)}_Exp/eval_phase/{re.escape(stream)}(?:/Task(\d+))?/Exp(\d+)$")
    stream_name = re.compile(rf"^{re.escape(metric)}_Stream/eval_phase/{re.escape(stream)}(?:/Task(\d+))?$")
    per_exp: List[Dict[int, float]] = []
    per_task: List[Dict[Optional[int], float]] = []
    for result in results:
        exps, tasks = {}, {}
        for name, value in result.items():
            found = exp_name.match(name)
            if found:
                exps[int(found.group(2))] = float(value)
            found = stream_name.match(name)
            if found:
                tasks[None if found.group(1) is None else int(found.group(1))] = float(value)
        per_exp.append(exps)
        per_task.append(tasks)
    experiences = sorted(set().union(*per_exp)) if per_exp else []
    if not experiences:
        seen = sorted({name for result in results for name in result})
        raise ValueError(
            f"No {metric}_Exp/eval_phase/{stream}/... values in the {len(results)} result(s) (names found: "
            f"{seen[:6]}{' ...' if len(seen) > 6 else ''}). Pass what strategy.eval(benchmark.{stream}) returns, "
            f"with accuracy_metrics(experience=True, stream=True) in the strategy's evaluator.")
    tasks = sorted(set().union(*per_task), key=lambda t: -1 if t is None else t)
    return StreamAccuracies(experiences, tasks, [[row.get(e) for e in experiences] for row in per_exp],
                            [[row.get(t) for t in tasks] for row in per_task])


def _cell(value: Optional[float], digits: int) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def summary_table(results: Results, stream: str = "test_stream", metric: str = "Top1_Acc",
                  steps: Optional[Sequence[object]] = None, digits: int = 4) -> str:
    """A markdown table of ``stream``'s accuracy per experience (columns) after each
    evaluation (rows), with Avalanche's stream accuracy (a column per task label).

    :param results: the dictionaries ``strategy.eval(...)`` returned, in order (or one).
    :param steps: the rows' labels; default ``1, 2, ...``: step ``t`` is after training ``t``
        experiences, the numbering of :func:`plot_stream` and the benchmark runner's tables
        and plots (the columns name experiences by id, ``exp 0``...).
    :param digits: decimals of the accuracies (fractions in [0, 1]).
    """
    acc = accuracy_matrix(results, stream, metric)
    labels = list(range(1, len(acc.per_experience) + 1)) if steps is None else list(steps)
    if len(labels) != len(acc.per_experience):
        raise ValueError(f"steps has {len(labels)} labels for {len(acc.per_experience)} results.")
    stream_columns = ["stream"] if len(acc.tasks) == 1 else [f"stream, task {t}" for t in acc.tasks]
    header = ["after step", *(f"exp {e}" for e in acc.experiences), *stream_columns]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    for label, row, streams in zip(labels, acc.per_experience, acc.stream):
        cells = [str(label), *(_cell(v, digits) for v in row), *(_cell(v, digits) for v in streams)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot_stream(results: Results, path: Union[str, Path], stream: str = "test_stream", metric: str = "Top1_Acc",
                steps: Optional[Sequence[object]] = None, title: Optional[str] = None) -> Path:
    """Plot ``stream``'s accuracy on each experience (one line each) and its stream accuracy
    (black, one line per task label) against the evaluations, into ``path`` (its suffix gives
    the format: ``.png``, ``.pdf``, ``.svg``); returns the path. The steps are numbered as
    :func:`summary_table`'s rows (``steps``; default ``1, 2, ...``). Needs matplotlib (``pip
    install matplotlib``); no pyplot state is touched."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("plot_stream needs matplotlib: pip install matplotlib (the 'plots' extra; "
                          "summary_table needs nothing).") from None
    acc = accuracy_matrix(results, stream, metric)
    labels = list(range(1, len(acc.per_experience) + 1)) if steps is None else list(steps)
    if len(labels) != len(acc.per_experience):
        raise ValueError(f"steps has {len(labels)} labels for {len(acc.per_experience)} results.")
    x = list(range(len(labels)))
    fig = Figure(figsize=(6.4, 4.0), layout="constrained")
    ax = fig.add_subplot()
    for j, experience in enumerate(acc.experiences):
        ax.plot(x, [row[j] if row[j] is not None else float("nan") for row in acc.per_experience], marker="o",
                label=f"exp {experience}")
    for k, task in enumerate(acc.tasks):
        name = "stream" if len(acc.tasks) == 1 else f"stream, task {task}"
        ax.plot(x, [row[k] if row[k] is not None else float("nan") for row in acc.stream], color="black",
                linestyle="--" if k else "-", linewidth=2, label=name)
    ax.set_xticks(x, [str(label) for label in labels])
    ax.set_xlabel("after step")
    ax.set_ylabel(f"{metric} on {stream}")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small", ncol=2)
    if title:
        ax.set_title(title)
    path = Path(path)
    fig.savefig(path)
    return path
