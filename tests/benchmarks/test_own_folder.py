"""The runner on a researcher's own image folder (issue 52, items 1 and 7): ``--dataset
folder --data-root DIR`` named after DIR in the rows, the tables and the output folder; its
refusal without ``--data-root``; ``python -m benchmarks.datasets`` listing without loading
and checking one dataset with the layout it expects."""

import csv

import pytest

from benchmarks import run
from benchmarks.datasets import registry
from benchmarks.datasets.__main__ import main as datasets_main
from benchmarks.datasets.synthetic import make_image_folder
from benchmarks.runner.refusals import EXIT_REFUSED, command_line
from tests.benchmarks.test_paper_preset import SMALL


@pytest.fixture(scope="module")
def birds(tmp_path_factory):
    """A researcher's folder named ``birds``: 4 classes of 6 small JPEGs."""
    return make_image_folder(tmp_path_factory.mktemp("own") / "birds", "folder", classes=4, per_class=6,
                             min_size=40, max_size=56)


@pytest.mark.integration
def test_a_run_on_your_own_folder_is_named_after_it(birds, weights, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # the default output folder: results/<the folder's name>
    rows = run.main(["--dataset", "folder", "--data-root", str(birds), "--weights", str(weights), *SMALL,
                     "--methods", "tmc,naive", "--tasks", "2", "--freeze-until", "layer4"])
    printed = capsys.readouterr().out
    out = tmp_path / "results" / "birds"
    assert "[birds] class-incremental, 2 experiences, 4 classes" in printed
    with open(out / "results.csv", newline="") as f:
        written = list(csv.DictReader(f))
    assert {r["dataset"] for r in written} == {"birds"} == {r["dataset"] for r in rows}
    assert "C-birds (2 tasks" in (out / "results.md").read_text()
    assert (out / "accuracy_curves.png").is_file()
    # 6 images a class, 0.8 for training: 5 + 1 each, the test stream holds 4 images
    finals = [r for r in rows if r["method"] == "tmc" and r["eval_exp"] == "all" and r["after_task"] == 2]
    assert finals and all(round(r["accuracy"] * 4) == r["accuracy"] * 4 for r in finals)


def test_folder_without_data_root_is_one_line_before_any_data(tmp_path, capsys, monkeypatch):
    prepared = []
    monkeypatch.setattr(run, "prepare", lambda *a, **k: prepared.append(1))
    code = command_line(run.main, "python -m benchmarks.run", ["--dataset", "folder", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == EXIT_REFUSED and err.count("\n") == 1 and "pass --data-root DIR" in err and not prepared


def test_every_list_of_folder_datasets_reads_the_registry():
    assert registry.FOLDER_DATASETS == ("caltech256", "mit67", "oxford_pets", "tinyimagenet", "folder")
    assert set(registry.OFFLINE_DATASETS) | set(registry.FOLDER_DATASETS) == set(registry.DATASETS)
    assert all(registry.DATASETS[n].layout for n in registry.FOLDER_DATASETS)
    with pytest.raises(ValueError, match="kind='online'"):
        registry.DatasetEntry(print, "x", "y", kind="online")
    assert registry.dataset_label("folder", "/data/birds/") == "birds"
    assert registry.dataset_label("caltech256", "/data") == "caltech256"


def test_the_listing_loads_nothing_and_one_name_loads_only_that_one(birds, monkeypatch, capsys):
    loaded = []
    for name, entry in list(registry.DATASETS.items()):
        def record(*a, _name=name, _loader=entry.loader, **k):
            loaded.append(_name)
            return _loader(*a, **k)
        monkeypatch.setitem(registry.DATASETS, name, registry.DatasetEntry(record, entry.description, entry.requires,
                                                                           entry.kind, entry.layout))
    assert datasets_main([]) == 0
    listing = capsys.readouterr().out
    assert not loaded
    assert "caltech256 (folder)" in listing and "folder (folder)" in listing and "digits (offline)" in listing
    assert datasets_main(["folder", "--data-root", str(birds), "--image-size", "8"]) == 0
    out = capsys.readouterr().out
    assert loaded == ["folder"] and "train 20, test 4, classes 4, item (3, 8, 8)" in out
    assert "the runner's --image-size sets it" in out


def test_checking_a_missing_folder_dataset_shows_its_layout_and_exits_1(tmp_path, capsys):
    assert datasets_main(["mit67", "--data-root", str(tmp_path)]) == 1
    out = capsys.readouterr().out
    assert "unavailable (mit67 not found" in out and "expected layout under --data-root" in out
    assert "<data_root>/mit67/TrainImages.txt" in out
    with pytest.raises(SystemExit) as info:
        datasets_main(["imagenet21k"])
    assert info.value.code == 2 and "unknown dataset(s) imagenet21k" in capsys.readouterr().err


def test_every_folder_dataset_has_a_generated_layout_its_loader_reads(tmp_path):
    """The registry is the one list (issue 49): the generated layouts are its folder datasets,
    and the GPU-hours estimate counts the sizes its entries state."""
    from benchmarks.datasets.synthetic import LAYOUTS
    from benchmarks.tools.gpu_hours import DATASET_SIZES

    assert LAYOUTS == registry.FOLDER_DATASETS
    for name in LAYOUTS:
        root = make_image_folder(tmp_path / name, name, classes=2, per_class=5, min_size=16, max_size=20)
        options = {"train_per_class": 3} if name == "caltech256" else {}
        train, test = registry.load_dataset(name, data_root=root, image_size=8, **options)
        assert len(train) > 0 and len(test) > 0 and len(train) + len(test) <= 12, name
    assert DATASET_SIZES == {n: registry.DATASETS[n].sizes for n in registry.FOLDER_DATASETS if n != "folder"}
