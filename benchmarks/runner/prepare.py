"""A run's data and trainable network: load the dataset and the ImageNet backbone, freeze
and cache the trunk before ``freeze_until``, and lay the trained part out for speed.

Separate from :mod:`benchmarks.run` so that the parallel trainer and the studies can
prepare a run without importing the runner.
"""

import time
from typing import Any, Callable, List, Optional, Tuple

import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from benchmarks.datasets import load_dataset
from benchmarks.datasets.registry import FOLDER_DATASETS, dataset_label
from benchmarks.networks.backbones import input_stats, load_backbone
from benchmarks.networks.shrink import convolutions_as_matmuls, shrink_convolutions
from benchmarks.networks.trunk import cache_features, split_backbone
from benchmarks.runner.config import RunConfig

__all__ = ["FOLDER_DATASETS", "prepare", "load_run_dataset", "first_experience_batches", "num_classes"]


def prepare(run: RunConfig, *, data_root: Optional[str] = None,
            weights: Optional[str] = None) -> Tuple[Dataset, Dataset, nn.Module]:
    """Datasets (features when the trunk is frozen) and the trainable top network of ``run``
    (of which only ``dataset``, ``data_options``, ``image_size``, ``backbone``,
    ``freeze_until``, ``transforms`` and ``imagenet_weights`` are read). Weights are never
    downloaded (a missing file: :class:`~avalanche_tmc.factories.models.WeightsNotFoundError`).

    Two layout changes make the top network cheaper to train on the small feature maps of
    the offline benchmarks (2x2 and 1x1), for every method alike (the same network is given
    to all of them; the arithmetic is the same up to float rounding):

    * ``channels_last`` memory format: oneDNN's convolutions and their backward take half
      the time (an SGD step of the main job's top: 157 -> 81 ms on 2 cores, inference
      46 -> 14 ms);
    * convolutions whose kernels reach past the (fixed) input size are cut to the taps
      that touch it (:func:`benchmarks.networks.shrink.shrink_convolutions`): the same outputs, the
      dropped taps would get zero gradient anyway (8 depthwise convolutions of the main
      job's top; an SGD step a further ~1.6x faster);
    * 1x1 convolutions run as matrix products over channels, and the depthwise ones left on
      2x2 maps as products with their gathered kernels
      (:func:`benchmarks.networks.shrink.convolutions_as_matmuls`, the same parameters): an SGD step
      of the main job's top 45 -> 27 ms for the 1x1 ones (one thread, idle machine), the
      depthwise ones a further ~30% of the step's CPU time.

    :param data_root: folder holding the dataset (folder datasets).
    :param weights: local state-dict file with the backbone's ImageNet weights.
    """
    start, name = time.time(), dataset_label(run.dataset, data_root)
    print(f"[{name}] loading the data...", flush=True)  # what preparing says while it takes its time
    train, test = load_run_dataset(run, data_root)
    print(f"[{name}] {len(train)} train / {len(test)} test samples loaded ({time.time() - start:.0f}s); loading "
          f"{run.backbone}...", flush=True)
    backbone = load_backbone(run.backbone, weights=weights, version=run.imagenet_weights)
    if str(run.freeze_until).lower() in ("none", ""):
        top, note = backbone, "whole network trained"
    else:
        example = torch.stack([train[i][0] for i in range(2)])
        trunk, top = split_backbone(backbone, run.freeze_until, example)
        print(f"[{name}] computing the frozen trunk's features (before {run.freeze_until}) of "
              f"{len(train) + len(test)} images...", flush=True)
        counted = _quarters(name, len(train) + len(test), start)
        train, test = cache_features(trunk, train, on_batch=counted), cache_features(trunk, test, on_batch=counted)
        note = f"trunk before {run.freeze_until} frozen, features cached"
    top = top.to(memory_format=torch.channels_last)
    example = torch.stack([train[i][0] for i in range(2)])
    shrunk = shrink_convolutions(top, example)
    if shrunk:
        note += f", {len(shrunk)} convolutions cut to the kernel taps that reach their input"
    matmuls = convolutions_as_matmuls(top, example)
    if matmuls:
        note += f", {len(matmuls)} convolutions on 2x2 or 1x1 maps run as products"
    options = ", ".join(f"{k}={v}" for k, v in run.data_options.items())
    label = dataset_label(run.dataset, data_root)
    print(f"[{label}{' (' + options + ')' if options else ''}] {len(train)} train / {len(test)} test "
          f"samples, {run.image_size}px, {run.backbone}: {note}; prepared in {time.time() - start:.0f}s", flush=True)
    return train, test, top


def _quarters(name: str, total: int, start: float) -> Callable[[int], None]:
    """``on_batch`` of :func:`cache_features`: a line as each quarter of ``total`` images is done."""
    done = [0, 0]  # images, quarters shown

    def count(images: int) -> None:
        done[0] += images
        if 4 * done[0] // max(total, 1) > done[1]:
            done[1] = 4 * done[0] // max(total, 1)
            print(f"[{name}]   features of {done[0]}/{total} images ({time.time() - start:.0f}s)", flush=True)

    return count


def load_run_dataset(run: RunConfig, data_root: Optional[str] = None) -> Tuple[Dataset, Dataset]:
    """``run``'s (train, test) datasets, images not yet decoded for the folder datasets
    (cheap: the runner calls it before anything else to refuse a missing dataset early)."""
    options = dict(run.data_options)
    if run.transforms != "square":
        options["transforms"] = run.transforms
    return load_dataset(run.dataset, data_root=data_root, image_size=run.image_size,
                        normalization=input_stats(run.backbone), **options)


def num_classes(train: Dataset) -> int:
    """Classes of a training set (its largest target + 1)."""
    return int(torch.as_tensor(train.targets).max()) + 1


def first_experience_batches(bm: Any, batch_size: int) -> List[torch.Tensor]:
    """The inputs of the first training experience, in order, batch by batch (no labels)."""
    loader = DataLoader(bm.train_stream[0].dataset, batch_size=batch_size, shuffle=False)
    return [batch[0] for batch in loader]
