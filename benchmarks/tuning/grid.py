"""Fair tuning: learning rate and epochs chosen per method family on a validation split.

What it is for: a comparison in which no method is favoured by its hyper-parameters.
The validation split is carved from the *training* data only (stratified by class, and
by domain where the dataset has domains); the test data is never looked at. Each tuning
*unit* gets the same budget of trials (:class:`TuningGrid`: the same number of learning
rates times the same epochs, every trial with the same step decay of the learning rate)
and is scored by its representative group (``register_method(tuning="represents")``):

* ``tangent`` (Adam): TMC and TME (the ``tangent`` group, the paper's comparison: T
  components trained independently from the pre-trained point); the chosen values also
  train TMC-Seq and TMC-FC;
* ``non-linear`` (SGD, momentum 0.9): Soup, Ens-L and Ens-SM (the ``independent``
  group); the chosen values also train LwF, EWC and Naive;
* the paragons ``joint`` (SGD) and ``joint-tangent`` (Adam) and the replay methods
  ``er`` and ``der`` (SGD) are tuned for themselves
  (``register_method(tuning="self")``), when the run has them.

A trial's score is the mean, over the group's rows, of the final accuracy on the
validation stream. Ties go to the earlier trial in grid order (smaller learning rate,
then fewer epochs). A choice on the edge of the grid (its smallest or largest learning
rate or epoch count) is flagged (:func:`edges`): the optimum may lie outside. With
``extend`` rounds (``TuningGrid(extend=3, epoch_cap=40)``) the grid grows where a choice
sits on its edge (one more learning rate beyond it, at the grid's own ratio; half or twice
the epochs, never beyond ``epoch_cap``) until every choice is interior or at the cap, and a
choice still on an edge after the last round is refused (:class:`TuningEdgeError`). Training-free
heads have nothing to tune. The final run then trains every method on the whole training
set with its unit's chosen values.
"""

import math
from dataclasses import dataclass, fields
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch.utils.data import Dataset, Subset

from avalanche_tmc.cli.argtypes import MAX_EPOCHS
from benchmarks.datasets.base import stratified_split

__all__ = ["TuningGrid", "Trial", "TuningEdgeError", "validation_split", "labelled_subset", "tune",
           "choose", "edges", "GRID_BOUNDS", "MAX_EXTEND"]



def _representatives() -> Dict[str, str]:
    """Tuning unit -> the group that scores it (:func:`benchmarks.methods.representatives`:
    each group says so where it is registered)."""
    from benchmarks.methods import representatives  # the registry (imported late: it imports baselines)

    return representatives()


def _tangent_units() -> Tuple[str, ...]:
    from benchmarks.methods import tangent_units

    return tangent_units()


MAX_EXTEND = 10
"""The most rounds of growing a grid (``extend``)."""
GRID_BOUNDS: Dict[str, Tuple[str, float, float]] = {
    "tangent_lrs": ("list-lr", 0.0, 1.0),  # Adam, as --lr-tangent
    "lrs": ("list-lr", 0.0, 10.0),  # SGD, as --lr
    "epochs": ("list-int", 1, MAX_EPOCHS),
    "val_fraction": ("fraction", 0.0, 1.0),
    "decay_at": ("list-fraction", 0.0, 1.0),
    "epoch_cap": ("int", 1, MAX_EPOCHS),  # (or None)
    "extend": ("int", 0, MAX_EXTEND),
}
"""``field -> (kind, low, high)`` of a :class:`TuningGrid` (a preset's ``tune``): learning
rates in (0, high], integers in [low, high], fractions in (0, 1); checked when the preset or
command line is read (:class:`benchmarks.runner.config.RunConfig`), before any data."""


def _words(kind: str, low: float, high: float) -> str:
    """A bound in words: ``"a list of integers in 1..10000"``, ``"a fraction in (0, 1)"``."""
    what = {"lr": "learning rates", "int": "integers" if kind.startswith("list") else "an integer",
            "fraction": "fractions" if kind.startswith("list") else "a fraction"}[kind.split("-")[-1]]
    bound = (f"{low:g}..{high:g}" if kind.endswith("int") else f"({low:g}, {high:g})" if kind.endswith("fraction")
             else f"({low:g}, {high:g}]")
    return f"{'a list of ' if kind.startswith('list') else ''}{what} in {bound}"


def _within(kind: str, value: object, low: float, high: float) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    if "int" in kind:
        return isinstance(value, int) and low <= value <= high
    return low < value < high if "fraction" in kind else low < value <= high


