"""Continual-learning splits of a (train, test) pair, built with Avalanche's current
benchmark API (``benchmark_from_datasets``, ``with_task_labels``).

* class-incremental (C-): disjoint class groups per experience, every class used once;
  the first experiences take the remainder (67 classes / 5 tasks -> 14,14,13,13,13), as
  the paper's code does. ``class_incremental_benchmark(num_experiences=...)`` in
  avalanche-lib 0.6.0 silently drops remainder classes, so counts are always explicit.
* task-incremental: the class-incremental split with task labels 0..T-1 and global
  class ids (one fixed head; evaluation masks to the task's classes). Its training is the
  class-incremental training (no strategy here reads task labels to train), so a class-IL
  run can also be evaluated task-incrementally on :func:`task_test_stream`, the same test
  split with task labels, instead of training again (``RunConfig.task_il``).
* data-incremental (D-): seeded random shards of the training set, each with every
  class; or, when the dataset has domains (emoji styles), one domain per experience.
  The test stream is the whole test set.

The experiences are exactly those of the deprecated ``nc_benchmark`` / ``ni_benchmark``
that produced the published results: the same samples in the same order, the same
targets and task labels (every sample carries one, so a mini-batch is ``(x, y, t)``),
the same ``classes_in_this_experience`` (and ``previous_classes``,
``classes_seen_so_far``, ``future_classes``) lists; ``tests/benchmarks/test_scenarios.py``
compares both, sample by sample. The index lists are computed here (:func:`class_indices`,
:func:`random_shards`, :func:`domain_shards`) because the current generators differ,
measured on avalanche-lib 0.6.0:

* ``class_incremental_benchmark(class_order=..., num_classes_per_exp=...)`` gives the
  same classes per experience but concatenates them in reverse order (so mini-batches,
  hence every trained number, would change), and its datasets carry no task labels:
  ``with_task_labels`` on it then labels every experience task 0.
* ``with_classes_timeline`` gives sets, and its ``future_classes`` are the classes not
  seen yet rather than those of the later experiences.
"""

from typing import List, Optional, Sequence

import numpy as np
import torch
from avalanche.benchmarks.scenarios import benchmark_from_datasets, with_task_labels
from avalanche.benchmarks.utils import (
    ConstantSequence,
    DataAttribute,
    DefaultTransformGroups,
    TaskAwareSupervisedClassificationDataset,
    TaskLabels,
)

from avalanche_tmc.training.adaptation import dataset_targets
from benchmarks.protocol.choices import SCENARIOS

__all__ = [
    "SCENARIOS",
    "classes_per_experience",
    "CLASS_ORDERS",
    "SHARDINGS",
    "class_order",
    "class_indices",
    "authors_shards",
    "class_incremental",
    "random_shards",
    "domain_shards",
    "data_incremental",
    "make_scenario",
    "TASK_TEST_STREAM",
    "task_test_stream",
]

def classes_per_experience(num_classes: int, n_experiences: int) -> List[int]:
    """Class counts per experience that use every class; the first ones take the remainder."""
    if not 1 <= n_experiences <= num_classes:
        raise ValueError(f"Cannot split {num_classes} classes into {n_experiences} experiences.")
    base, extra = divmod(num_classes, n_experiences)
    return [base + (1 if i < extra else 0) for i in range(n_experiences)]


def _targets(dataset) -> np.ndarray:
    return dataset_targets(dataset).numpy().astype(np.int64)


CLASS_ORDERS = ("seeded", "label")
SHARDINGS = ("permutation", "authors")
AUTHORS_SHARD_SEED = 139  # the authors' data-IL shards come from np.random.default_rng(139)


