"""The GPU check in one command: ``python -m benchmarks.tools.gpu_check`` (``make gpu-check``).

What it is for: every number the project has only measured on a CPU or on paper, measured
on one GPU in about 10 minutes of its time (docs/speed.md, "On a GPU: the plan": second by
second), and
written to ``docs/results/gpu/<device>.md`` to commit:

1. **device-tests**: the device-sensitive tests (strategies, composition, statistics,
   component files, mixed precision) with ``pytest --device cuda``;
2. **speed**: ``python -m benchmarks.tools.speed --device cuda`` (tangent/plain step ratios and
   memory, composed inference), ResNet-50 at the paper's 224 px and batch 32 among them;
3. **steady-fp32**, **steady-bf16**, **steady-fp16**: the paper step in steady state
   (:mod:`benchmarks.tools.steady_state`: one real-size experience of ``c-caltech256-5``,
   3,060 generated images, 2 epochs with persistent workers; the second epoch's images/s,
   GPU busy fraction, the loader alone and the step alone, the bound named; fp16 with its
   GradScaler from 2**16, skipped steps counted);
4. **paper-epoch-fp16**: one epoch of the paper preset through the runner itself
   (``benchmarks.run --preset c-caltech256-5 --amp fp16``, small generated folder): the
   float16 path end to end (AutocastPlugin, the scaler, the runner's loaders);
5. **fast-options** and **fast-options-compile**: :mod:`benchmarks.tools.fast_options` (TF32,
   cudnn.benchmark, channels-last, bf16 autocast and all of them together; then torch.compile,
   in a step of its own), each against the baseline, ResNet-50 at 224 px;
6. **authors-speed**: :mod:`benchmarks.tools.authors_speed` with ``--authors-code DIR`` (the
   authors' hand-linearized ResNet-50 against our tangent step and composed inference);
   skipped, with a note, without ``--authors-code``;
7. **nccl**: the two-process ``torch.distributed`` tests with NCCL, when there are two GPUs;
8. **gpu-hours**: ``python -m benchmarks.tools.gpu_hours`` from the measured steady state
   (``--steady-state``, fp32) and the speed step's tangent ratio.

Each step runs in its own process with its own time limit, so one failure or hang is
reported and the others still run. ``--dry-run`` runs every step small on the CPU (the
tests run it so; authors-speed on a stand-in network unless ``--authors-code`` is given):
it checks the script, not the GPU, and its report says so.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from avalanche_tmc.files.filesystem import atomic_path, check_writable
from benchmarks.results.outputs import one_line, writing
from benchmarks.results.reading import ReportFileError
from benchmarks.tools.gpu_report import (
    PLANNED,
    PRESET,
    STEADY_AMPS,
    GpuSampler,
    Step,
    StepResult,
    _tail,
    images_per_second,
    report,
    report_sections,
    speed_rows,
)

__all__ = ["PLANNED", "Step", "StepResult", "GpuSampler", "plan", "run_step", "images_per_second", "speed_rows",
           "report", "main"]

ROOT = Path(__file__).resolve().parents[2]
# the tests that take the ``device`` fixture (tests/conftest.py): models, data and δ on it
DEVICE_TESTS = ("tests/avalanche_tmc/composition", "tests/avalanche_tmc/files", "tests/avalanche_tmc/training",
                "tests/avalanche_tmc/models", "tests/avalanche_tmc/tangent/test_mixed_precision.py")
REQUIRED = ("avalanche", "timm", "safetensors", "sklearn", "torchvision")
# The paper-epoch folder gives each experience 4 optimizer steps. With the check's random
# weights the δ-gradients reach about 525 at loss scale 1 (measured on the CPU in float32,
# ResNet-50 at 224 px, docs/speed.md, "Mixed precision"), so float16 overflows (65504) at scales of 128 and
# more: from GradScaler's 2**16 the first 10 steps are skipped (on an H100 all 4 were,
# refused by AutocastPlugin); from 256, 2 of 4. The check starts at 64. A real experience
# (about 96 steps) calibrates from 2**16 itself: the steady-fp16 step counts what it skips.
FP16_SCALE = {True: ["--amp-init-scale", "64"], False: []}


def plan(device: str, workdir: Path, *, dry_run: bool, gpus: int, authors_code: Optional[str] = None) -> List[Step]:
    """The steps of the check on ``device``; ``dry_run``: every step small, on the CPU.
    ``authors_code``: a clone of the authors' repository (authors-speed is skipped without one)."""
    py = sys.executable
    data, weights = workdir / "caltech256", workdir / f"{'resnet18' if dry_run else 'resnet50'}-random.pth"
    if dry_run:
        tests = ["tests/avalanche_tmc/composition/test_deltas.py"]
        speed = ["--networks", "resnet18@32", "--rounds", "1", "--ensemble-rounds", "0", "--task-counts", "1",
                 "--threads", "1"]
        shrink = ["--backbone", "resnet18", "--image-size", "32", "--threads", "1", "--workers", "1",
                  "--data-option", "train_per_class=5"]
        amps = ("fp32",)  # the runner's fp16 autocast is for CUDA
        steady = ["--backbone", "resnet18", "--image-size", "32", "--classes", "3", "--per-class", "8", "--batch",
                  "8", "--workers", "1", "--rounds", "1", "--threads", "1"]
        options = ["--network", "resnet18", "--image-size", "16", "--batch", "4", "--rounds", "1", "--threads", "1"]
        compiled = ["--network", "resnet18", "--image-size", "8", "--batch", "2", "--rounds", "1", "--threads", "1"]
        authors = ["--arch", "resnet18", "--image-size", "32", "--batch", "4", "--rounds", "1", "--threads", "1"]
    else:
        tests = list(DEVICE_TESTS)
        speed = ["--networks", "resnet50@224,resnet18,efficientnet_lite0,vit_tiny", "--rounds", "5",
                 "--ensemble-rounds", "2", "--task-counts", "1,5,20"]
        shrink = ["--workers", "8", "--data-option", "train_per_class=60"]
        amps = ("fp16",)  # fp32 and bf16 in steady state below; the runner's float16 path end to end here
        steady = ["--workers", "8"]
        options = compiled = ["--network", "resnet50@224", "--rounds", "5"]
        authors = ["--arch", "resnet50", "--image-size", "224", "--batch", "32", "--rounds", "5"]
    steps = [Step("device-tests", [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--device", device,
                                 "-m", "not slow and not integration", *tests], timeout=60 if dry_run else 240),
             Step("speed", [py, "-m", "benchmarks.tools.speed", "--device", device, *speed,
                            "--save", str(workdir / "speed.md")], timeout=60 if dry_run else 120)]
    for amp in amps:
        steps.append(Step(f"paper-epoch-{amp}", [
            py, "-m", "benchmarks.run", "--preset", PRESET, "--data-root", str(data), "--weights", str(weights),
            "--device", device, "--epochs", "1", "--seeds", "1", "--jobs", "1", "--methods", "tmc", "--progress",
            *shrink, *([] if amp == "fp32" else ["--amp", amp]), *FP16_SCALE[amp == "fp16"],
            "--out", str(workdir / f"run-{amp}")],
            timeout=60 if dry_run else 150))
    for amp in STEADY_AMPS:
        steps.insert(2 + STEADY_AMPS.index(amp), Step(f"steady-{amp}", [
            py, "-m", "benchmarks.tools.steady_state", "--root", str(workdir / "steady"), "--device", device,
            "--amp", amp, *steady, "--json", str(workdir / f"steady-{amp}.json"),
            "--save", str(workdir / f"steady-{amp}.md")], timeout=120 if dry_run else 180))
    eager = "baseline,tf32,cudnn-benchmark,channels-last,bf16,all"
    steps.append(Step("fast-options", [py, "-m", "benchmarks.tools.fast_options", "--device", device, *options,
                                       "--configs", eager, "--save", str(workdir / "fast-options.md")],
                      timeout=180 if dry_run else 150))
    # torch.compile apart: a slow compile or a failed one costs only its own numbers
    steps.append(Step("fast-options-compile", [
        py, "-m", "benchmarks.tools.fast_options", "--device", device, *compiled, "--configs", "baseline,compile",
        "--save", str(workdir / "fast-options-compile.md")], timeout=300 if dry_run else 240))
    source = ["--authors-code", authors_code] if authors_code else ["--stand-in"]
    steps.append(Step("authors-speed", [py, "-m", "benchmarks.tools.authors_speed", "--device", device, *source,
                                        *authors, "--save", str(workdir / "authors-speed.md")],
                      timeout=120, skipped=None if authors_code or dry_run else
                      "no --authors-code DIR (a clone of tianyu139/tangent-model-composition; "
                      "docs/speed.md, \"The authors' code beside ours\")"))
    nccl = [py, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--device", device, "--dist-backend", "nccl",
            "tests/avalanche_tmc/test_distributed.py"]
    steps.append(Step("nccl", nccl, timeout=120, skipped=None if gpus >= 2 else f"{gpus} GPU(s): NCCL needs two"))
    return steps


