"""Issue 61: every failure says what to do, fifth round. One test per class of the round's
silent wrong answers and unclear crashes, each refused in one line before any work (or
answered right), with nothing lost."""

import os

import pytest

from benchmarks import run
from benchmarks.results.files import ReportFileError
from benchmarks.runner.refusals import EXIT_REFUSED, Refusal, command_line


def _refused(argv, capsys, monkeypatch):
    """Run the runner's command line on ``argv`` with no data prepared: its exit code and stderr."""
    prepared = []
    monkeypatch.setattr(run, "prepare", lambda *a, **k: prepared.append(1))
    code = command_line(run.main, "python -m benchmarks.run", argv)
    assert not prepared
    return code, capsys.readouterr().err


def test_class_8_no_abbreviation_and_a_resume_line_without_restart(capsys, monkeypatch, tmp_path):
    """``--resta`` was taken for ``--restart``, and the Ctrl-C line's resume command, which
    drops only ``--restart``, restarted again."""
    with pytest.raises(SystemExit):
        run.parse_args(["--resta"])
    assert "did you mean --restart?" in capsys.readouterr().err
    from benchmarks.runner.terminal import interrupted_message

    line = interrupted_message(str(tmp_path), ["--dataset", "digits", "--restart", "--out", str(tmp_path)])
    assert "--restart" not in line and line.endswith(f"--dataset digits --out {tmp_path}")


def test_class_8_a_confirmatory_run_may_not_draw_the_pilots_class_orders(capsys, monkeypatch, tmp_path):
    code, err = _refused(["--preset", "offline-confirm", "--no-order-by-seed", "--data-seed", "0", "--out",
                          str(tmp_path / "o")], capsys, monkeypatch)
    assert code == EXIT_REFUSED and "would draw the class orders or shards of data seed(s) 0, the pilot's" in err


def test_class_9_tuning_training_free_heads_is_refused_before_the_data(capsys, monkeypatch, tmp_path):
    code, err = _refused(["--dataset", "digits", "--methods", "ncm", "--tune", "--out", str(tmp_path / "o")],
                         capsys, monkeypatch)
    assert code == EXIT_REFUSED and "--tune chooses learning rates and epochs, but ncm train nothing" in err
    from benchmarks.tuning.grid import TuningGrid, tune

    with pytest.raises(ValueError, match="Nothing to tune"):
        tune([], TuningGrid.from_dict({}), lambda *a: {})


def test_class_9_a_meta_device_is_refused_before_the_data(capsys, monkeypatch, tmp_path):
    code, err = _refused(["--dataset", "digits", "--device", "meta", "--out", str(tmp_path / "o")], capsys,
                         monkeypatch)
    assert code == EXIT_REFUSED and "--device meta: a meta device holds shapes, no values" in err


def test_class_9_a_folder_where_a_file_belongs_is_named_not_its_descriptor(tmp_path, capsys):
    from benchmarks import report
    from benchmarks.results.reading import read_text
    from benchmarks.runner.folder_files import read_regular

    folder = tmp_path / "results.csv"
    folder.mkdir()
    with pytest.raises(ReportFileError, match=f"{folder}: not a regular file"):
        read_text(folder)
    with pytest.raises(Refusal, match=f"{folder}: not a regular file"):
        read_regular(str(folder), "remove it")
    with pytest.raises(SystemExit):
        report.main([str(folder)])
    err = capsys.readouterr().err
    assert f"{folder}: not a regular file" in err and "Is a directory" not in err
    assert not os.listdir(folder)
