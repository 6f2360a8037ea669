"""Convolutions cut down to the kernel taps that can reach a fixed-size input.

What it is for: the offline benchmarks train the top of a network on cached features of
one fixed size, where late feature maps are 2x2 or 1x1. A 5x5 depthwise convolution on a
1x1 map (padding 2) only ever multiplies the input by its centre tap; the other 24 taps
see zero padding, never change an output and get exactly zero gradient. oneDNN still
does the whole 5x5 work, and its backward on such maps is the largest cost of a training
step of the main job (45% of it).

:func:`shrink_convolutions` replaces each such convolution by a plain ``nn.Conv2d`` over
the taps that can touch the input (weights copied from the original), with the padding
adjusted so that every output is the same. For inputs of that size the network computes
the same function, and every optimizer (SGD with momentum, Adam, EWC's penalty, tangent
parameters) leaves the dropped taps where they were anyway: training is the same
arithmetic, minus the work on zeros (float rounding aside). Each replacement is checked
on the example input and kept only if the outputs agree. A network shrunk this way only
accepts inputs of the example's spatial size.

:func:`convolutions_as_matmuls` then runs the 1x1 convolutions (stride 1, no padding; most
of them are the pointwise convolutions of inverted-residual blocks, the rest depthwise ones
cut to one tap above) as what they are, a matrix product over channels
(:class:`PointwiseConv`) or a per-channel scale (:class:`ChannelScale`). The parameters
keep their names, shapes and values, so optimizers and component files see the same
tensors; on 2x2 and 1x1 maps oneDNN's convolution costs about ten times its arithmetic,
and an SGD step of the main job's top goes from 45 to 27 ms (one thread, idle machine).
The depthwise convolutions left on 2x2 maps (3x3 after cutting, and a strided 2x2) run
as products with their kernel gathered into an (output position, input position) matrix
per channel (:class:`SmallMapDepthwise`): oneDNN's backward of each took ~8 ms, 40% of the
main job's SGD step, for a few hundred thousand multiplications.

The three modules have tangent rules of their own (registered here with
:func:`avalanche_tmc.tangent.register_rule`), so TangentModel's fast path runs each as one
step rather than tracing its forward into a dozen shape and arithmetic steps (the main
job's top: 524 plan steps -> 231, a tangent training step 69 -> 55 ms on one thread).

Why these rules stay here rather than in the library's ``avalanche_tmc/tangent/rules/``
(issue 43): they are rules for this module's own classes, which exist only for a network
shrunk to inputs of one fixed size; the library never builds them, and a rule keyed on a
class the library does not define would make the library import the runner. The registry
is open for extension for exactly this (as timm's ``register_model`` serves models defined
outside timm); ``tests/benchmarks/test_shrink.py`` holds them to the generic path.
"""

from typing import Callable, Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from avalanche_tmc.tangent import Call, RuleResult, add_tangents, expand_to, register_rule

__all__ = ["used_taps", "shrink_convolutions", "PointwiseConv", "ChannelScale", "SmallMapDepthwise",
           "convolutions_as_matmuls", "pointwise_tangent", "channel_scale_tangent", "small_map_depthwise_tangent"]


