"""How fast the image pipeline feeds a training step, measured:
``python -m benchmarks.tools.pipeline --root DIR [--workers 0,1,2] [--step] [--save FILE.md]``.

What it is for: knowing, before renting a GPU, how many DataLoader workers keep it busy
on the paper's image-folder datasets (Caltech-256 and the like: JPEG photos of 300-500 px
decoded, resized to 256, randomly cropped to 224 and flipped, then ToTensor and ImageNet
normalisation, the TMC authors' training recipe).

It prints Markdown tables:

* **loading**: images/s of the training pipeline (``load_caltech256(transforms="authors")``'s
  training set through a ``DataLoader``, batch 32, shuffled, persistent workers), per
  worker count, reading the JPEG files and reading the decoded cache of
  :func:`benchmarks.datasets.loading.decode_once` (built once, its time and size shown). Each
  rate is over ``--epochs`` epochs after one warm-up epoch (which starts the workers and
  fills the page cache); wall clock, so it drops when other processes share the cores.
* **CPU time per image** on one thread (``time.thread_time``, load-independent), from
  the files and from the cache: ``1000 / ms`` is the rate of one worker on an idle core.
* with ``--step``: a training step of a tangent ResNet-50 (``TangentModel(resnet50(),
  num_classes=10, start_at="layer1")``, random weights, Adam on δ, the rescaled square
  loss) and of the plain network (Adam on every parameter) at 224 px on this CPU, as
  seconds and images/s, interleaved rounds, medians.
* **workers needed** ≈ GPU images/s ÷ images/s per worker (from the CPU time), for an
  assumed GPU throughput: NVIDIA's published ResNet-50 v1.5 training throughput on one
  A100 80GB with mixed precision (:data:`GPU_REFERENCE`), divided by the tangent/plain
  step ratio measured here for the tangent step (an assumption: the ratio on a GPU may
  differ).

``--root DIR``: a Caltech-256-style folder (``DIR/caltech256/256_ObjectCategories/...``);
if it has none, a generated one (:func:`benchmarks.datasets.synthetic.make_image_folder`,
``--classes`` × ``--per-class`` JPEGs of 300-500 px) is written there first. At most
``--images`` training images are read. Timings vary with the machine's load: the header
gives the load average at the start.
"""

from __future__ import annotations

import argparse
import copy
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch
from torch.utils.data import DataLoader

from benchmarks.datasets.base import ImageFileDataset
from benchmarks.datasets.folders import load_caltech256
from benchmarks.datasets.loading import decode_once
from benchmarks.datasets.synthetic import make_image_folder
from benchmarks.networks.threads import available_cores

__all__ = ["GPU_REFERENCE", "cpu_ms_per_image", "loading_rates", "step_times", "workers_needed", "main"]

GPU_REFERENCE = {
    "images_per_s": 2470.0,
    "what": "ResNet-50 v1.5 training, 1x A100 80GB, mixed precision, PyTorch (NGC pytorch-21.03 container)",
    "source": "NVIDIA DeepLearningExamples, PyTorch/Classification/ConvNets/resnet50v1.5/README.md, "
              "'Training performance: NVIDIA DGX A100 (8x A100 80GB)', 1-GPU row (TF32: 938 img/s)",
}
"""The published plain ResNet-50 training throughput the GPU estimate starts from."""


def _epoch(loader: DataLoader) -> int:
    seen = 0
    for images, _ in loader:
        seen += len(images)
    return seen


