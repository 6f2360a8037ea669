"""Rows that two machines computed bit for bit alike: the CSV that
``python -m benchmarks.tools.same_rows`` writes (:data:`~benchmarks.results.files.SAME_ROWS_COLUMNS`),
made (:func:`same_rows`), read back with its numbers checked (:func:`read_same_rows`) and
shown (:func:`same_rows_table`).

Where the cross-machine spread (:mod:`benchmarks.results.spread`) compares final accuracies,
this compares every row two results files share: each method's accuracy after every
experience on every evaluation stream, as the doubles the files store. Equal rows mean the
two machines computed the same arithmetic, not merely similar numbers.
"""

from pathlib import Path
from typing import Dict, List, Mapping, Sequence, Tuple

from benchmarks.results.files import SAME_ROWS_COLUMNS, order_methods, row_key, row_seed, run_key, run_label
from benchmarks.results.reading import FRACTION, TEXT, Cell, ReportFileError, check_rows, read_table

__all__ = ["SAME_ROWS_COLUMNS", "same_rows", "read_same_rows", "same_rows_table", "same_rows_counts"]

Row = Mapping[str, object]

SAME_ROWS_CELLS: Dict[str, Cell] = {
    "dataset": TEXT, "scenario": TEXT, "tasks": Cell(int, 1, 1000), "method": TEXT, "seeds": TEXT,
    "machine_a": TEXT, "machine_b": TEXT, "rows": Cell(int, 1, 10 ** 9), "equal": Cell(int, 0, 10 ** 9),
    "max_difference": FRACTION}


def same_rows(rows_a: Sequence[Row], rows_b: Sequence[Row], name_a: str, name_b: str) -> List[Dict[str, object]]:
    """One dict per (run, method) both files have rows of: the seeds, the rows in common
    (:func:`~benchmarks.results.files.row_key`), how many hold the same accuracy to the last
    bit, and the largest difference (a fraction)."""
    accuracies = {row_key(r): float(r["accuracy"]) for r in rows_b}  # type: ignore[arg-type]
    groups: Dict[Tuple[object, str], Dict[str, object]] = {}
    for r in rows_a:
        other = accuracies.get(row_key(r))
        if other is None:
            continue
        group = groups.setdefault((run_key(r), str(r["method"])), dict(
            zip(("dataset", "scenario", "tasks", "regime"), run_key(r)), method=r["method"], seeds=set(),
            machine_a=name_a, machine_b=name_b, rows=0, equal=0, max_difference=0.0))
        difference = abs(float(r["accuracy"]) - other)  # type: ignore[arg-type]
        group["seeds"].add(row_seed(r))  # type: ignore[union-attr]
        group["rows"] += 1  # type: ignore[operator]
        group["equal"] += difference == 0.0  # type: ignore[operator]
        group["max_difference"] = max(group["max_difference"], difference)  # type: ignore[call-overload]
    return [dict(g, seeds=" ".join(map(str, sorted(g["seeds"])))) for g in groups.values()]  # type: ignore[call-overload]


def read_same_rows(path: Path) -> List[Dict[str, object]]:
    """Rows written by ``benchmarks.tools.same_rows``, numbers restored;
    :class:`~benchmarks.results.files.ReportFileError` for a malformed file, more equal rows
    than rows, or two rows of one run, method and machines."""
    records = read_table(path, required=SAME_ROWS_COLUMNS)[1]
    check_rows(path, records, SAME_ROWS_CELLS, ("dataset", "scenario", "tasks", "regime", "method", "machine_a",
                                                "machine_b"), "run, method and machines")
    rows: List[Dict[str, object]] = []
    for line, raw in records:
        if int(raw["equal"]) > int(raw["rows"]):
            raise ReportFileError(f"{path}, line {line}: {raw['equal']} equal rows of {raw['rows']}: an edited row; "
                                  "write the file again.")
        rows.append(dict(raw, tasks=int(raw["tasks"]), rows=int(raw["rows"]), equal=int(raw["equal"]),
                         max_difference=float(raw["max_difference"])))
    return rows


def same_rows_counts(rows: Sequence[Row]) -> Tuple[int, int]:
    """(equal rows, rows compared) over ``rows``."""
    return sum(int(r["equal"]) for r in rows), sum(int(r["rows"]) for r in rows)  # type: ignore[call-overload]


def same_rows_table(rows: Sequence[Row]) -> str:
    """Methods (rows) by run (columns): rows equal bit for bit of rows compared, and the
    largest difference in points where some differ."""
    from benchmarks.results.files import method_info

    runs = list(dict.fromkeys((str(r["dataset"]), str(r["scenario"]), int(r["tasks"]), str(r["regime"]))  # type: ignore[call-overload]
                              for r in rows))
    cells = {((str(r["dataset"]), str(r["scenario"]), int(r["tasks"]), str(r["regime"])), str(r["method"])): r  # type: ignore[call-overload]
             for r in rows}
    lines = ["| Method | " + " | ".join(run_label(run) for run in runs) + " |",
             "| --- | " + " | ".join("---:" for _ in runs) + " |"]
    for method in order_methods(str(r["method"]) for r in rows):
        values = []
        for run in runs:
            r = cells.get((run, method))
            if r is None:
                values.append("–")
                continue
            text = f"{r['equal']}/{r['rows']} (seeds {str(r['seeds']).replace(' ', ', ')})"
            values.append(text if r["equal"] == r["rows"] else f"{text}, ≤ {100 * float(r['max_difference']):.1f}")  # type: ignore[arg-type]
        lines.append("| " + " | ".join([method_info(method)[0], *values]) + " |")
    equal, compared = same_rows_counts(rows)
    first = rows[0] if rows else {}
    return (f"Rows equal to the last bit of the stored double, of the rows both files hold (every experience, every "
            f"evaluation stream): {first.get('machine_a', '?')} vs {first.get('machine_b', '?')}; largest difference "
            f"in points where some differ:\n\n" + "\n".join(lines) +
            f"\n\n{equal} of {compared} rows equal bit for bit.\n")
