"""Re-estimate a network's BatchNorm statistics on the target data before linearizing.

What it is for: a tangent model keeps the BatchNorm running statistics of its base point
``w`` fixed (they are part of ``w``). Pre-trained statistics from another domain (ImageNet
statistics on 32 px grey digits, say) can leave most units of a layer inactive, and the
tangent ``J·δ`` passes only through the active ones. Re-estimating the statistics once,
on data of the new domain, *before* the first component is trained, gives every
component the same, better base point: composition and forgetting stay exact, since all
components are still trained around one fixed ``w``. The new statistics change
``TangentModel.base_fingerprint()``, so components trained around the old and the new
base point cannot be mixed.

This module imports torch only.
"""

from typing import Iterable, Optional, Union

import torch
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

__all__ = ["reestimate_batchnorm"]


def _inputs(batch) -> Tensor:
    if isinstance(batch, Tensor):
        return batch
    if isinstance(batch, (list, tuple)) and batch and isinstance(batch[0], Tensor):
        return batch[0]
    raise TypeError(
        f"reestimate_batchnorm needs batches of inputs, or (inputs, ...) tuples as a DataLoader "
        f"gives them; got {type(batch).__name__}."
    )


@torch.no_grad()
def reestimate_batchnorm(
    model: nn.Module,
    batches: Iterable,
    *,
    max_batches: Optional[int] = None,
    device: Optional[Union[str, torch.device]] = None,
) -> nn.Module:
    """Replace the running mean and variance of every BatchNorm layer of ``model`` by
    their average over ``batches`` (in place; returns ``model``).

    Each layer averages, with equal weight, the batch statistics it sees in train mode
    (``momentum=None``: a cumulative average, independent of the order of the batches
    up to float rounding). Only the running statistics change: no weight, no other
    buffer, no dropout draw (the rest of the network runs in eval mode). Call it before
    wrapping the network in a :class:`~avalanche_tmc.tangent.TangentModel`, on data the
    whole continual run may use, e.g. the first experience or an unlabeled sample.

    :param batches: an iterable of input tensors or of ``(inputs, targets, ...)`` tuples
        (a ``DataLoader``). Labels are never read.
    :param max_batches: use at most this many batches.
    :param device: move inputs there (default: the device of the model's first parameter).
    """
    layers = [m for m in model.modules() if isinstance(m, _BatchNorm) and m.track_running_stats]
    if not layers:
        raise ValueError("The model has no BatchNorm layer that tracks running statistics: nothing to re-estimate.")
    if max_batches is not None and max_batches < 1:
        raise ValueError(f"max_batches must be at least 1, got {max_batches}.")
    if device is None:
        first = next(model.parameters(), None)
        device = first.device if first is not None else torch.device("cpu")
    was_training = model.training
    momenta = [m.momentum for m in layers]
    saved = [(m.running_mean.clone(), m.running_var.clone(), m.num_batches_tracked.clone()) for m in layers]
    seen = 0
    try:
        model.eval()
        for m in layers:
            m.reset_running_stats()
            m.momentum = None  # cumulative moving average: every batch counts the same
            m.train()
        for batch in batches:
            if max_batches is not None and seen >= max_batches:
                break
            model(_inputs(batch).to(device))
            seen += 1
        if seen == 0:
            raise ValueError("reestimate_batchnorm got no batch: pass a non-empty iterable of inputs.")
    except BaseException:
        for m, (mean, var, count) in zip(layers, saved):  # leave the model as it was
            m.running_mean.copy_(mean)
            m.running_var.copy_(var)
            m.num_batches_tracked.copy_(count)
        raise
    finally:
        for m, momentum in zip(layers, momenta):
            m.momentum = momentum
        model.train(was_training)
    return model
