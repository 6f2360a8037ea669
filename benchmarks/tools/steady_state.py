"""The paper's training step in steady state: ``python -m benchmarks.tools.steady_state``.

What it is for: how fast a real experience of a paper preset trains on a GPU, and what
bounds it. One experience of ``c-caltech256-5`` is about 3,000 training images (51 of
Caltech-256's classes × 60); the tool trains a generated Caltech-style folder of that size
(``--classes`` × ``--per-class``, the size a flag so that a dry run is small) with the
preset's recipe (``load_caltech256(transforms="authors")``: Resize 256 + RandomCrop 224 +
flip; ResNet-50 linearized from ``layer1``; Adam on δ; the rescaled square loss, β 25;
batch 32; the runner's DataLoader settings: shuffled, ``--workers`` persistent workers,
pinned memory on CUDA), for ``--epochs`` (at least 2) epochs, and reports the **last**
one, when the workers are running and the page cache is warm:

* **pipeline**: images/s of that epoch (loading, copying to the device, the step);
* **GPU busy**: the mean utilisation ``nvidia-smi`` reports during it (``–`` without
  one), and the step's share, step-alone seconds × batches ÷ the epoch's seconds;
* **loader alone**: images/s of one more epoch of the same DataLoader, iterated only;
* **step alone**: images/s of the same step on synthetic tensors already on the device
  (interleaved medians of :func:`benchmarks.tools.speed_timing.interleaved_medians`);
* **bound**: ``loader-bound`` when the loader alone is slower than the step alone, else
  ``step-bound``; the pipeline's rate over the slower of the two says how well they overlap.

``--amp fp16`` trains with a ``GradScaler`` from its default scale 2**16, as
``AutocastPlugin(torch.float16)`` does, and counts the optimizer steps it skipped in each
epoch (docs/speed.md, "Mixed precision", explains the float16 failure of the first GPU check). The fast-path
options (``--tf32``, ``--cudnn-benchmark``, ``--channels-last``, ``--compile``) are off
unless given, and the report says which were on (:mod:`benchmarks.tools.fast_options`).

``--json FILE`` writes the numbers for ``python -m benchmarks.tools.gpu_hours --steady-state
FILE``; ``--save FILE.md`` the table.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import torch
from torch.utils.data import DataLoader

from benchmarks.tools.fast_options import AMP_DTYPES, Options, add_option_flags, apply_backend_options

__all__ = ["STEADY_KIND", "PAPER_CLASSES", "PAPER_PER_CLASS", "make_folder", "bound", "measure", "format_report",
           "read_report", "main"]

STEADY_KIND = "steady-state"
PAPER_CLASSES, PAPER_PER_CLASS = 51, 60  # one experience of c-caltech256-5: 256 classes / 5, 60 training images each
BETA = 25.0  # the preset's TMC β in class-IL


def make_folder(root: Path, *, classes: int, per_class: int, image_size: int, distinct: int = 4) -> Path:
    """A generated Caltech-style folder under ``root`` (unless it has one): ``classes`` classes of
    ``per_class`` training images and 2 test images each, 300-500 px photos as Caltech's (40-64
    px for inputs under 200 px: a dry run). ``distinct`` classes are drawn (about 40-90 ms an
    image on one core) and copied to make the rest: loading and decoding cost the same, and
    3,162 images take seconds instead of minutes of the GPU machine's time."""
    if root.is_dir() and any(root.iterdir()):
        return root
    import shutil

    from benchmarks.datasets.synthetic import make_image_folder

    large = image_size >= 200
    drawn = min(classes, distinct)
    make_image_folder(root, layout="caltech256", classes=drawn, per_class=per_class + 2,
                      min_size=300 if large else 40, max_size=500 if large else 64)
    categories = next(root.rglob("256_ObjectCategories"))
    for c in range(drawn, classes):
        source = categories / f"{c % drawn + 1:03d}.shape-{c % drawn + 1:03d}"
        shutil.copytree(source, categories / f"{c + 1:03d}.shape-{c + 1:03d}")
    return root


