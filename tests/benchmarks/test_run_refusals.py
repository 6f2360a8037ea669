"""The runner and the report refuse bad input at the boundary and never leave a half-written
file (moved from ``tests/avalanche_tmc/test_reliability.py``: they test ``benchmarks``)."""

import re

import pytest


@pytest.mark.parametrize("argv, message", [
    (["--beta", "-25"], "--beta: must be in"),
    (["--beta", "nan"], "--beta: must be in"),
    (["--epochs", "-1"], "--epochs: must be at least 1"),
    (["--epochs", "0"], "--epochs: must be at least 1"),
    (["--tasks", "two"], "--tasks: expected a positive integer"),
    (["--batch-size", "0"], "--batch-size: must be at least 1"),
    (["--lr-tangent", "1e30"], r"--lr-tangent: must be in \(0, 1\]"),
    (["--lr-tangent", "-0.001"], "--lr-tangent: must be in"),
    (["--lr", "inf"], r"--lr: must be in \(0, 10\]"),
    (["--milestones", "15,10"], "milestones must be increasing"),
    (["--projection-dim", "0"], "--projection-dim: must be at least 1"),
    (["--projection-dim", "16385"], "--projection-dim: must be at most 16384"),
])
def test_runner_refuses_bad_arguments(argv, message, capsys):
    from benchmarks import run

    with pytest.raises(SystemExit):
        run.parse_args(argv)
    assert re.search(message, capsys.readouterr().err)


def test_runner_accepts_good_arguments():
    from benchmarks import run

    args = run.parse_args(["--beta", "5", "--epochs", "2", "--lr-tangent", "1e-3", "--lr", "0.05",
                           "--milestones", "10,15"])
    assert (args.beta, args.epochs, args.lr_tangent, args.lr, args.milestones) == (5.0, 2, 1e-3, 0.05, "10,15")


def test_report_files_are_written_atomically(tmp_path, monkeypatch):
    from benchmarks import report, results_io

    rows = [dict(dataset="d", scenario="class", tasks=1, backbone="b", method="tmc", model="composed",
                 after_task=1, eval_exp="all", accuracy=0.5, train_seconds=1.0, eval_seconds=0.1)]
    path = report.write_csv(rows, tmp_path / "results.csv")
    before = path.read_bytes()

    class Boom(Exception):
        pass

    def fail_midway(self, _rows):
        raise Boom()

    monkeypatch.setattr(results_io.csv.DictWriter, "writerows", fail_midway)  # the CSV writer of write_csv
    with pytest.raises(Boom):
        report.write_csv(rows * 2, path)
    assert path.read_bytes() == before  # the old file is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.csv"]  # and no temporary left


def test_runner_checks_the_output_folder_before_training(tmp_path):
    import os

    from benchmarks import run

    file_in_the_way = tmp_path / "file"
    file_in_the_way.write_text("x")
    with pytest.raises(SystemExit, match="not writable"):  # found before any data is loaded
        run.main(["--dataset", "digits", "--out", str(file_in_the_way / "out")])
    locked = tmp_path / "locked"
    locked.mkdir()
    os.chmod(locked, 0o500)
    try:
        if not os.access(locked, os.W_OK):  # (root can write anywhere)
            with pytest.raises(SystemExit, match="not writable"):
                run.main(["--dataset", "digits", "--out", str(locked / "out")])
    finally:
        os.chmod(locked, 0o700)


def test_projection_dim_reaches_the_heads_and_keeps_earlier_folders_settings():
    """``--projection-dim`` is the M of every RanPAC-style head's training config; the default
    M is left out of the settings, so a folder written before the option existed still matches."""
    from benchmarks import run
    from benchmarks.config import DEFAULT_PROJECTION_DIM, Options, progress_key, train_config

    (small,) = run.resolve_runs(run.parse_args(["--dataset", "digits", "--projection-dim", "64"]))
    (default,) = run.resolve_runs(run.parse_args(["--dataset", "digits"]))
    assert train_config(small, Options(), num_classes=10, seed=0).projection_dim == 64
    assert train_config(default, Options(), num_classes=10, seed=0).projection_dim == DEFAULT_PROJECTION_DIM == 2000
    assert progress_key(small, Options(), 0)["projection_dim"] == 64
    assert "projection_dim" not in progress_key(default, Options(), 0)
