"""A paper preset end to end on a generated Caltech-style folder (the authors' recipe, image
workers, the progress line), and the runner's refusals: one line on stderr, exit code 2,
before any data is prepared (issue 28)."""

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from benchmarks import run
from benchmarks.datasets.synthetic import make_image_folder
from benchmarks.runner.presets import PRESETS
from benchmarks.runner.refusals import EXIT_REFUSED, command_line

ROOT = Path(__file__).resolve().parents[2]
# small enough for a test: ResNet-18 at 32 px (random weights from a file), one epoch
SMALL = ["--backbone", "resnet18", "--image-size", "32", "--epochs", "1", "--seeds", "1", "--jobs", "1",
         "--threads", "1"]




@pytest.mark.integration
def test_a_paper_preset_runs_the_authors_recipe_on_a_generated_folder(folder, weights, tmp_path, capsys,
                                                                       monkeypatch):
    monkeypatch.setenv("AVALANCHE_TMC_CACHE", str(tmp_path / "cache"))  # the decoded images
    out = tmp_path / "out"
    rows = run.main(["--preset", "c-caltech256-5", "--data-root", str(folder), "--weights", str(weights), *SMALL,
                     "--methods", "tmc,tme,joint-tangent", "--data-option", "train_per_class=5", "--workers", "2",
                     "--decoded-cache", "--out", str(out)])
    printed = capsys.readouterr().out
    assert "TME: its own components, beta 5.0" in printed and "linearized from after-stem" in printed
    assert "decay on delta 1e-05 (norm)" in printed and "authors transforms" in printed
    assert "2 loader workers" in printed
    assert "img/s" in printed and "ETA" in printed  # the progress line of every epoch
    assert len(list((tmp_path / "cache" / "decoded").iterdir())) == 2  # train and test, decoded once
    final = {r["method"]: r["accuracy"] for r in rows
             if r["model"] == "composed" and r["eval_exp"] == "all" and r["after_task"] == 5}
    assert set(final) == {"tmc", "tme", "joint-tangent"} and all(0 <= a <= 1 for a in final.values())
    with open(out / "results.csv", newline="") as f:
        assert {r["method"] for r in csv.DictReader(f)} == {"tmc", "tme", "joint-tangent"}


@pytest.mark.parametrize("argv, message", [
    (["--preset", "c-caltech256-5", "--data-root", "{empty}", "--weights", "{weights}"], "caltech256 not found"),
    (["--preset", "c-caltech256-5", "--data-root", "{folder}", "--weights", "{weights}", "--data-option",
      "train_per_class=7"], "train_per_class"),
    (["--preset", "c-caltech256-5", "--data-root", "{folder}"], "never downloaded"),
    (["--preset", "c-caltech256-5", "--data-root", "{folder}", "--weights", "{empty}/missing.pth"],
     "no such file"),
    (["--dataset", "digits", "--transforms", "authors", "--freeze-until", "blocks.6"], "caches the frozen trunk"),
    (["--dataset", "digits", "--jobs", "64", "--threads", "64"], "threads on"),
    (["--dataset", "digits", "--methods", "tmc,nonsense"], "Unknown method"),
    (["--dataset", "digits", "--decoded-cache"], "drop --decoded-cache"),
    (["--dataset", "digits", "--backbone", "nonsense-net"], "unknown backbone"),
    (["--preset", "no-such-preset"], "Unknown preset"),
    (["--dataset", "no_such_dataset"], "unknown dataset 'no_such_dataset'"),
])
def test_each_refusal_is_one_line_before_any_data_is_prepared(argv, message, folder, weights, tmp_path, capsys,
                                                               monkeypatch):
    monkeypatch.setattr(torch.hub, "get_dir", lambda: str(tmp_path / "hub"))  # no cached weights
    (tmp_path / "empty").mkdir()
    argv = [a.format(empty=tmp_path / "empty", folder=folder, weights=weights) for a in argv]
    prepared = []
    monkeypatch.setattr(run, "prepare", lambda *a, **k: prepared.append(1))
    code = command_line(run.main, "python -m benchmarks.run", [*argv, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == EXIT_REFUSED == 2
    assert err.count("\n") == 1 and err.startswith("python -m benchmarks.run: error: ") and message in err, err
    assert not prepared and not (tmp_path / "out" / "results.csv").exists()


@pytest.mark.integration
def test_the_module_exits_with_code_2_and_no_traceback(tmp_path):
    env = dict(os.environ, TORCH_HOME=str(tmp_path / "torch"), OMP_WAIT_POLICY="PASSIVE")
    done = subprocess.run([sys.executable, "-m", "benchmarks.run", "--preset", "c-mit67-5", "--data-root",
                           str(tmp_path), "--out", str(tmp_path / "out")], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().count("\n") == 0 and "Traceback" not in done.stderr
    assert "resnet50-19c8e357.pth" in done.stderr and str(tmp_path / "torch") in done.stderr


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A generated folder per layout, 20 classes (enough for 20 tasks)."""
    root = tmp_path_factory.mktemp("layouts")
    for layout in ("caltech256", "mit67", "oxford_pets", "tinyimagenet"):
        make_image_folder(root / layout, layout=layout, classes=20, per_class=6, min_size=40, max_size=60)
    return root


@pytest.mark.slow
@pytest.mark.parametrize("preset", [n for n in PRESETS if n[:2] in ("c-", "t-", "d-")])
def test_every_paper_preset_runs_end_to_end_on_a_generated_folder(preset, folders, weights, tmp_path, monkeypatch):
    """Every paper preset, its recipe as it is but small (ResNet-18 at 32 px, one epoch,
    TMC and TME on their own components), on a generated folder of its dataset's layout."""
    monkeypatch.setenv("AVALANCHE_TMC_CACHE", str(tmp_path / "cache"))
    dataset, tasks = PRESETS[preset][0]["dataset"], PRESETS[preset][0]["tasks"]
    split = ["--data-option", "train_per_class=4"] if dataset == "caltech256" else []
    rows = run.main(["--preset", preset, "--data-root", str(folders / dataset), "--weights", str(weights), *SMALL,
                     "--methods", "tmc,tme", "--workers", "0", "--out", str(tmp_path / "out"), *split])
    final = [r for r in rows if r["model"] == "composed" and r["eval_exp"] == "all" and r["after_task"] == tasks]
    assert sorted(r["method"] for r in final) == ["tmc", "tme"]
