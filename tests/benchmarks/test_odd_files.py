"""Crafted or odd files in the runner's output folder (issue 52, item 11): each is refused in
one line naming the file and what to do (exit 2), never followed, blocked on or used: a
symlinked ``OUT/.lock`` (its target would be truncated), a FIFO ``settings.json`` (the
runner hung), a progress file or run record of valid JSON but another shape, a run record
with a NaN accuracy (it was copied into a results.csv the report then refused)."""

import json
import math
import os

import pytest

from benchmarks.runner import outdir
from benchmarks.runner.config import Options, RunConfig
from benchmarks.runner.groups import load_progress, save_progress
from benchmarks.runner.presets import PRESETS
from benchmarks.runner.refusals import EXIT_REFUSED, Refusal, command_line


def _runs():
    return [RunConfig.from_dict(r) for r in PRESETS["offline"]]


def _row(**changes):
    return dict(dict(dataset="mnist_like_30", scenario="class", tasks=5, backbone="efficientnet_lite0", method="tmc",
                     model="composed", after_task=5, eval_exp="all", accuracy=0.5, train_seconds=1.0,
                     eval_seconds=0.1, regime="from blocks.6", seed=0), **changes)


def test_a_symlinked_lock_file_is_refused_and_its_target_left_alone(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    precious = tmp_path / "thesis.tex"
    precious.write_text("three years of work\n")
    (out / outdir.LOCK_FILE).symlink_to(precious)
    with pytest.raises(Refusal, match=r"\.lock is a symbolic link.*remove it") as refused:
        with outdir.claim(str(out), _runs(), Options()):
            pass  # pragma: no cover
    assert refused.value.code == EXIT_REFUSED
    assert precious.read_text() == "three years of work\n"
    (out / outdir.LOCK_FILE).unlink()
    with outdir.claim(str(out), _runs(), Options()):  # the runner's own lock file: a regular file
        pass
    assert not os.path.islink(out / outdir.LOCK_FILE)


def test_a_dangling_lock_symlink_creates_nothing_at_its_target(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / outdir.LOCK_FILE).symlink_to(tmp_path / "elsewhere")
    with pytest.raises(Refusal, match="symbolic link"):
        with outdir.claim(str(out), _runs(), Options()):
            pass  # pragma: no cover
    assert not (tmp_path / "elsewhere").exists()


@pytest.mark.parametrize("name", [outdir.SETTINGS_FILE, outdir.STATUS_FILE])
def test_a_fifo_in_place_of_a_folder_file_is_refused_without_blocking(tmp_path, name):
    out = tmp_path / "out"
    out.mkdir()
    os.mkfifo(out / name)
    with pytest.raises(Refusal, match=rf"{name}.*not a regular file.*remove it"):
        with outdir.claim(str(out), _runs(), Options()):
            pass  # pragma: no cover


@pytest.mark.parametrize("content", [[1, 2], {"rows": "tmc"}, {"rows": [1]}, {"rows": [{"method": "tmc"}]},
                                     {"rows": [_row(accuracy=float("nan"))]}, {"rows": [_row(accuracy=1.5)]},
                                     {"rows": [_row(accuracy=True)]}, {"rows": [_row(accuracy="0.5")]}],
                         ids=["list", "rows-text", "row-number", "no-accuracy", "nan", "above-1", "bool", "text"])
def test_a_progress_file_of_another_shape_is_refused_naming_it(tmp_path, content):
    path = str(tmp_path / "progress" / "tmc-0123456789abcdef.json")
    os.makedirs(os.path.dirname(path))
    with open(path, "w", encoding="utf-8") as f:
        json.dump(content, f)
    with pytest.raises(Refusal, match=rf"{path}: .*(remove it|--restart)"):
        load_progress(path)


def test_a_progress_file_the_runner_wrote_is_read_back_and_a_missing_one_is_none(tmp_path):
    path = str(tmp_path / "progress" / "tmc-0123456789abcdef.json")
    assert load_progress(path) is None
    save_progress(path, [_row()])
    assert load_progress(path) == [_row()]


def _record(out, **changes):
    """Finish the first run of a claim of ``out`` and edit its record with ``changes``."""
    with outdir.claim(out, _runs(), Options()) as folder:
        name = next(iter(folder.planned))
        folder.finished(name, [_row()], [])
        path = folder._record_path(name)
    with open(path, encoding="utf-8") as f:
        record = json.load(f)
    record.update(changes)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(record, f)
    return path


@pytest.mark.parametrize("changes", [dict(rows=[_row(accuracy=math.nan)]), dict(rows=[_row(accuracy=-0.1)]),
                                     dict(rows=[["tmc", 0.5]]), dict(trials=[3])], ids=["nan", "negative", "row-list",
                                                                                         "trial-number"])
def test_a_run_record_with_a_bad_row_is_refused_naming_it(tmp_path, changes):
    out = str(tmp_path / "out")
    path = _record(out, **changes)
    with pytest.raises(Refusal, match=rf"{path}: .*(remove it|--restart)"):
        with outdir.claim(out, _runs(), Options()):
            pass  # pragma: no cover


def test_a_crafted_run_record_is_one_line_and_exit_2_from_the_command_line(tmp_path, monkeypatch, capsys):
    from benchmarks import run

    out = str(tmp_path / "out")
    path = _record(out, rows=[_row(accuracy=math.nan)])
    monkeypatch.setattr(run, "preflight", lambda runs, options: None)
    monkeypatch.setattr(run, "run_one", lambda config, options, out_dir: ([_row(dataset=config.dataset)], []))
    assert command_line(run.main, "python -m benchmarks.run", ["--preset", "offline", "--out", out]) == EXIT_REFUSED
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and path in err and "Traceback" not in err
