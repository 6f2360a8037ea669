"""Freeze the early layers of a backbone and cache their output once.

What it is for: making CPU benchmark runs affordable without changing what is compared.
Every method (TMC's tangent models and the non-linear baselines alike) then trains the
same top part of the network on the same cached trunk features; the trunk is never
trained by anyone (the official TMC code also leaves the stem out of the linearization).
No augmentation is used, so caching is exact.

Works for networks whose forward is a chain of their children (torchvision and timm
ResNets, EfficientNets, MobileNets, VGG...). The split is checked against the model's own
output and refused otherwise (e.g. vision transformers: run them without a trunk).
"""

from typing import Callable, List, Optional, Tuple

import torch
from torch import Tensor, nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from benchmarks.networks.threads import fixed_threads

__all__ = ["ChainSegment", "split_backbone", "cache_features"]


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
        raise ValueError(
            f"start_at={start_at!r} is not a child module (or a child of a Sequential child) of the model.")
    return stages, split


def split_backbone(model: nn.Module, start_at: str, example: Tensor) -> Tuple[ChainSegment, ChainSegment]:
    """Split ``model`` into a frozen ``trunk`` (eval mode) and the ``top`` from ``start_at``
    on, checked on ``example`` to reproduce the model's output."""
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
        raise ValueError(
            f"{type(model).__name__} is not a chain of its children, so it cannot be split at {start_at!r}. "
            "Run it without a frozen trunk (--freeze-until none)."
        )
    return trunk, top


@torch.no_grad()
def cache_features(trunk: nn.Module, dataset: Dataset, batch_size: int = 256,
                   on_batch: Optional[Callable[[int], None]] = None) -> TensorDataset:
    """Run ``trunk`` once over ``dataset``; a dataset of (features, target) that keeps
    ``targets`` (and ``domains`` when present) for Avalanche's generators. On one thread
    (:func:`~benchmarks.networks.threads.fixed_threads`): the features, hence every row
    trained on them, do not depend on the thread count of the process that prepares the run.
    ``on_batch(n)`` after each batch of ``n`` images (the runner's progress)."""
    trunk.eval()
    features, targets = [], []
    with fixed_threads():
        for x, y in DataLoader(dataset, batch_size=batch_size, shuffle=False):
            features.append(trunk(x))
            targets.append(torch.as_tensor(y))
            if on_batch is not None:
                on_batch(len(x))
    cached = TensorDataset(torch.cat(features), torch.cat(targets))
    cached.targets = cached.tensors[1]
    if hasattr(dataset, "domains"):
        cached.domains = dataset.domains
    return cached
