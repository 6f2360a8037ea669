"""A network split at a named layer into a frozen trunk and a trained top, and the trunk's
features of a dataset computed once.

What it is for: when only the top of a pre-trained network trains (a tangent model's
``start_at``, a fine-tuned head and last blocks), the trunk's output of an image never
changes, so it can be computed once instead of at every epoch of every method. Training
the top on those features is then exactly training the whole network with the trunk
frozen, as long as the images do not change between epochs (no random augmentation:
:mod:`avalanche_tmc.factories.frozen_features` refuses it).

Works for networks whose forward is a chain of their children (torchvision and timm
ResNets, EfficientNets, MobileNets, VGG, ``nn.Sequential``): the split is checked against
the model's own output and refused otherwise (a vision transformer adds a class token and
position embeddings between its children: train it whole, or cache its penultimate
features with :class:`~avalanche_tmc.models.training_free.LayerFeatures`).
"""

from typing import Callable, List, Optional, Tuple

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from ..arithmetic import fixed_threads

__all__ = ["ChainSegment", "NotAChainError", "split_network", "trunk_features", "FEATURE_THREADS"]

FEATURE_THREADS = 1
"""Threads the trunk's features are computed on: one, so that they (and every result trained
on them) do not depend on how many threads the process happens to have (a reduction split
another way rounds another way)."""


class NotAChainError(ValueError):
    """The network's forward is not the chain of its children, so it cannot be split there."""


def _starts_with_linear(module: nn.Module) -> bool:
    while isinstance(module, nn.Sequential) and len(module):
        module = module[0]
    return isinstance(module, nn.Linear)


class ChainSegment(nn.Module):
    """Consecutive stages of a chain network, applied in order (flattening before a
    Linear): the frozen trunk and the trained top are both one."""

    def __init__(self, stages: List[Tuple[str, nn.Module]]):
        super().__init__()
        self.stages = nn.ModuleDict([(name.replace(".", "_"), module) for name, module in stages])

    def forward(self, x: Tensor) -> Tensor:
        for module in self.stages.values():
            if _starts_with_linear(module):  # (a no-op on 2-D input; no test on x keeps it fx-traceable)
                x = torch.flatten(x, 1)
            x = module(x)
        return x


def _stages(model: nn.Module, start_at: str) -> Tuple[List[Tuple[str, nn.Module]], int]:
    """Top-level children, with the child that contains ``start_at`` expanded, and the
    index of the first stage of the top part."""
    stages: List[Tuple[str, nn.Module]] = []
    split: Optional[int] = None
    for name, child in model.named_children():
        if start_at == name:
            split = len(stages)
            stages.append((name, child))
        elif start_at.startswith(name + "."):
            sub = start_at[len(name) + 1:].split(".")[0]
            if not isinstance(child, nn.Sequential) or sub not in dict(child.named_children()):
                raise ValueError(f"Cannot split inside {name!r}: give a child of a Sequential, e.g. {name}.0.")
            for sub_name, grandchild in child.named_children():
                if sub_name == sub:
                    split = len(stages)
                stages.append((f"{name}.{sub_name}", grandchild))
        else:
            stages.append((name, child))
    if split is None:
        children = ", ".join(name for name, _ in model.named_children())
        raise ValueError(f"start_at={start_at!r} is not a child module (or a child of a Sequential child) of "
                         f"{type(model).__name__}, whose children are: {children}.")
    return stages, split


def split_network(model: nn.Module, start_at: str, example: Tensor) -> Tuple[ChainSegment, ChainSegment]:
    """Split ``model`` into a frozen ``trunk`` (eval mode, no gradients) and the ``top`` from
    module ``start_at`` on (``"blocks.6"``, ``"layer4"``), checked on the batch ``example``
    to give the model's own output (to 1e-4); :class:`NotAChainError` where it does not
    (the network is not a chain of its children). The modules are shared with ``model``,
    not copied."""
    if not isinstance(example, Tensor) or example.dim() < 2:
        raise ValueError(f"example must be a batch of the model's inputs (a tensor with a batch dimension), got "
                         f"{type(example).__name__} {tuple(getattr(example, 'shape', ()))}.")
    model = model.eval()
    stages, split = _stages(model, start_at)
    trunk = ChainSegment(stages[:split]).eval().requires_grad_(False)
    top = ChainSegment(stages[split:])
    with torch.no_grad():
        expected = model(example)
        try:
            got = top(trunk(example))
        except RuntimeError:
            got = None
    if got is None or got.shape != expected.shape or not torch.allclose(got, expected, rtol=1e-4, atol=1e-4):
        raise NotAChainError(
            f"{type(model).__name__} is not a chain of its children (its forward does more than call them in "
            f"order), so it cannot be split at {start_at!r}: train the whole network (a TangentModel's start_at "
            "still linearizes only from there), or cache its penultimate features (LayerFeatures).")
    return trunk, top


@torch.no_grad()
def trunk_features(trunk: nn.Module, dataset: Dataset, batch_size: int = 256,
                   on_batch: Optional[Callable[[int], None]] = None) -> TensorDataset:
    """``trunk`` run once over ``dataset`` (items ``(x, y, ...)``), in order, on
    :data:`FEATURE_THREADS` thread(s): a dataset of ``(features, target)`` with ``targets``
    (and the source's ``domains``, when it has them) for Avalanche's generators.
    ``on_batch(n)`` after each batch of ``n`` items (progress)."""
    trunk.eval()
    device = next((p.device for p in trunk.parameters()), torch.device("cpu"))
    features, targets = [], []
    with fixed_threads(FEATURE_THREADS):
        for batch in DataLoader(dataset, batch_size=batch_size, shuffle=False):
            x, y = batch[0], batch[1]
            features.append(trunk(x.to(device)).cpu())
            targets.append(torch.as_tensor(y))
            if on_batch is not None:
                on_batch(len(x))
    cached = TensorDataset(torch.cat(features), torch.cat(targets))
    cached.targets = cached.tensors[1]
    if hasattr(dataset, "domains"):
        cached.domains = dataset.domains
    return cached
