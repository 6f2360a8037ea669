"""What a paper preset costs on one GPU, estimated from throughput: ``python -m
benchmarks.tools.gpu_hours --out docs/results/pipeline/gpu-hours.csv``; docs/paper-benchmarks.md
shows the table generated from that file (``python -m benchmarks.report
docs/results/pipeline/gpu-hours.csv --readme docs/paper-benchmarks.md``).

A preset's work is counted in training images (per experience, its images times its epochs;
the paragons once over the whole stream) times a per-method cost in units of one plain
training step's image, then divided by the GPU's plain-step throughput, per seed and over
the preset's seeds (3 for every paper preset):

* a plain step (Soup/Ens fine-tunes, EWC, joint) costs 1; LwF 1.35 (a forward of the old
  model); ER and DER 2 (a replayed batch as large as the new one, the runner's
  ``batch_size_mem`` 32);
* a tangent step costs ``--tangent-ratio``, TMC-FC 0.35 (a plain forward, the head's tangent);
* evaluation (every row after every experience, on the whole test stream) costs 0.35 a
  test image per row and experience (a forward; TME and TMC-FC rows alike).

The defaults are the GPU check's measurement on an NVIDIA H100 80GB (ResNet-50 at 224 px,
batch 32, float32: a plain step 1103.4 images/s, a tangent step 2.21x a plain one;
docs/results/gpu/nvidia-h100-80gb-hbm3.md). Data loading and the hours between steps are
not counted, so the hours are a lower bound. Dataset sizes are those the loaders give on
the published archives.

``--steady-state FILE`` (``python -m benchmarks.tools.steady_state --json FILE``, the GPU
check's ``steady-*`` steps) replaces the bound by a measurement: the paper step's images/s in
its last epoch (``--precision`` picks the row), loading, copying and stepping included, times
the tangent ratio, is the plain-step throughput every preset is divided by; the tool says
which row it used and what bounds it (``loader-bound``: the DataLoader, ``step-bound``: the
GPU step). Every paper preset runs the same recipe at 224 px, so the paper step stands for
all of them; folders of larger photos decode slower (a loader-bound rate is then optimistic).
"""

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from benchmarks.datasets.registry import DATASETS
from benchmarks.methods import groups_for
from benchmarks.results.files import GPU_HOURS_COLUMNS, write_rows_csv
from benchmarks.results.gpu_hours import gpu_hours_table, read_gpu_hours
from benchmarks.results.outputs import one_line, writing
from benchmarks.runner.config import RunConfig
from benchmarks.runner.presets import PRESETS

__all__ = ["DATASET_SIZES", "PLAIN_COST", "PUBLISHED_A100", "MEASURED_H100", "MEASURED_RATIO", "Estimate",
           "estimate", "estimates", "steady_throughput", "csv_rows", "write_gpu_hours", "read_gpu_hours",
           "gpu_hours_table", "main"]

# (training images, test images) as the loaders split the published archives: the registry's
DATASET_SIZES = {name: entry.sizes for name, entry in DATASETS.items() if entry.sizes is not None}
# a method group's training cost per image, in plain training steps (the tangent ones are
# multiplied by the tangent ratio)
PLAIN_COST = {"independent": 1.0, "ewc": 1.0, "joint": 1.0, "naive": 1.0, "lwf": 1.35, "er": 2.0, "der": 2.0,
              "tmc-fc": 0.35}
TANGENT_GROUPS = ("tangent", "tme", "tmc-seq", "tmc-alt-beta", "joint-tangent")
EVAL_COST = 0.35
PUBLISHED_A100 = 2470.0  # NVIDIA's published A100 80GB ResNet-50 rate (mixed precision, batch 256)
MEASURED_H100 = 1103.4  # the GPU check's plain ResNet-50 step at 224 px, batch 32, float32
MEASURED_RATIO = 2.21  # its tangent step over the plain one (the fast path)
MEASURED_SOURCE = "the GPU check on an NVIDIA H100 80GB (docs/results/gpu/nvidia-h100-80gb-hbm3.md)"


@dataclass(frozen=True)
class Estimate:
    """The GPU time of one preset: per seed (``hours``) and over its ``seeds``."""

    preset: str
    train_images: int
    test_images: int
    image_passes: float  # in plain-step images, per seed
    hours: float  # per seed
    seeds: int = 1
    images_per_second: float = MEASURED_H100
    tangent_ratio: float = MEASURED_RATIO


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
    return Estimate(preset, train, test, passes, passes / images_per_second / 3600, len(run.seeds),
                    images_per_second, tangent_ratio)


