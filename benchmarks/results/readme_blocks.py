"""The blocks of a Markdown page generated from a committed file (between ``<!-- generated
from PATH by: COMMAND -->`` and ``<!-- end generated -->``): finding them outside fenced
code, refusing markers that do not pair up, and rewriting them (:func:`update_readme`).
What goes in a block is :func:`generated_block`, by the kind of the committed file.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import List, Optional, Sequence, Tuple

from avalanche_tmc.files.filesystem import atomic_path
from benchmarks.results.claims import verdict_table
from benchmarks.results.files import (
    PathLike,
    ReportFileError,
    Row,
    check_columns,
    csv_kind,
    read_csv,
    read_tuning_csv,
    run_label,
)
from benchmarks.results.gpu_hours import gpu_hours_table, read_gpu_hours
from benchmarks.results.premise import map_table, premise_section, read_map_csv
from benchmarks.results.reading import read_text, unsafe_cell
from benchmarks.results.spread import read_spread_csv
from benchmarks.results.suite_costs import cost_table, read_costs
from benchmarks.results.tables import incomplete_note, markdown_table, spread_table, tuning_table, variance_table

__all__ = ["GENERATED_END", "generated_block", "readme_block", "find_generated_blocks", "update_readme",
           "opening_fence", "closes_fence"]

GENERATED_END = "<!-- end generated -->"


def _generated_prefix(csv_path: str) -> str:
    return f"<!-- generated from {csv_path} by: "


def _generated_begin(csv_path: str, command: Optional[str] = None) -> str:
    command = command or f"python -m benchmarks.report {csv_path} --readme README.md"
    return f"{_generated_prefix(csv_path)}{command} -->"


def readme_block(rows: Sequence[Row]) -> str:
    """What README.md shows of a results file: the table, the premise figures (when it has
    their rows) and the verdicts."""
    verdicts = verdict_table(rows, run_label)
    premise = premise_section(rows)
    return markdown_table(rows) + ("\n" + premise if premise else "") + ("\n" + verdicts if verdicts else "")


_BEGIN_PREFIX = "<!-- generated from "
_BEGIN = re.compile(r"<!-- generated from (.+?) by: (.+) -->")
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")


def opening_fence(line: str) -> Optional[str]:
    """The fence (its run of backticks or tildes) that ``line`` (without its line end) opens,
    or None. CommonMark: up to 3 spaces of indentation, then 3 or more backticks or tildes;
    a backtick fence's info string has no backtick (the line is then inline code)."""
    match = _FENCE.fullmatch(line)
    if match is None or (match.group(1)[0] == "`" and "`" in match.group(2)):
        return None
    return match.group(1)


def closes_fence(line: str, fence: str) -> bool:
    """Whether ``line`` (without its line end) closes the code block opened by ``fence``.
    CommonMark: up to 3 spaces of indentation (a line indented 4 or more is content), the
    fence's character at least as many times, then nothing but spaces or tabs (a fence
    followed by text, or of the other character, is content)."""
    return re.fullmatch(r" {0,3}%s{%d,}[ \t]*" % (re.escape(fence[0]), len(fence)), line) is not None


def _lines(text: str) -> List[str]:
    """``text`` split after each ``\\n`` (line ends kept, ``\\r\\n`` included)."""
    return re.findall(r"[^\n]*\n|[^\n]+$", text)


def find_generated_blocks(text: str, where: str = "the page") -> List[Tuple[int, int, str, str]]:
    """``(begin line, end line, PATH, COMMAND)`` (0-based line indices) of every generated
    block of the Markdown ``text``. Markers count at the start of a line outside fenced
    code (CommonMark's fences: :func:`opening_fence`, :func:`closes_fence`, which
    ``tests/doc_pages.py`` reads them by too): an example that quotes them is not a block,
    nor is one after a quoted fence marker inside the code (indented 4 spaces, or followed
    by text).
    :class:`ReportFileError` (naming ``where`` and the line) when the markers do not pair
    up: a block without its end marker (before the next block or the end of the page),
    an end marker without a block, or a begin marker of another form."""
    blocks: List[Tuple[int, int, str, str]] = []
    fence: Optional[str] = None
    opened: Optional[Tuple[int, str, str]] = None
    for number, raw in enumerate(_lines(text)):
        line = raw.rstrip("\n").rstrip("\r")
        if fence is None:
            fence = opening_fence(line)
            if fence is not None:
                continue
        else:
            if closes_fence(line, fence):
                fence = None  # the closing fence (CommonMark's rule: closes_fence)
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
    text = read_text(readme)
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
    _same_blocks(readme, text, new, csv_path)
    if new == text or check:
        return new == text
    target = Path(os.path.realpath(readme))  # through a symlink: the target gets the table
    with atomic_path(target, mode=stat.S_IMODE(target.stat().st_mode)) as tmp, \
            tmp.open("w", encoding="utf-8", newline="") as f:
        f.write(new)
    return False


