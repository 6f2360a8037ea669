"""Fair tuning: learning rate and epochs chosen per method family on a validation split.

What it is for: a comparison in which no method is favoured by its hyper-parameters.
The validation split is carved from the *training* data only (stratified by class, and
by domain where the dataset has domains); the test data is never looked at. Each family
gets the same budget of trials (:class:`TuningGrid`: the same number of learning rates
times the same epochs), and is scored by its composition group — the paper's comparison,
T components trained independently from the pre-trained point:

* ``tangent`` (Adam): TMC and TME (the ``tangent`` group); the chosen values also train
  TMC-Seq, TMC-FC and joint-tangent;
* ``non-linear`` (SGD, momentum 0.9): Soup, Ens-L and Ens-SM (the ``independent``
  group); the chosen values also train ER, DER, LwF, EWC and joint.

A trial's score is the mean, over the group's rows, of the final accuracy on the
validation stream. Ties go to the earlier trial in grid order (smaller learning rate,
then fewer epochs). Training-free heads have nothing to tune. The final run then trains
every method on the whole training set with its family's chosen values.
"""

from dataclasses import dataclass
from typing import Callable, Dict, List, Sequence, Tuple

import numpy as np
import torch
from torch.utils.data import Dataset, Subset

from benchmarks.datasets.base import stratified_split

__all__ = ["TuningGrid", "Trial", "REPRESENTATIVE", "validation_split", "labelled_subset", "tune", "choose"]

# The group whose validation accuracy decides each tuned family.
REPRESENTATIVE: Dict[str, str] = {"tangent": "tangent", "non-linear": "independent"}


@dataclass(frozen=True)
class TuningGrid:
    """The trials of each family: every learning rate times every epoch count.

    Both families get ``len(lrs) * len(epochs)`` trials; the learning-rate ranges differ
    because the optimizers do (Adam on δ for tangent models, SGD for fine-tuning).
    """

    tangent_lrs: Tuple[float, ...] = (1e-4, 1e-3, 1e-2)
    lrs: Tuple[float, ...] = (1e-3, 1e-2, 1e-1)
    epochs: Tuple[int, ...] = (2, 5)
    val_fraction: float = 0.2

    def __post_init__(self):
        if len(self.tangent_lrs) != len(self.lrs):
            raise ValueError(f"Both families need the same number of learning rates (a fair budget); "
                             f"got {len(self.tangent_lrs)} tangent and {len(self.lrs)} non-linear.")
        if not self.epochs or any(e < 1 for e in self.epochs):
            raise ValueError(f"epochs must be positive integers, got {self.epochs}.")
        if any(not 0 < lr < float("inf") for lr in self.tangent_lrs + self.lrs):
            raise ValueError("learning rates must be positive and finite.")
        if not 0 < self.val_fraction < 1:
            raise ValueError(f"val_fraction must be in (0, 1), got {self.val_fraction}.")

    @classmethod
    def from_dict(cls, values: Dict) -> "TuningGrid":
        """A grid from a preset's ``tune`` dict (lists become tuples)."""
        return cls(**{k: tuple(v) if isinstance(v, (list, tuple)) else v for k, v in values.items()})

    def trials(self, family: str) -> List[Tuple[float, int]]:
        """``(learning rate, epochs)`` pairs of ``family``, in grid order."""
        lrs = self.tangent_lrs if family == "tangent" else self.lrs
        return [(lr, epochs) for lr in lrs for epochs in self.epochs]


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


def tune(families: Sequence[str], grid: TuningGrid,
         run_trial: Callable[[str, float, int], Dict[str, float]]) -> Tuple[Dict[str, Trial], List[Trial]]:
    """Run every trial of ``families`` and choose.

    :param run_trial: ``(family, lr, epochs) -> {row: final validation accuracy}`` of the
        family's representative group (see :data:`REPRESENTATIVE`).
    :return: (chosen trial per family, every trial in order).
    """
    unknown = [f for f in families if f not in REPRESENTATIVE]
    if unknown:
        raise ValueError(f"Cannot tune families {unknown}; tunable: {', '.join(REPRESENTATIVE)}.")
    trials = [Trial(family, lr, epochs, run_trial(family, lr, epochs))
              for family in families for lr, epochs in grid.trials(family)]
    return choose(trials), trials
