"""The cross-machine spread as the report reads and shows it: the CSV that
``python -m benchmarks.tools.spread`` writes (:data:`~benchmarks.results.files.SPREAD_COLUMNS`),
read back with its numbers checked (its table: :func:`benchmarks.results.tables.spread_table`)."""

from pathlib import Path
from typing import Dict, List, Mapping

from benchmarks.results.files import (
    SPREAD_COLUMNS,
    ReportFileError,
    _check_fraction,
    _check_unique,
    _read_table,
)

__all__ = ["SPREAD_COLUMNS", "read_spread_csv"]

Row = Mapping[str, object]


def read_spread_csv(path: Path) -> List[Dict[str, object]]:
    """Rows written by :func:`write_spread_csv`, numbers restored;
    :class:`~benchmarks.results.files.ReportFileError` (one line naming the file and line) for
    a malformed file, a value that is not a number, an accuracy (or difference of two) that
    is not a fraction in [0, 1], or two rows of one run, method and machines."""
    rows: List[Dict[str, object]] = []
    seen: Dict[tuple, int] = {}
    for line, raw in _read_table(path, required=SPREAD_COLUMNS)[1]:
        r: Dict[str, object] = dict(raw)
        try:
            r["tasks"] = int(raw["tasks"])
            for column in ("mean_a", "mean_b", "max_seed_difference", "seed_difference_std"):
                r[column] = float(raw[column])
        except ValueError:
            raise ReportFileError(f"{path}, line {line}: a value that is not a number: a cut or edited row.") \
                from None
        for column in ("mean_a", "mean_b", "max_seed_difference", "seed_difference_std"):
            _check_fraction(path, line, column, raw[column])
        _check_unique(path, seen, tuple(raw[c] for c in ("dataset", "scenario", "tasks", "regime", "method",
                                                          "machine_a", "machine_b")), line,
                      "run, method and machines")
        rows.append(r)
    return rows