def bound(loader_ips: float, step_ips: float) -> str:
    """``loader-bound`` when the loader alone feeds fewer images/s than the step alone takes, else ``step-bound``."""
    return "loader-bound" if loader_ips < step_ips else "step-bound"


class _Trainer:
    """The preset's tangent step on one device: TangentModel from ``layer1``, Adam on δ, the
    rescaled square loss, autocast to ``amp`` (None: float32), a GradScaler for float16."""

    def __init__(self, net: torch.nn.Module, classes: int, device: torch.device, amp: Optional[torch.dtype],
                 options: Options) -> None:
        from avalanche_tmc import RescaledSquareLoss, TangentModel
        from benchmarks.methods.builders import linearize_start

        self.device, self.amp = device, amp
        self.model = TangentModel(net, classes, start_at=linearize_start("after-stem", net),
                                  channels_last=options.channels_last).to(device)
        self.model.train()
        self.forward = torch.compile(self.model) if options.compile else self.model
        self.optimizer = torch.optim.Adam(self.model.delta_parameters(), lr=1e-4)
        self.criterion = RescaledSquareLoss(beta=BETA)
        self.scaler = torch.amp.GradScaler(device.type) if amp is torch.float16 else None

    def step(self, x: torch.Tensor, y: torch.Tensor) -> bool:
        """One optimizer step; True when the GradScaler skipped it (an inf/NaN gradient)."""
        self.optimizer.zero_grad(set_to_none=True)
        context = torch.autocast(self.device.type, self.amp) if self.amp is not None else _null()
        with context:
            out = self.forward(x)
        loss = self.criterion(out.float(), y)
        if self.scaler is None:
            loss.backward()
            self.optimizer.step()
            return False
        before = self.scaler.get_scale()
        self.scaler.scale(loss).backward()
        self.scaler.step(self.optimizer)
        self.scaler.update()
        return self.scaler.get_scale() < before


def _null():
    import contextlib

    return contextlib.nullcontext()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _train_epoch(loader: DataLoader, trainer: _Trainer) -> Dict[str, float]:
    images = skipped = batches = 0
    start = time.perf_counter()
    for x, y in loader:
        x = x.to(trainer.device, non_blocking=True)
        y = y.to(trainer.device, non_blocking=True)
        skipped += trainer.step(x, y)
        images, batches = images + len(x), batches + 1
    _sync(trainer.device)
    return {"images": images, "batches": batches, "seconds": time.perf_counter() - start, "skipped": skipped}


def _loader_epoch(loader: DataLoader) -> Dict[str, float]:
    images = 0
    start = time.perf_counter()
    for x, _ in loader:
        images += len(x)
    return {"images": images, "seconds": time.perf_counter() - start}


