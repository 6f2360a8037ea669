"""The main job's settings come from the committed tuning run, not from a hand."""

import csv
from pathlib import Path

import pytest

from benchmarks.config import RunConfig
from benchmarks.presets import MAIN_DECAY, MAIN_SEEDS, MAIN_TUNED, PRESETS
from benchmarks.tuning import TuningGrid

ROOT = Path(__file__).resolve().parents[2]
TUNING = ROOT / "docs" / "results" / "offline-tuning" / "tuning.csv"


def test_main_tuned_values_are_the_committed_tuning_choices():
    with TUNING.open(newline="", encoding="utf-8") as f:
        trials = list(csv.DictReader(f))
    chosen = {}
    for t in trials:
        if t["chosen"] == "yes":
            chosen.setdefault(t["scenario"], {})[t["family"]] = (float(t["lr"]), int(t["epochs"]))
    assert chosen == {scenario: dict(units) for scenario, units in MAIN_TUNED.items()}
    # every trial of the default grid was run, for every unit of each scenario
    grid = TuningGrid()
    for scenario, units in MAIN_TUNED.items():
        for unit in units:
            ran = {(float(t["lr"]), int(t["epochs"])) for t in trials
                   if t["scenario"] == scenario and t["family"] == unit}
            assert ran == set(grid.trials(unit)), (scenario, unit)
    assert MAIN_DECAY == grid.decay_at


@pytest.mark.parametrize("preset", ["offline", "offline-full"])
def test_main_presets_train_with_the_tuned_values_over_several_seeds(preset):
    for run in map(RunConfig.from_dict, PRESETS[preset]):
        assert run.tuned == MAIN_TUNED[run.scenario] and run.decay_at == MAIN_DECAY
        assert run.seeds == MAIN_SEEDS and len(run.seeds) >= 3
