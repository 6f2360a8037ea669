"""Tables and plots from benchmark result rows.

A result row is a dict with the keys in :data:`COLUMNS`. One row is the accuracy of one
model (``"composed"``, or ``"component-<k>"`` evaluated alone) of one method and seed,
after training ``after_task`` experiences, on one test experience (``eval_exp`` ``"0"``,
``"1"``, ...) or on the whole test stream (``eval_exp == "all"``). Rows that share all
keys but ``seed``/``accuracy``/timings are summarised as mean ± sample standard deviation
over seeds; the claims of the paper are judged from paired per-seed differences
(:mod:`benchmarks.verdicts`). A run is a (dataset, scenario, tasks, regime) — the regime
says how much of the network was trained; a results file with several regimes of one
dataset also gets ``regimes.png`` (accuracy vs. how much is trained, one line per method).

``python -m benchmarks.report results/x/results.csv`` re-makes the table and plots next
to the CSV; ``--readme README.md`` (or ``--readme docs/results.md``: any Markdown file)
also rewrites the blocks of that file generated from the CSV (between ``<!-- generated
from PATH by: COMMAND -->`` and ``<!-- end generated -->``; PATH is relative to the Markdown
file, COMMAND the one to run from the repository root). Marker lines count only at the
start of a line outside fenced code (an example quoting them is not a block); every block
generated from the CSV is rewritten; a page whose markers do not pair up (a block that lost
its end marker) is refused before anything is written; the page is written through a
symlink to its target, keeping its mode and line endings.

A results file that is malformed (cut mid-line by a killed write or copy, a row of another
length, a value that is not a number, unknown or missing columns) is refused with
:class:`ReportFileError`; the command prints its one-line message and exits with status 2.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import math
import os
import re
import stat
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from matplotlib import colormaps
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from benchmarks.intervals import mean_std
from benchmarks.methods import joint_methods, method_family, method_names, method_row, method_unit
from benchmarks.verdicts import verdict_table

__all__ = [
    "COLUMNS", "TUNING_COLUMNS", "method_info", "cost_class", "order_methods", "run_key", "list_runs", "run_label",
    "accuracy_index", "final_accuracy", "atomic_path", "write_csv", "read_csv", "write_tuning_csv", "markdown_table",
    "write_markdown", "regime_tables", "plot_accuracy_curves", "component_methods", "plot_components", "plot_regimes",
    "write_report", "accuracy_spread", "seed_count", "readme_block", "read_tuning_csv", "tuning_table",
    "generated_block", "variance_table", "update_readme", "timing_table", "main", "ReportFileError",
    "find_generated_blocks", "incomplete_note",
]

Row = Mapping[str, object]
RunKey = Tuple[str, str, int, str]  # (dataset, scenario, tasks, regime)
PathLike = Union[str, Path]

COLUMNS: Tuple[str, ...] = (
    "dataset", "scenario", "tasks", "backbone", "method", "model",
    "after_task", "eval_exp", "accuracy", "train_seconds", "eval_seconds",
    "regime", "trained_params", "lr", "epochs", "tuned", "setting", "seed", "trained_in",
)
_CONVERTERS: Dict[str, Callable[[str], object]] = {
    "tasks": int, "after_task": int, "accuracy": float, "train_seconds": float, "eval_seconds": float,
    "seed": lambda v: int(v) if v else "",
    "trained_params": lambda v: int(v) if v else "", "epochs": lambda v: int(v) if v else "",
    "lr": lambda v: float(v) if v else "",
}
TUNING_COLUMNS: Tuple[str, ...] = (
    "dataset", "scenario", "tasks", "regime", "family", "lr", "epochs", "validation_accuracy", "chosen", "edge", "rows",
)

COMPOSED = "composed"
COMPONENT_PREFIX = "component-"
ALL = "all"
MISSING = "–"
SCENARIO_PREFIX = {"class": "C", "task": "T", "data": "D"}


class ReportFileError(ValueError):
    """A results file or Markdown page the report refuses to read or rewrite: a malformed
    CSV (cut mid-line, a row of another length, a value that is not a number, unknown or
    missing columns), a page without the block, or with markers that do not pair up. The
    message is one line naming the file (and line) and what to do; ``python -m
    benchmarks.report`` prints it and exits with status 2."""


def method_info(method: str) -> Tuple[str, str, str, bool]:
    """(label, inference/memory cost, replay buffer, trainable in parallel over tasks) of a
    registered method (:mod:`benchmarks.methods`), or ``(method, "?", "?", False)``."""
    row = method_row(method)
    return (method, "?", "?", False) if row is None else (row.label, row.cost, row.replay, row.parallel)


def cost_class(method: str) -> Optional[str]:
    """``"O(1)"`` or ``"O(T)"`` for the methods that compete for bold / italic; else None."""
    if method in joint_methods():
        return None
    cost = method_info(method)[1]
    return next((c for c in ("O(1)", "O(T)") if cost.startswith(c)), None)


def order_methods(methods: Iterable[str]) -> List[str]:
    """Distinct methods in the registry's table order, unknown ones last (first-seen order)."""
    present = list(dict.fromkeys(methods))
    return [m for m in method_names() if m in present] + [m for m in present if m not in method_names()]


def run_key(row: Row) -> RunKey:
    """The run (table column / plot panel) a row belongs to."""
    return (str(row["dataset"]), str(row["scenario"]), int(row["tasks"]),  # type: ignore[arg-type]
            str(row.get("regime", "") or ""))


