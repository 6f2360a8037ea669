"""A run's training time, estimated before any training (the plan line): one SGD step of the
run's trained network, timed on this machine, scaled by each planned training's images,
epochs and its group's relative cost (``MethodGroup.cost``, the scheduling weight: a tangent
step costs about three plain ones, a composition baseline's four networks four). Rough by
design (evaluation, replay batches and loaders are not counted one by one): the ETA printed
after each finished training replaces it."""

import copy
import math
import time
from typing import Iterable, Optional, Tuple

import torch
from torch import nn

from benchmarks.methods import MethodGroup, TrainConfig, config_for

__all__ = ["seconds_per_image", "estimated_seconds", "estimate_text"]


def seconds_per_image(top: nn.Module, dataset, batch_size: int, repeats: int = 3) -> Optional[float]:
    """Seconds of one SGD training step of a copy of ``top`` per image, on a batch of
    ``dataset`` (after one warm-up step); None when the dataset is empty. The global random
    state is left as it was (the rows do not depend on whether the plan was timed)."""
    if len(dataset) == 0:
        return None
    state = torch.random.get_rng_state()
    try:
        batch = [dataset[i] for i in range(min(batch_size, len(dataset)))]
        x = torch.stack([torch.as_tensor(item[0]) for item in batch])
        y = torch.as_tensor([int(item[1]) for item in batch])
        net = copy.deepcopy(top).train()
        optimizer = torch.optim.SGD([p for p in net.parameters() if p.requires_grad], lr=0.0)
        timings = []
        for _ in range(repeats + 1):
            start = time.perf_counter()
            optimizer.zero_grad()
            out = net(x)
            out = out if out.dim() == 2 else out.flatten(1)
            nn.functional.cross_entropy(out, y.clamp(max=out.shape[1] - 1)).backward()
            optimizer.step()
            timings.append(time.perf_counter() - start)
        return min(timings[1:]) / len(batch)
    finally:
        torch.random.set_rng_state(state)


def estimated_seconds(pieces: Iterable[Tuple[MethodGroup, TrainConfig]], train_size: int, per_image: float,
                      jobs: int) -> float:
    """Wall seconds of training ``pieces`` (each a group and the run's config) on
    ``train_size`` images at ``per_image`` seconds an image-step, ``jobs`` at a time."""
    work = sum(group.cost * (1 if group.family == "training-free" else config_for(group, cfg).epochs)
               * train_size * per_image for group, cfg in pieces)
    return work / max(1, jobs)


def estimate_text(seconds: Optional[float]) -> str:
    """``"; about 12 min of training estimated (one timed SGD step here, rough)"`` or ``""``."""
    if seconds is None or not math.isfinite(seconds):
        return ""
    amount = f"{seconds / 60:.0f} min" if seconds >= 90 else f"{max(1, round(seconds))} s"
    return (f"; about {amount} of training estimated (a timed SGD step here x images x epochs x each method's "
            "cost, rough)")
