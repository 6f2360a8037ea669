"""The authors' hand-linearized ResNet beside our tangent model: ``python -m benchmarks.tools.authors_speed
--authors-code DIR``.

What it is for: the TMC authors (github tianyu139/tangent-model-composition) linearize a
ResNet by hand: every layer of ``models/linear_resnet.py`` carries a ``linear_weight`` /
``linear_bias`` beside its weights and returns ``(output, output_jvp)`` (a convolution runs
``conv(x, δW) + conv(dx, W)``, a BatchNorm two more normalisations, a ReLU a mask); the stem
is plain, ``layer1`` … ``fc`` are linearized, their trainer keeps BatchNorm in eval mode and
trains the ``linear_*`` parameters, the output is ``logits + jvp``. This tool imports their
code from the folder the user gives (a clone; nothing of it is copied into this project),
builds their ResNet and ours (``TangentModel(start_at="layer1")``, the fast path) from the same
random weights, and times in one process, interleaved round by round, medians
(:func:`benchmarks.tools.speed_timing.interleaved_medians`):

* a **training step**: plain fine-tuning (Adam on every parameter, BatchNorm in train mode),
  theirs (Adam on their ``linear_*`` parameters) and ours (Adam on δ), the rescaled square
  loss for all three;
* **inference**: a plain forward, theirs (``logits + jvp``) and ours (``forward_with`` a
  composed δ);

and prints each as milliseconds and as a multiple of the plain one. Channels-last for all
(as :mod:`benchmarks.tools.speed`) unless ``--no-channels-last``. Without ``--authors-code``,
``--stand-in`` times a small network hand-linearized in the authors' style instead (the
tests and the GPU check's dry run use it: it checks the tool, it measures nothing of theirs).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib
import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import nn

__all__ = ["StandIn", "load_authors_resnet", "stand_in_pair", "time_pair", "format_table", "main"]


def load_authors_resnet(code: Path, arch: str, classes: int) -> nn.Module:
    """Their ``linear_<arch>`` (random weights) with a ``LinearLinear`` head of ``classes``, as
    their ``models/models.py`` builds it, imported from the clone at ``code``."""
    code = Path(code).resolve()
    if not (code / "models" / "linear_resnet.py").is_file():
        raise FileNotFoundError(f"--authors-code {code}: no models/linear_resnet.py there (a clone of "
                                "github tianyu139/tangent-model-composition)")
    clash = sys.modules.get("models")
    if clash is not None and not str(next(iter(getattr(clash, "__path__", [])), "")).startswith(str(code)):
        raise RuntimeError(f"a module named 'models' is already imported from {clash!r}: run in a fresh process")
    sys.path.insert(0, str(code))
    try:
        resnet = importlib.import_module("models.linear_resnet")
        layers = importlib.import_module("models.linear_layers")
    finally:
        sys.path.remove(str(code))
    net = getattr(resnet, f"linear_{arch}")(pretrained=False)
    net.fc = layers.LinearLinear(net.fc.in_features, classes)
    return net


def _thaw_linear(net: nn.Module) -> List[nn.Parameter]:
    """Their ``thaw(mode='tangent')`` for a ResNet: only ``linear_*`` parameters of ``layer*`` and ``fc``
    train (and the stand-in's own ``linear_*``)."""
    trained = []
    for name, p in net.named_parameters():
        p.requires_grad = "linear" in name and name.startswith(("layer", "fc", "linear_"))
        if p.requires_grad:
            trained.append(p)
    return trained


class StandIn(nn.Module):
    """A small network hand-linearized in the authors' style (their ``LinearConv2D``, batch
    norm in eval mode, ``LinearReLU``, pooling, ``LinearLinear``): ``forward(x) -> (out, jvp)``.
    ``plain()`` is the same network as ordinary modules (for our tangent model)."""

    def __init__(self, classes: int = 5, width: int = 8) -> None:
        super().__init__()
        self.stem = nn.Conv2d(3, width, 3, padding=1, bias=False)
        self.conv = nn.Conv2d(width, width, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(width)
        self.fc = nn.Linear(width, classes)
        self.linear_conv = nn.Parameter(torch.zeros_like(self.conv.weight))
        self.linear_bn_weight = nn.Parameter(torch.zeros(width))
        self.linear_bn_bias = nn.Parameter(torch.zeros(width))
        self.linear_fc_weight = nn.Parameter(torch.zeros_like(self.fc.weight))
        self.linear_fc_bias = nn.Parameter(torch.zeros_like(self.fc.bias))

    def forward(self, x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        x = F.relu(self.stem(x))
        out, jvp = self.conv(x), F.conv2d(x, self.linear_conv, padding=1)
        bn = self.bn
        scale = bn.weight / torch.sqrt(bn.running_var + bn.eps)
        jvp = jvp * scale[:, None, None] + ((out - bn.running_mean[:, None, None]) / torch.sqrt(
            bn.running_var + bn.eps)[:, None, None]) * self.linear_bn_weight[:, None, None] \
            + self.linear_bn_bias[:, None, None]
        out = F.batch_norm(out, bn.running_mean, bn.running_var, bn.weight, bn.bias, False, 0.0, bn.eps)
        out = F.relu(out)
        jvp = jvp * (out > 0)
        out, jvp = out.mean((2, 3)), jvp.mean((2, 3))
        return self.fc(out), F.linear(out, self.linear_fc_weight, self.linear_fc_bias) + F.linear(jvp, self.fc.weight)

    def plain(self) -> nn.Module:
        """The same weights as ordinary modules: stem, ReLU, then the linearized part."""
        return nn.Sequential(copy.deepcopy(self.stem), nn.ReLU(), nn.Sequential(
            copy.deepcopy(self.conv), copy.deepcopy(self.bn), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
            copy.deepcopy(self.fc)))


def stand_in_pair(classes: int = 5) -> Tuple[nn.Module, nn.Module]:
    """(theirs-style stand-in, the same network plain): random weights and BatchNorm statistics."""
    torch.manual_seed(0)
    theirs = StandIn(classes)
    with torch.no_grad():
        theirs.bn.running_mean.normal_(0, 0.1)
        theirs.bn.running_var.uniform_(0.5, 1.5)
    return theirs, theirs.plain()


def _authors_pair(code: Path, arch: str, classes: int) -> Tuple[nn.Module, nn.Module]:
    """(their linear ResNet, torchvision's ResNet) with the same random weights."""
    import torchvision

    from benchmarks.tools.speed_timing import _randomize_batchnorm

    torch.manual_seed(0)
    plain = _randomize_batchnorm(getattr(torchvision.models, arch)())
    plain.fc = nn.Linear(plain.fc.in_features, classes)
    theirs = load_authors_resnet(code, arch, classes)
    missing, unexpected = theirs.load_state_dict(plain.state_dict(), strict=False)
    if unexpected or any("linear" not in k for k in missing):
        raise RuntimeError(f"their {arch} does not hold torchvision's weights: missing {missing[:3]}, "
                           f"unexpected {unexpected[:3]}")
    return theirs, plain


def time_pair(theirs: nn.Module, plain: nn.Module, *, start_at: Optional[str], image_size: int, batch: int,
              classes: int, device: torch.device, rounds: int, channels_last: bool = True) -> Dict[str, float]:
    """Median seconds of the plain, their and our training step and forward (module doc)."""
    from avalanche_tmc import RescaledSquareLoss, TangentModel
    from benchmarks.tools.speed_timing import interleaved_medians

    ours = TangentModel(copy.deepcopy(plain), start_at=start_at, channels_last=channels_last).to(device)
    plain, theirs = plain.to(device), theirs.to(device)
    trained = _thaw_linear(theirs)
    theirs.eval()  # their trainer: use_train_mode False
    x = torch.randn(batch, 3, image_size, image_size, device=device)
    y = torch.randint(0, classes, (batch,), device=device)
    if channels_last:
        plain.to(memory_format=torch.channels_last)
        theirs.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    criterion = RescaledSquareLoss(beta=25.0)
    optimizers = {"plain": torch.optim.Adam(plain.parameters(), lr=1e-4), "theirs": torch.optim.Adam(trained, lr=1e-4),
                  "ours": torch.optim.Adam(ours.delta_parameters(), lr=1e-4)}
    composed = {n: torch.randn_like(d) * 1e-3 for n, d in ours.delta.items()}

    def theirs_out() -> torch.Tensor:
        logits, jvp = theirs(x)
        return logits + jvp

    def step(name: str, forward: Callable[[], torch.Tensor]) -> Callable[[], None]:
        def run() -> None:
            optimizers[name].zero_grad(set_to_none=True)
            criterion(forward().float(), y).backward()
            optimizers[name].step()

        return run

    def inference(forward: Callable[[], torch.Tensor]) -> Callable[[], None]:
        @torch.inference_mode()
        def run() -> None:
            forward()

        return run

    plain.train()
    ours.train()
    train = interleaved_medians({"plain": step("plain", lambda: plain(x)), "theirs": step("theirs", theirs_out),
                                 "ours": step("ours", lambda: ours(x))}, rounds, device)
    plain.eval()
    ours.eval()
    infer = interleaved_medians({"plain": inference(lambda: plain(x)), "theirs": inference(theirs_out),
                                 "ours": inference(lambda: ours.forward_with(x, composed))}, rounds, device)
    return {**{f"step {k}": v for k, v in train.items()}, **{f"forward {k}": v for k, v in infer.items()}}


def format_table(seconds: Dict[str, float], *, what: str) -> str:
    """Markdown: each step and forward in ms and as a multiple of the plain one, ours over theirs."""
    lines = [f"{what}:", "", "| | plain | the authors' (x plain) | ours, fast path (x plain) | ours / theirs |",
             "|---|---:|---:|---:|---:|"]
    for kind, label in (("step", "training step"), ("forward", "inference (theirs: logits + jvp; ours: composed δ)")):
        plain, theirs, ours = (seconds[f"{kind} {k}"] for k in ("plain", "theirs", "ours"))
        lines.append(f"| {label} | {plain * 1e3:.1f} ms | {theirs * 1e3:.1f} ms ({theirs / plain:.2f}x) | "
                     f"{ours * 1e3:.1f} ms ({ours / plain:.2f}x) | {ours / theirs:.2f} |")
    return "\n".join(lines)


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, float]:
    p = argparse.ArgumentParser(prog="python -m benchmarks.tools.authors_speed", description=__doc__.split("\n\n")[0])
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--authors-code", type=Path, help="a clone of github tianyu139/tangent-model-composition")
    source.add_argument("--stand-in", action="store_true", help="a small hand-linearized network instead (checks "
                        "the tool; measures nothing of theirs)")
    p.add_argument("--arch", default="resnet50", choices=("resnet18", "resnet34", "resnet50"))
    p.add_argument("--device", default="cpu")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--classes", type=int, default=30)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--no-channels-last", action="store_true")
    p.add_argument("--save", type=Path, default=None, help="also write the table to this Markdown file")
    args = p.parse_args(argv)
    from benchmarks.networks.arithmetic import runner_arithmetic

    runner_arithmetic()  # the runner's one CPU arithmetic (AVX2), before torch computes
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda but torch.cuda.is_available() is False")
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.stand_in:
        theirs, plain = stand_in_pair(args.classes)
        start_at, what = "2", "A stand-in hand-linearized network (not the authors' code)"
    else:
        try:
            theirs, plain = _authors_pair(args.authors_code, args.arch, args.classes)
        except (FileNotFoundError, RuntimeError, ImportError) as error:
            p.error(str(error))
        start_at, what = "layer1", f"The authors' linear_{args.arch} against ours"
    seconds = time_pair(theirs, plain, start_at=start_at, image_size=args.image_size, batch=args.batch,
                        classes=args.classes, device=device, rounds=args.rounds,
                        channels_last=not args.no_channels_last)
    what += (f", {args.image_size} px, batch {args.batch}, {args.classes} classes, {device}, threads "
             f"{torch.get_num_threads()}, {'channels-last' if not args.no_channels_last else 'NCHW'}, "
             f"{args.rounds} interleaved rounds, medians, torch {torch.__version__}")
    table = format_table(seconds, what=what)
    print(table)
    if args.save:
        args.save.parent.mkdir(parents=True, exist_ok=True)
        command = " ".join(["python -m benchmarks.tools.authors_speed", *(sys.argv[1:] if argv is None else argv)])
        args.save.write_text(f"<!-- written by: {command} -->\n\n{table}\n", encoding="utf-8")
    return seconds


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        main()