def _same_blocks(readme: Path, text: str, new: str, csv_path: str) -> None:
    """Refuse a rewrite after which the page's generated blocks would not be the same ones
    (a block holding a marker line or an unclosed code fence would end a block early or
    swallow the next): the page could not be rewritten again."""
    before = [b[2:] for b in find_generated_blocks(text, str(readme))]
    try:
        after = [b[2:] for b in find_generated_blocks(new, str(readme))]
    except ReportFileError:
        after = []
    if after != before:
        raise ReportFileError(f"{readme}: the block generated from {csv_path} holds a generated-block marker or an "
                              "unclosed code fence, which would break the page's blocks: nothing was written; fix the "
                              "file it is generated from.")


def missing_runs(folder: Path) -> List[str]:
    """The planned runs the runner's ``status.json`` in ``folder`` lists as missing (none
    without one); :class:`ReportFileError` for one that cannot be read or whose list is not
    of run names fit for a page."""
    status_file = folder / "status.json"
    try:
        status = json.loads(read_text(status_file))
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as error:
        if isinstance(error, ReportFileError):
            raise
        raise ReportFileError(f"{status_file} is unreadable ({error}): restore it or remove it.") from None
    missing = status.get("missing", []) if isinstance(status, dict) else None
    if not isinstance(missing, list) or not all(isinstance(m, str) and not unsafe_cell(m) for m in missing):
        raise ReportFileError(f"{status_file}: 'missing' is not a list of runs (names without control characters "
                              "or HTML comment markers): restore it or remove it.")
    return missing


def generated_block(path: PathLike, summary: bool = False) -> str:
    """What README.md shows of a committed file: :func:`readme_block` of a results CSV
    (headed by :func:`~benchmarks.results.tables.incomplete_note` when the ``status.json``
    beside it lists missing runs),
    :func:`tuning_table` of a tuning CSV, :func:`variance_table` of a variance CSV,
    :func:`benchmarks.results.tables.spread_table` of a machine comparison or
    :func:`benchmarks.results.suite_costs.cost_table` of the test suite's costs or
    :func:`benchmarks.results.gpu_hours.gpu_hours_table` of the paper presets' GPU-hours or
    :func:`benchmarks.results.confirmation.confirmation_table` of a confirmatory run against its pilot or
    :func:`benchmarks.results.same_rows.same_rows_table` of two machines' rows compared bit for bit or
    :func:`benchmarks.results.margin_rules.margin_rules_table` of a run's verdicts under both margin rules.
    ``summary``: a results CSV's small table instead (:func:`benchmarks.results.summary.summary_block`)."""
    kind = csv_kind(path)  # written in the file (its ``kind`` column), never guessed
    check_columns(path, kind)
    if summary:
        if kind != "results":
            raise ReportFileError(f"{path}: --summary is the small table of a results file; this is a {kind} file.")
        from benchmarks.results.summary import summary_block  # (it imports the claims)

        return summary_block(read_csv(path))
    if kind == "spread":
        return spread_table(read_spread_csv(Path(path)))
    if kind == "test-costs":
        return cost_table(read_costs(Path(path)))
    if kind == "premise-map":
        return map_table(read_map_csv(Path(path)))
    if kind == "tuning":
        return tuning_table(read_tuning_csv(path))
    if kind == "variance":
        return variance_table(read_tuning_csv(path))
    if kind == "seed-count":
        from benchmarks.results.seed_count import read_seed_counts, seed_count_table  # (it imports the claims)

        return seed_count_table(read_seed_counts(Path(path)))
    if kind == "gpu-hours":
        return gpu_hours_table(read_gpu_hours(Path(path)))
    if kind == "margin-rules":
        from benchmarks.results.margin_rules import margin_rules_table, read_margin_rules  # (it imports the claims)

        return margin_rules_table(read_margin_rules(Path(path)))
    if kind == "same-rows":
        from benchmarks.results.same_rows import read_same_rows, same_rows_table

        return same_rows_table(read_same_rows(Path(path)))
    if kind == "confirmation":
        from benchmarks.results.confirmation import confirmation_table, read_confirmation  # (it imports the claims)

        return confirmation_table(read_confirmation(Path(path)))
    missing = missing_runs(Path(path).parent)
    return (incomplete_note(missing) + "\n" if missing else "") + readme_block(read_csv(path))