def measure(root: Path, *, device: torch.device, amp: str = "fp32", classes: int = PAPER_CLASSES,
            per_class: int = PAPER_PER_CLASS, epochs: int = 2, workers: int = 8, batch: int = 32,
            image_size: int = 224, backbone: str = "resnet50", rounds: int = 5,
            options: Optional[Options] = None, sampler=None) -> Dict:
    """Train ``classes`` × ``per_class`` images of the Caltech-style folder under ``root`` for
    ``epochs`` epochs and measure the last one, the loader alone and the step alone (module doc).
    ``sampler``: a context manager with ``utilisation`` samples (``GpuSampler``), or None."""
    import torchvision

    from benchmarks.datasets.folders import load_caltech256
    from benchmarks.datasets.loading import dataloader_kwargs
    from benchmarks.tools.speed_timing import interleaved_medians

    if epochs < 2:
        raise ValueError(f"epochs={epochs}: the steady state is the second epoch or later; give at least 2")
    options = options or Options()
    notes = apply_backend_options(options, device)
    train, _ = load_caltech256(root, image_size=image_size, transforms="authors", train_per_class=per_class)
    keep = [i for i, (_, label) in enumerate(train.samples) if label < classes] if hasattr(train, "samples") else None
    if keep is not None and len(keep) < len(train):
        train = torch.utils.data.Subset(train, keep)
    torch.manual_seed(0)
    net = getattr(torchvision.models, backbone)()
    trainer = _Trainer(net, classes, device, AMP_DTYPES[amp], options)
    loader = DataLoader(train, batch_size=batch, shuffle=True, **dataloader_kwargs(train, workers, device))
    epochs_done: List[Dict[str, float]] = []
    for epoch in range(epochs):
        last = epoch == epochs - 1
        if last and sampler is not None:
            with sampler:
                epochs_done.append(_train_epoch(loader, trainer))
        else:
            epochs_done.append(_train_epoch(loader, trainer))
    loader_only = _loader_epoch(loader)
    x = torch.randn(batch, 3, image_size, image_size, device=device)
    y = torch.randint(0, classes, (batch,), device=device)
    step_seconds = interleaved_medians({"step": lambda: trainer.step(x, y)}, rounds, device)["step"]
    final = epochs_done[-1]
    pipeline_ips = final["images"] / final["seconds"]
    loader_ips = loader_only["images"] / loader_only["seconds"]
    step_ips = batch / step_seconds
    util = list(getattr(sampler, "utilisation", []) or [])
    return {
        "kind": STEADY_KIND, "device": str(device), "amp": amp, "backbone": backbone, "image_size": image_size,
        "batch": batch, "workers": workers, "train_images": len(train), "epochs": epochs,
        "options": options.names(), "option_notes": notes,
        "pipeline_images_per_second": pipeline_ips, "epoch_seconds": final["seconds"],
        "loader_images_per_second": loader_ips, "step_images_per_second": step_ips,
        "step_share": min(1.0, final["batches"] * step_seconds / final["seconds"]),
        "gpu_busy": (sum(util) / len(util) / 100.0) if util else None,
        "bound": bound(loader_ips, step_ips), "overlap": pipeline_ips / min(loader_ips, step_ips),
        "skipped_steps": [int(e["skipped"]) for e in epochs_done],
        "epoch_images_per_second": [e["images"] / e["seconds"] for e in epochs_done],
    }


