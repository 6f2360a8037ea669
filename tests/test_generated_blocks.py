"""Every table README.md and the pages under docs/ show from a results file equals what that
committed file gives: the command each block names would change nothing.

A block is ``<!-- generated from PATH by: python -m benchmarks.report FILE --readme PAGE -->``
... ``<!-- end generated -->``: PATH is the results file relative to the page, FILE and PAGE
the same file and the page itself relative to the repository root (the command is run
from there)."""

import re
from pathlib import Path

import pytest

from benchmarks import report
from tests.doc_pages import ROOT, documents, prose_lines, relative

BEGIN = re.compile(r"^<!-- generated from (\S+) by: python -m benchmarks\.report (\S+) --readme (\S+)"
                   r"( --summary)? -->$")
OPENED = "<!-- generated from "


def generated_blocks(path: Path):
    """``(line, path in the marker, FILE, PAGE)`` of every generated block of ``path``
    (markers quoted in fenced code are not blocks); a marker line of another form, or begin
    and end markers that do not pair up, fail."""
    lines = prose_lines(path.read_text(encoding="utf-8"))
    found, open_at = [], None
    for number, line in enumerate(lines, 1):
        if line.startswith(OPENED):
            m = BEGIN.match(line)
            assert m, f"{relative(path)}:{number}: a generated-block marker of an unknown form: {line}"
            assert open_at is None, f"{relative(path)}:{number}: the block opened on line {open_at} is not closed"
            open_at = number
            found.append((number, *m.groups()))
        elif line == report.GENERATED_END:
            assert open_at is not None, f"{relative(path)}:{number}: an end marker without a block"
            open_at = None
    assert open_at is None, f"{relative(path)}:{open_at}: the generated block is not closed"
    return found


BLOCKS = [(path, *block) for path in documents() for block in generated_blocks(path)]


def test_the_results_are_shown_where_the_readers_look():
    shown = {(relative(path), marker) for path, _, marker, _, _, _ in BLOCKS}
    assert ("README.md", "docs/results/offline-confirm/results.csv") in shown  # the confirmatory run decides
    assert ("docs/results.md", "results/offline-confirm/verdicts.csv") in shown  # and says what changed
    assert ("docs/results.md", "results/machines/spread.csv") in shown  # the cross-machine spread
    for results_file in ("offline/results.csv", "offline-confirm/results.csv", "offline-tuning/tuning.csv",
                         "variance/variance.csv", "offline-blocks4/results.csv"):
        assert ("docs/results.md", f"results/{results_file}") in shown, results_file


def test_marker_parser_refuses_other_forms(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("<!-- generated from a.csv by: python -m benchmarks.report a.csv -->\n<!-- end generated -->\n")
    with pytest.raises(AssertionError, match="unknown form"):
        generated_blocks(page)
    page.write_text("<!-- generated from a.csv by: python -m benchmarks.report a.csv --readme page.md -->\n")
    with pytest.raises(AssertionError, match="not closed"):
        generated_blocks(page)


@pytest.mark.parametrize("path, line, marker, command_file, command_page, summary", BLOCKS,
                         ids=[f"{relative(b[0])}:{b[1]}" for b in BLOCKS])
def test_block_is_generated_from_its_committed_file(path, line, marker, command_file, command_page, summary):
    where = f"{relative(path)}:{line}"
    results_file = (path.parent / marker).resolve()
    assert results_file.is_file(), f"{where}: {marker} does not exist"
    assert (ROOT / command_page).resolve() == path.resolve(), f"{where}: its command rewrites {command_page}"
    assert (ROOT / command_file).resolve() == results_file, f"{where}: its command reads {command_file}, not {marker}"
    assert report.update_readme(path, marker, report.generated_block(results_file, summary=bool(summary)),
                                check=True), (
        f"{where}: the block from {marker} is stale: run python -m benchmarks.report {command_file} "
        f"--readme {command_page}{summary or ''}")


def test_the_report_finds_the_blocks_this_test_finds():
    """benchmarks.report rewrites exactly the blocks checked here (issue 30, case 11: it
    took markers quoted in a fenced example for the block)."""
    for path in documents():
        text = path.read_text(encoding="utf-8")
        found = [(begin + 1, marker) for begin, _, marker, _ in report.find_generated_blocks(text, relative(path))]
        assert found == [(line, marker) for line, marker, *_ in generated_blocks(path)], relative(path)


def test_markers_in_a_fenced_example_are_not_a_block(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("````markdown\n```\n<!-- generated from a.csv by: python -m benchmarks.report a.csv -->\n```\n"
                    "<!-- end generated -->\n````\n")
    assert generated_blocks(page) == [] == report.find_generated_blocks(page.read_text())
