"""Every count and grid value of a run has a documented bound, checked while the command line
and the preset are read (issue 52, item 11): a ``--data-option`` count or fraction out of
range (``train_per_class=-3`` meant "all but 3 per class"), a malformed ``tune`` (it failed
after the data was prepared); and the 1-epoch floor is no edge of a tuning grid."""

import pytest

from benchmarks.runner.config import RunConfig
from benchmarks.runner.presets import PRESETS
from benchmarks.runner.refusals import Refusal
from benchmarks.tuning.grid import Trial, TuningGrid, edges, tune


def _resolve(argv):
    from benchmarks import run

    return run.resolve(run.parse_args(argv))


@pytest.mark.parametrize("option, message", [
    ("train_per_class=-3", r"train_per_class=-3: .*an integer in 1\.\.1000000"),
    ("train_per_class=0", r"train_per_class=0: .*an integer in 1\.\.1000000"),
    ("test_per_class=2.5", r"test_per_class=2\.5: .*an integer"),
    ("limit_per_category=10000001", r"limit_per_category=10000001: .*1\.\.1000000"),
    ("train_per_class=true", r"train_per_class=True: .*an integer"),
    ("test_fraction=1.5", r"test_fraction=1\.5: .*a fraction in \(0, 1\)"),
    ("train_fraction=0", r"train_fraction=0: .*a fraction in \(0, 1\)"),
    ("train_fraction=nan", r"train_fraction=nan: .*a fraction in \(0, 1\)"),
    ("split_seed=-1", r"split_seed=-1: .*an integer in 0\.\.2147483647"),
    ("seed=2147483648", r"seed=2147483648: .*an integer in 0\.\.2147483647"),
    ("workers=1000", r"workers=1000: .*an integer in 0\.\.256"),
    ("categories=0", r"categories=0: .*an integer in 1\.\.1000000"),
])
def test_a_data_option_out_of_its_bound_is_refused_while_parsing(option, message):
    with pytest.raises(Refusal, match=rf"--data-option {message}"):
        _resolve(["--dataset", "digits", "--data-option", option])


def test_data_options_within_their_bounds_are_taken():
    runs, _ = _resolve(["--dataset", "digits", "--data-option", "train_per_class=1000000", "--data-option",
                        "test_fraction=0.25", "--data-option", "split_seed=2147483647", "--data-option", "cache=false"])
    assert dict(runs[0].data_options) == dict(train_per_class=1000000, test_fraction=0.25, split_seed=2147483647,
                                              cache=False)


@pytest.mark.parametrize("grid, message", [
    ("epochs", r"tune: .*a dict"),
    ({"epoch": [5]}, r"tune: unknown key.*'epoch'.*known: .*epochs"),
    ({"epochs": [0, 5]}, r"tune: epochs .*integers in 1\.\.10000"),
    ({"epochs": [2.5]}, r"tune: epochs .*integers in 1\.\.10000"),
    ({"epochs": [10001]}, r"tune: epochs .*integers in 1\.\.10000"),
    ({"epochs": []}, r"tune: epochs .*integers in 1\.\.10000"),
    ({"epochs": 5}, r"tune: epochs .*a list"),
    ({"lrs": [1e300, 1, 2], "tangent_lrs": [1e-3, 3e-3, 1e-2]}, r"tune: lrs .*\(0, 10\]"),
    ({"tangent_lrs": [0, 1e-3, 1e-2]}, r"tune: tangent_lrs .*\(0, 1\]"),
    ({"tangent_lrs": ["fast", 1e-3, 1e-2]}, r"tune: tangent_lrs .*\(0, 1\]"),
    ({"extend": 10 ** 6}, r"tune: extend .*an integer in 0\.\.10"),
    ({"extend": 1.5}, r"tune: extend .*an integer in 0\.\.10"),
    ({"epoch_cap": 0}, r"tune: epoch_cap .*an integer in 1\.\.10000"),
    ({"val_fraction": 1.0}, r"tune: val_fraction .*\(0, 1\)"),
    ({"decay_at": [0.5, 2]}, r"tune: decay_at .*\(0, 1\)"),
])
def test_a_malformed_tune_is_refused_while_the_preset_is_read(monkeypatch, grid, message):
    monkeypatch.setitem(PRESETS, "tuned-test", [dict(PRESETS["offline"][0], tune=grid)])
    with pytest.raises(Refusal, match=message):
        _resolve(["--preset", "tuned-test"])
    with pytest.raises(ValueError, match=message):  # and a run built in Python
        RunConfig.from_dict(dict(PRESETS["offline"][0], tune=grid))


def test_a_tune_within_its_bounds_is_taken(monkeypatch):
    grid = {"tangent_lrs": [1e-3, 1.0], "lrs": [1e-3, 10.0], "epochs": [1, 10000], "extend": 10, "epoch_cap": 10000,
            "val_fraction": 0.5, "decay_at": []}
    monkeypatch.setitem(PRESETS, "tuned-test", [dict(PRESETS["offline"][0], tune=grid)])
    runs, _ = _resolve(["--preset", "tuned-test"])
    assert TuningGrid.from_dict(runs[0].tune).epochs == (1, 10000)


def test_the_one_epoch_floor_is_no_edge():
    grid = TuningGrid(epochs=(1, 2, 4), extend=1)
    assert edges(Trial("tangent", 3e-3, 1, {}), grid) == ["at the epoch floor (1)"]
    assert edges(Trial("tangent", 3e-3, 2, {}), TuningGrid(epochs=(2, 4))) == ["smallest epochs"]

    def best_at_one_epoch(unit, lr, epochs):  # the middle learning rate, the fewest epochs
        return {"tmc": 1.0 if lr == 3e-3 and epochs == 1 else 0.5}

    chosen, _ = tune(["tangent"], grid, best_at_one_epoch)  # not refused as an edge to widen
    assert (chosen["tangent"].lr, chosen["tangent"].epochs) == (3e-3, 1)