def class_order(num_classes: int, seed: int, order: str = "seeded") -> List[int]:
    """The order in which classes appear: ``"seeded"``, a permutation drawn with ``seed``;
    ``"label"``, ascending labels (the authors' code: classes 0..k-1 form the first
    experience, whatever the seed)."""
    if order == "label":
        return list(range(num_classes))
    if order != "seeded":
        raise ValueError(f"class order must be one of {CLASS_ORDERS}, got {order!r}.")
    return np.random.default_rng(seed).permutation(num_classes).tolist()


def class_indices(targets: Sequence[int], groups: Sequence[Sequence[int]]) -> List[List[int]]:
    """For each class group, the indices of its samples: class by class, in the iteration
    order of ``set(group)`` (as ``nc_benchmark`` does), each class's samples in dataset order."""
    targets = np.asarray(targets)
    return [[i for c in set(group) for i in np.flatnonzero(targets == c).tolist()] for group in groups]


def _classification_dataset(dataset, int_targets: bool):
    """``dataset`` as an Avalanche classification dataset: its ``targets`` as a list of
    ints, task label 0 on every sample. ``int_targets``: an item's target is a Python
    ``int`` (``nc_benchmark`` maps every target through its class-id table, which turns a
    0-d tensor into an ``int``; ``ni_benchmark`` leaves it as it is)."""
    return TaskAwareSupervisedClassificationDataset(
        [dataset],
        data_attributes=[DataAttribute(_targets(dataset).tolist(), "targets"),
                         TaskLabels(ConstantSequence(0, len(dataset)))],
        frozen_transform_groups=DefaultTransformGroups((None, int)) if int_targets else None,
    )


def _experience_data(data, indices: Optional[List[int]], task: int, group: str):
    """``data[indices]`` (all of it for ``None``) with task label ``task`` and the
    transform group ``group`` ("train" or "eval")."""
    if indices is not None:
        data = data.subset(indices)
    if task != 0:
        data = data.update_data_attribute("targets_task_labels", TaskLabels(ConstantSequence(task, len(data))))
    return data.with_transforms(group)


def _with_class_lists(benchmark):
    """Give each experience ``nc_benchmark``'s class lists: ``classes_in_this_experience``,
    ``previous_classes``, ``classes_seen_so_far`` and ``future_classes`` (those of the
    later experiences of its stream)."""
    for stream in benchmark.streams.values():
        classes = [set(list(exp.dataset.targets)) for exp in stream]
        for i, exp in enumerate(stream):
            previous, future = set(), set()
            for earlier in classes[:i]:
                previous.update(earlier)
            for later in classes[i + 1:]:
                future.update(later)
            exp.classes_in_this_experience = list(classes[i])
            exp.previous_classes = list(previous)
            exp.classes_seen_so_far = list(classes[i].union(previous))
            exp.future_classes = list(future)
    return benchmark


def _benchmark(train, test, train_indices, test_indices, task_labels: bool, int_targets: bool,
               test_name: str = "test"):
    """The benchmark whose experience ``t`` holds ``train[train_indices[t]]`` and
    ``test[test_indices[t]]`` (``test_indices=[None]``: one test experience, the whole
    test set), with task label ``t`` (``task_labels``) or 0; its test stream is named
    ``test_name`` (``<test_name>_stream``)."""

    def stream(dataset, index_lists, group):
        data = _classification_dataset(dataset, int_targets)
        return [_experience_data(data, idx, t if task_labels else 0, group) for t, idx in enumerate(index_lists)]

    return _with_class_lists(with_task_labels(benchmark_from_datasets(
        train=stream(train, train_indices, "train"),
        **{test_name: stream(test, test_indices, "eval")},
    )))


def class_incremental(train, test, n_experiences: int, seed: int = 0, task_labels: bool = False,
                      order: str = "seeded", test_name: str = "test"):
    """C- split (``task_labels=True``: the task-incremental version of it); ``order``: see
    :func:`class_order`; ``test_name``: the test stream's name."""
    train_targets = _targets(train)
    num_classes = int(train_targets.max()) + 1
    order = class_order(num_classes, seed, order)
    bounds = np.cumsum([0, *classes_per_experience(num_classes, n_experiences)])
    groups = [order[start:end] for start, end in zip(bounds[:-1], bounds[1:])]
    return _benchmark(train, test, class_indices(train_targets, groups), class_indices(_targets(test), groups),
                      task_labels, int_targets=True, test_name=test_name)


