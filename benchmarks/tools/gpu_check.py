"""The GPU check in one command: ``python -m benchmarks.tools.gpu_check`` (``make gpu-check``).

What it is for: every number the project has only measured on a CPU or on paper, measured
on one GPU in about 8 minutes, and written to ``docs/results/gpu/<device>.md`` to commit:

1. **device-tests**: the device-sensitive tests (strategies, composition, statistics,
   component files, mixed precision) with ``pytest --device cuda``;
2. **speed**: ``python -m benchmarks.tools.speed --device cuda`` (tangent/plain step ratios and
   memory, composed inference), ResNet-50 at the paper's 224 px and batch 32 among them;
3. **paper-epoch** in fp32, bf16 and fp16: one epoch of the paper preset ``c-caltech256-5``
   (the authors' recipe: ResNet-50, Resize 256 + RandomCrop 224 + flip, decay on δ,
   linearized from layer1) on a generated Caltech-style folder, with 8 loader workers and
   ``--amp``: images/s from the runner's progress lines, GPU utilisation and peak memory
   sampled by ``nvidia-smi``;
4. **nccl**: the two-process ``torch.distributed`` tests with NCCL, when there are two GPUs;
5. **gpu-hours**: ``python -m benchmarks.tools.gpu_hours`` from the measured plain ResNet-50
   throughput and tangent/plain ratio instead of the published A100 figure.

Each step runs in its own process with its own time limit, so one failure or hang is
reported and the others still run. ``--dry-run`` runs every step small on the CPU (the
tests run it so): it checks the script, not the GPU, and its report says so.
"""

from __future__ import annotations

import argparse
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Dict, List, Optional, Sequence

from avalanche_tmc.files.filesystem import atomic_path, check_writable
from benchmarks.results.outputs import one_line, writing
from benchmarks.results.reading import ReportFileError

__all__ = ["Step", "StepResult", "GpuSampler", "plan", "run_step", "images_per_second", "speed_rows",
           "report", "main"]

ROOT = Path(__file__).resolve().parents[2]
# the tests that take the ``device`` fixture (tests/conftest.py): models, data and δ on it
DEVICE_TESTS = ("tests/avalanche_tmc/composition", "tests/avalanche_tmc/files", "tests/avalanche_tmc/training",
                "tests/avalanche_tmc/models", "tests/avalanche_tmc/tangent/test_mixed_precision.py")
REQUIRED = ("avalanche", "timm", "safetensors", "sklearn", "torchvision")
PRESET = "c-caltech256-5"
# The generated folder gives each experience 4 optimizer steps: from GradScaler's 2**16 the
# float16 scale halves on every overflowing step and never gets low enough (measured on an
# H100: all 4 skipped, refused by AutocastPlugin), so the check starts lower.
FP16_SCALE = {True: ["--amp-init-scale", "256"], False: []}


@dataclass
class Step:
    """One command of the check: its name, argv, time limit and why it is skipped (if so)."""

    name: str
    argv: List[str]
    timeout: int
    skipped: Optional[str] = None


@dataclass
class StepResult:
    """What one step gave: exit code (None: timed out or skipped), seconds, output and the
    GPU samples taken while it ran."""

    step: Step
    returncode: Optional[int]
    seconds: float
    output: str
    utilisation: List[float] = field(default_factory=list)
    memory_mib: List[float] = field(default_factory=list)

    @property
    def status(self) -> str:
        if self.step.skipped:
            return f"skipped: {self.step.skipped}"
        if self.returncode is None:
            return f"timed out after {self.step.timeout} s"
        return "passed" if self.returncode == 0 else f"failed (exit {self.returncode})"