def list_runs(rows: Iterable[Row]) -> List[RunKey]:
    """Distinct runs in first-seen order."""
    return list(dict.fromkeys(run_key(r) for r in rows))


def run_label(run: RunKey) -> str:
    """Column header such as ``"C-mnist_like_30 (5 tasks, from blocks.6)"``."""
    dataset, scenario, tasks, regime = run
    prefix = SCENARIO_PREFIX.get(scenario, scenario[:1].upper())
    return f"{prefix}-{dataset} ({tasks} tasks{', ' + regime if regime else ''})"


AccuracyIndex = Dict[Tuple[RunKey, str, str, int, str], float]


def accuracy_index(rows: Iterable[Row]) -> AccuracyIndex:
    """``(run, method, model, after_task, eval_exp) -> accuracy``, duplicates averaged."""
    groups: Dict[Tuple[RunKey, str, str, int, str], List[float]] = defaultdict(list)
    for r in rows:
        key = (run_key(r), str(r["method"]), str(r["model"]), int(r["after_task"]), str(r["eval_exp"]))  # type: ignore[arg-type]
        groups[key].append(float(r["accuracy"]))  # type: ignore[arg-type]
    return {k: sum(v) / len(v) for k, v in groups.items()}


def final_accuracy(index: AccuracyIndex, run: RunKey, method: str) -> Optional[float]:
    """Composed model, whole test stream, after the last experience (None if absent)."""
    return index.get((run, method, COMPOSED, run[2], ALL))


SpreadIndex = Dict[Tuple[RunKey, str, str, int, str], Tuple[float, float, int]]


def accuracy_spread(rows: Iterable[Row]) -> SpreadIndex:
    """``(run, method, model, after_task, eval_exp) -> (mean, sample std, seeds)`` over
    the seeds of each cell."""
    groups: Dict[Tuple[RunKey, str, str, int, str], List[float]] = defaultdict(list)
    for r in rows:
        key = (run_key(r), str(r["method"]), str(r["model"]), int(r["after_task"]), str(r["eval_exp"]))  # type: ignore[arg-type]
        groups[key].append(float(r["accuracy"]))  # type: ignore[arg-type]
    return {k: (*mean_std(v), len(v)) for k, v in groups.items()}


def seed_count(rows: Iterable[Row]) -> int:
    """Distinct seeds of ``rows`` (rows without a seed count as one)."""
    return len({r.get("seed", "") for r in rows}) or 1


# ----------------------------------------------------------------------------- CSV