def _same_padding(size: int, kernel: int, stride: int, dilation: int) -> Tuple[int, int]:
    """TensorFlow "same" padding (before, after) of one axis, as timm's ``Conv2dSame`` pads."""
    total = max((-(-size // stride) - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)
    return total // 2, total - total // 2


def used_taps(size: int, kernel: int, stride: int, dilation: int, pad_before: int,
              outputs: int) -> Optional[Tuple[int, int]]:
    """``(first, last)`` kernel tap of one axis that reads a real input element for some
    output (tap ``i`` of output ``o`` reads element ``o * stride + i * dilation -
    pad_before``); None when no tap does."""
    taps = [i for i in range(kernel)
            if any(0 <= o * stride + i * dilation - pad_before < size for o in range(outputs))]
    return (taps[0], taps[-1]) if taps else None


def _conv_inputs(net: nn.Module, example: Tensor) -> Dict[nn.Module, Tensor]:
    """The input each convolution of ``net`` gets from ``example`` (in eval mode, so
    BatchNorm statistics are left as they are)."""
    inputs: Dict[nn.Module, Tensor] = {}

    def record(module: nn.Module, args) -> None:
        inputs.setdefault(module, args[0].detach())

    hooks = [m.register_forward_pre_hook(record) for m in net.modules() if isinstance(m, nn.Conv2d)]
    training = net.training
    try:
        with torch.no_grad():
            net.eval()(example)
    finally:
        net.train(training)
        for hook in hooks:
            hook.remove()
    return inputs


def _is_same_padded(conv: nn.Conv2d) -> bool:
    """timm's ``Conv2dSame`` (padding computed from the input size in forward)."""
    return type(conv).__name__ == "Conv2dSame"


def _shrunk(conv: nn.Conv2d, size: Tuple[int, int]) -> Optional[nn.Conv2d]:
    """The smaller convolution equal to ``conv`` on inputs of spatial ``size``, or None
    when nothing can be dropped (or the result would need asymmetric padding)."""
    if type(conv) is not nn.Conv2d and not _is_same_padded(conv) or conv.padding_mode != "zeros":
        return None
    if isinstance(conv.padding, str):
        return None
    crops, paddings = [], []
    for axis in range(2):
        k, s, d, n = conv.kernel_size[axis], conv.stride[axis], conv.dilation[axis], size[axis]
        before, after = _same_padding(n, k, s, d) if _is_same_padded(conv) else (conv.padding[axis],) * 2
        outputs = (n + before + after - (k - 1) * d - 1) // s + 1
        taps = used_taps(n, k, s, d, before, outputs)
        if taps is None:
            return None
        first, last = taps
        pad = before - first * d
        new_k = last - first + 1
        if pad < 0 or (n + 2 * pad - (new_k - 1) * d - 1) // s + 1 != outputs:
            return None
        crops.append((first, last + 1))
        paddings.append(pad)
    if all(b - a == k for (a, b), k in zip(crops, conv.kernel_size)):
        return None  # every tap is used
    (r0, r1), (c0, c1) = crops
    small = nn.Conv2d(conv.in_channels, conv.out_channels, (r1 - r0, c1 - c0), stride=conv.stride,
                      padding=tuple(paddings), dilation=conv.dilation, groups=conv.groups,
                      bias=conv.bias is not None).to(device=conv.weight.device, dtype=conv.weight.dtype)
    with torch.no_grad():
        small.weight.copy_(conv.weight[:, :, r0:r1, c0:c1])
        if conv.bias is not None:
            small.bias.copy_(conv.bias)
    small.requires_grad_(conv.weight.requires_grad)
    return small.to(memory_format=torch.channels_last) if conv.weight.is_contiguous(
        memory_format=torch.channels_last) and not conv.weight.is_contiguous() else small


def _replace_checked(net: nn.Module, example: Tensor, atol: float,
                     replacement: Callable[[nn.Conv2d, Tensor], Optional[nn.Module]]) -> List[str]:
    """Put ``replacement(conv, its input)`` in place of every convolution of ``net`` it
    returns a module for, keeping it only if its output on ``example``'s input agrees
    (within ``atol`` relative to the output's scale); returns the names replaced."""
    inputs = _conv_inputs(net, example)
    replaced = []
    for name, conv in list(net.named_modules()):
        if conv not in inputs:
            continue
        new = replacement(conv, inputs[conv])
        if new is None:
            continue
        with torch.no_grad():
            x = inputs[conv]
            expected, got = conv(x), new(x)
        scale = float(expected.abs().max()) + 1.0
        if got.shape != expected.shape or float((got - expected).abs().max()) > atol * scale:
            continue
        parent_name, _, child = name.rpartition(".")
        setattr(net.get_submodule(parent_name) if parent_name else net, child, new)
        replaced.append(name)
    return replaced


def shrink_convolutions(net: nn.Module, example: Tensor, atol: float = 1e-5) -> List[str]:
    """Replace, in place, every convolution of ``net`` whose kernel reaches past inputs of
    ``example``'s size by the smaller equivalent one; returns the names replaced. Each
    replacement is checked on ``example`` (module output within ``atol``, relative to its
    scale) and undone otherwise."""
    return _replace_checked(net, example, atol, lambda conv, x: _shrunk(conv, tuple(x.shape[2:])))


class PointwiseConv(nn.Module):
    """A 1x1 convolution (stride 1, no padding, one group) computed as a matrix product over
    channels; ``weight`` keeps the convolution's ``(out, in, 1, 1)`` shape."""

    def __init__(self, conv: nn.Conv2d):
        super().__init__()
        self.weight = conv.weight
        self.bias = conv.bias

    def forward(self, x: Tensor) -> Tensor:
        n, c, h, w = x.shape
        # one (positions, channels) matrix: a 2-D product is one GEMM, a 4-D one may be batched
        out = F.linear(x.permute(0, 2, 3, 1).reshape(n * h * w, c), self.weight.flatten(1), self.bias)
        return out.view(n, h, w, -1).permute(0, 3, 1, 2)


class ChannelScale(nn.Module):
    """A depthwise 1x1 convolution (stride 1, no padding) computed as a per-channel scale;
    ``weight`` keeps the convolution's ``(channels, 1, 1, 1)`` shape."""

    def __init__(self, conv: nn.Conv2d):
        super().__init__()
        self.weight = conv.weight
        self.bias = conv.bias

    def forward(self, x: Tensor) -> Tensor:
        out = x * self.weight.view(1, -1, 1, 1)
        return out if self.bias is None else out + self.bias.view(1, -1, 1, 1)


class SmallMapDepthwise(nn.Module):
    """A depthwise convolution (any kernel, stride, padding and dilation) on inputs of one
    small spatial size, computed as a product with its kernel gathered into an
    ``(output position, input position)`` matrix per channel: ``out[o] = sum_i x[i] *
    w[tap(o, i)]``, where ``tap(o, i)`` is the kernel tap through which output ``o`` reads
    input ``i`` (zero where none does). ``weight`` keeps the convolution's ``(channels, 1,
    kh, kw)`` shape; inputs must have the spatial size given here."""

    def __init__(self, conv: nn.Conv2d, size: Tuple[int, int]):
        super().__init__()
        self.weight = conv.weight
        self.bias = conv.bias
        self.size = tuple(int(n) for n in size)
        (h, w), (kh, kw) = self.size, conv.kernel_size
        (sh, sw), (ph, pw), (dh, dw) = conv.stride, conv.padding, conv.dilation
        self.out_size = ((h + 2 * ph - dh * (kh - 1) - 1) // sh + 1, (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1)
        oh, ow = self.out_size
        taps = torch.zeros(oh * ow, h * w, dtype=torch.long)
        reaches = torch.zeros(oh * ow, h * w, 1, dtype=conv.weight.dtype, device=conv.weight.device)
        for o in range(oh * ow):
            for i in range(kh):
                for j in range(kw):
                    row, col = (o // ow) * sh + i * dh - ph, (o % ow) * sw + j * dw - pw
                    if 0 <= row < h and 0 <= col < w:
                        taps[o, row * w + col] = i * kw + j
                        reaches[o, row * w + col] = 1
        self.register_buffer("taps", taps.to(conv.weight.device), persistent=False)
        self.register_buffer("reaches", reaches, persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        return self.apply_kernel(x, self.weight, self.bias)

    def apply_kernel(self, x: Tensor, weight: Tensor, bias: Optional[Tensor]) -> Tensor:
        """The convolution of ``x`` with ``weight`` (this module's shape) and ``bias``:
        ``forward`` with the module's own, the tangent rule with ``δ``'s as well."""
        size = tuple(x.shape[2:])
        if size != self.size:
            raise ValueError(f"SmallMapDepthwise was built for {self.size[0]}x{self.size[1]} inputs, got "
                             f"{'x'.join(map(str, size))}: it only holds for the feature size the network was "
                             "prepared on.")
        n, c = x.shape[0], x.shape[1]
        kernel = weight.flatten(1).t()[self.taps] * self.reaches  # (outputs, inputs, channels)
        # positions x channels (a view of channels_last inputs), summed over input positions
        out = (x.permute(0, 2, 3, 1).reshape(n, 1, self.size[0] * self.size[1], c) * kernel).sum(2)
        out = out.view(n, self.out_size[0], self.out_size[1], c).permute(0, 3, 1, 2)
        return out if bias is None else out + bias.view(1, -1, 1, 1)


# The tangent rules of the three modules above (TangentModel's fast path): each module is
# one step with output and tangent (``dy = W·dx + δW·x + δb``, the module being linear in
# its input and in its weights), instead of its forward traced into a dozen shape and
# arithmetic steps.
def _rows(x: Tensor) -> Tensor:
    return x.permute(0, 2, 3, 1).reshape(-1, x.shape[1])


@register_rule(PointwiseConv)
def pointwise_tangent(call: Call) -> RuleResult:
    """:class:`PointwiseConv`: ``y = W·x + b``, ``dy = W·dx + δW·x + δb`` over channels."""
    module, d = call.fn, call.param_tangents()
    x, dx = call.first_input()
    rows, weight = _rows(x), module.weight.flatten(1)
    y = F.linear(rows, weight, module.bias)
    dy = expand_to(add_tangents(None if dx is None else F.linear(_rows(dx), weight),
                                None if d.get("weight") is None else F.linear(rows, d["weight"].flatten(1)),
                                d.get("bias")), y)
    n, _, h, w = x.shape
    return (y.view(n, h, w, -1).permute(0, 3, 1, 2),
            None if dy is None else dy.reshape(n, h, w, -1).permute(0, 3, 1, 2))


@register_rule(ChannelScale)
def channel_scale_tangent(call: Call) -> RuleResult:
    """:class:`ChannelScale`: ``y = w·x + b``, ``dy = w·dx + δw·x + δb`` per channel."""
    module, d = call.fn, call.param_tangents()
    x, dx = call.first_input()
    y = module(x)
    dy = expand_to(add_tangents(None if dx is None else dx * module.weight.view(1, -1, 1, 1),
                                None if d.get("weight") is None else x * d["weight"].view(1, -1, 1, 1),
                                None if d.get("bias") is None else d["bias"].view(1, -1, 1, 1)), y)
    return y, dy


@register_rule(SmallMapDepthwise)
def small_map_depthwise_tangent(call: Call) -> RuleResult:
    """:class:`SmallMapDepthwise`: the gathered product with ``W`` on ``dx``, plus the one
    with ``δW`` on ``x``, plus ``δb``."""
    module, d = call.fn, call.param_tangents()
    x, dx = call.first_input()
    y = module(x)
    dy = expand_to(add_tangents(None if dx is None else module.apply_kernel(dx, module.weight, None),
                                None if d.get("weight") is None else module.apply_kernel(x, d["weight"], None),
                                None if d.get("bias") is None else d["bias"].view(1, -1, 1, 1)), y)
    return y, dy


# Maps up to this many positions: where oneDNN's fixed cost per call dominates (measured on
# the main job's 2x2 and 1x1 maps; larger maps keep the convolution).
MATMUL_MAX_POSITIONS = 16
# Depthwise convolutions as gathered products: measured on 2x2 inputs only (the product
# grows with positions squared, the convolution linearly).
DEPTHWISE_MAX_POSITIONS = 4


def _as_matmul(conv: nn.Conv2d, x: Tensor) -> Optional[nn.Module]:
    if type(conv) is not nn.Conv2d or conv.padding_mode != "zeros" or isinstance(conv.padding, str):
        return None
    positions = x.shape[2] * x.shape[3]
    depthwise = conv.groups == conv.in_channels == conv.out_channels
    if conv.kernel_size != (1, 1) or conv.stride != (1, 1) or conv.padding != (0, 0) or conv.dilation != (1, 1):
        return SmallMapDepthwise(conv, tuple(x.shape[2:])) if depthwise and positions <= DEPTHWISE_MAX_POSITIONS \
            else None
    if positions > MATMUL_MAX_POSITIONS:
        return None
    if conv.groups == 1:
        return PointwiseConv(conv)
    if depthwise:
        return ChannelScale(conv)
    return None


def convolutions_as_matmuls(net: nn.Module, example: Tensor, atol: float = 1e-5) -> List[str]:
    """Replace, in place, every 1x1 convolution of ``net`` (stride 1, no padding; one group,
    or depthwise) on a map of at most :data:`MATMUL_MAX_POSITIONS` positions by
    :class:`PointwiseConv` or :class:`ChannelScale`, and every other depthwise convolution
    on a map of at most :data:`DEPTHWISE_MAX_POSITIONS` positions by
    :class:`SmallMapDepthwise`, which hold the same parameters; returns the names
    replaced. Each is checked on ``example`` as in :func:`shrink_convolutions`."""
    return _replace_checked(net, example, atol, _as_matmul)
