"""The main job's settings come from the committed tuning run, not from a hand."""

import csv
from pathlib import Path

import pytest

from benchmarks.runner.config import RunConfig
from benchmarks.runner.presets import (
    DEEP_BATCH,
    DEEP_REGIME,
    DEEP_TUNED,
    MAIN_BATCH,
    MAIN_DECAY,
    MAIN_REGIME,
    MAIN_SEEDS,
    MAIN_TUNE,
    MAIN_TUNED,
    OUTSIDE_BATCH,
    OUTSIDE_REGIME,
    OUTSIDE_TUNED,
    PRESETS,
)
from benchmarks.tuning.grid import CAP, TuningGrid

ROOT = Path(__file__).resolve().parents[2]
RESULTS = ROOT / "docs" / "results"
# tuning preset -> (the tuned values it chose, the regime its trials ran, its grid)
TUNINGS = {"offline-tuning": (MAIN_TUNED, f"from {MAIN_REGIME}", TuningGrid.from_dict(MAIN_TUNE)),
           "offline-32px-tuning": (OUTSIDE_TUNED, f"from {OUTSIDE_REGIME}", TuningGrid()),
           "offline-blocks4-tuning": (DEEP_TUNED, f"from {DEEP_REGIME}", TuningGrid())}


# tuning preset -> the folders of its committed tuning.csv files (TME's unit, tuned for itself
# after the others, in a file of its own: its trials do not depend on the units beside it)
TUNING_FOLDERS = {"offline-tuning": ("offline-tuning", "offline-tuning-tme")}


@pytest.mark.parametrize("tuning", TUNINGS)
def test_tuned_values_are_the_committed_tuning_choices(tuning):
    tuned, regime, grid = TUNINGS[tuning]
    trials = []
    for folder in TUNING_FOLDERS.get(tuning, (tuning,)):
        with (RESULTS / folder / "tuning.csv").open(newline="", encoding="utf-8") as f:
            trials += list(csv.DictReader(f))
    chosen = {}
    for t in trials:
        if t["chosen"] == "yes":
            chosen.setdefault(t["scenario"], {})[t["family"]] = (float(t["lr"]), int(t["epochs"]))
    assert {t["regime"] for t in trials} == {regime}
    assert chosen == {scenario: dict(units) for scenario, units in tuned.items()}
    # every trial of the grid was run, for every unit of each scenario (a growing grid
    # may add trials past its edges), and no choice is left on an edge
    for scenario, units in tuned.items():
        for unit in units:
            ran = {(float(t["lr"]), int(t["epochs"])) for t in trials
                   if t["scenario"] == scenario and t["family"] == unit}
            assert set(grid.trials(unit)) <= ran, (scenario, unit)
            assert grid.extend or ran == set(grid.trials(unit)), (scenario, unit)
    if grid.extend:
        on_edge = [t for t in trials if t["chosen"] == "yes"
                   and any(not edge.startswith(CAP) for edge in filter(None, t["edge"].split(", ")))]
        assert not on_edge
    assert MAIN_DECAY == grid.decay_at


@pytest.mark.parametrize("preset, tuning, regime, batch", [
    ("offline", "offline-tuning", MAIN_REGIME, MAIN_BATCH), ("offline-full", "offline-tuning", MAIN_REGIME, MAIN_BATCH),
    ("offline-32px", "offline-32px-tuning", OUTSIDE_REGIME, OUTSIDE_BATCH),
    ("offline-blocks4", "offline-blocks4-tuning", DEEP_REGIME, DEEP_BATCH)])
def test_main_presets_train_with_the_tuned_values_over_several_seeds(preset, tuning, regime, batch):
    tuned = TUNINGS[tuning][0]
    for run in map(RunConfig.from_dict, PRESETS[preset]):
        assert run.tuned == tuned[run.scenario] and run.decay_at == MAIN_DECAY
        assert run.tuned_by == f"--preset {tuning}"
        assert (run.freeze_until, run.batch_size) == (regime, batch)
        assert run.seeds == MAIN_SEEDS and len(run.seeds) >= 3
    # the tuning ran the very settings it tuned, on one seed
    for run, trial in zip(map(RunConfig.from_dict, PRESETS[preset]), map(RunConfig.from_dict, PRESETS[tuning])):
        assert (trial.dataset, trial.scenario, trial.image_size, trial.freeze_until, trial.batch_size,
                trial.data_options) == (run.dataset, run.scenario, run.image_size, run.freeze_until, run.batch_size,
                                        run.data_options)


def test_the_confirmatory_preset_runs_the_main_rows_at_fresh_seeds_and_refuses_the_pilot_s():
    """``offline-confirm``: the main job's runs and rows (the paper's TME with β 5) at 20
    seeds none of which the pilot (the main job) used; a pilot seed is refused by name."""
    from benchmarks.runner.arguments import parse_args, resolve_runs
    from benchmarks.runner.presets import CONFIRM_SEEDS, MAIN_TME_BETA

    confirm, main = map(RunConfig.from_dict, PRESETS["offline-confirm"]), map(RunConfig.from_dict, PRESETS["offline"])
    for run, pilot in zip(confirm, main):
        assert run.seeds == CONFIRM_SEEDS and len(run.seeds) == 20 and not set(run.seeds) & set(MAIN_SEEDS)
        assert run.replace(seeds=pilot.seeds) == pilot and run.order_by_seed and run.tme_beta == MAIN_TME_BETA
    for flags in (["--seeds", "3,100"], ["--seed", "0"], ["--seeds", "5"]):
        with pytest.raises(SystemExit, match=r"confirmatory run: seed\(s\) (3|0|0, 1, 2, 3, 4) are its pilot's"):
            resolve_runs(parse_args(["--preset", "offline-confirm", *flags]))
    assert resolve_runs(parse_args(["--preset", "offline-confirm", "--seeds", "7,8"]))[0].seeds == (7, 8)
    assert resolve_runs(parse_args(["--preset", "offline", "--seeds", "3"]))[0].seeds == (0, 1, 2)  # no pilot there
