"""Reading the files the report and the tools take as input, strictly: regular files only
(a FIFO or a device is refused without blocking), UTF-8 text (a spreadsheet's Latin-1 or
UTF-16 export is named as such), CSV cells that cannot break a generated block (no control
character, no HTML comment marker), and each kind's cells checked against their bounds
(:class:`Cell`, :func:`check_rows`). Every refusal is a :class:`ReportFileError` whose
message is one line naming the file (and line).
"""

from __future__ import annotations

import codecs
import csv
import io
import math
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

__all__ = ["ReportFileError", "read_text", "unsafe_cell", "Cell", "TEXT", "FRACTION", "PERCENT", "POINTS",
           "check_rows", "read_table"]

PathLike = Union[str, Path]
Record = Tuple[int, Dict[str, str]]


class ReportFileError(ValueError):
    """A results file or Markdown page the report refuses to read or rewrite: a malformed
    CSV (cut mid-line, a row of another length, a value that is not a number, an accuracy
    that is NaN, infinite or outside [0, 1], a duplicated row, unknown or missing columns),
    a page without the block, or with markers that do not pair up. The message is one line
    naming the file (and line) and what to do; ``python -m benchmarks.report`` prints it and
    exits with status 2."""


def read_text(path: PathLike) -> str:
    """The text of the regular file ``path`` (a UTF-8 byte-order mark dropped);
    :class:`ReportFileError` for a FIFO, a device or a folder (refused without blocking) and
    for text that is not UTF-8 (the line of its first bad byte named). ``OSError``: unreadable."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    if not stat.S_ISREG(os.fstat(fd).st_mode):  # before fdopen, which refuses a folder naming only the descriptor
        os.close(fd)
        raise ReportFileError(f"{path}: not a regular file (a FIFO, a device or a folder): give the file itself.")
    with os.fdopen(fd, "rb") as f:
        data = f.read()
    if data.startswith(codecs.BOM_UTF8):
        data = data[len(codecs.BOM_UTF8):]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[:error.start].count(b"\n") + 1
        found = ("a UTF-16 byte-order mark" if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE))
                 else f"the byte 0x{data[error.start]:02x}")
        raise ReportFileError(f"{path}, line {line}: not UTF-8 text ({found}: a spreadsheet's Latin-1 or UTF-16 "
                              "export?): save it as UTF-8 (CSV UTF-8) or restore the file the tool wrote.") from None


_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]|<!--|-->")


def unsafe_cell(text: str) -> Optional[str]:
    """Why ``text`` may not be a cell of a generated block (a control character such as a
    line break, or an HTML comment marker: either could end a block or hide the page after
    it), or None when it may."""
    found = _UNSAFE.search(text)
    if found is None:
        return None
    return f"an HTML comment marker {found.group()!r}" if len(found.group()) > 1 else \
        f"a control character {found.group()!r}"


def read_table(path: PathLike, known: Optional[Sequence[str]] = None,
               required: Sequence[str] = ()) -> Tuple[List[str], List[Record]]:
    """The header and ``(line number, {column: value})`` of each row of the CSV ``path``;
    :class:`ReportFileError` when it is malformed: not a regular UTF-8 file (:func:`read_text`),
    empty, cut mid-line (its last line has no line end), a row whose field count is not the
    header's, a header with empty or repeated names, names outside ``known`` or lacking one
    of ``required``, a cell :func:`unsafe_cell` refuses."""
    data = read_text(path)
    if not data.strip():
        raise ReportFileError(f"{path}: the file is empty (no header, no rows): restore it or run the benchmark again.")
    if not data.endswith("\n"):
        line = data.count("\n") + 1
        raise ReportFileError(f"{path}, line {line}: the file ends inside a row (no line end after it): it was cut "
                              "(a killed write or copy); restore it from a complete copy or run the benchmark again.")
    reader = csv.reader(io.StringIO(data, newline=""))
    try:
        header = next(reader)
        records, start = [], reader.line_num + 1
        for record in reader:  # a record is named by its first line (a quoted field may span lines)
            if record:
                records.append((start, record))
            start = reader.line_num + 1
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
    for line, record in [(1, header), *records]:
        if len(record) != len(header):
            raise ReportFileError(f"{path}, line {line}: {len(record)} fields, the header has {len(header)}: a cut "
                                  "or edited row; restore the file or run the benchmark again.")
        for column, value in zip(header, record):
            reason = unsafe_cell(value)
            if reason:
                raise ReportFileError(f"{path}, line {line}: the {column} cell {value!r} holds {reason}, which "
                                      "would break the page its table is generated into: an edited file; remove "
                                      "it from the cell.")
        if line > 1:
            rows.append((line, dict(zip(header, record))))
    return header, rows


@dataclass(frozen=True)
class Cell:
    """What a column of a kind of file holds: a number of ``type`` (``int`` or ``float``,
    always finite) in [``low``, ``high``] (``above``: strictly above ``low``), one of
    ``choices``, or (``type`` ``str``) text; ``empty``: the cell may be empty."""

    type: type = float
    low: float = -math.inf
    high: float = math.inf
    above: bool = False
    empty: bool = False
    choices: Tuple[str, ...] = ()

    def describe(self) -> str:
        """The cell's range in words, e.g. ``"a fraction in [0, 1]"``."""
        if self is FRACTION or self == FRACTION:
            return "a fraction in [0, 1]"
        kind = "an integer" if self.type is int else "a number"
        low = f"({self.low:g}" if self.above else f"[{self.low:g}"
        return f"{kind} in {low}, {self.high:g}]" if math.isfinite(self.high) else \
            f"{kind} {'above' if self.above else 'of at least'} {self.low:g}"