@contextlib.contextmanager
def atomic_path(path: PathLike, mode: int = 0o644):
    """Yield a temporary path next to ``path``; when the block succeeds it is renamed over
    ``path`` (``os.replace``), so a kill or an error never leaves a half-written file.
    The file gets permissions ``mode`` (results files are ordinary files: ``0o644``)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    os.chmod(tmp, mode)  # mkstemp makes it private
    try:
        yield Path(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def _write_dict_csv(rows: Iterable[Row], path: PathLike, columns: Sequence[str]) -> Path:
    path = Path(path)
    with atomic_path(path) as tmp, tmp.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


def write_csv(rows: Iterable[Row], path: PathLike) -> Path:
    """Write ``rows`` with the columns of :data:`COLUMNS` (others are ignored), atomically."""
    return _write_dict_csv(rows, path, COLUMNS)


_REQUIRED = COLUMNS[:COLUMNS.index("regime")]
"""The columns every results file has (those after them were added later: files written
before a column existed read it as empty)."""
_NOT_EMPTY = ("dataset", "scenario", "method", "model", "eval_exp")


def _read_table(path: PathLike, known: Optional[Sequence[str]] = None,
                required: Sequence[str] = ()) -> Tuple[List[str], List[Tuple[int, Dict[str, str]]]]:
    """The header and ``(line number, {column: value})`` of each row of the CSV ``path``;
    :class:`ReportFileError` when it is malformed: empty, cut mid-line (its last line has
    no line end), a row whose field count is not the header's, a header with empty or
    repeated names, names outside ``known`` or lacking one of ``required``."""
    with Path(path).open(newline="", encoding="utf-8") as f:
        data = f.read()
    if not data.strip():
        raise ReportFileError(f"{path}: the file is empty (no header, no rows): restore it or run the benchmark again.")
    if not data.endswith("\n"):
        line = data.count("\n") + 1
        raise ReportFileError(f"{path}, line {line}: the file ends inside a row (no line end after it): it was cut "
                              "(a killed write or copy); restore it from a complete copy or run the benchmark again.")
    reader = csv.reader(io.StringIO(data, newline=""))
    try:
        header = next(reader)
        records = [(reader.line_num, record) for record in reader if record]
    except csv.Error as e:
        raise ReportFileError(f"{path}, line {reader.line_num}: not a CSV file ({e}).") from None
    if any(not name for name in header) or len(set(header)) != len(header):
        raise ReportFileError(f"{path}, line 1: the header has empty or repeated column names: {header}.")
    unknown = [c for c in header if known is not None and c not in known]
    if unknown:
        raise ReportFileError(f"{path}, line 1: unknown column(s) {unknown} (known: {list(known or ())}): not a "
                              "results file of this version, or its header was edited.")
    missing = [c for c in required if c not in header]
    if missing:
        raise ReportFileError(f"{path}, line 1: the header lacks the column(s) {missing}: not a results file, or "
                              "its header was edited.")
    rows = []
    for line, record in records:
        if len(record) != len(header):
            raise ReportFileError(f"{path}, line {line}: {len(record)} fields, the header has {len(header)}: a cut "
                                  "or edited row; restore the file or run the benchmark again.")
        rows.append((line, dict(zip(header, record))))
    return header, rows


def read_csv(path: PathLike) -> List[Dict[str, object]]:
    """Rows written by :func:`write_csv`, with int / float columns restored.
    :class:`ReportFileError` for a malformed file (see :func:`_read_table`), an empty key
    column, or a value that is not a number."""
    _, records = _read_table(path, known=COLUMNS, required=_REQUIRED)
    rows = []
    for line, raw in records:
        row: Dict[str, object] = {}
        for c in COLUMNS:
            value = raw.get(c) or ""
            if c in _NOT_EMPTY and not value:
                raise ReportFileError(f"{path}, line {line}: {c} is empty: a cut or edited row.")
            try:
                row[c] = _CONVERTERS.get(c, str)(value)
            except ValueError:
                raise ReportFileError(f"{path}, line {line}: {c} is {value!r}, not a number: a cut or edited "
                                      "row.") from None
        rows.append(row)
    return rows


def write_tuning_csv(trials: Iterable[Row], path: PathLike) -> Path:
    """Write tuning trials (:data:`TUNING_COLUMNS`, see :mod:`benchmarks.tuning`), atomically."""
    return _write_dict_csv(trials, path, TUNING_COLUMNS)


# ------------------------------------------------------------------------ Markdown


def _md_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _emphasis(index: AccuracyIndex, runs: Sequence[RunKey], methods: Sequence[str]) -> Dict[Tuple[RunKey, str], str]:
    """``**`` for the best O(1) method and ``*`` for the best O(T) method of each run (ties all marked)."""
    marks: Dict[Tuple[RunKey, str], str] = {}
    for run in runs:
        for cost, mark in (("O(1)", "**"), ("O(T)", "*")):
            scores = {m: final_accuracy(index, run, m) for m in methods if cost_class(m) == cost}
            scores = {m: v for m, v in scores.items() if v is not None}
            if scores:
                best = max(scores.values())
                marks.update({(run, m): mark for m, v in scores.items() if v == best})
    return marks


def _percent(cell: Tuple[float, float, int], seeds: int = 1) -> str:
    """An accuracy cell in %: ``"81.23"`` for one seed, ``"81.2 ± 1.4"`` (mean ± sample
    standard deviation) for several; a cell from fewer than the table's ``seeds`` says
    from how many (``"81.2 ± 1.4 (2 seeds)"``, ``"81.23 (1 seed)"``)."""
    mean, std, n = cell
    text = f"{100 * mean:.1f} ± {100 * std:.1f}" if n > 1 else f"{100 * mean:.2f}"
    return text + (f" ({n} seed{'s' if n > 1 else ''})" if n < seeds else "")


def markdown_table(rows: Sequence[Row]) -> str:
    """The paper's table: final accuracy (%) per method and run, plus cost columns and notes."""
    runs = list_runs(rows)
    methods = order_methods(str(r["method"]) for r in rows)
    index = accuracy_index(rows)
    spread = accuracy_spread(rows)
    marks = _emphasis(index, runs, methods)
    seeds = seed_count(rows)

    lines = [
        _md_row(["Method", *map(run_label, runs), "Inference/Memory", "Replay buffer", "Parallel tasks"]),
        _md_row(["---", *["---:"] * len(runs), "---", "---", "---"]),
    ]
    for method in methods:
        name, cost, buffer, parallel = method_info(method)
        cells = []
        for run in runs:
            cell = spread.get((run, method, COMPOSED, run[2], ALL))
            mark = marks.get((run, method), "")
            cells.append(MISSING if cell is None else f"{mark}{_percent(cell, seeds)}{mark}")
        lines.append(_md_row([name, *cells, cost, buffer, "yes" if parallel else "no"]))

    backbones = ", ".join(dict.fromkeys(str(r["backbone"]) for r in rows))
    fewer = any(n < seeds for (run, _, model, after, exp), (_, _, n) in spread.items()
                if (model, after, exp) == (COMPOSED, run[2], ALL))
    lines += [
        "",
        "Final accuracy (%) on the whole test stream after the last experience"
        + (f", mean ± sample standard deviation over {seeds} seeds" if seeds > 1 else "")
        + (" (a cell from fewer seeds says how many: a run is missing)" if fewer else "") + f"; backbone: {backbones}. "
        "**Bold**: best single-model (O(1)) method per column (by the mean), joint paragons excluded; *italic*: best "
        "O(T) method" + (" (the verdicts below say which differences the seeds resolve)." if seeds > 1 else "."),
    ]
    for run in runs:
        paragons = [(m, spread.get((run, m, COMPOSED, run[2], ALL))) for m in methods if m in joint_methods()]
        parts = [f"{method_info(m)[0]} {_percent(cell, seeds)}" for m, cell in paragons if cell is not None]
        if parts:
            lines.append(f"- Paragon, {run_label(run)}: " + ", ".join(parts))
    lines += _reuse_lines(rows, runs)
    lines += _settings_lines(rows, runs)
    return "\n".join(lines) + "\n"


def _reuse_lines(rows: Sequence[Row], runs: Sequence[RunKey]) -> List[str]:
    """One line per run whose rows were evaluated from another scenario's training, naming
    the rows trained for the run itself (their training reads task labels)."""
    lines = []
    for run in runs:
        in_run = [r for r in rows if run_key(r) == run and r["model"] == COMPOSED]
        sources = {str(r["trained_in"]) for r in in_run if r.get("trained_in")}
        own = order_methods({str(r["method"]) for r in in_run if not r.get("trained_in")})
        for source in sorted(sources):
            other = run_label((run[0], source, run[2], run[3]))
            lines.append(f"- {run_label(run)}: the rows are {other}'s training, evaluated with each test sample's "
                         "prediction restricted to the classes of its task (the task label is known at test time; "
                         "those methods do not read it to train, so training again with task labels gives the same "
                         "models)" + (f", except {', '.join(method_info(m)[0] for m in own)}, whose training reads "
                                      "task labels: trained on this split" if own else ""))
    return lines