@dataclass(frozen=True)
class TuningGrid:
    """The trials of each unit: every learning rate times every epoch count, each with the
    learning rate multiplied by 0.1 at the fractions ``decay_at`` of its epochs.

    Every unit gets ``len(lrs) * len(epochs)`` trials; the learning-rate ranges differ
    because the optimizers do (Adam on δ for tangent models, SGD for fine-tuning).
    """

    tangent_lrs: Tuple[float, ...] = (1e-3, 3e-3, 1e-2)
    lrs: Tuple[float, ...] = (3e-3, 1e-2, 3e-2)
    epochs: Tuple[int, ...] = (5, 10, 20)
    val_fraction: float = 0.2
    decay_at: Tuple[float, ...] = (0.5, 0.75)
    epoch_cap: Optional[int] = None  # no trial gets more epochs; a choice at the cap is no edge
    extend: int = 0  # rounds of growing the grid where a choice sits on its edge (0: the grid as given)

    def __post_init__(self):
        """Every value within its bound (:data:`GRID_BOUNDS`), and a fair budget."""
        for name, (kind, low, high) in GRID_BOUNDS.items():
            value = getattr(self, name)
            listed = kind.startswith("list")
            values = value if listed and isinstance(value, tuple) else () if value is None else (value,)
            if (listed and (not isinstance(value, tuple) or not value and name != "decay_at")
                    or not all(_within(kind, v, low, high) for v in values)):
                raise ValueError(f"{name} must be {_words(kind, low, high)}, got {value!r}.")
        if len(self.tangent_lrs) != len(self.lrs):
            raise ValueError(f"Both families need the same number of learning rates (a fair budget); "
                             f"got {len(self.tangent_lrs)} tangent and {len(self.lrs)} non-linear.")
        if self.epoch_cap is not None and max(self.epochs) > self.epoch_cap:
            raise ValueError(f"epochs {self.epochs} go beyond the epoch cap {self.epoch_cap}.")

    @classmethod
    def from_dict(cls, values: Dict) -> "TuningGrid":
        """A grid from a preset's ``tune`` dict (lists become tuples); ``ValueError`` for
        anything else than a dict of known keys whose values are within :data:`GRID_BOUNDS`."""
        if not isinstance(values, dict):
            raise ValueError(f"must be a dict of grid values (e.g. {{'epochs': [5, 10]}}), got {values!r}.")
        known = [f.name for f in fields(cls)]
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(f"unknown key(s) {unknown}; known: {', '.join(known)}.")
        return cls(**{k: tuple(v) if isinstance(v, (list, tuple)) else v for k, v in values.items()})

    def learning_rates(self, unit: str) -> Tuple[float, ...]:
        """The learning rates ``unit`` tries (Adam's range for the tangent units)."""
        return self.tangent_lrs if unit in _tangent_units() else self.lrs

    def trials(self, unit: str) -> List[Tuple[float, int]]:
        """``(learning rate, epochs)`` pairs of ``unit``, in grid order."""
        return [(lr, epochs) for lr in self.learning_rates(unit) for epochs in self.epochs]


@dataclass(frozen=True)
class Trial:
    """One trial: a family's learning rate and epochs, and the validation accuracy of each row."""

    family: str
    lr: float
    epochs: int
    accuracies: Dict[str, float]

    @property
    def score(self) -> float:
        """Mean validation accuracy over the representative group's rows."""
        return sum(self.accuracies.values()) / len(self.accuracies)


def labelled_subset(dataset: Dataset, indices: Sequence[int]) -> Subset:
    """``Subset`` of ``dataset`` keeping ``targets`` (and ``domains``), as Avalanche's generators need."""
    indices = [int(i) for i in indices]
    subset = Subset(dataset, indices)
    subset.targets = torch.as_tensor(dataset.targets)[indices]
    domains = getattr(dataset, "domains", None)
    if domains is not None:
        subset.domains = torch.as_tensor(domains)[indices]
    return subset


def validation_split(dataset: Dataset, fraction: float, seed: int = 0) -> Tuple[Subset, Subset]:
    """``(train part, validation part)`` of a training set, stratified by class (and by
    domain when ``dataset.domains`` exists); the parts are disjoint and cover ``dataset``."""
    targets = np.asarray(torch.as_tensor(dataset.targets).tolist())
    strata = targets
    domains = getattr(dataset, "domains", None)
    if domains is not None:
        strata = targets * (int(torch.as_tensor(domains).max()) + 1) + np.asarray(torch.as_tensor(domains).tolist())
    train_idx, val_idx = stratified_split(strata, test_fraction=fraction, seed=seed)
    if len(val_idx) == 0 or len(train_idx) == 0:
        raise ValueError(f"A validation fraction of {fraction} leaves an empty part of {len(dataset)} samples; "
                         "use a larger dataset or another fraction.")
    return labelled_subset(dataset, train_idx), labelled_subset(dataset, val_idx)


def choose(trials: Sequence[Trial]) -> Dict[str, Trial]:
    """The best trial of each family (highest score; ties: the earliest)."""
    best: Dict[str, Trial] = {}
    for trial in trials:
        if trial.family not in best or trial.score > best[trial.family].score:
            best[trial.family] = trial
    return best


class TuningEdgeError(ValueError):
    """A tuning choice still on the edge of its grid after every round of extension: the
    optimum may lie outside what was tried, so the choice is refused."""


CAP = "at the epoch cap"
FLOOR = "at the epoch floor"


