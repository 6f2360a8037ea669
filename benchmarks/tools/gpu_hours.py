"""What a paper preset costs on one GPU, estimated from throughput: ``python -m
benchmarks.tools.gpu_hours --save docs/results/pipeline/gpu-hours.md``.

A preset's work is counted in training images (per experience, its images times its epochs;
the paragons once over the whole stream) times a per-method cost in units of one plain
training step's image, then divided by the GPU's plain-step throughput:

* a plain step (Soup/Ens fine-tunes, EWC, joint) costs 1; LwF 1.35 (a forward of the old
  model); ER and DER 2 (a replayed batch as large as the new one, the runner's
  ``batch_size_mem`` 32);
* a tangent step costs ``--tangent-ratio`` (measured: ``python -m benchmarks.tools.pipeline
  --step`` gave 1.14x on this CPU for ResNet-50 at 224 px, 1.14-1.54x over runs; the
  speed study's ResNets 1.48-1.54x), TMC-FC 0.35 (a plain forward, the head's tangent);
* evaluation (every row after every experience, on the whole test stream) costs 0.35 a
  test image per row and experience (a forward; TME and TMC-FC rows alike).

The plain throughput is a published figure (``--gpu-images-per-second``, default NVIDIA's
A100 80GB ResNet-50 mixed-precision training rate at batch 256); the paper's batch 32 runs
below it, so the hours are a lower bound. Dataset sizes are those the loaders give on the
published archives.
"""

import argparse
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

from benchmarks.methods import groups_for
from benchmarks.runner.config import RunConfig
from benchmarks.runner.presets import PRESETS

__all__ = ["DATASET_SIZES", "PLAIN_COST", "PUBLISHED_A100", "Estimate", "estimate", "estimates", "markdown", "main"]

# (training images, test images) as the loaders split the published archives
DATASET_SIZES = {
    "caltech256": (256 * 60, 29_780 - 256 * 60),  # 60 per class (train_per_class), 257.clutter left out
    "mit67": (5_360, 1_340),  # the official TrainImages / TestImages lists
    "oxford_pets": (3_680, 3_669),  # half of each of the 37 classes (train_fraction 0.5)
    "tinyimagenet": (100_000, 10_000),  # train / the labelled validation set
}
# a method group's training cost per image, in plain training steps (the tangent ones are
# multiplied by the tangent ratio)
PLAIN_COST = {"independent": 1.0, "ewc": 1.0, "joint": 1.0, "naive": 1.0, "lwf": 1.35, "er": 2.0, "der": 2.0,
              "tmc-fc": 0.35}
TANGENT_GROUPS = ("tangent", "tme", "tmc-seq", "tmc-alt-beta", "joint-tangent")
EVAL_COST = 0.35
PUBLISHED_A100 = 2470.0
PUBLISHED_SOURCE = ("NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5 README, training "
                    "performance, 1x A100 80GB, mixed precision: 2470 images/s")


@dataclass(frozen=True)
class Estimate:
    """The GPU time of one preset, per seed."""

    preset: str
    train_images: int
    test_images: int
    image_passes: float  # in plain-step images
    hours: float


def estimate(preset: str, run: RunConfig, images_per_second: float, tangent_ratio: float) -> Estimate:
    """The GPU-hours of one seed of ``run`` (every method group, training and evaluation)."""
    train, test = DATASET_SIZES[run.dataset]
    passes = 0.0
    for group, rows in groups_for(list(run.methods)):
        epochs = run.epochs
        cost = tangent_ratio if group.name in TANGENT_GROUPS else PLAIN_COST.get(group.name, 1.0)
        passes += train * epochs * cost
        evaluations = 1 if group.joint else run.tasks
        passes += test * evaluations * len(rows) * EVAL_COST
    return Estimate(preset, train, test, passes, passes / images_per_second / 3600)


def estimates(images_per_second: float = PUBLISHED_A100, tangent_ratio: float = 1.5,
              presets: Optional[Sequence[str]] = None) -> List[Estimate]:
    """:func:`estimate` of every paper preset (those over the folder datasets)."""
    chosen = []
    for name, runs in PRESETS.items():
        if presets is not None and name not in presets:
            continue
        for run in runs:
            config = RunConfig.from_dict(run)
            if config.dataset in DATASET_SIZES:
                chosen.append(estimate(name, config, images_per_second, tangent_ratio))
    return chosen


def markdown(rows: Sequence[Estimate], images_per_second: float, tangent_ratio: float) -> str:
    """The estimates as a markdown table with its assumptions."""
    lines = [f"GPU-hours per seed at {images_per_second:g} plain training images/s and a tangent step "
             f"{tangent_ratio:g}x a plain one (every row of the preset, training and evaluation; a lower bound: "
             "batch 32 runs below the published batch-256 rate).", "",
             "| preset | train / test images | work (plain-step images) | GPU-hours per seed |",
             "|---|---:|---:|---:|"]
    lines += [f"| `{r.preset}` | {r.train_images:,} / {r.test_images:,} | {r.image_passes / 1e6:.1f} M | "
              f"{r.hours:.1f} |" for r in rows]
    total = sum(r.hours for r in rows)
    lines += ["", f"All {len(rows)} presets: {total:.0f} GPU-hours per seed."]
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, float]:
    """Print (and with ``--save``, write) the table; returns preset -> hours."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.tools.gpu_hours", description=__doc__.split("\n\n")[0])
    p.add_argument("--gpu-images-per-second", type=float, default=PUBLISHED_A100,
                   help=f"plain ResNet-50 training images/s of the GPU (default: {PUBLISHED_SOURCE})")
    p.add_argument("--tangent-ratio", type=float, default=1.5,
                   help="a tangent step's time over a plain one's (default 1.5: the upper end measured on CPU)")
    p.add_argument("--save", default=None, help="also write the table to this markdown file")
    args = p.parse_args(argv)
    rows = estimates(args.gpu_images_per_second, args.tangent_ratio)
    text = markdown(rows, args.gpu_images_per_second, args.tangent_ratio)
    if args.gpu_images_per_second == PUBLISHED_A100:
        text += f"\nThroughput source: {PUBLISHED_SOURCE}.\n"
    print(text, end="")
    if args.save:
        command = "python -m benchmarks.tools.gpu_hours" + (f" --save {args.save}" if args.save else "")
        with open(args.save, "w", encoding="utf-8") as f:
            f.write(f"<!-- written by: {command} -->\n{text}")
    return {r.preset: r.hours for r in rows}


if __name__ == "__main__":
    main()