def random_shards(num_samples: int, n_experiences: int, seed: int = 0) -> List[List[int]]:
    """The paper's D- split: a seeded permutation of the training set cut into
    ``n_experiences`` shards of (almost) equal size."""
    order = np.random.default_rng(seed).permutation(num_samples)
    return [shard.tolist() for shard in np.array_split(order, n_experiences)]


def authors_shards(num_samples: int, n_experiences: int) -> List[List[int]]:
    """The authors' D- split (their ``TaskIncrementalDataset``): the sample indices shuffled
    once by ``np.random.default_rng(139).shuffle`` (the same for every seed), then dealt
    round-robin, the ``i``-th shuffled index to experience ``i mod n_experiences``."""
    shuffled = list(range(num_samples))
    np.random.default_rng(AUTHORS_SHARD_SEED).shuffle(shuffled)
    return [shuffled[k::n_experiences] for k in range(n_experiences)]


def domain_shards(domains: Sequence[int], order: Optional[Sequence[int]] = None) -> List[List[int]]:
    """One experience per domain (in ``order``, default ascending)."""
    domains = np.asarray(torch.as_tensor(domains).tolist())
    order = sorted(set(domains.tolist())) if order is None else list(order)
    return [np.flatnonzero(domains == d).tolist() for d in order]


def data_incremental(train, test, n_experiences: int, seed: int = 0, by_domain: Optional[bool] = None,
                     shards: str = "permutation"):
    """D- split: domains as experiences when the dataset has them (``by_domain=None``
    auto), else random shards: ``shards="permutation"`` (:func:`random_shards`, by
    ``seed``) or ``"authors"`` (:func:`authors_shards`). The test stream is the whole test set."""
    if shards not in SHARDINGS:
        raise ValueError(f"shards must be one of {SHARDINGS}, got {shards!r}.")
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
        split = random_shards if shards == "permutation" else lambda n, k, _seed: authors_shards(n, k)
        shards = split(len(train), n_experiences, seed)
    return _benchmark(train, test, shards, [None], task_labels=False, int_targets=False)


def make_scenario(scenario: str, train, test, n_experiences: int, seed: int = 0, *, class_order: str = "seeded",
                  shards: str = "permutation"):
    """The Avalanche benchmark for ``scenario`` in :data:`SCENARIOS` (``class_order``: see
    :func:`class_order`; ``shards``: see :func:`data_incremental`)."""
    if scenario == "class":
        return class_incremental(train, test, n_experiences, seed, order=class_order)
    if scenario == "task":
        return class_incremental(train, test, n_experiences, seed, task_labels=True, order=class_order)
    if scenario == "data":
        return data_incremental(train, test, n_experiences, seed, shards=shards)
    raise ValueError(f"Unknown scenario {scenario!r}; use one of {SCENARIOS}.")


TASK_TEST_STREAM = "task_test"


def task_test_stream(train, test, n_experiences: int, seed: int = 0, *, class_order: str = "seeded"):
    """The test stream of the task-incremental split (experience ``t``: the test samples
    of the classes of class-IL experience ``t``, task label ``t``), named
    ``task_test_stream`` so that Avalanche's metrics and logs keep it apart from the
    class-IL ``test_stream`` of the same run. A strategy trained on the class-IL split
    and evaluated on it under the task mask (:func:`benchmarks.protocol.task_il.task_masked`)
    gives what training on the task-IL split gives."""
    bm = class_incremental(train, test, n_experiences, seed, task_labels=True, order=class_order,
                           test_name=TASK_TEST_STREAM)
    return getattr(bm, f"{TASK_TEST_STREAM}_stream")