def run_step(step: Step, env: Dict[str, str]) -> StepResult:
    """Run one step in its own process under its time limit, sampling the GPU meanwhile."""
    if step.skipped:
        return StepResult(step, None, 0.0, "")
    print(f"[gpu-check] {step.name}: {' '.join(step.argv[1:])}", flush=True)
    start = time.perf_counter()
    with GpuSampler() as sampler:
        try:
            done = subprocess.run(step.argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=step.timeout)
            code, output = done.returncode, done.stdout + done.stderr
        except subprocess.TimeoutExpired as expired:
            code, output = None, _text(expired.stdout) + _text(expired.stderr)
    result = StepResult(step, code, time.perf_counter() - start, output, sampler.utilisation, sampler.memory_mib)
    print(f"[gpu-check] {step.name}: {result.status} in {result.seconds:.0f} s", flush=True)
    return result


def _text(data: object) -> str:
    return data.decode(errors="replace") if isinstance(data, bytes) else str(data or "")


def _prepare_inputs(workdir: Path, *, dry_run: bool) -> None:
    """The generated Caltech-style folder and a random-weights file for the paper preset."""
    import torch
    from torchvision.models import resnet18, resnet50

    from benchmarks.datasets.synthetic import make_image_folder
    from benchmarks.tools.steady_state import PAPER_CLASSES, PAPER_PER_CLASS, make_folder

    make_image_folder(workdir / "caltech256", layout="caltech256", classes=10, per_class=7 if dry_run else 70,
                      min_size=40 if dry_run else 256, max_size=64 if dry_run else 320)
    # the steady state's experience: 51 classes x 60 training images at Caltech's 300-500 px
    make_folder(workdir / "steady", classes=3 if dry_run else PAPER_CLASSES,
                per_class=8 if dry_run else PAPER_PER_CLASS, image_size=32 if dry_run else 224)
    torch.manual_seed(0)
    net = resnet18() if dry_run else resnet50()
    torch.save(net.state_dict(), workdir / f"{'resnet18' if dry_run else 'resnet50'}-random.pth")