def cpu_ms_per_image(dataset: ImageFileDataset, images: Optional[int] = None, passes: int = 3) -> float:
    """CPU milliseconds of one item (read or decode, then the whole transform) on one thread,
    the median of ``passes`` passes: the calling thread's CPU time (``time.thread_time``)
    with torch on one thread, so other processes' load counts little (only through shared
    caches and cores). ``1000 / this`` is what one worker on an idle core gives."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        torch.manual_seed(0)
        n = len(dataset) if images is None else min(images, len(dataset))
        dataset[0]
        times = []
        for _ in range(passes):
            start = time.thread_time()
            for i in range(n):
                dataset[i]
            times.append((time.thread_time() - start) * 1000 / n)
        return statistics.median(times)
    finally:
        torch.set_num_threads(threads)


def loading_rates(
    dataset: ImageFileDataset, workers: Sequence[int], batch_size: int = 32, epochs: int = 2,
) -> Dict[int, Tuple[float, float]]:  # fmt: skip
    """Per worker count: (images/s, main-process CPU ms per image) of ``dataset`` through a
    shuffled DataLoader, over ``epochs`` epochs after a warm-up one (persistent workers, so
    the timed epochs start none). With workers, the main process's CPU time is what
    receiving and collating the batches costs it."""
    rates: Dict[int, Tuple[float, float]] = {}
    for n in workers:
        torch.manual_seed(0)
        loader = DataLoader(dataset, batch_size=batch_size, shuffle=True, num_workers=n, persistent_workers=n > 0)
        _epoch(loader)
        start, cpu = time.perf_counter(), time.process_time()
        seen = sum(_epoch(loader) for _ in range(epochs))
        rates[n] = (seen / (time.perf_counter() - start), (time.process_time() - cpu) * 1000 / seen)
        del loader
    return rates


def step_times(batch: int = 8, image_size: int = 224, rounds: int = 3) -> Dict[str, float]:
    """Median seconds of a plain and a tangent ResNet-50 training step (random weights)."""
    import torchvision

    from avalanche_tmc import RescaledSquareLoss, TangentModel, replace_head
    from benchmarks.tools.speed_timing import interleaved_medians

    torch.manual_seed(0)
    base = torchvision.models.resnet50(weights=None)
    plain = replace_head(copy.deepcopy(base), 10)
    tangent = TangentModel(copy.deepcopy(base), num_classes=10, start_at="layer1")
    x = torch.randn(batch, 3, image_size, image_size)
    y = torch.randint(0, 10, (batch,))
    criterion = RescaledSquareLoss(beta=25.0)
    plain_opt = torch.optim.Adam(plain.parameters(), lr=1e-3)
    tangent_opt = torch.optim.Adam(tangent.delta_parameters(), lr=1e-3)

    def plain_step() -> None:
        plain.train()
        plain_opt.zero_grad(set_to_none=True)
        criterion(plain(x), y).backward()
        plain_opt.step()

    def tangent_step() -> None:
        tangent.train()
        tangent_opt.zero_grad(set_to_none=True)
        criterion(tangent(x), y).backward()
        tangent_opt.step()

    return interleaved_medians({"plain": plain_step, "tangent": tangent_step}, rounds, torch.device("cpu"))


def workers_needed(gpu_images_per_s: float, images_per_s_per_worker: float) -> float:
    """Workers that keep a GPU doing ``gpu_images_per_s`` fed: GPU rate ÷ one worker's rate."""
    return gpu_images_per_s / images_per_s_per_worker


_MEASURED = ("benchmarks/tools/pipeline.py", "benchmarks/datasets/loading.py", "benchmarks/datasets",
             "avalanche_tmc/tangent",
             "avalanche_tmc/composition")  # the code whose speed the tables show