TEXT = Cell(str)
FRACTION = Cell(float, 0.0, 1.0)
PERCENT = Cell(float, 0.0, 100.0)
POINTS = Cell(float, -100.0, 100.0)  # a difference of two percentages


def _check_cell(path: PathLike, line: int, column: str, value: str, cell: Cell) -> None:
    if value == "":
        if cell.empty:
            return
        raise ReportFileError(f"{path}, line {line}: {column} is empty: a cut or edited row.")
    if cell.choices:
        if value not in cell.choices:
            raise ReportFileError(f"{path}, line {line}: {column} is {value!r}, not one of {list(cell.choices)}: an "
                                  "edited row; restore the file or write it again.")
        return
    if cell.type is str:
        return
    try:
        number = cell.type(value)
    except ValueError:
        raise ReportFileError(f"{path}, line {line}: {column} is {value!r}, not "
                              f"{'an integer' if cell.type is int else 'a number'}: a cut or edited row.") from None
    inside = (cell.low < number if cell.above else cell.low <= number) and number <= cell.high
    if not (math.isfinite(number) and inside):
        raise ReportFileError(f"{path}, line {line}: {column} is {value!r}, not {cell.describe()} (NaN, infinite or "
                              "out of range): an edited or corrupted row; restore the file or write it again.")


def check_rows(path: PathLike, records: Sequence[Record], cells: Mapping[str, Cell], key: Sequence[str] = (),
               what: str = "") -> None:
    """Refuse (:class:`ReportFileError`) a row of ``records`` whose cell is not what
    ``cells`` says it holds (not a number, NaN, infinite, out of its bounds, not one of its
    choices, empty), or whose ``key`` columns (``what`` names them) an earlier row has."""
    seen: Dict[Tuple[str, ...], int] = {}
    for line, row in records:
        for column, cell in cells.items():
            _check_cell(path, line, column, row.get(column, ""), cell)
        if key:
            check_unique(path, seen, tuple(row.get(c, "") for c in key), line, what or ", ".join(key))


def check_unique(path: PathLike, seen: Dict[Tuple[str, ...], int], key: Tuple[str, ...], line: int,
                 what: str) -> None:
    """Refuse a row whose key (``what`` names its columns) an earlier row of the file has:
    a duplicate would be averaged into the table while the verdicts pair by seed."""
    if key in seen:
        raise ReportFileError(f"{path}, line {line}: a duplicate of line {seen[key]} (the same {what}): a file "
                              "concatenated or edited by hand; keep one of them, or run the benchmark again.")
    seen[key] = line