def format_report(results: Sequence[Dict]) -> str:
    """Markdown: one row per measured precision (the last epoch, the loader and the step alone, the bound)."""
    lines = ["| precision | options | train images | epoch images/s (1st … last) | GPU busy | step share | "
             "loader alone | step alone | bound (overlap) | fp16 skipped steps per epoch |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in results:
        epochs = " … ".join(f"{v:.0f}" for v in (r["epoch_images_per_second"][0], r["pipeline_images_per_second"]))
        busy = "–" if r["gpu_busy"] is None else f"{r['gpu_busy']:.0%}"
        skipped = ", ".join(map(str, r["skipped_steps"])) if r["amp"] == "fp16" else "–"
        options = ", ".join(r["options"]) or "none"
        lines.append(f"| {r['amp']} | {options} | {r['train_images']:,} | {epochs} | {busy} | "
                     f"{r['step_share']:.0%} | {r['loader_images_per_second']:.0f} | {r['step_images_per_second']:.0f} "
                     f"| {r['bound']} ({r['overlap']:.2f}) | {skipped} |")
    notes = sorted({n for r in results for n in r.get("option_notes", [])})
    first = results[0] if results else {}
    lines += ["", f"{first.get('backbone', '')} at {first.get('image_size', '')} px, batch {first.get('batch', '')}, "
              f"{first.get('workers', '')} persistent loader workers, {first.get('epochs', '')} epochs on "
              f"{first.get('device', '')}; images/s of the last epoch. Loader alone: one more epoch of the same "
              "DataLoader, iterated only; step alone: the same step on synthetic tensors on the device."]
    lines += [f"- {n}" for n in notes]
    return "\n".join(lines)


def read_report(path: Path) -> List[Dict]:
    """The results of a ``--json`` file (a list, one per precision), checked for what gpu_hours reads."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    rows = data if isinstance(data, list) else [data]
    for row in rows:
        if not isinstance(row, dict) or row.get("kind") != STEADY_KIND:
            raise ValueError(f"{path}: not a steady-state file (kind {STEADY_KIND!r}): write it with "
                             "python -m benchmarks.tools.steady_state --json FILE")
        for key in ("pipeline_images_per_second", "loader_images_per_second", "step_images_per_second"):
            value = row.get(key)
            if not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
                raise ValueError(f"{path}: {key}={value!r}: expected a positive number")
    return rows


def main(argv: Optional[Sequence[str]] = None) -> List[Dict]:
    p = argparse.ArgumentParser(prog="python -m benchmarks.tools.steady_state", description=__doc__.split("\n\n")[0])
    p.add_argument("--root", required=True, help="a Caltech-style folder (generated there when empty or absent)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--amp", default="fp32", help="comma-separated precisions: fp32, bf16, fp16")
    p.add_argument("--classes", type=int, default=PAPER_CLASSES, help="classes of the experience (default 51)")
    p.add_argument("--per-class", type=int, default=PAPER_PER_CLASS,
                   help="training images per class (default 60: 51 x 60 = 3,060, one experience of c-caltech256-5)")
    p.add_argument("--epochs", type=int, default=2, help="epochs (at least 2; the last is reported)")
    p.add_argument("--workers", type=int, default=8)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--backbone", default="resnet50", help="a torchvision ResNet (random weights)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds of the step alone")
    p.add_argument("--threads", type=int, default=None, help="CPU threads of the main process")
    p.add_argument("--json", type=Path, default=None, help="write the numbers here (for gpu_hours --steady-state)")
    p.add_argument("--save", type=Path, default=None, help="write the table here")
    add_option_flags(p)
    args = p.parse_args(argv)
    from benchmarks.networks.arithmetic import runner_arithmetic

    runner_arithmetic()  # the runner's one CPU arithmetic (AVX2), before torch computes
    amps = [a.strip() for a in args.amp.split(",") if a.strip()]
    if not amps or set(amps) - set(AMP_DTYPES):
        p.error(f"--amp {args.amp!r}: choose from {', '.join(AMP_DTYPES)}")
    if args.epochs < 2 or args.classes < 1 or args.per_class < 1:
        p.error("--epochs must be at least 2 (the second epoch is the steady state); --classes and --per-class >= 1")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda but torch.cuda.is_available() is False (use --device cpu with a small folder)")
    if args.threads:
        torch.set_num_threads(args.threads)
    root = make_folder(Path(args.root), classes=args.classes, per_class=args.per_class, image_size=args.image_size)
    from benchmarks.tools.gpu_sampler import GpuSampler

    options = Options.from_args(args)
    results = []
    for amp in amps:
        sampler = GpuSampler() if device.type == "cuda" else None
        result = measure(root, device=device, amp=amp, classes=args.classes, per_class=args.per_class,
                         epochs=args.epochs, workers=args.workers, batch=args.batch, image_size=args.image_size,
                         backbone=args.backbone, rounds=args.rounds, options=options, sampler=sampler)
        results.append(result)
        print(f"[steady-state] {amp}: {result['pipeline_images_per_second']:.0f} images/s, {result['bound']}",
              flush=True)
    table = format_report(results)
    print(table)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")
    if args.save:
        args.save.parent.mkdir(parents=True, exist_ok=True)
        args.save.write_text(table + "\n", encoding="utf-8")
    return results


if __name__ == "__main__":
    main()
