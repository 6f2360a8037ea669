"""Issue 42, "every failure says what to do": the runner's and the report's failures that
ended in a traceback get one line and exit code 2, found before anything is written."""

import csv
import os
import re
from pathlib import Path

import pytest


@pytest.mark.parametrize("argv, message", [
    (["--seed", "-1"], "--seed: must be at least 0"),
    (["--seed", "1e25"], "--seed: expected a non-negative integer"),
    (["--seed", "10000000000000000000000000"], r"--seed: must be in 0\.\.2147483647"),
    (["--data-seed", "4294967296"], r"--data-seed: must be in 0\.\.2147483647"),
    (["--seeds", "99999999999"], r"--seeds: a seed count must be in 1\.\.1000"),
    (["--seeds", "0,4294967296"], r"--seeds: seeds must be distinct integers in 0\.\.2147483647"),
    (["--image-size", "1000000"], r"--image-size: must be in 1\.\.4096"),
    (["--batch-size", "100000000000000000000"], r"--batch-size: must be in 1\.\.65536"),
    (["--workers", "1000000000"], r"--workers: must be in 0\.\.256"),
    (["--parallel", "1000000000"], r"--parallel: must be in 1\.\.256"),
])
def test_numbers_out_of_range_are_refused_while_parsing(argv, message, capsys):
    from benchmarks import run

    with pytest.raises(SystemExit) as exit_info:
        run.parse_args(argv)
    assert exit_info.value.code == 2
    assert re.search(message, capsys.readouterr().err)


# ------------------------------------------------------------- the report given another kind of CSV (A5)

