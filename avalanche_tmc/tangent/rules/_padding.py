"""Zero padding for the convolution rules: TensorFlow's "same" padding of timm's
``Conv2dSame`` (:func:`pad_same`) and a pad that writes each element once
(:func:`zero_pad`)."""

import math
from typing import Any, Dict, List, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._ops import needs_grad

__all__ = ["is_timm_conv2d_same", "zero_pad", "pad_same"]


def is_timm_conv2d_same(m: nn.Module) -> bool:
    """timm's ``Conv2dSame``: TensorFlow "same" padding computed from the input size,
    then a plain convolution (both linear, so the convolution rule applies)."""
    return type(m).__name__ == "Conv2dSame" and type(m).__module__.startswith("timm.")


def _same_padding(size: int, kernel: int, stride: int, dilation: int) -> int:
    return max((math.ceil(size / stride) - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)


def zero_pad(x: Tensor, pad: Sequence[int]) -> Tensor:
    """``F.pad(x, pad)`` (zeros; ``pad`` non-negative, last axis first) in ``x``'s layout,
    writing each element once: ``F.pad`` fills the whole output with zeros before copying
    ``x`` in, a second pass over it (measured: 10% of EfficientNet-Lite0's tangent
    inference at 112 px, whose strided convolutions pad input and tangent). Under
    autograd: ``F.pad``."""
    if needs_grad(x):
        return F.pad(x, list(pad))
    shape = list(x.shape)
    for i in range(len(pad) // 2):
        shape[x.dim() - 1 - i] += pad[2 * i] + pad[2 * i + 1]
    if x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last):
        out = torch.empty(shape, dtype=x.dtype, device=x.device, memory_format=torch.channels_last)
    elif x.dim() == 5 and x.is_contiguous(memory_format=torch.channels_last_3d):
        out = torch.empty(shape, dtype=x.dtype, device=x.device, memory_format=torch.channels_last_3d)
    else:
        out = x.new_empty(shape)
    inner = out
    for i in range(len(pad) // 2):
        axis, low, high = x.dim() - 1 - i, pad[2 * i], pad[2 * i + 1]
        if low:
            out.narrow(axis, 0, low).zero_()
        if high:
            out.narrow(axis, shape[axis] - high, high).zero_()
        inner = inner.narrow(axis, low, x.shape[axis])
    inner.copy_(x)
    return out


def pad_same(x: Tensor, conf: Dict[str, Any]) -> Tensor:
    """``x`` zero-padded as timm's ``Conv2dSame`` pads it for the convolution ``conf``."""
    pad: List[int] = []
    for axis in range(conf["dim"] - 1, -1, -1):  # F.pad lists the last axis first
        total = _same_padding(
            x.shape[2 + axis], conf["kernel_size"][axis], conf["stride"][axis], conf["dilation"][axis]
        )
        pad += [total // 2, total - total // 2]
    return zero_pad(x, pad) if any(pad) else x
