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


TINY = ["--dataset", "digits", "--data-option", "train_per_class=6", "--data-option", "test_per_class=3",
        "--tasks", "2", "--epochs", "1", "--batch-size", "8", "--jobs", "1", "--methods", "tmc"]


@pytest.mark.integration
def test_class_5_progress_files_are_checked_against_the_group_they_claim(tmp_path, capsys, monkeypatch):
    """An emptied progress file counted as a finished group (120 rows of 144, exit 0), a bare
    ``[]`` too, seed 0's file copied under seed 1's name was kept as seed 1's, a row missing
    its keys crashed after training the rest, a folder there said "4: Is a directory"."""
    import json

    from benchmarks.methods import group_named
    from benchmarks.runner.config import progress_key, replay_buffer_size
    from benchmarks.runner.groups import progress_path

    out = tmp_path / "out"
    argv = TINY + ["--seeds", "2", "--out", str(out)]
    trained = run.run_group

    def stop_at_seed_1(group, rows, bm, top, cfg, *args, **kwargs):
        if cfg.seed == 1:
            raise KeyboardInterrupt
        return trained(group, rows, bm, top, cfg, *args, **kwargs)

    with monkeypatch.context() as m:
        m.setattr(run, "run_group", stop_at_seed_1)
        with pytest.raises(KeyboardInterrupt):
            run.main(argv)
    (kept,) = (out / "progress").glob("tangent-*.json")
    rows = json.loads(kept.read_text())["rows"]
    assert {r["seed"] for r in rows} == {0}
    (config,), options = run.resolve(run.parse_args(argv))
    seed_1 = progress_path(str(out / "progress"), progress_key(config, options, 1, replay_buffer_size(60, 10)),
                           group_named("tangent"))

    def refused_with(text, message):
        with open(seed_1, "w", encoding="utf-8") as f:
            f.write(text)
        code = command_line(run.main, "python -m benchmarks.run", argv)
        err = capsys.readouterr().err
        assert code == EXIT_REFUSED and seed_1 in err and message in err, err
        assert kept.is_file()  # nothing stored is lost

    refused_with('{"rows": []}', "holds no row, so no finished group")
    refused_with("[]", 'not a progress file the runner wrote ({"rows": [...]})')
    refused_with(kept.read_text(), "is of seed 0, not 1")
    refused_with(json.dumps({"rows": [{k: v for k, v in r.items() if k != "dataset"} for r in rows]}),
                 "lacks ['dataset']")
    refused_with(json.dumps({"rows": [dict(r, seed=1) for r in rows if r["after_task"] < 2]}),
                 "no row after the last experience on the whole stream")
    os.remove(seed_1)
    os.mkdir(seed_1)
    code = command_line(run.main, "python -m benchmarks.run", argv)
    assert code == EXIT_REFUSED and f"{seed_1}: not a regular file" in capsys.readouterr().err
    os.rmdir(seed_1)
    assert run.main(argv)  # seed 0's file as the runner wrote it: kept; seed 1 trained
    assert "finished by an earlier run: kept" in capsys.readouterr().out


CONFIRM = "docs/results/offline-confirm/results.csv"
PILOT = "docs/results/offline/results.csv"


def test_class_1_the_confirmation_tool_checks_what_it_compares(tmp_path, capsys):
    """A file "confirmed" against itself exited 0; a confirmatory file holding the pilot's seeds
    was accepted; two files with no run in common gave 43 "not run" cells."""
    from benchmarks.results import confirmation
    from benchmarks.results.files import read_csv, write_csv

    root = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    pilot, confirm = read_csv(os.path.join(root, PILOT)), read_csv(os.path.join(root, CONFIRM))
    overlapping = tmp_path / "overlap.csv"
    write_csv(confirm + [dict(r, seed=0) for r in confirm if r["seed"] == 100], overlapping)
    elsewhere = tmp_path / "elsewhere.csv"
    write_csv([dict(r, dataset="other") for r in confirm], elsewhere)
    for second, message in ((os.path.join(root, PILOT), "hold the same rows: a run cannot confirm itself"),
                            (str(overlapping), "Seed(s) 0 are in both files"),
                            (str(elsewhere), "no run in common")):
        with pytest.raises(SystemExit):
            confirmation.main([os.path.join(root, PILOT), second, "--out", str(tmp_path / "v.csv")])
        assert message in capsys.readouterr().err
        assert not (tmp_path / "v.csv").exists()
    assert len(confirmation.confirmation_rows(pilot, confirm, 200)) == 43  # the real pair: as committed


