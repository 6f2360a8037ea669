"""Tiny model and data factories for the command-line tests
(``--model tests.avalanche_tmc.cli_factories:model --data tests.avalanche_tmc.cli_factories:data``):
a seeded MLP and scikit-learn's digits, class-incremental. ``width`` changes the
network (another base model)."""

import torch
from torch import nn

from tests.helpers import digits_benchmark, digits_splits

__all__ = ["model", "data"]


def model(*, tasks: int = 5, seed: int = 0, width: int = 64) -> nn.Module:
    """The 'pre-trained' network, a seeded MLP with BatchNorm: every call with the same
    options gives the same weights and statistics."""
    torch.manual_seed(seed)
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, width), nn.BatchNorm1d(width), nn.ReLU(), nn.Linear(width, 10))
    net[2].running_mean.normal_(0, 0.1)
    return net


def data(*, tasks: int = 5, seed: int = 0, width: int = 4):
    """Digits split into ``tasks`` class-incremental experiences."""
    _, train, test = digits_splits(seed=0)
    return digits_benchmark(train, test, n_experiences=tasks, seed=seed)