def _missing_packages() -> List[str]:
    import importlib.util

    return [name for name in REQUIRED if importlib.util.find_spec(name) is None]


def _gpu_hours(speed: Dict[str, Dict[str, float]], env: Dict[str, str], steady: Optional[Path] = None) -> str:
    """The GPU-hours table from the tangent ratio of ResNet-50 at 224 px (the paper's network;
    in a dry run, the first network timed) and the measured steady state (fp32) when
    ``steady`` exists, else the speed step's plain throughput (a bound)."""
    name = "resnet50@224" if "resnet50@224" in speed else next(iter(speed), None)
    if name is None:
        return ""
    row = speed[name]
    argv = [sys.executable, "-m", "benchmarks.tools.gpu_hours", "--tangent-ratio", f"{row['ratio']:.2f}"]
    if steady is not None and steady.exists():
        argv += ["--steady-state", str(steady), "--precision", "fp32"]
        what = f"the steady state of the paper step, fp32, and the tangent ratio of {name} in the speed step"
    else:
        argv += ["--gpu-images-per-second", f"{row['plain_img_s']:.1f}"]
        what = f"the plain step and tangent ratio of {name} in the speed step: a bound, no steady state measured"
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    head = f"`{' '.join(['python'] + argv[1:])}` ({what}):"
    return head + "\n\n" + (done.stdout if done.returncode == 0 else _tail(done.stderr))


def _check_folders(workdir: Optional[str], out: str) -> None:
    """Make ``--workdir`` (when given) and ``--out`` and probe that they can be written, before
    any step runs: a file in the way, a symlink loop or a read-only folder is a
    :class:`~benchmarks.results.files.ReportFileError` naming it."""
    for flag, folder in (("--workdir", workdir), ("--out", out)):
        if folder is None:
            continue
        try:
            Path(folder).mkdir(parents=True, exist_ok=True)
            check_writable(folder, create=False)
        except OSError as error:
            raise ReportFileError(f"{flag} {folder}: not a folder that can be written ({error.strerror or error}: a "
                                  "file in the way, a symlink loop, a read-only folder?): choose another.") from None