def _settings_lines(rows: Sequence[Row], runs: Sequence[RunKey]) -> List[str]:
    """One line per run: the learning rate and epochs each tuning unit (a family, or a
    method tuned for itself) trained with."""
    lines = []
    for run in runs:
        used: Dict[str, Tuple[object, object]] = {}
        tuned = "no"
        for r in rows:
            unit = method_unit(str(r["method"])) if method_family(str(r["method"])) != "training-free" else None
            if run_key(r) == run and r.get("lr", "") != "" and unit is not None:
                used.setdefault(unit, (r["lr"], r["epochs"]))
                tuned = str(r.get("tuned") or "no")
        for method in order_methods(str(r["method"]) for r in rows if run_key(r) == run and r.get("setting")):
            setting = next(r["setting"] for r in rows
                           if run_key(r) == run and r["method"] == method and r.get("setting"))
            lines.append(f"- {method_info(method)[0]}, {run_label(run)}: {setting}")
        if used:
            how = ("chosen on a validation split of the training data, see tuning.csv" if tuned == "yes" else
                   "set by the run" if tuned == "no" else
                   f"chosen on a validation split of the training data by {tuned}")
            lines.append(f"- Learning rate / epochs per experience, {run_label(run)}: "
                         + ", ".join(f"{f} {lr:g} / {ep}" for f, (lr, ep) in used.items()) + f" ({how})")
    return lines


def regime_tables(rows: Sequence[Row]) -> str:
    """For each dataset and scenario run in several regimes: final accuracy (%) per method
    (rows) and regime (columns, fewest trained parameters first), and the best method of
    the library (a ``shipped`` row) against joint fine-tuning. Empty when no dataset has two regimes."""
    index = accuracy_index(rows)
    parts = []
    for (dataset, scenario, tasks), runs in _regime_panels(rows).items():
        methods = order_methods(str(r["method"]) for r in rows if run_key(r) in {run for run, _ in runs})
        lines = [f"{run_label((dataset, scenario, tasks, ''))}: final accuracy (%) by trained part", "",
                 _md_row(["Method", *(f"{run[3]} ({size / 1e6:.2g} M)" for run, size in runs)]),
                 _md_row(["---", *["---:"] * len(runs)])]
        for method in methods:
            cells = [final_accuracy(index, run, method) for run, _ in runs]
            values = (MISSING if a is None else f"{100 * a:.2f}" for a in cells)
            lines.append(_md_row([method_info(method)[0], *values]))
        best = []
        for run, _ in runs:
            scores = {m: final_accuracy(index, run, m) for m in methods
                      if m not in joint_methods() and getattr(method_row(m), "shipped", False)}
            scores = {m: v for m, v in scores.items() if v is not None}
            joint = final_accuracy(index, run, "joint")
            if scores and joint is not None:
                top = max(scores, key=scores.get)
                best.append(f"{run[3]}: {method_info(top)[0]} {100 * scores[top]:.2f} vs joint {100 * joint:.2f} "
                            f"({100 * (scores[top] - joint):+.2f})")
        versus = ["", "Best avalanche-tmc method vs joint fine-tuning: " + "; ".join(best)] if best else []
        parts.append("\n".join(lines + versus))
    return "\n\n".join(parts) + ("\n" if parts else "")


def timing_table(rows: Sequence[Row]) -> str:
    """Seconds each method took per seed (training; evaluation after every experience),
    mean over seeds, one column per run. Rows that share a training (TMC and TME, the
    Soup/Ens rows) show the same training time."""
    runs = list_runs(rows)
    methods = order_methods(str(r["method"]) for r in rows)
    train: Dict[Tuple[RunKey, str], Dict[object, float]] = defaultdict(dict)
    evals: Dict[Tuple[RunKey, str], Dict[object, float]] = defaultdict(dict)
    reused: Dict[Tuple[RunKey, str], str] = {}
    for r in rows:
        if r["model"] != COMPOSED or r["eval_exp"] != ALL:
            continue
        key, seed = (run_key(r), str(r["method"])), r.get("seed", "")
        train[key][seed] = max(train[key].get(seed, 0.0), float(r["train_seconds"]))  # type: ignore[arg-type]
        evals[key][seed] = evals[key].get(seed, 0.0) + float(r["eval_seconds"])  # type: ignore[arg-type]
        if r.get("trained_in"):
            reused[key] = str(r["trained_in"])
    lines = [_md_row(["Method", *map(run_label, runs)]), _md_row(["---", *["---:"] * len(runs)])]
    for method in methods:
        cells = []
        for run in runs:
            t, e = train.get((run, method)), evals.get((run, method))
            trained = (f"{SCENARIO_PREFIX.get(reused[(run, method)], '?')}-IL's" if (run, method) in reused else
                       f"{sum(t.values()) / len(t):.0f}" if t else "")  # type: ignore[union-attr]
            cells.append(MISSING if not t else f"{trained} / {sum(e.values()) / len(e):.0f}")  # type: ignore[union-attr]
        lines.append(_md_row([method_info(method)[0], *cells]))
    note = (" A cell \"C-IL's\" reuses the class-IL column's training (its seconds are there): only the evaluation "
            "is this column's." if reused else "")
    return ("Seconds per seed, training / evaluation (mean over seeds; one process and thread each)." + note + "\n\n"
            + "\n".join(lines) + "\n")