def estimates(images_per_second: float = MEASURED_H100, tangent_ratio: float = MEASURED_RATIO,
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


def steady_throughput(path: Path, precision: str, tangent_ratio: float) -> Tuple[float, str]:
    """(plain-step images/s, the sentence saying where it comes from and what bounds it) from
    the ``precision`` row of a steady-state file: its pipeline images/s (tangent steps) times
    ``tangent_ratio``."""
    from benchmarks.tools.steady_state import read_report

    rows = {r["amp"]: r for r in read_report(path)}
    if precision not in rows:
        raise ValueError(f"{path}: no {precision} row (it holds {', '.join(rows) or 'none'}): choose --precision")
    r = rows[precision]
    rate = r["pipeline_images_per_second"] * tangent_ratio
    limit = ("the DataLoader (more workers or the decoded cache would raise it)" if r["bound"] == "loader-bound"
             else "the training step on the device (the fast-path options would raise it)")
    text = (f"Throughput measured in steady state ({path.name}, {precision}): the paper step trained "
            f"{r['pipeline_images_per_second']:.1f} tangent images/s in its last epoch ({r['train_images']:,} images, "
            f"{r['backbone']} at {r['image_size']} px, batch {r['batch']}, {r['workers']} workers; loader alone "
            f"{r['loader_images_per_second']:.0f}, step alone {r['step_images_per_second']:.0f} images/s), "
            f"{r['bound']}: what limits it is {limit}. Times the tangent ratio {tangent_ratio:g}: {rate:.1f} "
            "plain-step images/s for every preset.")
    return rate, text


def csv_rows(rows: Sequence[Estimate]) -> List[Dict[str, str]]:
    """The rows of a GPU-hours file (hours to 2 decimals, work in millions of images)."""
    return [dict(preset=r.preset, train_images=str(r.train_images), test_images=str(r.test_images),
                 work=f"{r.image_passes / 1e6:.2f}", seeds=str(r.seeds), hours_per_seed=f"{r.hours:.2f}",
                 hours=f"{r.hours * r.seeds:.2f}", images_per_second=f"{r.images_per_second:g}",
                 tangent_ratio=f"{r.tangent_ratio:g}") for r in rows]


def write_gpu_hours(rows: Sequence[Estimate], path: Path) -> Path:
    """Write :func:`csv_rows` of ``rows`` to ``path`` (kind ``gpu-hours``), atomically."""
    return write_rows_csv(csv_rows(rows), path, GPU_HOURS_COLUMNS, kind="gpu-hours")


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, float]:
    """Print (and with ``--out``, write) the table; returns preset -> hours over its seeds."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.tools.gpu_hours", description=__doc__.split("\n\n")[0])
    p.add_argument("--gpu-images-per-second", type=float, default=MEASURED_H100,
                   help=f"plain ResNet-50 training images/s of the GPU (default {MEASURED_H100:g}: {MEASURED_SOURCE}; "
                        f"NVIDIA publishes {PUBLISHED_A100:g} for an A100 80GB at batch 256, mixed precision)")
    p.add_argument("--tangent-ratio", type=float, default=MEASURED_RATIO,
                   help=f"a tangent step's time over a plain one's (default {MEASURED_RATIO:g}: {MEASURED_SOURCE})")
    p.add_argument("--out", type=Path, default=None, help="also write the estimates to this CSV (kind gpu-hours)")
    p.add_argument("--steady-state", type=Path, default=None, metavar="FILE.json",
                   help="use the paper step's measured steady state (python -m benchmarks.tools.steady_state --json) "
                        "instead of --gpu-images-per-second")
    p.add_argument("--precision", default="fp32", help="the row of --steady-state to use (fp32, bf16, fp16)")
    args = p.parse_args(argv)
    if not (args.gpu_images_per_second > 0 and args.tangent_ratio > 0):
        p.error("--gpu-images-per-second and --tangent-ratio must be above 0")
    rate = args.gpu_images_per_second
    if args.steady_state is not None:
        try:
            rate, basis = steady_throughput(args.steady_state, args.precision, args.tangent_ratio)
        except (OSError, ValueError) as error:
            p.error(f"--steady-state {args.steady_state}: {error}")
        print(basis + "\n")
    rows = estimates(rate, args.tangent_ratio)
    with one_line(p):
        if args.out is not None:
            with writing(args.out):
                args.out.parent.mkdir(parents=True, exist_ok=True)
                write_gpu_hours(rows, args.out)
    print(gpu_hours_table(csv_rows(rows)))
    return {r.preset: r.hours * r.seeds for r in rows}


if __name__ == "__main__":
    main()