ROOT = Path(__file__).resolve().parents[2]
OTHER_FILES = {"tuning": ROOT / "docs/results/offline-32px-tuning/tuning.csv",
               "spread": ROOT / "docs/results/machines/spread.csv",
               "variance": ROOT / "docs/results/variance/variance.csv",
               "results": ROOT / "docs/results/offline-32px/results.csv"}


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
@pytest.mark.parametrize("kind", ["results", "tuning", "spread", "variance", "test-costs", None])
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
    from benchmarks.tools import spread as machines

    with pytest.raises(SystemExit) as exit_info:
        machines.main([str(OTHER_FILES[source]), str(OTHER_FILES["results"]), "--out", str(tmp_path / "s.csv")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert f"a {source} file, not a results file" in err and "lacks the column(s)" in err
    assert not (tmp_path / "s.csv").exists()


# ------------------------------------------------------------- the runner's preflight: nothing written first (A6)

# small enough for a test: ResNet-18 at 32 px (random weights from a file), one epoch
QUICK = ["--epochs", "1", "--seeds", "1", "--jobs", "1", "--threads", "1", "--methods", "tmc", "--workers", "0"]
SMALL = ["--backbone", "resnet18", "--image-size", "32", *QUICK]
CALTECH = ["--preset", "c-caltech256-5", "--data-root", "{folder}", *SMALL, "--data-option", "train_per_class=5"]
DIGITS = ["--dataset", "digits", *QUICK]




def _runner(argv, capsys):
    """(exit code, the one stderr line) of ``python -m benchmarks.run argv``, in-process."""
    from benchmarks import run
    from benchmarks.runner.refusals import command_line

    code = command_line(run.main, "python -m benchmarks.run", argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.count("\n") <= 1, err
    return code, err


@pytest.mark.parametrize("argv, message", [
    ([*CALTECH, "--weights", "{weights}", "--tasks", "6"], "--tasks 6: caltech256 has 5 classes"),
    ([*DIGITS, "--tasks", "11"], "--tasks 11: digits has 10 classes"),
    ([*DIGITS, "--scenario", "task", "--tasks", "12"], "--tasks 12: digits has 10 classes"),
    ([*CALTECH, "--weights", "{weights}", "--data-option", "nonsense=1"],
     "--data-option nonsense: dataset caltech256 takes no such option"),
    ([*DIGITS, "--data-option", "colour=red"], "--data-option colour: dataset digits takes no such"),
    ([*DIGITS, "--data-option", "normalization=3"], "--data-option normalization: dataset digits"),
    ([*CALTECH, "--weights", "{garbage}"], "not a state dict of resnet18"),
    ([*CALTECH, "--weights", "{other}"], "not a state dict of resnet18"),
    ([*CALTECH, "--weights", "{misnamed}"], "does not start with 0123abcd"),
])
def test_what_can_be_checked_is_refused_before_anything_is_written(argv, message, folder, weights, tmp_path,
                                                                     capsys, monkeypatch):
    """These failed after settings.json was written (a traceback, and a retry refused as "holds results of other
    settings"): refused by the preflight, no output folder made."""
    import torch

    from benchmarks import run

    garbage = tmp_path / "garbage.pth"
    garbage.write_bytes(b"\x80\x02 not a state dict" * 100)
    other = tmp_path / "other.pth"
    torch.save({"fc.weight": torch.zeros(3, 3)}, other)
    misnamed = tmp_path / "resnet18-0123abcd.pth"
    misnamed.write_bytes(weights.read_bytes())
    prepared = []
    monkeypatch.setattr(run, "prepare", lambda *a, **k: prepared.append(1))
    argv = [a.format(folder=folder, weights=weights, garbage=garbage, other=other, misnamed=misnamed) for a in argv]
    out = tmp_path / "new" / "out"
    code, err = _runner([*argv, "--out", str(out)], capsys)
    assert code == 2 and message in err, err
    assert not prepared and not (tmp_path / "new").exists()


def test_a_corrupt_image_is_named_and_leaves_no_settings_behind(folder, weights, tmp_path, capsys, monkeypatch):
    """A corrupt JPEG (found when the images are decoded) failed with PIL's error, naming no file, after
    settings.json was written: the retry with other settings was refused."""
    import shutil

    monkeypatch.setenv("AVALANCHE_TMC_CACHE", str(tmp_path / "cache"))
    broken = tmp_path / "broken"
    shutil.copytree(folder, broken)
    for image in broken.rglob("*.jpg"):
        image.write_bytes(image.read_bytes()[:40])  # cut: PIL cannot decode it
    argv = [a.format(folder=broken) for a in CALTECH] + ["--weights", str(weights)]
    out = tmp_path / "out"
    code, err = _runner([*argv, "--out", str(out)], capsys)
    assert code == 2 and "not a readable image" in err and str(broken) in err and ".jpg" in err, err
    assert not out.exists()
    existing = tmp_path / "existing"  # a folder that existed keeps nothing of the failed attempt
    existing.mkdir()
    code, err = _runner([*argv, "--out", str(existing)], capsys)
    assert code == 2 and "not a readable image" in err
    assert sorted(p.name for p in existing.iterdir()) in ([], [".lock"])


def test_a_failure_before_any_run_finished_restores_the_settings(tmp_path):
    """The folder's settings and status are put back (or removed) when nothing finished; kept once a run did."""
    from benchmarks.runner import outdir
    from benchmarks.runner.config import Options, RunConfig
    from benchmarks.runner.presets import PRESETS

    runs = [RunConfig.from_dict(dict(PRESETS["offline"][0]))]
    out = tmp_path / "out"
    with pytest.raises(RuntimeError):
        with outdir.claim(str(out), runs, Options()):
            assert (out / outdir.SETTINGS_FILE).exists()
            raise RuntimeError("a corrupt image")
    assert not out.exists()
    out.mkdir()
    (out / outdir.SETTINGS_FILE).write_text('{"held": 1}\n')
    record = out / outdir.RUNS_DIR / "0123456789abcdef.json"  # a finished run's record of the earlier settings
    record.parent.mkdir()
    record.write_text('{"name": "earlier"}\n')
    with pytest.raises(RuntimeError):
        with outdir.claim(str(out), runs, Options(restart=True)):
            raise RuntimeError("a corrupt image")
    assert (out / outdir.SETTINGS_FILE).read_text() == '{"held": 1}\n' and not (out / outdir.STATUS_FILE).exists()
    assert record.read_text() == '{"name": "earlier"}\n'  # --restart removes records only once a run finished
    with pytest.raises(RuntimeError):
        with outdir.claim(str(out), runs, Options(restart=True)) as folder:
            folder.finished(next(iter(folder.planned)))
            raise RuntimeError("after a run finished")
    assert outdir.SETTINGS_FILE in os.listdir(out) and '"held"' not in (out / outdir.SETTINGS_FILE).read_text()
    assert not record.exists()


@pytest.mark.parametrize("number, advice", [(28, "disk is full"), (27, "file-size limit"), (30, "read-only"),
                                            (5, "check the path")])
def test_an_oserror_while_writing_the_results_is_one_line(tmp_path, capsys, monkeypatch, number, advice):
    """A full disk (any OSError of a write) while the runner wrote its results ended in a traceback."""
    from benchmarks import report, run

    def full(rows, out_dir, **kwargs):
        raise OSError(number, os.strerror(number), os.path.join(out_dir, "results.csv"))

    monkeypatch.setattr(run, "preflight", lambda runs, options: None)
    monkeypatch.setattr(run, "run_one", lambda config, options, out_dir: ([], []))
    monkeypatch.setattr(report, "write_report", full)
    code, err = _runner(["--dataset", "digits", "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "results.csv" in err and os.strerror(number) in err and advice in err, err


# ------------------------------------------------------------- the runner's --help and progress (B11)


def test_every_runner_option_has_help():
    """Seven options had no help text."""
    from benchmarks.runner.arguments import build_parser

    parser = build_parser()
    assert [a.option_strings for a in parser._actions if not (a.help or "").strip()] == []


@pytest.mark.integration
def test_the_runner_s_help_imports_neither_torch_nor_avalanche():
    """`python -m benchmarks.run --help` took 9 s: it imported torch and Avalanche before parsing."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "benchmarks.run", "--help"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "--preset" in done.stdout
    imported = {line.rsplit("|", 1)[-1].strip().split(".")[0] for line in done.stderr.splitlines() if "|" in line}
    assert not imported & {"torch", "avalanche", "numpy"}, sorted(imported & {"torch", "avalanche", "numpy"})


@pytest.mark.parametrize("done, total, elapsed, line", [
    (1, 4, 60.0, "1/4 method groups done, 1m00s elapsed, ETA 3m00s"),
    (3, 12, 90.0, "3/12 method groups done, 1m30s elapsed, ETA 4m30s"),
    (5, 5, 3725.0, "5/5 method groups done, 1h02m elapsed, ETA 0s"),
])
def test_the_main_job_s_progress_line_has_the_elapsed_time_and_an_eta(done, total, elapsed, line):
    from benchmarks.runner.epoch_log import groups_progress

    assert groups_progress(done, total, elapsed) == line


@pytest.mark.parametrize("jobs", [1, 2])
def test_run_tasks_reports_each_finished_task_in_this_process(jobs):
    from benchmarks.runner.forked_jobs import run_tasks

    reported = []
    assert run_tasks(abs, [-3, -1, -2], jobs, on_done=reported.append) == [3, 1, 2]
    assert reported == [1, 2, 3]
