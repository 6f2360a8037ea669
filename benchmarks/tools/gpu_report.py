"""The GPU check's records: its steps and their results, the GPU sampler, the numbers read
from the steps' output and the Markdown report (:mod:`benchmarks.tools.gpu_check` runs them)."""

from __future__ import annotations

import platform
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Dict, List, Optional, Sequence

from benchmarks.tools.gpu_sampler import GpuSampler

__all__ = ["PRESET", "STEADY_AMPS", "PLANNED", "Step", "StepResult", "GpuSampler", "images_per_second", "speed_rows",
           "report", "report_sections"]

PRESET = "c-caltech256-5"
STEADY_AMPS = ("fp32", "bf16", "fp16")
# planned GPU seconds per step (docs/speed.md, "On a GPU: the plan"), the inputs' preparation and the start-up apart
PLANNED = {"device-tests": 70, "speed": 50, "steady-fp32": 45, "steady-bf16": 45, "steady-fp16": 45,
           "paper-epoch-fp16": 50, "fast-options": 60, "fast-options-compile": 90, "authors-speed": 40, "nccl": 30}


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
           speed_table: str = "", gpu_hours: str = "", sections: Optional[Dict[str, str]] = None) -> str:
    """The Markdown report: what ran, how each step ended (seconds beside the planned ones),
    the measured numbers (``sections``: heading -> a step's table), and the end of the output
    of every step that did not pass."""
    lines = [f"# GPU check: {device_name}", "", f"<!-- written by: {command} -->", ""]
    if dry_run:
        lines += ["**Dry run on the CPU**: every step small; it checks the script, it measures no GPU.", ""]
    lines += [f"torch {_torch_version()}, Python {platform.python_version()}, {time.strftime('%Y-%m-%d')}.", "",
              "| step | status | seconds | images/s | GPU util. mean / max | peak GPU memory | planned s |",
              "|---|---|---:|---:|---:|---:|---:|"]
    for r in results:
        rate = images_per_second(r.output) if r.step.name.startswith("paper-epoch") else None
        util = (f"{sum(r.utilisation) / len(r.utilisation):.0f}% / {max(r.utilisation):.0f}%"
                if r.utilisation else "–")
        memory = f"{max(r.memory_mib):,.0f} MiB" if r.memory_mib else "–"
        lines.append(f"| {r.step.name} | {r.status} | {r.seconds:.0f} | {f'{rate:.0f}' if rate else '–'} | "
                     f"{util} | {memory} | {PLANNED.get(r.step.name, '–')} |")
    lines += ["", f"`paper-epoch-*`: one epoch of `--preset {PRESET}` (TMC, the authors' recipe) on a generated "
              "Caltech-style folder; images/s is the median of the runner's per-epoch progress lines.", ""]
    if speed_table:
        lines += ["## Speed (`benchmarks.tools.speed`)", "", speed_table.strip(), ""]
    for heading, text in (sections or {}).items():
        if text.strip():
            lines += [f"## {heading}", "", text.strip(), ""]
    if gpu_hours:
        lines += ["## GPU-hours from the measured throughput", "", gpu_hours.strip(), ""]
    failed = [r for r in results if not r.step.skipped and r.returncode != 0]
    for r in failed:
        lines += [f"## {r.step.name}: {r.status}", "", "```text", _tail(r.output), "```", ""]
    return "\n".join(lines)


def _torch_version() -> str:
    import torch

    return torch.__version__


SECTIONS = (("The paper step in steady state (`benchmarks.tools.steady_state`)", "steady-*.json"),
            ("Fast-path options, each against the baseline (`benchmarks.tools.fast_options`)", "fast-options*.md"),
            ("The authors' code beside ours (`benchmarks.tools.authors_speed`)", "authors-speed.md"))


def report_sections(workdir: Path) -> Dict[str, str]:
    """The tables the steps wrote under ``workdir``, by report heading; the steady state's
    precisions (one ``--json`` file each) in one table, in the order fp32, bf16, fp16."""
    found = {}
    for heading, pattern in SECTIONS:
        if pattern.startswith("steady"):
            from benchmarks.tools.steady_state import format_report, read_report

            files = [workdir / f"steady-{amp}.json" for amp in STEADY_AMPS if (workdir / f"steady-{amp}.json").exists()]
            if files:
                found[heading] = format_report([row for f in files for row in read_report(f)])
            continue
        files = sorted(workdir.glob(pattern))
        if files:
            found[heading] = "\n\n".join(f.read_text(encoding="utf-8").strip() for f in files)
    return found
