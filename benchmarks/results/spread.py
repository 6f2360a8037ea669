"""The cross-machine spread as the report reads and shows it: the CSV that
``python -m benchmarks.tools.spread`` writes (:data:`~benchmarks.results.files.SPREAD_COLUMNS`),
read back with its numbers checked (its table: :func:`benchmarks.results.tables.spread_table`)."""

from pathlib import Path
from typing import Dict, List, Mapping

from benchmarks.results.files import SPREAD_COLUMNS, ReportFileError
from benchmarks.results.reading import FRACTION, TEXT, Cell, check_rows, read_table

__all__ = ["SPREAD_COLUMNS", "SPREAD_CELLS", "read_spread_csv"]

Row = Mapping[str, object]

SPREAD_CELLS: Dict[str, Cell] = {
    "dataset": TEXT, "scenario": TEXT, "tasks": Cell(int, 1, 1000), "method": TEXT, "seeds": TEXT,
    "machine_a": TEXT, "machine_b": TEXT, "mean_a": FRACTION, "mean_b": FRACTION, "max_seed_difference": FRACTION,
    "seed_difference_std": FRACTION}
"""What each cell of a spread CSV holds (:func:`~benchmarks.results.reading.check_rows`)."""


def read_spread_csv(path: Path) -> List[Dict[str, object]]:
    """Rows written by :func:`write_spread_csv`, numbers restored;
    :class:`~benchmarks.results.files.ReportFileError` (one line naming the file and line) for
    a malformed file, a value that is not a number, an accuracy (or difference of two) that
    is not a fraction in [0, 1], seeds that are not distinct non-negative integers, or two
    rows of one run, method and machines."""
    records = read_table(path, required=SPREAD_COLUMNS)[1]
    check_rows(path, records, SPREAD_CELLS, ("dataset", "scenario", "tasks", "regime", "method", "machine_a",
                                             "machine_b"), "run, method and machines")
    rows: List[Dict[str, object]] = []
    for line, raw in records:
        seeds = raw["seeds"].split(" ")
        if not all(s.isascii() and s.isdigit() for s in seeds) or len(set(map(int, seeds))) != len(seeds):
            raise ReportFileError(f"{path}, line {line}: seeds is {raw['seeds']!r}, not distinct seeds (integers "
                                  "separated by one space): an edited row; write the file again.")
        rows.append(dict(raw, tasks=int(raw["tasks"]), **{c: float(raw[c]) for c in (
            "mean_a", "mean_b", "max_seed_difference", "seed_difference_std")}))
    return rows
