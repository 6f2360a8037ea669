"""The results files of the benchmark runner: their schema and how they are read and written.

A result row is a dict with the keys in :data:`COLUMNS` (see :mod:`benchmarks.report`);
:data:`TUNING_COLUMNS` are those of a tuning trial (:mod:`benchmarks.tuning.grid`). Here: the
schema, the keys that index rows (run, method, model, after_task, eval_exp) and the
accuracy indexes built from them, the CSV writers (through the library's one atomic write,
:func:`avalanche_tmc.files.filesystem.atomic_path`, re-exported here) and the CSV readers,
which refuse a malformed file with :class:`ReportFileError`. The tables are
:mod:`benchmarks.results.tables`, the plots :mod:`benchmarks.results.plots`.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, Union

from avalanche_tmc.files.filesystem import atomic_path
from benchmarks.methods import joint_methods, method_names, method_row
from benchmarks.results.intervals import mean_std
from benchmarks.results.reading import FRACTION, TEXT, Cell, ReportFileError, check_rows
from benchmarks.results.reading import check_unique as _check_unique
from benchmarks.results.reading import read_table as _read_table

__all__ = [
    "COLUMNS", "TUNING_COLUMNS", "ReportFileError", "method_info", "cost_class", "order_methods", "run_key", "row_key",
    "list_runs", "run_label", "accuracy_index", "final_accuracy", "accuracy_spread", "seed_count", "atomic_path",
    "write_csv", "read_csv", "write_tuning_csv", "read_tuning_csv", "read_written_csv", "KINDS", "VARIANCE_COLUMNS",
    "write_rows_csv", "SPREAD_COLUMNS", "SAME_ROWS_COLUMNS", "PINNED_ARITHMETIC", "MARGIN_RULES_COLUMNS",
    "SEED_COUNT_COLUMNS", "GPU_HOURS_COLUMNS", "CONFIRMATION_COLUMNS",
    "regime_panels", "csv_kind", "kind_columns", "check_columns",
]

Row = Mapping[str, object]
RunKey = Tuple[str, str, int, str]  # (dataset, scenario, tasks, regime)
PathLike = Union[str, Path]

COLUMNS: Tuple[str, ...] = (
    "dataset", "scenario", "tasks", "backbone", "method", "model",
    "after_task", "eval_exp", "accuracy", "train_seconds", "eval_seconds",
    "regime", "trained_params", "lr", "epochs", "tuned", "setting", "seed", "trained_in", "data_seed", "arithmetic",
    "replay_fraction", "loss_rose",
    "final_average_accuracy", "average_incremental_accuracy", "forgetting", "backward_transfer", "replay_buffer",
)
PINNED_ARITHMETIC = "avx2"
"""The ``arithmetic`` of a row computed with the pinned CPU arithmetic (avalanche_tmc.arithmetic);
a native one is ``native:<ATen>/<oneDNN>``. Files written before the column read it as empty:
rows made with some CPU's own kernels, not known to be the pinned arithmetic. The pilot's and
the confirmatory run's files carry ``avx2``: made on an AVX2 CPU, whose own kernels are the
pinned ones, and reproduced bit for bit pinned on an AVX-512 CPU (docs/results.md, "One
arithmetic"), the column was added to them as the runner now writes it."""
_CONVERTERS: Dict[str, Callable[[str], object]] = {
    "tasks": int, "after_task": int, "accuracy": float, "train_seconds": float, "eval_seconds": float,
    "seed": lambda v: int(v) if v else "", "data_seed": lambda v: int(v) if v else "",
    "trained_params": lambda v: int(v) if v else "", "epochs": lambda v: int(v) if v else "",
    "lr": lambda v: float(v) if v else "", "replay_fraction": lambda v: float(v) if v else "",
    "replay_buffer": lambda v: int(v) if v else "",
    **{c: (lambda v: float(v) if v else "") for c in ("final_average_accuracy", "average_incremental_accuracy",
                                                     "forgetting", "backward_transfer")},
}
TUNING_COLUMNS: Tuple[str, ...] = (
    "dataset", "scenario", "tasks", "regime", "family", "lr", "epochs", "validation_accuracy", "chosen", "edge", "rows",
)
VARIANCE_COLUMNS: Tuple[str, ...] = ("protocol", "seed", "method", "accuracy")  # experiments/variance.py
SPREAD_COLUMNS: Tuple[str, ...] = ("dataset", "scenario", "tasks", "regime", "method", "seeds", "machine_a", "mean_a",
                                   "machine_b", "mean_b", "max_seed_difference",
                                   "seed_difference_std")  # benchmarks.tools.spread
SAME_ROWS_COLUMNS: Tuple[str, ...] = ("dataset", "scenario", "tasks", "regime", "method", "seeds", "machine_a",
                                      "machine_b", "rows", "equal", "max_difference")  # benchmarks.tools.same_rows
MARGIN_RULES_COLUMNS: Tuple[str, ...] = (  # benchmarks.results.margin_rules
    "dataset", "scenario", "tasks", "regime", "claim", "rival", "seeds", "difference", "holm_low", "holm_high",
    "repeats", "family", "preregistered_margin", "preregistered_verdict", "pinned_margin", "pinned_verdict")
COST_COLUMNS: Tuple[str, ...] = ("tier", "module", "tests", "seconds")  # benchmarks.results.suite_costs
SEED_COUNT_COLUMNS: Tuple[str, ...] = (  # benchmarks.results.seed_count
    "dataset", "scenario", "tasks", "regime", "claim", "rival", "pilot_seeds", "difference", "paired_std",
    "pilot_verdict", "family", "cap", "delta", "seeds_needed", "decides")
CONFIRMATION_COLUMNS: Tuple[str, ...] = (  # benchmarks.results.confirmation
    "dataset", "scenario", "tasks", "regime", "claim", "rival", "pilot_seeds", "pilot_verdict", "seeds", "difference",
    "holm_low", "holm_high", "verdict", "repeats", "family", "cap", "seeds_needed", "decides")
MAP_COLUMNS: Tuple[str, ...] = (  # the premise map (benchmarks.results.premise)
    "input", "dataset", "scenario", "tasks", "regime", "seeds", "joint", "joint_tangent", "tmc", "tmc_fc",
    "gap", "gap_low", "gap_high", "loss", "loss_low", "loss_high", "gain", "gain_low", "gain_high", "premise",
    "seconds_per_seed",
)
GPU_HOURS_COLUMNS: Tuple[str, ...] = (  # benchmarks.tools.gpu_hours
    "preset", "train_images", "test_images", "work", "seeds", "hours_per_seed", "hours", "images_per_second",
    "tangent_ratio")
KINDS: Tuple[str, ...] = ("results", "tuning", "variance", "spread", "test-costs", "premise-map", "seed-count",
                          "gpu-hours", "confirmation", "same-rows", "margin-rules")
"""What a CSV of the runner holds, written in its last column, ``kind``, on every row
(results rows, tuning trials, variance rows, a machine comparison, the test suite's costs):
the report reads it there instead of guessing from the header."""
KIND_COLUMN = "kind"

COMPOSED = "composed"
COMPONENT_PREFIX = "component-"
ALL = "all"
MISSING = "–"
SCENARIO_PREFIX = {"class": "C", "task": "T", "data": "D"}


def method_info(method: str, buffer: Optional[int] = None) -> Tuple[str, str, str, bool]:
    """(label, inference/memory cost, replay buffer, trainable in parallel over tasks) of a
    registered method (:mod:`benchmarks.methods`), or ``(method, "?", "?", False)``; a replay
    method's texts give ``buffer`` samples (default: the default buffer; :func:`method_row`)."""
    row = method_row(method, buffer)
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


def row_seed(row: Row) -> int:
    """The seed a row was trained with (0 when the file has none)."""
    seed = row.get("seed", "")
    return int(seed) if seed not in ("", None) else 0  # type: ignore[arg-type]


def row_key(row: Row) -> Tuple[str, ...]:
    """What makes a result row one of a kind: its run, backbone, seed, method, model,
    experience and evaluation stream (two rows of one key in a file are a duplicate)."""
    return tuple(str(row.get(c, "") if row.get(c) is not None else "") for c in (
        "dataset", "scenario", "tasks", "regime", "backbone", "seed", "method", "model", "after_task", "eval_exp"))


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


def write_rows_csv(rows: Iterable[Row], path: PathLike, columns: Sequence[str], kind: str) -> Path:
    """Write ``rows`` with ``columns`` (others are ignored) and the file's ``kind`` (one of
    :data:`KINDS`) as a last column, atomically."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}.")
    path = Path(path)
    with atomic_path(path) as tmp, tmp.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=[*columns, KIND_COLUMN], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(dict(row, **{KIND_COLUMN: kind}) for row in rows)
    return path


def write_csv(rows: Iterable[Row], path: PathLike) -> Path:
    """Write ``rows`` with the columns of :data:`COLUMNS` (others are ignored), atomically."""
    return write_rows_csv(rows, path, COLUMNS, "results")


def csv_kind(path: PathLike) -> str:
    """The kind (:data:`KINDS`) a CSV written by :func:`write_rows_csv` records in its
    ``kind`` column; :class:`ReportFileError` when it has none, an unknown one, or rows
    that disagree."""
    header, records = _read_table(path)
    kinds = {row.get(KIND_COLUMN, "") for _, row in records}
    if not records or kinds - set(KINDS) or len(kinds) != 1:
        found = sorted(kinds) if records else "no rows"
        missing = [c for c in _REQUIRED if c not in header]
        lacks = f"; as a results.csv it lacks the column(s) {missing}" if missing else ""
        raise ReportFileError(f"{path}: its '{KIND_COLUMN}' column does not say one of {list(KINDS)} on every row "
                              f"(found {found}{lacks}): not a file written by this version's runner (results, "
                              "tuning, experiments/variance.py or benchmarks.tools.spread), or it was edited. The "
                              "report expects the results.csv that python -m benchmarks.run wrote.")
    return kinds.pop()


def check_columns(path: PathLike, kind: str) -> None:
    """Refuse (:class:`ReportFileError`) a CSV labelled ``kind`` that lacks one of the
    columns of its kind's tables (:func:`kind_columns`), naming them and the file expected."""
    header = _read_table(path)[0]
    missing = [c for c in kind_columns(kind) if c not in header]
    if missing:
        raise ReportFileError(f"{path}: its '{KIND_COLUMN}' column says it is a {kind} file, but it lacks the "
                              f"column(s) {missing} of one: not a {kind} file, or it was edited. The report expects a "
                              "results.csv written by python -m benchmarks.run (or a tuning.csv, a variance.csv, a "
                              "spread CSV of benchmarks.tools.spread or a costs CSV of benchmarks.results.suite_costs, "
                              "with all of their columns).")


def kind_columns(kind: str) -> Tuple[str, ...]:
    """The columns every file of ``kind`` (:data:`KINDS`) has."""
    return {"results": _REQUIRED, "tuning": TUNING_COLUMNS, "variance": VARIANCE_COLUMNS, "spread": SPREAD_COLUMNS,
            "test-costs": COST_COLUMNS, "premise-map": MAP_COLUMNS, "seed-count": SEED_COUNT_COLUMNS,
            "gpu-hours": GPU_HOURS_COLUMNS, "confirmation": CONFIRMATION_COLUMNS,
            "same-rows": SAME_ROWS_COLUMNS, "margin-rules": MARGIN_RULES_COLUMNS}[kind]


def _not_results(path: PathLike, header: Sequence[str], records: Sequence[Tuple[int, Dict[str, str]]]) -> None:
    """Refuse a CSV of another kind than results (a tuning, variance or spread file), naming
    the results columns it lacks and the file expected."""
    kinds = sorted({row.get(KIND_COLUMN, "") for _, row in records} - {"results", ""})
    missing = [c for c in _REQUIRED if c not in header]
    if kinds and missing:
        raise ReportFileError(f"{path}: a {kinds[0]} file, not a results file (results.csv): it lacks the column(s) "
                              f"{missing} (a results.csv has {list(_REQUIRED)}). Give the results.csv that "
                              "python -m benchmarks.run wrote in its --out folder.")


_REQUIRED = COLUMNS[:COLUMNS.index("regime")]
"""The columns every results file has (those after them were added later: files written
before a column existed read it as empty)."""
_NOT_EMPTY = ("dataset", "scenario", "method", "model", "eval_exp")


def _check_fraction(path: PathLike, line: int, column: str, value: object) -> None:
    """Refuse an accuracy that is NaN, infinite or outside [0, 1] (it would be averaged into
    a table and could be bolded as the best)."""
    check_rows(path, [(line, {column: str(value)})], {column: FRACTION})


def read_csv(path: PathLike) -> List[Dict[str, object]]:
    """Rows written by :func:`write_csv`, with int / float columns restored.
    :class:`ReportFileError` for a malformed file (see :func:`_read_table`), an empty key
    column, a value that is not a number, an accuracy that is not a fraction in [0, 1]
    (NaN, infinite or out of range), two rows of one key (:func:`row_key`), or another kind
    of CSV (its missing columns named)."""
    try:
        header, records = _read_table(path)
    except ReportFileError:
        pass  # malformed: the strict read below says how
    else:
        _not_results(path, header, records)
    _, records = _read_table(path, known=(*COLUMNS, KIND_COLUMN), required=_REQUIRED)
    rows = []
    seen: Dict[Tuple[str, ...], int] = {}
    for line, raw in records:
        if raw.get(KIND_COLUMN, "results") != "results":
            raise ReportFileError(f"{path}, line {line}: a {raw[KIND_COLUMN]} file, not a results file.")
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
        _check_fraction(path, line, "accuracy", raw["accuracy"])
        _check_unique(path, seen, row_key(row), line, "run, backbone, seed, method, model, experience and evaluation")
        rows.append(row)
    return rows


def write_tuning_csv(trials: Iterable[Row], path: PathLike) -> Path:
    """Write tuning trials (:data:`TUNING_COLUMNS`, see :mod:`benchmarks.tuning.grid`), atomically."""
    return write_rows_csv(trials, path, TUNING_COLUMNS, "tuning")


_TUNING_UNIT = ("dataset", "scenario", "tasks", "regime", "family")
_KIND_CELLS: Dict[str, Tuple[Dict[str, Cell], Tuple[str, ...]]] = {
    "tuning": ({"dataset": TEXT, "scenario": TEXT, "tasks": Cell(int, 1, 1000), "family": TEXT,
                "lr": Cell(float, 0.0, above=True), "epochs": Cell(int, 1, 10000), "validation_accuracy": FRACTION,
                "chosen": Cell(str, choices=("yes", "no"))}, (*_TUNING_UNIT, "lr", "epochs")),
    "variance": ({"protocol": TEXT, "seed": Cell(int, 0, 2**31 - 1), "method": TEXT, "accuracy": FRACTION},
                 ("protocol", "seed", "method")),
}
"""Per kind of file read by :func:`read_tuning_csv`: what its cells hold and the columns
that make a row one of a kind."""


def read_tuning_csv(path: PathLike) -> List[Dict[str, str]]:
    """Trials written by :func:`write_tuning_csv`, or rows of a variance file (as strings);
    :class:`ReportFileError` for a malformed file (cut mid-line, a row of another length),
    a cell that is not what its kind holds (an accuracy not in [0, 1], a learning rate not
    positive, epochs not an integer >= 1, ...), two rows of one key, or two chosen trials of
    one tuning unit."""
    return [row for _, row in _checked_records(path)]


def _checked_records(path: PathLike) -> List[Tuple[int, Dict[str, str]]]:
    """:func:`read_tuning_csv`'s records with their line numbers."""
    records = _read_table(path)[1]
    for kind, (cells, key) in _KIND_CELLS.items():
        of_kind = [(line, row) for line, row in records if row.get(KIND_COLUMN, "") == kind]
        check_rows(path, of_kind, {c: cell for c, cell in cells.items() if of_kind and c in of_kind[0][1]}, key)
    chosen = [(line, row) for line, row in records if row.get(KIND_COLUMN) == "tuning" and row.get("chosen") == "yes"]
    check_rows(path, chosen, {}, _TUNING_UNIT, "run and unit chosen twice: two chosen trials for one tuning unit")
    return records


def read_written_csv(path: PathLike, kind: str, columns: Sequence[str], written_by: str,
                     cells: Optional[Mapping[str, Cell]] = None, key: Sequence[str] = ()) -> List[Dict[str, str]]:
    """The rows (as strings) of a ``kind`` file that ``written_by`` writes: :func:`read_tuning_csv`'s
    checks, :class:`ReportFileError` when a row lacks one of ``columns``, has a cell that is
    not what ``cells`` says it holds (:func:`~benchmarks.results.reading.check_rows`), or
    repeats an earlier row's ``key``."""
    records = _checked_records(path)
    rows = [row for _, row in records]
    missing = sorted({c for r in rows for c in columns if c not in r})
    if missing:
        raise ReportFileError(f"{path}: its kind says {kind}, but it lacks the columns {missing} of a file "
                              f"written by {written_by} (a results.csv or another file relabelled?)")
    check_rows(path, records, cells or {}, key)
    return rows


def regime_panels(rows: Sequence[Row]) -> Dict[Tuple[str, str, int], List[Tuple[RunKey, float]]]:
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
