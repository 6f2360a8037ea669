"""Seconds per batch of a backbone's forward, forward + backward, ``torch.func.jvp`` and jvp
+ backward (a tangent-model training step), on CPU::

    python -m benchmarks.tools.backbone_time --name efficientnet_lite0 --sizes 32 64
"""

import argparse
from typing import Dict, Optional, Sequence

import torch
from torch import nn

from benchmarks.networks.backbones import load_backbone
from benchmarks.tools.speed_timing import interleaved_medians

__all__ = ["time_backbone", "main"]


def time_backbone(model: nn.Module, batch: int = 32, image_size: int = 32, repeats: int = 3) -> Dict[str, float]:
    """Seconds per batch of: eval forward (no grad), forward + backward w.r.t. all
    parameters, ``torch.func.jvp`` of ``functional_call`` w.r.t. all parameters, and that
    jvp plus a backward to the tangents (a tangent-model training step)."""
    from torch.func import functional_call, jvp

    model = model.eval()
    x = torch.randn(batch, 3, image_size, image_size)
    params = {k: v.detach() for k, v in model.named_parameters()}
    buffers = dict(model.named_buffers())

    def forward() -> None:
        with torch.no_grad():
            model(x)

    def forward_backward() -> None:
        model.zero_grad(set_to_none=True)
        model(x).sum().backward()

    def tangent_step(backward: bool) -> None:
        tangents = {k: torch.zeros_like(v).normal_(0, 1e-3).requires_grad_(backward) for k, v in params.items()}
        out, dout = jvp(lambda p: functional_call(model, (p, buffers), (x,)), (params,), (tangents,))
        if backward:
            (out + dout).sum().backward()

    steps = {"forward": forward, "forward_backward": forward_backward, "jvp": lambda: tangent_step(False),
             "jvp_backward": lambda: tangent_step(True)}
    # one at a time (each warmed up, then timed ``repeats`` times), not interleaved
    return {name: interleaved_medians({name: step}, repeats, torch.device("cpu"))[name] for name, step in steps.items()}


def main(argv: Optional[Sequence[str]] = None) -> None:
    """Time a backbone's forward and jvp passes at each image size."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.tools.backbone_time",
                                     description="Time a backbone's forward and jvp on CPU.")
    parser.add_argument("--name", default="efficientnet_lite0")
    parser.add_argument("--weights", default=None)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--sizes", type=int, nargs="+", default=[32, 64])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    from benchmarks.networks.arithmetic import runner_arithmetic

    runner_arithmetic()  # the runner's one CPU arithmetic (AVX2), before torch computes
    torch.set_num_threads(args.threads)
    net = load_backbone(args.name, args.weights, pretrained=True)
    n_params = sum(p.numel() for p in net.parameters())
    print(f"{args.name}: {n_params:,} parameters, threads {args.threads}, batch {args.batch}")
    for size in args.sizes:
        row = time_backbone(net, args.batch, size, args.repeats)
        print(f"  {size}x{size}: " + ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in row.items()))


if __name__ == "__main__":
    main()
