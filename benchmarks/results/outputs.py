"""What the offline tools (``benchmarks.tools.spread``, ``benchmarks.results.premise``,
``benchmarks.results.seed_count``, ``benchmarks.results.suite_costs``, the GPU check) share
about their outputs: an output that names one of their inputs is refused (as the command
line's ``compose`` refuses it), a name that would break a page is refused, a write that
fails names its file, and every refusal is one line on stderr with exit 2.

Outputs are written through :func:`~avalanche_tmc.files.filesystem.atomic_path`: an output
that is a symlink is replaced, never followed, so no other file is truncated.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence, Union

from benchmarks.results.reading import ReportFileError, unsafe_cell

__all__ = ["check_not_an_input", "writing", "one_line", "page_text", "nothing_to_write", "write_tool_rows",
           "two_results_parser", "write_from_inputs"]

PathLike = Union[str, Path]


def check_not_an_input(out: PathLike, inputs: Mapping[PathLike, str], flag: str = "--out") -> None:
    """Refuse (:class:`ReportFileError`) an output ``out`` that is one of ``inputs`` (path ->
    what it is, e.g. ``"the pilot's results file"``): the same file by another path, a
    symlink or a hard link included; writing there would replace the input."""
    from avalanche_tmc.files.filesystem import same_file

    if not os.path.exists(out):
        return  # not an input: every input exists
    for path, what in inputs.items():
        if same_file(out, path):
            raise ReportFileError(f"{flag} names {what} ({path}): writing there would replace an input; choose "
                                  "another path. Nothing was written.")


@contextlib.contextmanager
def writing(path: PathLike) -> Iterator[None]:
    """An ``OSError`` of the block (a read-only folder, a full disk, the file-size limit, a
    folder in the way) becomes a :class:`ReportFileError` naming ``path``."""
    try:
        yield
    except OSError as error:
        raise ReportFileError(f"{path}: cannot be written ({error.strerror or error}): free space, make its folder "
                              "writable or choose another path; nothing was written there.") from None


@contextlib.contextmanager
def one_line(parser: argparse.ArgumentParser) -> Iterator[None]:
    """End the command in one line on stderr with exit 2 (``parser``'s form) on a
    :class:`ReportFileError` or an ``OSError`` of the block (never a traceback)."""
    try:
        yield
    except ReportFileError as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    except OSError as error:
        parser.exit(2, f"{parser.prog}: error: {error.filename or ''}: {error.strerror or error}\n")


def page_text(flag: str) -> Callable[[str], str]:
    """An argparse ``type`` for text that ends up in a generated block (``--names``): refused
    (a usage error) when :func:`~benchmarks.results.reading.unsafe_cell` says it could break the page."""
    def check(value: str) -> str:
        reason = unsafe_cell(value)
        if reason:
            raise argparse.ArgumentTypeError(f"{flag} {value!r} holds {reason}, which would break the page its "
                                             "table is generated into")
        return value

    return check


def nothing_to_write(what: str) -> ReportFileError:
    """The refusal of a tool whose inputs give it nothing to write (``what``: why)."""
    return ReportFileError(f"{what}: nothing to write, so nothing was written.")


def write_tool_rows(out: Path, rows, columns, kind: str, nothing: str) -> None:
    """Write a tool's ``rows`` as a ``kind`` file at ``out`` (its folder made), or refuse them
    with :func:`nothing_to_write` when there are none (``nothing`` says why); a failed write
    names ``out`` (:func:`writing`)."""
    from benchmarks.results.files import write_rows_csv

    if not rows:
        raise nothing_to_write(nothing)
    with writing(out):
        out.parent.mkdir(parents=True, exist_ok=True)
        write_rows_csv(rows, out, columns, kind=kind)


def two_results_parser(prog: str, description: str) -> argparse.ArgumentParser:
    """The command line of a tool that compares two results files (the spread, the rows
    compared bit for bit): ``RESULTS_A RESULTS_B [--names A B] --out FILE``."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("results_a")
    p.add_argument("results_b")
    p.add_argument("--names", nargs=2, default=("machine A", "machine B"), metavar=("A", "B"),
                   type=page_text("--names"))
    p.add_argument("--out", required=True)
    return p


def write_from_inputs(parser: argparse.ArgumentParser, out: Path, inputs: Mapping[PathLike, str],
                      make_rows: Callable[[], Sequence[Mapping[str, object]]], columns: Sequence[str], kind: str,
                      nothing: str) -> Sequence[Mapping[str, object]]:
    """A tool's write, ending in one line on a refusal: ``out`` refused when it is one of
    ``inputs`` (:func:`check_not_an_input`), the rows made (a ``ValueError`` of ``make_rows``
    is a refusal), then written as a ``kind`` file (:func:`write_tool_rows`); returns them."""
    with one_line(parser):
        check_not_an_input(out, inputs)
        try:
            rows = make_rows()
        except ValueError as error:
            raise ReportFileError(str(error)) from None
        write_tool_rows(out, rows, columns, kind, nothing)
    return rows