def edges(trial: Trial, grid: TuningGrid, trials: Optional[Sequence[Trial]] = None) -> List[str]:
    """Where ``trial``'s values sit on the edge of what its unit tried (``trials``, else
    ``grid``): e.g. ``["largest epochs"]``; the largest epochs at ``grid.epoch_cap`` is
    ``"at the epoch cap (N)"`` and the smallest at 1 ``"at the epoch floor (1)"``, not edges
    (nothing lies beyond them; empty when both are interior, or only one value of that kind
    was tried)."""
    if trials is None:
        lrs, epochs = grid.learning_rates(trial.family), grid.epochs
    else:
        lrs = sorted({t.lr for t in trials if t.family == trial.family})
        epochs = sorted({t.epochs for t in trials if t.family == trial.family})
    found = []
    for kind, value, values in (("learning rate", trial.lr, lrs), ("epochs", trial.epochs, epochs)):
        if len(values) > 1 and value == min(values):
            found.append(f"{FLOOR} (1)" if kind == "epochs" and value == 1 else f"smallest {kind}")
        elif len(values) > 1 and value == max(values):
            at_cap = kind == "epochs" and value == grid.epoch_cap
            found.append(f"{CAP} ({value})" if at_cap else f"largest {kind}")
    return found


def _grown(trial: Trial, lrs: List[float], epochs: List[int], grid: TuningGrid) -> Tuple[List[float], List[int]]:
    """The unit's values with one more beyond each edge its chosen ``trial`` sits on."""
    lrs, epochs = list(lrs), list(epochs)
    base = grid.learning_rates(trial.family)
    ratio = (max(base) / min(base)) ** (1 / (len(base) - 1)) if len(base) > 1 else 1.0
    for edge in edges(trial, grid, [Trial(trial.family, lr, e, {}) for lr in lrs for e in epochs]):
        if edge == "smallest learning rate":
            lrs.append(float(f"{trial.lr / ratio:.3g}"))
        elif edge == "largest learning rate":
            lrs.append(float(f"{trial.lr * ratio:.3g}"))
        elif edge == "smallest epochs" and trial.epochs > 1:
            epochs.append(max(1, trial.epochs // 2))
        elif edge == "largest epochs":
            epochs.append(trial.epochs * 2 if grid.epoch_cap is None else min(grid.epoch_cap, trial.epochs * 2))
    return sorted(set(lrs)), sorted(set(epochs))


def tune(families: Sequence[str], grid: TuningGrid, run_trial: Callable[[str, float, int], Dict[str, float]],
         run_trials: Optional[Callable[[List[Tuple[str, float, int]]], List[Dict[str, float]]]] = None,
         ) -> Tuple[Dict[str, Trial], List[Trial]]:
    """Run every trial of ``families`` (tuning units) and choose.

    :param run_trial: ``(unit, lr, epochs) -> {row: final validation accuracy}`` of the
        unit's representative group (:func:`benchmarks.methods.representatives`).
    :param run_trials: optional: all trials at once (e.g. over several processes), in
        order; ``run_trial`` is not called then.
    :return: (chosen trial per unit, every trial in order).
    """
    tunable = _representatives()
    unknown = [f for f in families if f not in tunable]
    if unknown:
        raise ValueError(f"Cannot tune {unknown}; tunable: {', '.join(tunable)}.")
    if not families:
        raise ValueError("Nothing to tune: no tuning unit given (training-free heads have none); tunable: "
                         f"{', '.join(tunable)}.")
    values = {f: (list(grid.learning_rates(f)), list(grid.epochs)) for f in families}
    done: Dict[Tuple[str, float, int], Dict[str, float]] = {}
    for round_ in range(grid.extend + 1):
        keys = [(f, lr, e) for f in families for lr in values[f][0] for e in values[f][1] if (f, lr, e) not in done]
        if not keys:
            break
        done.update(zip(keys, run_trials(keys) if run_trials is not None else [run_trial(*k) for k in keys]))
        # grid order (unit, then learning rate, then epochs): ties go to the smaller values
        trials = [Trial(f, lr, e, done[(f, lr, e)]) for f, lr, e in
                  sorted(done, key=lambda k: (list(families).index(k[0]), k[1], k[2]))]
        chosen = choose(trials)
        if round_ < grid.extend:
            values = {f: _grown(chosen[f], *values[f], grid) for f in families}
    if grid.extend:
        stuck = {f: [e for e in edges(t, grid, trials) if not e.startswith((CAP, FLOOR))] for f, t in chosen.items()}
        stuck = {f: e for f, e in stuck.items() if e}
        if stuck:
            raise TuningEdgeError(
                f"Tuning choices still on the edge of the grid after {grid.extend} round(s) of extension: "
                + "; ".join(f"{f} lr {chosen[f].lr:g}, {chosen[f].epochs} epochs ({', '.join(e)})"
                            for f, e in stuck.items())
                + ". The optimum may lie outside what was tried: widen the grid (the preset's tune: tangent_lrs, "
                "lrs, epochs) or raise its extend, and rerun with --restart (or another --out): a changed grid is "
                "another run, whose trials train again.")
    return chosen, trials
