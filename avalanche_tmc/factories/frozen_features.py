"""An Avalanche benchmark whose experiences hold a frozen trunk's features instead of the
images: the same streams, experiences, samples in the same order, targets, task labels and
class lists, for any strategy that trains the top of the network (``TMCStrategy`` on
``TangentModel(top)``, Avalanche's Naive, ER, DER, LwF, EWC on ``top``).

What it is for: the trunk of a pre-trained network (everything before the first trained
layer) then runs once per image instead of at every epoch of every strategy, which is how
the benchmark runner trains a seed of its main job in seconds on a CPU.

Exact or refused: the features are computed once, so training on them equals training the
network with the trunk frozen only when an image gives the same input at every epoch. A
stream whose transforms are random (random crops, flips, colour jitter) is refused
(:class:`RandomTransformsError`), unless ``augmentation="eval"`` asks to cache the images as
the evaluation transforms give them: the training then sees no augmentation (one view of
each image instead of a new draw each epoch), which usually costs a little accuracy on
small data and is what the runner does. The features are computed on one thread
(:data:`~avalanche_tmc.models.frozen_trunk.FEATURE_THREADS`), and their size is computed
before they are made: a benchmark whose features exceed ``max_bytes`` (default: half the
memory available) is refused with its size (:class:`FeaturesTooLargeError`).
"""

import random
import re
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from ..models.frozen_trunk import trunk_features

__all__ = ["frozen_trunk_benchmark", "feature_bytes", "RandomTransformsError", "FeaturesTooLargeError",
           "AUGMENTATION_CHOICES"]

AUGMENTATION_CHOICES = ("refuse", "eval")
_EXPERIENCE_ATTRIBUTES = ("classes_in_this_experience", "previous_classes", "classes_seen_so_far", "future_classes")
_RANDOM_NAMES = re.compile(r"\b(Random\w+|ColorJitter|RandAugment|AutoAugment|TrivialAugment\w*|AugMix|GaussianBlur)\b")
_CHECKED_ITEMS = 8  # each drawn three times: a coin-flip transform escapes with probability 4^-8


class RandomTransformsError(ValueError):
    """A stream's transforms are random, so features computed once would freeze one draw."""


class FeaturesTooLargeError(ValueError):
    """The trunk's features of the benchmark would not fit in the memory allowed."""


def _items(dataset: Any, indices: Sequence[int], seed: int) -> List[Tensor]:
    """The inputs of ``dataset[i]`` for ``indices``, every random generator seeded with
    ``seed`` first (and restored after)."""
    states = torch.random.get_rng_state(), np.random.get_state(), random.getstate()
    try:
        torch.manual_seed(seed)
        np.random.seed(seed)
        random.seed(seed)
        return [torch.as_tensor(dataset[i][0]) for i in indices]
    finally:
        torch.random.set_rng_state(states[0])
        np.random.set_state(states[1])
        random.setstate(states[2])


def _is_random(dataset: Any) -> bool:
    """Whether the first items of ``dataset`` change between draws of the random generators."""
    indices = range(min(_CHECKED_ITEMS, len(dataset)))
    first, *others = (_items(dataset, indices, seed) for seed in (1, 2, 3))
    return any(not torch.equal(a, b) for other in others for a, b in zip(first, other))


def _random_names(dataset: Any) -> List[str]:
    """Names of random transforms found in ``dataset``'s transform attributes (best effort,
    for the message: the draw test decides)."""
    found: List[str] = []
    seen = set()
    stack = [dataset]
    while stack:
        node = stack.pop()
        if id(node) in seen or len(seen) > 200:
            continue
        seen.add(id(node))
        for name in ("transform", "transforms", "_transform_groups", "transform_groups"):
            value = getattr(node, name, None)
            if value is not None:
                found += _RANDOM_NAMES.findall(repr(value))
        for name in ("_datasets", "datasets", "dataset", "_flat_data"):
            child = getattr(node, name, None)
            if isinstance(child, (list, tuple)):
                stack.extend(child)
            elif child is not None:
                stack.append(child)
    return sorted(set(found))


def _deterministic(dataset: Any, stream: str, augmentation: str) -> Any:
    """``dataset`` as its features must be computed: itself when its items do not change
    between draws; its evaluation transforms with ``augmentation="eval"``; else refused."""
    if not _is_random(dataset):
        return dataset
    names = ", ".join(_random_names(dataset)) or "transforms whose output changes between draws"
    if augmentation == "eval":
        evaluated = dataset.eval() if hasattr(dataset, "eval") else dataset
        if not _is_random(evaluated):
            return evaluated
        raise RandomTransformsError(
            f"The {stream} stream's images change between draws even with the evaluation transforms ({names}): the "
            "randomness is inside the dataset itself, not in an Avalanche transform group. Build the benchmark "
            "without augmentation (e.g. image_folder(..., augment=False)) to cache its features.")
    raise RandomTransformsError(
        f"The {stream} stream's transforms are random ({names}): features computed once would freeze one draw, and "
        "training on them would not be training with augmentation. Pass augmentation='eval' to cache the images as "
        "the evaluation transforms give them (no augmentation during training), build the benchmark without "
        "augmentation, or train on the images without a frozen trunk.")


