"""Opt-in settings for the GPU step, each timed before and after: ``python -m benchmarks.tools.fast_options``.

What it is for: which of the usual GPU speed-ups pays for the tangent step and the composed
forward, measured one at a time against the same process's baseline (interleaved rounds,
medians: :func:`benchmarks.tools.speed_timing.interleaved_medians`):

* ``tf32``: ``torch.backends.cuda.matmul.allow_tf32`` and ``torch.backends.cudnn.allow_tf32``
  on (PyTorch's defaults: off and on); CUDA only;
* ``cudnn-benchmark``: ``torch.backends.cudnn.benchmark`` on (cuDNN tries its algorithms per
  shape); CUDA only;
* ``channels-last``: ``TangentModel(channels_last=True)`` and the plain network in the
  channels-last layout;
* ``bf16``: every forward, plain and tangent, under ``torch.autocast`` to bfloat16;
* ``all``: every one of the above together (the eager fast path);
* ``compile``: ``torch.compile`` of the plain network, the tangent model and its
  ``forward_with`` (alone: a
  compile takes minutes where the others take none, so the GPU check runs it as a step of
  its own).

The library's defaults are not changed: these are flags of the measuring tools
(:mod:`benchmarks.tools.steady_state` takes the same ones). The backend flags are set
only inside the timed calls of the configuration that names them and put back after, so
one process compares them all. On the CPU ``tf32`` and ``cudnn-benchmark`` are no-ops (the
report says so); ``tests/benchmarks/test_fast_options.py`` checks that channels-last and
compile leave the outputs and δ-gradients unchanged beyond float rounding.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
from dataclasses import dataclass, fields
from typing import Callable, Dict, Iterator, List, Optional, Sequence

import torch

__all__ = ["AMP_DTYPES", "OPTION_FLAGS", "CONFIGS", "Options", "add_option_flags", "apply_backend_options",
           "backend", "time_options", "format_options", "main"]

AMP_DTYPES: Dict[str, Optional[torch.dtype]] = {"fp32": None, "bf16": torch.bfloat16, "fp16": torch.float16}
OPTION_FLAGS = ("tf32", "cudnn-benchmark", "channels-last", "compile")
CONFIGS = ("baseline", "tf32", "cudnn-benchmark", "channels-last", "bf16", "all", "compile")


@dataclass(frozen=True)
class Options:
    """The opt-in fast-path settings (all off by default)."""

    tf32: bool = False
    cudnn_benchmark: bool = False
    channels_last: bool = False
    compile: bool = False

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> "Options":
        return cls(**{f.name: bool(getattr(args, f.name)) for f in fields(cls)})

    @classmethod
    def named(cls, config: str) -> "Options":
        """The options of one configuration of :data:`CONFIGS` (``bf16`` is a precision, not an option)."""
        if config == "all":
            return cls(tf32=True, cudnn_benchmark=True, channels_last=True)
        return cls(**{f.name: f.name == config.replace("-", "_") for f in fields(cls)})

    def names(self) -> List[str]:
        return [f.name.replace("_", "-") for f in fields(self) if getattr(self, f.name)]


def add_option_flags(parser: argparse.ArgumentParser) -> None:
    """``--tf32``, ``--cudnn-benchmark``, ``--channels-last``, ``--compile`` (all off unless given)."""
    parser.add_argument("--tf32", action="store_true", help="TF32 matrix products and convolutions (CUDA only)")
    parser.add_argument("--cudnn-benchmark", action="store_true", help="torch.backends.cudnn.benchmark (CUDA only)")
    parser.add_argument("--channels-last", action="store_true", help="channels-last weights, δ and inputs")
    parser.add_argument("--compile", action="store_true", help="torch.compile the tangent model")


def apply_backend_options(options: Options, device: torch.device) -> List[str]:
    """Set the process-wide backend flags ``options`` asks for (CUDA only); returns notes for
    the report (what was a no-op and why). Flags not asked for are left as the user has them."""
    notes = []
    wanted = [name for name in ("tf32", "cudnn_benchmark") if getattr(options, name)]
    if device.type != "cuda":
        notes += [f"{name.replace('_', '-')}: no-op on {device.type} (a CUDA setting)" for name in wanted]
        return notes
    if options.tf32:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if options.cudnn_benchmark:
        torch.backends.cudnn.benchmark = True
    notes.append(f"in effect: matmul TF32 {torch.backends.cuda.matmul.allow_tf32}, cuDNN TF32 "
                 f"{torch.backends.cudnn.allow_tf32}, cudnn.benchmark {torch.backends.cudnn.benchmark}")
    return notes


@contextlib.contextmanager
def backend(options: Options, device: torch.device) -> Iterator[None]:
    """The backend flags of ``options`` for the calls inside (CUDA), put back after."""
    if device.type != "cuda":
        yield
        return
    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark)
    try:
        if options.tf32:
            torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
        if options.cudnn_benchmark:
            torch.backends.cudnn.benchmark = True
        yield
    finally:
        (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
         torch.backends.cudnn.benchmark) = saved


def _functions(config: str, base: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, classes: int,
               device: torch.device) -> Dict[str, Callable[[], None]]:
    """The plain step, tangent step, plain forward and composed forward of one configuration."""
    from avalanche_tmc import RescaledSquareLoss, TangentModel, replace_head

    options = Options.named(config)
    amp = torch.bfloat16 if config in ("bf16", "all") else None
    plain = replace_head(copy.deepcopy(base), classes).to(device)
    tangent = TangentModel(copy.deepcopy(base), classes, start_at="layer1" if hasattr(base, "layer1") else None,
                           channels_last=options.channels_last).to(device)
    xin = x
    if options.channels_last:
        plain.to(memory_format=torch.channels_last)
        xin = x.contiguous(memory_format=torch.channels_last)
    plain_fwd = torch.compile(plain) if options.compile else plain
    tangent_fwd = torch.compile(tangent) if options.compile else tangent
    composed_fwd = torch.compile(tangent.forward_with) if options.compile else tangent.forward_with
    composed = {n: torch.randn_like(d) * 1e-3 for n, d in tangent.delta.items()}
    plain_opt = torch.optim.Adam(plain.parameters(), lr=1e-4)
    tangent_opt = torch.optim.Adam(tangent.delta_parameters(), lr=1e-4)
    criterion = RescaledSquareLoss(beta=25.0)

    def autocast():
        return torch.autocast(device.type, amp) if amp is not None else contextlib.nullcontext()

    def plain_step() -> None:
        with backend(options, device):
            plain.train()
            plain_opt.zero_grad(set_to_none=True)
            with autocast():
                out = plain_fwd(xin)
            criterion(out.float(), y).backward()
            plain_opt.step()

    def tangent_step() -> None:
        with backend(options, device):
            tangent.train()
            tangent_opt.zero_grad(set_to_none=True)
            with autocast():
                out = tangent_fwd(xin)
            criterion(out.float(), y).backward()
            tangent_opt.step()

    @torch.inference_mode()
    def plain_forward() -> None:
        with backend(options, device), autocast():
            plain.eval()
            plain_fwd(xin)

    @torch.inference_mode()
    def composed_forward() -> None:
        with backend(options, device), autocast():
            tangent.eval()
            composed_fwd(xin, composed)

    return {"plain step": plain_step, "tangent step": tangent_step, "plain forward": plain_forward,
            "composed forward": composed_forward}


def time_options(network: str, *, device: torch.device, configs: Sequence[str] = CONFIGS, rounds: int = 5,
                 classes: int = 30, image_size: Optional[int] = None, batch: Optional[int] = None) -> Dict[str, Dict]:
    """Median seconds of each configuration's four functions, all interleaved in one process
    (a configuration that fails is reported with its error)."""
    from benchmarks.tools.speed_timing import NETWORKS, interleaved_medians
    from benchmarks.tools.speed_timing import _failing as failing

    spec = dataclasses.replace(NETWORKS[network], image_size=image_size or NETWORKS[network].image_size,
                               batch=batch or NETWORKS[network].batch)
    torch.manual_seed(0)
    base = spec.build()
    x = torch.randn(spec.batch, 3, spec.image_size, spec.image_size, device=device)
    y = torch.randint(0, classes, (spec.batch,), device=device)
    fns: Dict[str, Callable[[], None]] = {}
    results: Dict[str, Dict] = {}
    for config in configs:
        try:
            built = _functions(config, base, x, y, classes, device)
        except Exception as error:  # noqa: BLE001 - reported in the table
            results[config] = {"error": f"{type(error).__name__}: {str(error).splitlines()[0][:80]}"}
            continue
        errors = [e for e in (failing(fn) for fn in built.values()) if e is not None]
        if errors:
            results[config] = {"error": errors[0]}
            continue
        fns.update({f"{config}|{name}": fn for name, fn in built.items()})
        results[config] = {}
    medians = interleaved_medians(fns, rounds, device)
    for key, seconds in medians.items():
        config, name = key.split("|")
        results[config][name] = seconds
    return {"network": network, "spec": spec, "device": str(device), "rounds": rounds, "configs": results}


def format_options(measured: Dict) -> str:
    """Markdown: per configuration, each function in ms, the tangent/plain ratios and the change
    against the baseline (after / before)."""
    spec, rows = measured["spec"], measured["configs"]
    base = rows.get("baseline", {})
    lines = [f"{spec.name} ({spec.image_size} px, batch {spec.batch}) on {measured['device']}, "
             f"{measured['rounds']} interleaved rounds, medians:", "",
             "| configuration | plain step | tangent step (x plain) | tangent step after/before | plain forward | "
             "composed forward (x plain) | composed after/before |", "|---|---:|---:|---:|---:|---:|---:|"]
    for config, r in rows.items():
        if "error" in r:
            lines.append(f"| {config} | failed: {r['error']} |" + " |" * 5)
            continue

        def after(name: str) -> str:
            return f"{r[name] / base[name]:.2f}" if name in base else "–"

        lines.append(f"| {config} | {r['plain step'] * 1e3:.1f} ms | {r['tangent step'] * 1e3:.1f} ms "
                     f"({r['tangent step'] / r['plain step']:.2f}x) | {after('tangent step')} | "
                     f"{r['plain forward'] * 1e3:.1f} ms | {r['composed forward'] * 1e3:.1f} ms "
                     f"({r['composed forward'] / r['plain forward']:.2f}x) | {after('composed forward')} |")
    if measured["device"].startswith("cpu"):
        lines += ["", "On the CPU `tf32` and `cudnn-benchmark` are no-ops (CUDA settings): their rows repeat the "
                  "baseline."]
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> Dict:
    from benchmarks.tools.speed_timing import NETWORKS

    p = argparse.ArgumentParser(prog="python -m benchmarks.tools.fast_options", description=__doc__.split("\n\n")[0])
    p.add_argument("--network", default="resnet50@224", help=f"one of {', '.join(NETWORKS)}")
    p.add_argument("--device", default="cuda")
    p.add_argument("--configs", default=",".join(CONFIGS), help=f"comma-separated, from {', '.join(CONFIGS)}")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--image-size", type=int, default=None, help="instead of the network's own (a small dry run)")
    p.add_argument("--batch", type=int, default=None, help="instead of the network's own")
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--save", default=None, help="also write the table to this Markdown file")
    args = p.parse_args(argv)
    from benchmarks.networks.arithmetic import runner_arithmetic

    runner_arithmetic()  # the runner's one CPU arithmetic (AVX2), before torch computes
    configs = [c.strip() for c in args.configs.split(",") if c.strip()]
    if args.network not in NETWORKS or set(configs) - set(CONFIGS) or args.rounds < 1:
        p.error(f"--network one of {', '.join(NETWORKS)}; --configs from {', '.join(CONFIGS)}; --rounds >= 1")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda but torch.cuda.is_available() is False")
    if args.threads:
        torch.set_num_threads(args.threads)
    measured = time_options(args.network, device=device, configs=configs, rounds=args.rounds,
                            image_size=args.image_size, batch=args.batch)
    table = format_options(measured)
    print(table)
    if args.save:
        from pathlib import Path

        Path(args.save).parent.mkdir(parents=True, exist_ok=True)
        Path(args.save).write_text(table + "\n", encoding="utf-8")
    return measured


if __name__ == "__main__":
    main()
