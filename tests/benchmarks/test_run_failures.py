"""Issue 42, "every failure says what to do": the runner's and the report's failures that
ended in a traceback get one line and exit code 2, found before anything is written."""

import csv
import re
from pathlib import Path

import pytest


@pytest.mark.parametrize("argv, message", [
    (["--seed", "-1"], "--seed: must be at least 0"),
    (["--seed", "1e25"], "--seed: expected a non-negative integer"),
    (["--seed", "10000000000000000000000000"], r"--seed: must be in 0\.\.4294967295"),
    (["--data-seed", "4294967296"], r"--data-seed: must be in 0\.\.4294967295"),
    (["--seeds", "99999999999"], r"--seeds: a seed count must be in 1\.\.1000"),
    (["--seeds", "0,4294967296"], r"--seeds: seeds must be distinct integers in 0\.\.4294967295"),
    (["--image-size", "1000000"], r"--image-size: must be in 1\.\.4096"),
])
def test_numbers_out_of_range_are_refused_while_parsing(argv, message, capsys):
    from benchmarks import run

    with pytest.raises(SystemExit) as exit_info:
        run.parse_args(argv)
    assert exit_info.value.code == 2
    assert re.search(message, capsys.readouterr().err)


# ------------------------------------------------------------- the report given another kind of CSV (A5)

ROOT = Path(__file__).resolve().parents[2]
OTHER_FILES = {"tuning": ROOT / "docs/results/offline-tuning/tuning.csv",
               "spread": ROOT / "docs/results/machines/spread.csv",
               "variance": ROOT / "docs/results/variance/variance.csv",
               "results": ROOT / "docs/results/offline/results.csv"}


def _relabelled(source: Path, kind, out: Path) -> Path:
    """``source`` with its kind column set to ``kind`` on every row (None: the column dropped)."""
    with source.open(newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    at = rows[0].index("kind")
    rows = [r[:at] + r[at + 1:] for r in rows] if kind is None else [rows[0]] + [r[:at] + [kind] for r in rows[1:]]
    with out.open("w", newline="", encoding="utf-8") as f:
        csv.writer(f, lineterminator="\n").writerows(rows)
    return out


@pytest.mark.parametrize("source", sorted(OTHER_FILES))
@pytest.mark.parametrize("kind", ["results", "tuning", "spread", "variance", None])
def test_the_report_given_another_kind_of_csv_names_the_missing_columns(tmp_path, capsys, source, kind):
    """A tuning or spread CSV where a results.csv was expected (or labelled as another kind) raised KeyError."""
    from benchmarks import report

    if kind == source:
        pytest.skip("the file itself: reported")
    path = _relabelled(OTHER_FILES[source], kind, tmp_path / "given.csv")
    readme = tmp_path / "README.md"
    readme.write_text("text\n")
    for extra in ([], ["--readme", str(readme)]):
        with pytest.raises(SystemExit) as exit_info:
            report.main([str(path), *extra])
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
        assert "results.csv" in err
        assert "lacks the column(s)" in err or source == "results"  # a results file that lost its kind column
    assert readme.read_text() == "text\n" and sorted(p.name for p in tmp_path.iterdir()) == ["README.md", "given.csv"]


@pytest.mark.parametrize("source", ["tuning", "spread", "variance"])
def test_the_machine_comparison_given_another_kind_of_csv_says_what_it_expects(tmp_path, capsys, source):
    from benchmarks import machines

    with pytest.raises(SystemExit) as exit_info:
        machines.main([str(OTHER_FILES[source]), str(OTHER_FILES["results"]), "--out", str(tmp_path / "s.csv")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"a {source} file, not a results file" in err and "lacks the column(s)" in err
    assert not (tmp_path / "s.csv").exists()