def _available_bytes() -> Optional[int]:
    """The memory available to new allocations (Linux's MemAvailable), or None where unknown."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _feature_shape(trunk: nn.Module, dataset: Any) -> torch.Size:
    device = next((p.device for p in trunk.parameters()), torch.device("cpu"))
    with torch.no_grad():
        return trunk.eval()(torch.as_tensor(dataset[0][0]).unsqueeze(0).to(device)).shape[1:]


def feature_bytes(benchmark: Any, trunk: nn.Module) -> int:
    """The bytes the trunk's features of every experience of every stream of ``benchmark``
    take (float32), from one image's feature shape: what :func:`frozen_trunk_benchmark`
    would hold, computed before it is made."""
    sizes = [len(exp.dataset) for stream in benchmark.streams.values() for exp in stream]
    first = next((exp.dataset for stream in benchmark.streams.values() for exp in stream if len(exp.dataset)), None)
    if first is None:
        return 0
    return int(sum(sizes) * _feature_shape(trunk, first).numel() * 4)


def _feature_dataset(trunk: nn.Module, dataset: Any, batch_size: int,
                     on_batch: Optional[Callable[[int], None]]) -> Any:
    """The trunk's features of ``dataset`` as an Avalanche classification dataset with the
    same targets and task labels (0 where it has none: items ``(x, y, t)``, as Avalanche's
    DER, EWC and LwF read them), no transforms."""
    from avalanche.benchmarks.utils import DataAttribute, DefaultTransformGroups
    from avalanche.benchmarks.utils.classification_dataset import TaskAwareClassificationDataset
    from torch.utils.data import TensorDataset

    cached = trunk_features(trunk, dataset, batch_size=batch_size, on_batch=on_batch)
    features, targets = cached.tensors
    attributes = [DataAttribute(targets.tolist(), "targets", use_in_getitem=False)]
    task_labels = getattr(dataset, "targets_task_labels", None)  # 0 where it has none: what Avalanche's
    task_labels = [0] * len(targets) if task_labels is None else [int(t) for t in task_labels]  # DER and EWC read
    attributes.append(DataAttribute(task_labels, "targets_task_labels", use_in_getitem=True))
    return TaskAwareClassificationDataset([TensorDataset(features, targets)], data_attributes=attributes,
                                          frozen_transform_groups=DefaultTransformGroups((None, int)))


def _has_task_labels(experience: Any) -> bool:
    try:
        return experience.task_labels is not None
    except AttributeError:
        return False


def frozen_trunk_benchmark(benchmark: Any, trunk: nn.Module, *, augmentation: str = "refuse", batch_size: int = 256,
                           max_bytes: Optional[int] = None,
                           on_batch: Optional[Callable[[int], None]] = None) -> Any:
    """``benchmark`` (an Avalanche ``CLScenario``) with every experience's images replaced by
    ``trunk``'s features (:func:`~avalanche_tmc.models.frozen_trunk.split_network` gives the
    trunk and the top to train on them): the same streams, experiences, samples and their
    order, targets, task labels and class lists.

    :param augmentation: ``"refuse"`` (default) refuses a stream whose transforms are random
        (:class:`RandomTransformsError`); ``"eval"`` caches its images as its evaluation
        transforms give them, so training sees no augmentation.
    :param batch_size: images per forward pass of the trunk.
    :param max_bytes: the most the features may take; default half the memory available
        (:class:`FeaturesTooLargeError` beyond it, before any feature is made).
    :param on_batch: called with the number of images after each batch (progress)."""
    from avalanche.benchmarks.scenarios import benchmark_from_datasets

    if augmentation not in AUGMENTATION_CHOICES:
        raise ValueError(f"augmentation={augmentation!r}: use one of {AUGMENTATION_CHOICES}.")
    streams: Dict[str, List[Any]] = {name: list(stream) for name, stream in benchmark.streams.items()}
    datasets = {name: [_deterministic(exp.dataset, name, augmentation) for exp in exps]
                for name, exps in streams.items()}
    needed = feature_bytes(benchmark, trunk)
    limit = max_bytes if max_bytes is not None else (lambda a: None if a is None else a // 2)(_available_bytes())
    if limit is not None and needed > limit:
        images = sum(len(d) for ds in datasets.values() for d in ds)
        allowed = "max_bytes" if max_bytes is not None else "half the memory available"
        raise FeaturesTooLargeError(
            f"The trunk's features of the benchmark's {images} images would take {needed / 2**30:.2f} GiB (float32), "
            f"more than the {limit / 2**30:.2f} GiB allowed ({allowed}). Split the network later (a later start_at "
            "gives smaller features), use fewer or smaller images, or pass a larger max_bytes.")
    cached = {name: [_feature_dataset(trunk, d, batch_size, on_batch) for d in ds] for name, ds in datasets.items()}
    new = benchmark_from_datasets(**cached)
    if any(_has_task_labels(exp) for exps in streams.values() for exp in exps):
        from avalanche.benchmarks.scenarios.task_aware import with_task_labels

        new = with_task_labels(new)  # experiences that say their task labels, read from the datasets'
    for name, exps in streams.items():  # the class lists the generators gave, for code that reads them
        for old, exp in zip(exps, new.streams[name]):
            for attribute in _EXPERIENCE_ATTRIBUTES:
                if hasattr(old, attribute):
                    setattr(exp, attribute, list(getattr(old, attribute)))
    return new