def _write(path: Path, text: str) -> None:
    """Write the report atomically (a symlink at ``path`` is replaced, never followed); an
    ``OSError`` names ``path``."""
    with writing(path), atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def main(argv: Optional[Sequence[str]] = None) -> Path:
    """Run the check and write the report; returns the report's path."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.tools.gpu_check", description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda", help="the GPU to check (default: cuda)")
    p.add_argument("--dry-run", action="store_true", help="every step small on the CPU: checks the script only")
    p.add_argument("--out", default=None,
                   help="folder of the report, <out>/<device>.md (default: docs/results/gpu; for --dry-run a folder "
                        "under the temporary directory: a dry run writes nothing into docs/)")
    p.add_argument("--workdir", default=None, help="folder for generated images, weights and runs (default: temp)")
    p.add_argument("--steps", default=None, metavar="NAME[,NAME]",
                   help="run only these steps (a rerun of the ones that failed); the report is then named "
                        "<device>-<steps>.md so that it does not replace the whole check's")
    p.add_argument("--authors-code", default=None, metavar="DIR",
                   help="a clone of github tianyu139/tangent-model-composition for the authors-speed step (skipped "
                        "without it; the dry run then uses a stand-in network)")
    args = p.parse_args(argv)
    missing = _missing_packages()
    if missing:
        p.error(f"missing packages {', '.join(missing)}: install the project with `pip install -e .[test,benchmarks]` "
                "(on a machine without internet, carry their wheels)")
    import torch

    device = "cpu" if args.dry_run else args.device
    if not args.dry_run and not torch.cuda.is_available():
        p.error("no CUDA device: torch.cuda.is_available() is False (use --dry-run to check the script on the CPU)")
    if args.out is None:
        args.out = str(Path(tempfile.gettempdir()) / "avalanche-tmc-gpu-check" if args.dry_run
                       else ROOT / "docs" / "results" / "gpu")
    with one_line(p):
        _check_folders(args.workdir, args.out)
    gpus = 0 if args.dry_run else torch.cuda.device_count()
    name = "cpu-dry-run" if args.dry_run else torch.cuda.get_device_name(torch.device(device))
    # keep what PYTHONPATH already holds (carried wheels on a machine without internet)
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, PYTHONPATH=path, OMP_WAIT_POLICY="PASSIVE", PYTHONUNBUFFERED="1")
    with tempfile.TemporaryDirectory() as tmp, one_line(p):
        workdir = Path(args.workdir or tmp)
        env["AVALANCHE_TMC_CACHE"] = str(workdir / "cache")
        try:
            _prepare_inputs(workdir, dry_run=args.dry_run)
        except RuntimeError as error:  # torch.save's own error on a full disk ("enforce fail at inline_container")
            raise ReportFileError(f"{workdir}: the check's inputs cannot be written ({str(error).splitlines()[0]}): "
                                  "the disk is most likely full; free space there or give another --workdir.") \
                from None
        command = "python -m benchmarks.tools.gpu_check" + (" --dry-run" if args.dry_run else "")
        out = Path(args.out)
        authors = str(Path(args.authors_code).resolve()) if args.authors_code else None
        steps = plan(device, workdir, dry_run=args.dry_run, gpus=gpus, authors_code=authors)
        if args.steps:
            wanted = [s.strip() for s in args.steps.split(",") if s.strip()]
            unknown = sorted(set(wanted) - {s.name for s in steps})
            if unknown:
                p.error(f"unknown step(s) {', '.join(unknown)}: choose from {', '.join(s.name for s in steps)}")
            steps = [s for s in steps if s.name in wanted]
            command += f" --steps {','.join(wanted)}"
        stem = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-").lower()
        path = out / (stem + (f"-{'-'.join(s.name for s in steps)}" if args.steps else "") + ".md")
        speed_file = workdir / "speed.md"
        results: List[StepResult] = []
        speed_table = ""
        for step in steps:
            results.append(run_step(step, env))
            # rewritten after every step: a check stopped from outside still leaves what it measured
            speed_table = speed_file.read_text() if speed_file.exists() else ""
            sections = report_sections(workdir)
            _write(path, report(results, device_name=name, command=command, dry_run=args.dry_run,
                                speed_table=speed_table, sections=sections))
        hours = _gpu_hours(speed_rows(speed_table), env, workdir / "steady-fp32.json")
        _write(path, report(results, device_name=name, command=command, dry_run=args.dry_run,
                            speed_table=speed_table, gpu_hours=hours, sections=sections))
    print(f"[gpu-check] report: {path}")
    if any(not r.step.skipped and r.returncode != 0 for r in results):
        sys.exit(1)
    return path


if __name__ == "__main__":
    main()