def incomplete_note(missing: Sequence[str]) -> str:
    """The line that heads the report of an unfinished invocation: the planned runs it lacks."""
    return (f"**Incomplete: {len(missing)} planned run(s) missing: {', '.join(missing)}.** Their results are in "
            "neither this report nor results.csv (the runner was stopped or is still going; the same command "
            "resumes it; status.json lists the runs).\n")


def write_markdown(rows: Sequence[Row], path: PathLike, missing: Sequence[str] = ()) -> Path:
    """Write :func:`markdown_table` (with the verdicts, regime and timing tables) to
    ``path``, headed by :func:`incomplete_note` when planned runs are ``missing``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    regimes = regime_tables(rows)
    verdicts = verdict_table(rows, run_label)
    with atomic_path(path) as tmp:
        tmp.write_text((incomplete_note(missing) + "\n" if missing else "")
                       + markdown_table(rows) + ("\n" + verdicts if verdicts else "")
                       + ("\n" + regimes if regimes else "") + "\n" + timing_table(rows), encoding="utf-8")
    return path


# --------------------------------------------------------------------------- plots


def _panels(n: int, ncols: int, panel_size: Tuple[float, float]) -> Tuple[Figure, List[Axes]]:
    """An Agg figure with ``n`` axes on a grid of ``ncols`` columns (extra axes hidden)."""
    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols)
    fig = Figure(figsize=(panel_size[0] * ncols, panel_size[1] * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = list(fig.subplots(nrows, ncols, squeeze=False).flat)
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def _method_colors(rows: Sequence[Row]) -> Tuple[List[str], Dict[str, object]]:
    """The methods of ``rows`` in table order, and one colour each."""
    methods = order_methods(str(r["method"]) for r in rows)
    cmap = colormaps["tab20"]
    return methods, {m: cmap(i % cmap.N) for i, m in enumerate(methods)}


def _save_with_legend(fig: Figure, path: PathLike, methods: Sequence[str], handles: Dict[str, Line2D]) -> Path:
    shown = [m for m in methods if m in handles]
    fig.legend([handles[m] for m in shown], [method_info(m)[0] for m in shown], loc="outside right upper", fontsize=8)
    return _save(fig, path)


def _save(fig: Figure, path: PathLike) -> Path:
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    return path


def plot_accuracy_curves(rows: Sequence[Row], path: PathLike) -> Optional[Path]:
    """Accuracy on the whole test stream vs. experiences trained, one panel per run: the
    mean over seeds, with a band of ± one standard deviation when there are several.

    Joint paragons (trained once on all data) are a dashed horizontal line with a star at
    ``T``. Returns the PNG path, or None when there are no rows.
    """
    runs = list_runs(rows)
    if not runs:
        return None
    methods, colors = _method_colors(rows)
    spread = accuracy_spread(rows)

    fig, axes = _panels(len(runs), ncols=3, panel_size=(4.5, 3.5))
    handles: Dict[str, Line2D] = {}
    for ax, run in zip(axes, runs):
        for method in methods:
            points = sorted(
                (t, 100 * mean, 100 * std) for (r, m, model, t, e), (mean, std, _) in spread.items()
                if (r, m, model, e) == (run, method, COMPOSED, ALL)
            )
            if not points:
                continue
            xs, ys, stds = zip(*points)
            label, color = method_info(method)[0], colors[method]
            if method in joint_methods():
                ax.axhline(ys[-1], color=color, linestyle="--", linewidth=1)
                (line,) = ax.plot(xs[-1:], ys[-1:], marker="*", markersize=10, color=color, linestyle="--", label=label)
                if stds[-1] > 0:
                    ax.axhspan(ys[-1] - stds[-1], ys[-1] + stds[-1], color=color, alpha=0.08, linewidth=0)
            else:
                (line,) = ax.plot(xs, ys, marker="o", markersize=3, color=color, label=label)
                if any(stds):  # mean ± std over seeds
                    ax.fill_between(xs, [y - d for y, d in zip(ys, stds)], [y + d for y, d in zip(ys, stds)],
                                    color=color, alpha=0.15, linewidth=0)
            handles.setdefault(method, line)
        ax.set_title(run_label(run), fontsize=10)
        ax.set_xlabel("experiences trained")
        ax.set_ylabel("accuracy, all test data (%)")
        ax.set_xticks(range(1, run[2] + 1))
        ax.grid(alpha=0.3)
    return _save_with_legend(fig, path, methods, handles)


def _component_models(rows: Iterable[Row], run: RunKey, method: str) -> List[str]:
    """``component-<k>`` models of ``method`` in ``run``, sorted by k."""
    models = {
        str(r["model"]) for r in rows
        if r["method"] == method and run_key(r) == run and str(r["model"]).startswith(COMPONENT_PREFIX)
    }
    return sorted(models, key=_component_number)


def _component_number(model: str) -> float:
    """k of ``component-<k>`` (inf when k is not a number, so such names sort last)."""
    suffix = model[len(COMPONENT_PREFIX):]
    return int(suffix) if suffix.isdigit() else math.inf


def component_methods(rows: Iterable[Row]) -> List[str]:
    """Methods that have rows for components evaluated alone."""
    return order_methods(str(r["method"]) for r in rows if str(r["model"]).startswith(COMPONENT_PREFIX))


def plot_components(rows: Sequence[Row], path: PathLike, method: str = "tmc") -> Optional[Path]:
    """Heatmap of per-test-experience accuracy of each component alone vs. the composed model.

    One panel per run that has component rows of ``method``; rows of the heatmap are
    ``component 0..K-1`` then ``composed``, columns test experiences ``0..T-1``, all after
    the last experience. Returns the PNG path, or None (nothing written) without component rows.
    """
    runs = [(run, models) for run in list_runs(rows) if (models := _component_models(rows, run, method))]
    if not runs:
        return None
    index = accuracy_index(rows)
    max_tasks = max(run[2] for run, _ in runs)
    max_models = max(len(models) for _, models in runs) + 1
    fig, axes = _panels(len(runs), ncols=1, panel_size=(2.5 + 0.6 * max_tasks, 1.2 + 0.35 * max_models))
    name = method_info(method)[0]
    for ax, (run, models) in zip(axes, runs):
        tasks = run[2]
        labels = [m.replace("-", " ") for m in models] + [COMPOSED]
        grid = [
            [100 * index.get((run, method, model, tasks, str(e)), math.nan) for e in range(tasks)]
            for model in models + [COMPOSED]
        ]
        image = ax.imshow(grid, vmin=0, vmax=100, cmap="viridis", aspect="auto")
        for i, row in enumerate(grid):
            for j, value in enumerate(row):
                if not math.isnan(value):
                    ax.text(j, i, f"{value:.0f}", ha="center", va="center", fontsize=7,
                            color="white" if value < 60 else "black")
        ax.axhline(len(models) - 0.5, color="white", linewidth=2)
        ax.set_xticks(range(tasks), [str(e) for e in range(tasks)])
        ax.set_yticks(range(len(labels)), labels, fontsize=8)
        ax.set_xlabel("test experience")
        ax.set_title(f"{name}: components alone vs composed, {run_label(run)}", fontsize=10)
        fig.colorbar(image, ax=ax, label="accuracy (%)")
    return _save(fig, path)


def _regime_panels(rows: Sequence[Row]) -> Dict[Tuple[str, str, int], List[Tuple[RunKey, float]]]:
    """(dataset, scenario, tasks) -> its runs with their trained parameter counts, for
    those run in two or more regimes, fewest trained parameters first."""
    sizes: Dict[RunKey, float] = {}
    for r in rows:
        if r.get("trained_params", "") != "":
            sizes.setdefault(run_key(r), float(r["trained_params"]))  # type: ignore[arg-type]
    panels: Dict[Tuple[str, str, int], List[Tuple[RunKey, float]]] = defaultdict(list)
    for run, size in sizes.items():
        panels[run[:3]].append((run, size))
    return {k: sorted(v, key=lambda item: item[1]) for k, v in panels.items() if len(v) > 1}


def plot_regimes(rows: Sequence[Row], path: PathLike) -> Optional[Path]:
    """Final accuracy vs. how much of the network is trained (log scale of trained
    parameters, ticks named by regime), one line per method, one panel per dataset and
    scenario run in two or more regimes. Returns the PNG path, or None."""
    panels = _regime_panels(rows)
    if not panels:
        return None
    methods, colors = _method_colors(rows)
    index = accuracy_index(rows)
    fig, axes = _panels(len(panels), ncols=2, panel_size=(5.5, 4.0))
    handles: Dict[str, Line2D] = {}
    for ax, ((dataset, scenario, tasks), runs) in zip(axes, panels.items()):
        for method in methods:
            points = [(size, final_accuracy(index, run, method)) for run, size in runs]
            points = [(x, 100 * y) for x, y in points if y is not None]
            if points:
                xs, ys = zip(*points)
                style = "--" if method in joint_methods() else "-"
                (line,) = ax.plot(xs, ys, marker="o", markersize=4, linestyle=style, color=colors[method])
                handles.setdefault(method, line)
        ax.set_xscale("log")
        ax.set_xticks([size for _, size in runs], [f"{run[3]}\n{size / 1e6:.2g} M" for run, size in runs], fontsize=7)
        ax.minorticks_off()
        ax.set_title(run_label((dataset, scenario, tasks, "")), fontsize=10)
        ax.set_xlabel("trained part of the network (parameters)")
        ax.set_ylabel("final accuracy, all test data (%)")
        ax.grid(alpha=0.3)
    return _save_with_legend(fig, path, methods, handles)


# -------------------------------------------------------------------------- report


def write_report(rows: Sequence[Row], out_dir: PathLike, include_csv: bool = True,
                 missing: Sequence[str] = ()) -> Dict[str, Path]:
    """Write results.csv (unless ``include_csv`` is False), results.md, accuracy_curves.png
    regimes.png (when a dataset was run in several regimes) and components_<method>.png
    for every method with component rows; return the paths keyed ``csv``, ``markdown``,
    ``curves``, ``regimes``, ``components_<method>``. ``missing``: the planned runs not
    finished yet (the runner's :mod:`benchmarks.outdir`), named at the top of results.md."""
    out = Path(out_dir)
    paths: Dict[str, Optional[Path]] = {}
    if include_csv:
        paths["csv"] = write_csv(rows, out / "results.csv")
    paths["markdown"] = write_markdown(rows, out / "results.md", missing)
    paths["curves"] = plot_accuracy_curves(rows, out / "accuracy_curves.png")
    paths["regimes"] = plot_regimes(rows, out / "regimes.png")
    for method in component_methods(rows):
        paths[f"components_{method}"] = plot_components(rows, out / f"components_{method}.png", method)
    return {k: p for k, p in paths.items() if p is not None}


GENERATED_END = "<!-- end generated -->"


def _generated_prefix(csv_path: str) -> str:
    return f"<!-- generated from {csv_path} by: "


def _generated_begin(csv_path: str, command: Optional[str] = None) -> str:
    command = command or f"python -m benchmarks.report {csv_path} --readme README.md"
    return f"{_generated_prefix(csv_path)}{command} -->"


def readme_block(rows: Sequence[Row]) -> str:
    """What README.md shows of a results file: the table and the verdicts."""
    verdicts = verdict_table(rows, run_label)
    return markdown_table(rows) + ("\n" + verdicts if verdicts else "")


def read_tuning_csv(path: PathLike) -> List[Dict[str, str]]:
    """Trials written by :func:`write_tuning_csv` (as strings); :class:`ReportFileError`
    for a malformed file (cut mid-line, a row of another length)."""
    return [row for _, row in _read_table(path)[1]]


def tuning_table(trials: Sequence[Row]) -> str:
    """The chosen learning rate and epochs of each tuning unit per run, with its validation
    accuracy, the best and worst trial of the unit, and whether the choice is on the edge
    of the grid."""
    lines = [_md_row(["Run", "Unit", "Learning rate", "Epochs", "Validation", "Unit's trials (worst–best)",
                      "On the grid's edge"]), _md_row(["---", "---", "---:", "---:", "---:", "---", "---"])]
    for t in trials:
        if t["chosen"] != "yes":
            continue
        run = (str(t["dataset"]), str(t["scenario"]), int(t["tasks"]), str(t["regime"]))  # type: ignore[arg-type]
        scores = [float(u["validation_accuracy"]) for u in trials  # type: ignore[arg-type]
                  if (u["dataset"], u["scenario"], u["regime"], u["family"]) ==
                  (t["dataset"], t["scenario"], t["regime"], t["family"])]
        lines.append(_md_row([run_label(run), str(t["family"]), f"{float(t['lr']):g}", str(t["epochs"]),  # type: ignore[arg-type]
                              f"{100 * float(t['validation_accuracy']):.1f}",  # type: ignore[arg-type]
                              f"{100 * min(scores):.1f}–{100 * max(scores):.1f} ({len(scores)})",
                              str(t.get("edge") or "no")]))
    return "\n".join(lines) + "\n"


def variance_table(rows: Sequence[Row]) -> str:
    """The spread of each method's final accuracy over seeds (points) when one source of
    randomness varies at a time (``experiments/variance.py``'s ``variance.csv``)."""
    methods = list(dict.fromkeys(str(r["method"]) for r in rows))
    protocols = list(dict.fromkeys(str(r["protocol"]) for r in rows))
    lines = [_md_row(["Varied (others fixed)", *(method_info(m)[0] for m in methods)]),
             _md_row(["---", *["---:"] * len(methods)])]
    for protocol in protocols:
        cells = []
        for method in methods:
            values = [float(r["accuracy"]) for r in rows  # type: ignore[arg-type]
                      if r["protocol"] == protocol and r["method"] == method]
            cells.append(f"{100 * mean_std(values)[1]:.1f}" if values else MISSING)
        lines.append(_md_row([protocol, *cells]))
    seeds = len({r["seed"] for r in rows})
    return ("Sample standard deviation of the final accuracy (points) over "
            f"{seeds} seeds, one source of randomness varied at a time:\n\n" + "\n".join(lines) + "\n")


def generated_block(path: PathLike) -> str:
    """What README.md shows of a committed file: :func:`readme_block` of a results CSV,
    :func:`tuning_table` of a tuning CSV, :func:`variance_table` of a variance CSV or
    :func:`benchmarks.machines.spread_table` of a machine comparison."""
    header = _header(path)
    if "machine_a" in header:
        from benchmarks.machines import read_spread_csv, spread_table

        return spread_table(read_spread_csv(Path(path)))
    if "validation_accuracy" in header:
        return tuning_table(read_tuning_csv(path))
    if header.startswith("protocol,"):
        return variance_table(read_tuning_csv(path))
    return readme_block(read_csv(path))


def _header(path: PathLike) -> str:
    with Path(path).open(newline="", encoding="utf-8") as f:
        return f.readline()


_BEGIN_PREFIX = "<!-- generated from "
_BEGIN = re.compile(r"<!-- generated from (.+?) by: (.+) -->")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")


def _lines(text: str) -> List[str]:
    """``text`` split after each ``\\n`` (line ends kept, ``\\r\\n`` included)."""
    return re.findall(r"[^\n]*\n|[^\n]+$", text)


def find_generated_blocks(text: str, where: str = "the page") -> List[Tuple[int, int, str, str]]:
    """``(begin line, end line, PATH, COMMAND)`` (0-based line indices) of every generated
    block of the Markdown ``text``. Markers count at the start of a line outside fenced
    code (CommonMark fences of 3 or more backticks or tildes, as ``tests/doc_pages.py``
    reads them): an example that quotes them is not a block.
    :class:`ReportFileError` (naming ``where`` and the line) when the markers do not pair
    up: a block without its end marker (before the next block or the end of the page),
    an end marker without a block, or a begin marker of another form."""
    blocks: List[Tuple[int, int, str, str]] = []
    fence: Optional[str] = None
    opened: Optional[Tuple[int, str, str]] = None
    for number, raw in enumerate(_lines(text)):
        line = raw.rstrip("\n").rstrip("\r")
        if fence is None:
            match = _FENCE.fullmatch(line)
            if match and not (match.group(1)[0] == "`" and "`" in match.group(2)):
                fence = match.group(1)  # (a backtick fence's info string has no backtick: else inline code)
                continue
        else:
            if re.fullmatch(re.escape(fence[0]) + "{%d,}" % len(fence), line.strip()):
                fence = None  # the closing fence: the same character, at least as long, alone on its line
            continue
        if line.startswith(_BEGIN_PREFIX):
            begin = _BEGIN.fullmatch(line)
            if begin is None:
                raise ReportFileError(f"{where}, line {number + 1}: a generated-block marker of an unknown form "
                                      f"({line!r}); write {_generated_begin('PATH', 'COMMAND')!r}.")
            if opened is not None:
                raise ReportFileError(_no_end(where, opened, f"the next block, line {number + 1}"))
            opened = (number, begin.group(1), begin.group(2))
        elif line == GENERATED_END:
            if opened is None:
                raise ReportFileError(f"{where}, line {number + 1}: an end marker without a block ({GENERATED_END} "
                                      "with no begin marker before it): remove it or add its begin marker; nothing "
                                      "was written.")
            blocks.append((opened[0], number, opened[1], opened[2]))
            opened = None
    if opened is not None:
        raise ReportFileError(_no_end(where, opened, "the end of the page"))
    return blocks


def _no_end(where: str, opened: Tuple[int, str, str], before: str) -> str:
    return (f"{where}, line {opened[0] + 1}: the block generated from {opened[1]} has no end marker before {before}: "
            f"rewriting it would delete the text after it. Put {GENERATED_END} back after its table; nothing was "
            "written.")


def update_readme(readme: PathLike, csv_path: str, block: str, check: bool = False,
                  command: Optional[str] = None) -> bool:
    """Rewrite every block of the Markdown file ``readme`` generated from ``csv_path`` (its
    path as written in the marker, relative to that file) with ``block``
    (:func:`generated_block`); with ``check``, only say whether they are all up to date.
    Returns whether they already were. The marker lines themselves are kept; markers inside
    fenced code are not blocks (:func:`find_generated_blocks`). Refused with
    :class:`ReportFileError` (nothing written): a file without such a block (the message
    gives the lines to add; ``command``: the command they name) and a file whose markers do
    not pair up. A symlink is written through to its target; the file keeps its mode and
    its line endings (a block is written with its begin marker's)."""
    readme = Path(readme)
    with readme.open(encoding="utf-8", newline="") as f:
        text = f.read()
    lines = _lines(text)
    blocks = [b for b in find_generated_blocks(text, str(readme)) if b[2] == csv_path]
    if not blocks:
        raise ReportFileError(f"{readme} has no block generated from {csv_path}: add the lines\n"
                              f"{_generated_begin(csv_path, command)}\n{GENERATED_END}\n"
                              "where the table goes, then run the command again.")
    parts, done = [], 0
    for begin, end, _, _ in blocks:
        newline = "\r\n" if lines[begin].endswith("\r\n") else "\n"
        parts += lines[done:begin + 1] + [newline, block.replace("\n", newline), newline]
        done = end
    new = "".join(parts + lines[done:])
    if new == text or check:
        return new == text
    target = Path(os.path.realpath(readme))  # through a symlink: the target gets the table
    with atomic_path(target, mode=stat.S_IMODE(target.stat().st_mode)) as tmp, \
            tmp.open("w", encoding="utf-8", newline="") as f:
        f.write(new)
    return False


def _missing_runs(folder: Path) -> List[str]:
    """The planned runs the runner's ``status.json`` in ``folder`` lists as missing (none without one)."""
    try:
        with (folder / "status.json").open(encoding="utf-8") as f:
            status = json.load(f)
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as error:
        raise ReportFileError(f"{folder / 'status.json'} is unreadable ({error}): restore it or remove it.") from None
    missing = status.get("missing", []) if isinstance(status, dict) else None
    if not isinstance(missing, list):
        raise ReportFileError(f"{folder / 'status.json'}: 'missing' is not a list of runs: restore it or remove it.")
    return [str(m) for m in missing]


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Path]:
    """``python -m benchmarks.report CSV [--readme README.md]``: re-make the table and
    plots next to ``CSV`` (and the Markdown file's blocks generated from it)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", type=Path, help="results CSV written by write_csv / write_report")
    parser.add_argument("--readme", type=Path, default=None,
                        help="also rewrite this Markdown file's block generated from CSV (README.md, "
                             "docs/results.md; the path in its marker is relative to the file's folder)")
    args = parser.parse_args(argv)
    try:
        block = generated_block(args.csv)
        paths: Dict[str, Path] = {}
        if _header(args.csv).startswith("dataset,scenario,tasks,backbone"):  # a results file
            rows = read_csv(args.csv)
            paths = write_report(rows, args.csv.parent, include_csv=False, missing=_missing_runs(args.csv.parent))
        print(block)
        for key, path in paths.items():
            print(f"{key}: {path}")
        if args.readme is not None:
            relative = Path(os.path.relpath(args.csv.resolve(), args.readme.resolve().parent)).as_posix()
            command = f"python -m benchmarks.report {args.csv.as_posix()} --readme {args.readme.as_posix()}"
            update_readme(args.readme, relative, block, command=command)
            print(f"readme: {args.readme} (block generated from {relative})")
    except ReportFileError as e:
        parser.exit(2, f"{parser.prog}: error: {e}\n")
    except OSError as e:
        parser.exit(2, f"{parser.prog}: error: {e.filename}: {e.strerror}\n")
    return paths


if __name__ == "__main__":
    main()