class GpuSampler:
    """Polls ``nvidia-smi`` for utilisation (%) and memory used (MiB) every ``period``
    seconds while a step runs; records nothing where ``nvidia-smi`` is absent."""

    QUERY = ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"]

    def __init__(self, period: float = 0.5) -> None:
        self.period = period
        self.available = shutil.which("nvidia-smi") is not None
        self.utilisation: List[float] = []
        self.memory_mib: List[float] = []
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def _poll(self) -> None:
        while not self._stop.wait(self.period):
            try:
                line = subprocess.run(self.QUERY, capture_output=True, text=True, timeout=5).stdout.splitlines()[0]
                used, memory = (float(v) for v in line.split(",")[:2])
            except (OSError, ValueError, IndexError, subprocess.SubprocessError):
                continue
            self.utilisation.append(used)
            self.memory_mib.append(memory)

    def __enter__(self) -> "GpuSampler":
        if self.available:
            self._thread = threading.Thread(target=self._poll, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()


def plan(device: str, workdir: Path, *, dry_run: bool, gpus: int) -> List[Step]:
    """The steps of the check on ``device``; ``dry_run``: every step small, on the CPU."""
    py = sys.executable
    data, weights = workdir / "caltech256", workdir / f"{'resnet18' if dry_run else 'resnet50'}-random.pth"
    if dry_run:
        tests = ["tests/avalanche_tmc/composition/test_deltas.py"]
        speed = ["--networks", "resnet18@32", "--rounds", "1", "--ensemble-rounds", "0", "--task-counts", "1",
                 "--threads", "1"]
        shrink = ["--backbone", "resnet18", "--image-size", "32", "--threads", "1", "--workers", "1",
                  "--data-option", "train_per_class=5"]
        amps = ("fp32", "bf16")  # fp16 autocast is for CUDA
    else:
        tests = list(DEVICE_TESTS)
        speed = ["--networks", "resnet50@224,resnet18,efficientnet_lite0,vit_tiny", "--rounds", "5",
                 "--ensemble-rounds", "2", "--task-counts", "1,5,20"]
        shrink = ["--workers", "8", "--data-option", "train_per_class=60"]
        amps = ("fp32", "bf16", "fp16")
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


_PROGRESS = re.compile(r"epoch \d+/\d+: (\d+) img/s")
_SPEED_ROW = re.compile(r"^\| (\S+) \((\d+)px, (\d+)\) \| (\d+) ms \| [^|]*\| (\d+) ms \(([0-9.]+)x\)")


def images_per_second(output: str) -> Optional[float]:
    """The median images/s of the runner's per-epoch progress lines (None: no such line)."""
    rates = [float(m[1]) for m in _PROGRESS.finditer(output)]
    return median(rates) if rates else None


def speed_rows(table: str) -> Dict[str, Dict[str, float]]:
    """network -> plain and tangent (fast path) images/s and their ratio, from the training
    table of ``benchmarks.tools.speed --save``."""
    rows = {}
    for line in table.splitlines():
        m = _SPEED_ROW.match(line)
        if m:
            batch, plain_ms, tangent_ms = int(m[3]), float(m[4]), float(m[5])
            rows[m[1]] = {"plain_img_s": batch / plain_ms * 1e3, "tangent_img_s": batch / tangent_ms * 1e3,
                          "ratio": float(m[6])}
    return rows


def _tail(text: str, lines: int = 15) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


def report(results: Sequence[StepResult], *, device_name: str, command: str, dry_run: bool,
           speed_table: str = "", gpu_hours: str = "") -> str:
    """The Markdown report: what ran, how each step ended, the measured numbers, and the
    end of the output of every step that did not pass."""
    lines = [f"# GPU check: {device_name}", "", f"<!-- written by: {command} -->", ""]
    if dry_run:
        lines += ["**Dry run on the CPU**: every step small; it checks the script, it measures no GPU.", ""]
    lines += [f"torch {_torch_version()}, Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}.", "",
              "| step | status | seconds | images/s | GPU util. mean / max | peak GPU memory |",
              "|---|---|---:|---:|---:|---:|"]
    for r in results:
        rate = images_per_second(r.output) if r.step.name.startswith("paper-epoch") else None
        util = (f"{sum(r.utilisation) / len(r.utilisation):.0f}% / {max(r.utilisation):.0f}%"
                if r.utilisation else "–")
        memory = f"{max(r.memory_mib):,.0f} MiB" if r.memory_mib else "–"
        lines.append(f"| {r.step.name} | {r.status} | {r.seconds:.0f} | {f'{rate:.0f}' if rate else '–'} | "
                     f"{util} | {memory} |")
    lines += ["", f"`paper-epoch-*`: one epoch of `--preset {PRESET}` (TMC, the authors' recipe) on a generated "
              "Caltech-style folder; images/s is the median of the runner's per-epoch progress lines.", ""]
    if speed_table:
        lines += ["## Speed (`benchmarks.tools.speed`)", "", speed_table.strip(), ""]
    if gpu_hours:
        lines += ["## GPU-hours from the measured throughput", "", gpu_hours.strip(), ""]
    failed = [r for r in results if not r.step.skipped and r.returncode != 0]
    for r in failed:
        lines += [f"## {r.step.name}: {r.status}", "", "```text", _tail(r.output), "```", ""]
    return "\n".join(lines)


def _torch_version() -> str:
    import torch

    return torch.__version__


def _prepare_inputs(workdir: Path, *, dry_run: bool) -> None:
    """The generated Caltech-style folder and a random-weights file for the paper preset."""
    import torch
    from torchvision.models import resnet18, resnet50

    from benchmarks.datasets.synthetic import make_image_folder

    make_image_folder(workdir / "caltech256", layout="caltech256", classes=10, per_class=7 if dry_run else 70,
                      min_size=40 if dry_run else 256, max_size=64 if dry_run else 320)
    torch.manual_seed(0)
    net = resnet18() if dry_run else resnet50()
    torch.save(net.state_dict(), workdir / f"{'resnet18' if dry_run else 'resnet50'}-random.pth")


def _missing_packages() -> List[str]:
    import importlib.util

    return [name for name in REQUIRED if importlib.util.find_spec(name) is None]


def _gpu_hours(speed: Dict[str, Dict[str, float]], env: Dict[str, str]) -> str:
    """The GPU-hours table from the plain throughput and tangent ratio of ResNet-50 at 224 px
    (the paper's network; in a dry run, the first network timed)."""
    name = "resnet50@224" if "resnet50@224" in speed else next(iter(speed), None)
    if name is None:
        return ""
    row = speed[name]
    argv = [sys.executable, "-m", "benchmarks.tools.gpu_hours", "--gpu-images-per-second", f"{row['plain_img_s']:.1f}",
            "--tangent-ratio", f"{row['ratio']:.2f}"]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    head = f"`{' '.join(['python'] + argv[1:])}` (the plain step and tangent ratio of {name} in the speed step):"
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
    p.add_argument("--out", default=str(ROOT / "docs" / "results" / "gpu"),
                   help="folder of the report, <out>/<device>.md (default: docs/results/gpu)")
    p.add_argument("--workdir", default=None, help="folder for generated images, weights and runs (default: temp)")
    p.add_argument("--steps", default=None, metavar="NAME[,NAME]",
                   help="run only these steps (a rerun of the ones that failed); the report is then named "
                        "<device>-<steps>.md so that it does not replace the whole check's")
    args = p.parse_args(argv)
    missing = _missing_packages()
    if missing:
        p.error(f"missing packages {', '.join(missing)}: install the project with `pip install -e .[test,benchmarks]` "
                "(on a machine without internet, carry their wheels)")
    import torch

    device = "cpu" if args.dry_run else args.device
    if not args.dry_run and not torch.cuda.is_available():
        p.error("no CUDA device: torch.cuda.is_available() is False (use --dry-run to check the script on the CPU)")
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
        _prepare_inputs(workdir, dry_run=args.dry_run)
        command = "python -m benchmarks.tools.gpu_check" + (" --dry-run" if args.dry_run else "")
        out = Path(args.out)
        steps = plan(device, workdir, dry_run=args.dry_run, gpus=gpus)
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
            _write(path, report(results, device_name=name, command=command, dry_run=args.dry_run,
                                speed_table=speed_table))
        hours = _gpu_hours(speed_rows(speed_table), env)
        _write(path, report(results, device_name=name, command=command, dry_run=args.dry_run,
                            speed_table=speed_table, gpu_hours=hours))
    print(f"[gpu-check] report: {path}")
    if any(not r.step.skipped and r.returncode != 0 for r in results):
        sys.exit(1)
    return path


if __name__ == "__main__":
    main()