def test_class_2_a_cell_below_the_seed_rule_is_not_resolved_wherever_it_is_shown(tmp_path):
    """With Soup trimmed to seeds 100 and 101, the terminal printed "TME > Soup ...: holds" from
    2 seeds and the report's count line counted it, while its table said "not resolved at 2 seeds"."""
    from benchmarks.results.claims import NOT_RESOLVED, judged_cells, verdict_table
    from benchmarks.results.confirmation import confirmation_rows
    from benchmarks.results.files import read_csv, run_label
    from benchmarks.runner.terminal import decided_claims

    root = os.path.dirname(os.path.dirname(os.path.dirname(__file__)))
    rows = [r for r in read_csv(os.path.join(root, CONFIRM)) if r["method"] != "soup" or r["seed"] in (100, 101)]
    cells, _, _ = judged_cells(rows)
    two = [c for c in cells.values() if c["seeds"] == 2]
    assert two and all(c["verdict"] == NOT_RESOLVED for c in two)
    table = verdict_table(rows, run_label)
    assert table.count("**not resolved at 2 seeds**") == len([c for c in two if c["repeats"] is None])
    holds = sum(1 for c in cells.values() if c["verdict"] == "holds")
    assert f": {holds} hold," in table  # the count line counts the verdicts the table shows
    assert "TME > Soup" not in decided_claims(rows, "results.md")
    assert confirmation_rows(read_csv(os.path.join(root, PILOT)), rows, 200)  # no KeyError


def _folder(root, classes=3, per_class=5, seed=0):
    from benchmarks.datasets.synthetic import make_image_folder

    return make_image_folder(root, "folder", classes=classes, per_class=per_class, min_size=24, max_size=30,
                             seed=seed)


def test_class_3_a_folder_is_read_faithfully_or_refused(tmp_path, capsys):
    """A corrupt image late in a class passed the dataset check; a class folder linked to the
    root held every image; Train/+Test/, train/+val/ and train/+test/ beside class folders were
    taken without a word; a 16-bit PNG read as 99.6% white."""
    import numpy as np
    from PIL import Image

    from avalanche_tmc.factories import DatasetNotFoundError, read_image_folder
    from avalanche_tmc.factories.image_folder import read_rgb
    from benchmarks.datasets.__main__ import main as datasets_main

    root = _folder(tmp_path / "birds")
    late = sorted((root / "class01").iterdir())[-1]
    late.write_bytes(b"not an image")
    assert datasets_main(["folder", "--data-root", str(root)]) == 1
    assert f"1 image(s) cannot be read: {late}" in capsys.readouterr().out
    late.unlink()
    assert datasets_main(["folder", "--data-root", str(root)]) == 0
    out = capsys.readouterr().out
    assert "every image read" in out and "split: each class by seed 0, 80% for training" in out

    (root / "everything").symlink_to(root, target_is_directory=True)
    with pytest.raises(DatasetNotFoundError, match="class folder 'everything' is a link to the folder itself"):
        read_image_folder(root)
    (root / "everything").unlink()
    (root / "again").symlink_to(root / "class00", target_is_directory=True)
    with pytest.raises(DatasetNotFoundError, match="'again' is a link to class00 inside it"):
        read_image_folder(root)
    (root / "again").unlink()

    for names, message in ((("Train", "Test"), "holds Test/, Train/, which would be read as classes"),
                           (("train", "val"), "holds train/, val/, which would be read as classes")):
        split = tmp_path / "-".join(names)
        for name in names:
            _folder(split / name, classes=2)
        with pytest.raises(DatasetNotFoundError, match=message):
            read_image_folder(split)
    beside = _folder(tmp_path / "beside", classes=2)
    for name in ("train", "test"):
        _folder(beside / name, classes=2)
    with pytest.raises(DatasetNotFoundError, match=r"train/ and test/ beside other folders \('class00', 'class01'\)"):
        read_image_folder(beside)
    own = tmp_path / "own"
    for name in ("train", "test"):
        _folder(own / name, classes=2)
    assert read_image_folder(own).own_split

    wide = (np.arange(32 * 32).reshape(32, 32) * 64).astype(np.uint16)
    Image.fromarray(wide).save(tmp_path / "wide.png")
    with Image.open(tmp_path / "wide.png") as image:
        assert image.mode.startswith("I") and np.asarray(image.convert("RGB")).mean() > 250  # Pillow's clipping
    got = np.asarray(read_rgb(tmp_path / "wide.png"))
    assert got.shape == (32, 32, 3) and abs(got[..., 0].mean() - wide.mean() / 257) < 0.6


