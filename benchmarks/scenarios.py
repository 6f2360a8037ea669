"""Continual-learning splits of a (train, test) pair, built with Avalanche's generators.

* class-incremental (C-): disjoint class groups per experience, every class used once;
  the first experiences take the remainder (67 classes / 5 tasks -> 14,14,13,13,13), as
  the paper's code does. ``class_incremental_benchmark(num_experiences=...)`` in
  avalanche-lib 0.6.0 silently drops remainder classes, so counts are always explicit.
* task-incremental: the class-incremental split with task labels 0..T-1 and global
  class ids (one fixed head; evaluation masks to the task's classes).
* data-incremental (D-): seeded random shards of the training set, each with every
  class; or, when the dataset has domains (emoji styles), one domain per experience.
  The test stream is the whole test set.

Why the deprecated ``nc_benchmark`` / ``ni_benchmark``: avalanche-lib 0.6.0's
``class_incremental_benchmark(num_classes_per_exp=..., class_order=...)`` gives the same
classes per experience but orders the samples inside each experience differently (so
mini-batches, hence every trained number, would change), and ``with_task_labels`` on its
result labels every experience task 0 (measured on digits, 3 experiences). Moving off
them needs a split that reproduces these experiences exactly.
"""

from typing import List, Optional, Sequence

import numpy as np
import torch
from avalanche.benchmarks.scenarios.deprecated.generators import nc_benchmark, ni_benchmark

SCENARIOS = ("class", "task", "data")


def classes_per_experience(num_classes: int, n_experiences: int) -> List[int]:
    """Class counts per experience that use every class; the first ones take the remainder."""
    if not 1 <= n_experiences <= num_classes:
        raise ValueError(f"Cannot split {num_classes} classes into {n_experiences} experiences.")
    base, extra = divmod(num_classes, n_experiences)
    return [base + (1 if i < extra else 0) for i in range(n_experiences)]


def _targets(dataset) -> np.ndarray:
    return np.asarray(torch.as_tensor(dataset.targets).tolist(), dtype=np.int64)


def class_order(num_classes: int, seed: int) -> List[int]:
    """The seeded order in which classes appear."""
    return np.random.default_rng(seed).permutation(num_classes).tolist()


def class_incremental(train, test, n_experiences: int, seed: int = 0, task_labels: bool = False):
    """C- split (``task_labels=True``: the task-incremental version of it)."""
    num_classes = int(_targets(train).max()) + 1
    counts = classes_per_experience(num_classes, n_experiences)
    return nc_benchmark(
        train,
        test,
        n_experiences=n_experiences,
        task_labels=task_labels,
        fixed_class_order=class_order(num_classes, seed),
        per_exp_classes=dict(enumerate(counts)),
        class_ids_from_zero_in_each_exp=False,
        class_ids_from_zero_from_first_exp=False,
    )


def random_shards(num_samples: int, n_experiences: int, seed: int = 0) -> List[List[int]]:
    """The paper's D- split: a seeded permutation of the training set cut into
    ``n_experiences`` shards of (almost) equal size."""
    order = np.random.default_rng(seed).permutation(num_samples)
    return [shard.tolist() for shard in np.array_split(order, n_experiences)]


def domain_shards(domains: Sequence[int], order: Optional[Sequence[int]] = None) -> List[List[int]]:
    """One experience per domain (in ``order``, default ascending)."""
    domains = np.asarray(torch.as_tensor(domains).tolist())
    order = sorted(set(domains.tolist())) if order is None else list(order)
    return [np.flatnonzero(domains == d).tolist() for d in order]


def data_incremental(train, test, n_experiences: int, seed: int = 0, by_domain: Optional[bool] = None):
    """D- split: domains as experiences when the dataset has them (``by_domain=None``
    auto), else seeded random shards. The test stream is the whole test set."""
    domains = getattr(train, "domains", None)
    if by_domain is None:
        by_domain = domains is not None
    if by_domain:
        if domains is None:
            raise ValueError("by_domain=True needs a dataset with a `domains` attribute (e.g. emoji_styles).")
        shards = domain_shards(domains)
        if len(shards) != n_experiences:
            raise ValueError(f"The dataset has {len(shards)} domains; use --tasks {len(shards)} for a domain split.")
    else:
        shards = random_shards(len(train), n_experiences, seed)
    return ni_benchmark(train, test, n_experiences=n_experiences, fixed_exp_assignment=shards)


def make_scenario(scenario: str, train, test, n_experiences: int, seed: int = 0):
    """The Avalanche benchmark for ``scenario`` in :data:`SCENARIOS`."""
    if scenario == "class":
        return class_incremental(train, test, n_experiences, seed)
    if scenario == "task":
        return class_incremental(train, test, n_experiences, seed, task_labels=True)
    if scenario == "data":
        return data_incremental(train, test, n_experiences, seed)
    raise ValueError(f"Unknown scenario {scenario!r}; use one of {SCENARIOS}.")