def _commit() -> str:
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", *_MEASURED],
                               capture_output=True, text=True, check=True).stdout.strip()
        return commit + (f" (with uncommitted changes in {', '.join(_MEASURED)})" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"


def _dataset(root: Path, args: argparse.Namespace) -> ImageFileDataset:
    has_folder = any((root / sub).is_dir() for sub in ("caltech256/256_ObjectCategories", "256_ObjectCategories"))
    if not has_folder:
        print(f"writing {args.classes} x {args.per_class} generated JPEGs under {root} ...", file=sys.stderr)
        make_image_folder(root, "caltech256", classes=args.classes, per_class=args.per_class, seed=0)
    train, _ = load_caltech256(root, image_size=args.image_size, train_per_class=args.per_class - 1,
                               transforms="authors")
    if len(train) > args.images:
        keep = np.sort(np.random.default_rng(0).choice(len(train), args.images, replace=False))
        train = ImageFileDataset([train.samples[i] for i in keep], train.classes, train.transform)
    return train


def _sizes(dataset: ImageFileDataset) -> str:
    from PIL import Image

    pixels, nbytes = [], []
    for path, _ in dataset.samples:
        with Image.open(path) as img:
            pixels.append(img.size[0] * img.size[1])
        nbytes.append(os.path.getsize(path))
    return (f"{len(dataset)} JPEGs, {np.mean(pixels) / 1e3:.0f} kpixels and {np.mean(nbytes) / 1024:.0f} KiB "
            "on average")


def main(argv: Optional[Sequence[str]] = None) -> List[str]:
    """Measure and print the tables (and write them to ``--save``); returns the lines."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tools.pipeline", description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", required=True, help="a Caltech-256-style folder, or where to generate one")
    parser.add_argument("--workers", default="0,1,2", help="worker counts to time (comma-separated)")
    parser.add_argument("--step", action="store_true", help="also time ResNet-50 training steps (plain, tangent)")
    parser.add_argument("--images", type=int, default=320, help="training images read per epoch, at most")
    parser.add_argument("--classes", type=int, default=10, help="classes of a generated folder")
    parser.add_argument("--per-class", type=int, default=33, help="images per class of a generated folder "
                        "(all but one go to the training set)")
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--batch", type=int, default=32, help="DataLoader batch size")
    parser.add_argument("--epochs", type=int, default=2, help="timed epochs per setting")
    parser.add_argument("--step-batch", type=int, default=8)
    parser.add_argument("--step-rounds", type=int, default=3)
    parser.add_argument("--cache", default=None, help="where the decoded cache is built (in a new folder, deleted "
                        "at the end; default: the system's temporary folder)")
    parser.add_argument("--save", metavar="FILE.md", help="also write the output here, headed by the command")
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(argv)
    from benchmarks.networks.arithmetic import runner_arithmetic

    runner_arithmetic()  # the runner's one CPU arithmetic (AVX2), before torch computes
    workers = [int(w) for w in args.workers.split(",")]
    root = Path(args.root)
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    torch.set_num_threads(max(1, available_cores()))

    train = _dataset(root, args)
    cache_root = Path(tempfile.mkdtemp(prefix="decoded-", dir=args.cache))  # a fresh cache: its build is timed
    start = time.perf_counter()
    cached = decode_once(train, cache_root, num_workers=max(workers))
    build = time.perf_counter() - start
    cache_mb = cached.decoded.nbytes / 2**20  # type: ignore[union-attr]

    lines = [
        f"torch {torch.__version__}, {available_cores()} cores usable, torch threads {torch.get_num_threads()}, "
        f"load average {load[0]:.2f} / {load[1]:.2f} / {load[2]:.2f} (1/5/15 min) at the start",
        f"data: {_sizes(train)}; training transform {' -> '.join(type(t).__name__ for t in train.transform.transforms)}"
        f" at {args.image_size} px; DataLoader batch {args.batch}, shuffled, persistent workers; "
        f"{args.epochs} timed epochs after a warm-up one",
        f"decoded cache: built in {build:.1f} s with {max(workers)} workers (decode + Resize once per image), "
        f"{cache_mb:.1f} MiB ({cache_mb * 2**20 / len(train) / 1024:.0f} KiB per image, uint8, shorter side "
        f"{train.transform.transforms[0].size})",
        "",
        "Training pipeline (decode, Resize, RandomCrop, RandomHorizontalFlip, ToTensor, Normalize), images/s "
        "through the DataLoader (wall clock: slowed by whatever else runs on the machine):",
        "| workers | JPEG files | decoded cache | cache speed-up | main-process CPU ms per image, files / cache |",
        "|---|---|---|---|---|",
    ]
    files = loading_rates(train, workers, args.batch, args.epochs)
    decoded = loading_rates(cached, workers, args.batch, args.epochs)
    for n in workers:
        lines.append(f"| {n} | {files[n][0]:.0f} | {decoded[n][0]:.0f} | {decoded[n][0] / files[n][0]:.2f}x | "
                     f"{files[n][1]:.2f} / {decoded[n][1]:.2f} |")
    files_ms, cached_ms = cpu_ms_per_image(train), cpu_ms_per_image(cached)
    one, one_cached = 1000 / files_ms, 1000 / cached_ms
    lines += [
        "",
        "CPU time of one item on one thread (thread CPU time, median of 3 passes: the machine's load counts little), "
        "what one worker on an idle core does:",
        "| source | CPU ms per image | images/s per worker |",
        "|---|---|---|",
        f"| JPEG files | {files_ms:.2f} | {one:.0f} |",
        f"| decoded cache | {cached_ms:.2f} | {one_cached:.0f} |",
    ]
    print("\n".join(lines), flush=True)
    gpu = GPU_REFERENCE["images_per_s"]
    out = [""]
    ratio: Optional[float] = None
    if args.step:
        times = step_times(args.step_batch, args.image_size, args.step_rounds)
        ratio = times["tangent"] / times["plain"]
        out += [
            f"Training step on this CPU, ResNet-50 at {args.image_size} px, batch {args.step_batch}, random weights, "
            f"median of {args.step_rounds} interleaved rounds:",
            "| step | seconds | images/s | multiple of plain |",
            "|---|---|---|---|",
            f"| plain (Adam on all parameters) | {times['plain']:.2f} | {args.step_batch / times['plain']:.1f} "
            "| 1.00x |",
            f"| tangent, start_at='layer1' (Adam on δ) | {times['tangent']:.2f} | "
            f"{args.step_batch / times['tangent']:.1f} | {ratio:.2f}x |",
            f"One worker ({one:.0f} images/s from files, CPU time) against this CPU's tangent step "
            f"({args.step_batch / times['tangent']:.1f} images/s): on CPU the step, not the loading, is the bottleneck "
            f"when {one:.0f} > {args.step_batch / times['tangent']:.1f}.",
            "",
        ]
    out += [
        f"Assumed GPU throughput: {GPU_REFERENCE['what']}: {gpu:.0f} images/s ({GPU_REFERENCE['source']}).",
        "| GPU step (assumed) | GPU images/s | workers needed ≈ GPU images/s ÷ images/s per worker (files) "
        "| same, decoded cache |",
        "|---|---|---|---|",
        f"| plain ResNet-50, A100, AMP (published) | {gpu:.0f} | {gpu:.0f} ÷ {one:.0f} ≈ "
        f"{workers_needed(gpu, one):.1f} | {gpu:.0f} ÷ {one_cached:.0f} ≈ {workers_needed(gpu, one_cached):.1f} |",
    ]
    if ratio is not None:
        tangent_gpu = gpu / ratio
        out.append(
            f"| tangent ResNet-50 (published ÷ {ratio:.2f}, the CPU ratio) | {tangent_gpu:.0f} | {tangent_gpu:.0f} ÷ "
            f"{one:.0f} ≈ {workers_needed(tangent_gpu, one):.1f} | {tangent_gpu:.0f} ÷ {one_cached:.0f} ≈ "
            f"{workers_needed(tangent_gpu, one_cached):.1f} |"
        )
    out.append("(images/s per worker: from the CPU time per image above. Each worker needs a core of its own, and the "
               "main process also spends time receiving the batches (float32, 0.6 MB an image at 224 px); workers "
               "beyond the cores add nothing.)")
    print("\n".join(out), flush=True)
    lines += out
    shutil.rmtree(cache_root, ignore_errors=True)
    if args.save:
        header = [
            f"<!-- written by: python -m benchmarks.tools.pipeline {' '.join(argv)} -->",
            f"Made by `python -m benchmarks.tools.pipeline {' '.join(argv)}` at commit {_commit()}, on "
            f"{platform.machine()} ({os.cpu_count()} logical CPUs visible), Python {platform.python_version()}.",
            "",
        ]
        Path(args.save).parent.mkdir(parents=True, exist_ok=True)
        Path(args.save).write_text("\n".join(header + lines) + "\n", encoding="utf-8")
    return lines


if __name__ == "__main__":
    main()