def test_class_4_a_folder_changed_between_runs_is_not_mixed_into_one_table(tmp_path, capsys):
    """A class added between a Ctrl-C and the resume, or between two runs into one --out, mixed
    rows of the 4-class and the 5-class folder in one table: the folder's content is in the key."""
    from benchmarks.datasets.own_folder import folder_digest

    root = _folder(tmp_path / "birds", classes=4, per_class=6)
    before = folder_digest(root)
    argv = ["--dataset", "folder", "--data-root", str(root), "--tasks", "2", "--epochs", "1", "--methods", "tmc",
            "--seeds", "1", "--jobs", "1", "--image-size", "24", "--out", str(tmp_path / "out")]
    assert run.main(argv)
    _folder(tmp_path / "more", classes=1, per_class=6, seed=5)
    os.rename(tmp_path / "more" / "class00", root / "class04")
    assert folder_digest(root) != before
    code = command_line(run.main, "python -m benchmarks.run", argv)
    err = capsys.readouterr().err
    assert code == EXIT_REFUSED and "--restart" in err
    assert f"the image folder's content changed (files added, removed or replaced; digest '{before}' -> " \
           f"'{folder_digest(root)}')" in err


@pytest.mark.integration
@pytest.mark.parametrize("name", ["bi\nrds", "title\x1b]0;owned\x07", "a<!--b-->c", os.fsdecode(b"caf\xe9")])
def test_class_6_every_name_is_escaped_and_the_runners_report_reads_it_back(tmp_path, name, capsys):
    """A folder name with a newline, an escape sequence or an HTML comment trained and exited 0,
    then the report refused the runner's own results.csv; a name that is not UTF-8 crashed
    after training (UnicodeEncodeError); a bad file's name was printed with its raw control
    characters."""
    from benchmarks import report

    root = _folder(tmp_path / name, classes=2, per_class=5)
    out = tmp_path / "out"
    rows = run.main(["--dataset", "folder", "--data-root", str(root), "--tasks", "2", "--epochs", "1", "--methods",
                     "tmc", "--seeds", "1", "--jobs", "1", "--image-size", "24", "--out", str(out)])
    printed = capsys.readouterr().out
    label = rows[0]["dataset"]
    assert label != name and "\x1b" not in printed and "\x07" not in printed and "<!--" not in label
    assert report.main([str(out / "results.csv")])  # the runner's own file reads back
    late = sorted((root / "class01").iterdir())[-1]
    bad = late.with_name("bad\x1b[2J.png")
    late.rename(bad)
    bad.write_bytes(b"not an image")
    from benchmarks.datasets.__main__ import main as datasets_main

    assert datasets_main(["folder", "--data-root", str(root)]) == 1
    assert "\x1b" not in capsys.readouterr().out


def test_class_10_the_gpu_check_dry_run_writes_nothing_into_docs_and_a_full_disk_says_so(tmp_path, monkeypatch,
                                                                                           capsys):
    from benchmarks.tools import gpu_check

    seen = []

    def record(workdir, out):
        seen.append(out)
        raise ReportFileError("stop here")

    with monkeypatch.context() as m:
        m.setattr(gpu_check, "_check_folders", record)
        with pytest.raises(SystemExit):
            gpu_check.main(["--dry-run"])
    assert "docs" not in seen[0] and "avalanche-tmc-gpu-check" in seen[0]
    capsys.readouterr()

    def full(workdir, dry_run):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 64 vs 0")

    monkeypatch.setattr(gpu_check, "_prepare_inputs", full)
    with pytest.raises(SystemExit) as exit_info:
        gpu_check.main(["--dry-run", "--workdir", str(tmp_path / "work"), "--out", str(tmp_path / "out")])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "the check's inputs cannot be written" in err and "disk is most likely full" in err
    assert err.count("\n") == 1


@pytest.mark.timeout(60)
def test_class_10_a_fifo_at_a_cache_path_is_not_read(tmp_path, monkeypatch):
    """A FIFO where the digits' tensor cache belongs hung the run (reading it blocks): it is
    not a regular file, so it is rebuilt and replaced, never read."""
    import torch

    from benchmarks.datasets import cache

    monkeypatch.setenv("AVALANCHE_TMC_CACHE", str(tmp_path))
    (tmp_path / "tensors").mkdir()
    os.mkfifo(tmp_path / "tensors" / "k.pt")
    value = cache.cached_tensors("k", lambda: {"x": torch.ones(2)})
    assert torch.equal(value["x"], torch.ones(2)) and (tmp_path / "tensors" / "k.pt").is_file()
