"""Rules of shapes and the other operations linear in their input (the tangent goes through
the same operation): shapes, views and indexing, sums and means, average pooling, dropout in
eval, identity modules, ``cat``, dtype conversions; and of operations whose output has no
tangent (sizes, attributes). Max pooling is not linear: :mod:`.pooling`."""

import operator
from typing import Any, Callable, Dict, Tuple

import torch
import torch.nn.functional as F
from torch import nn

from .._ops import out_of_place
from ..registry import Call, RuleResult, register_rule
from ..tree import tree_flatten

__all__ = ["linear_in_first", "concatenate", "no_tangent", "convert", "identity_module", "register_linear_module"]


@register_rule(
    torch.flatten, torch.reshape, torch.permute, torch.transpose, torch.squeeze, torch.unsqueeze,
    torch.mean, torch.sum, torch.chunk, torch.split, torch.unbind, torch.narrow, torch.select,
    torch.neg, operator.neg, operator.getitem, torch.roll, torch.movedim,
    F.adaptive_avg_pool1d, F.adaptive_avg_pool2d, F.adaptive_avg_pool3d,
    F.avg_pool1d, F.avg_pool2d, F.avg_pool3d, F.dropout, F.dropout1d, F.dropout2d, F.dropout3d,
    F.pixel_shuffle, F.pixel_unshuffle, F.interpolate,
    "view", "reshape", "flatten", "permute", "transpose", "contiguous", "squeeze", "unsqueeze",
    "expand", "expand_as", "view_as", "reshape_as", "mean", "sum", "chunk", "split", "unbind",
    "narrow", "select", "clone", "neg", "repeat", "t", "flip", "roll", "movedim", "unflatten",
)
def linear_in_first(call: Call) -> RuleResult:
    """An operation linear in its first tensor argument: ``dy = op(dx, *rest)`` when the
    other arguments carry no tangent (else: jvp)."""
    args, kwargs, d_args = call.args, call.kwargs, call.d_args
    others = tree_flatten((d_args[1:], call.d_kwargs))[0]
    if not all(t is None for t in others):
        return None
    if call.op == "method":
        y = getattr(args[0], out_of_place(call.target))(*args[1:], **kwargs)
        dy = getattr(d_args[0], out_of_place(call.target))(*args[1:], **kwargs)
    else:
        y = call.fn(*args, **kwargs)
        dy = call.fn(d_args[0], *args[1:], **kwargs)
    return y, dy


@register_rule(torch.cat, torch.stack, torch.concat)
def concatenate(call: Call) -> RuleResult:
    """``cat``/``stack``: the tangents concatenated alike (zeros for inputs without one)."""
    tensors = call.args[0]
    d_tensors = [t if t is not None else torch.zeros_like(p) for p, t in zip(tensors, call.d_args[0])]
    return call.fn(tensors, *call.args[1:], **call.kwargs), call.fn(d_tensors, *call.args[1:], **call.kwargs)


@register_rule(getattr, len, torch.numel, "size", "dim", "numel")
def no_tangent(call: Call) -> RuleResult:
    """Operations evaluated without a tangent: sizes and attributes."""
    return call.without_tangent(), None


@register_rule("to", "float", "double", "half", "bfloat16", "type_as")
def convert(call: Call) -> RuleResult:
    """Dtype and device conversions: linear, so the tangent is converted alike (to the
    output's dtype and device)."""
    y = call.without_tangent()
    _, dx = call.first_input()
    if dx is None or not isinstance(y, torch.Tensor):
        return y, None
    return y, dx.to(device=y.device, dtype=y.dtype)


@register_rule(nn.Identity, nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout)
def identity_module(call: Call) -> RuleResult:
    """Identity, and dropout in eval mode: the input and its tangent unchanged."""
    x, dx = call.first_input()
    return x, dx


_LINEAR_MODULES: Dict[type, Callable[[nn.Module], Tuple[Callable[..., Any], Tuple[Any, ...], Dict[str, Any]]]] = {}


def _linear_module(call: Call) -> RuleResult:
    fn, fargs, fkw = _LINEAR_MODULES[type(call.fn)](call.fn)
    x, dx = call.first_input()
    y = fn(x, *fargs, **fkw)
    return y, (None if dx is None else fn(dx, *fargs, **fkw))


def register_linear_module(
    cls: type, call_of: Callable[[nn.Module], Tuple[Callable[..., Any], Tuple[Any, ...], Dict[str, Any]]]
) -> None:
    """Register the module class ``cls`` (exactly that class) as linear in its input:
    ``call_of(module)`` gives ``(function, args, kwargs)`` with ``module(x) = function(x, *args, **kwargs)``,
    and the tangent is ``function(dx, *args, **kwargs)``."""
    _LINEAR_MODULES[cls] = call_of
    register_rule(cls)(_linear_module)


register_linear_module(nn.AdaptiveAvgPool1d, lambda m: (F.adaptive_avg_pool1d, (m.output_size,), {}))
register_linear_module(nn.AdaptiveAvgPool2d, lambda m: (F.adaptive_avg_pool2d, (m.output_size,), {}))
register_linear_module(nn.AdaptiveAvgPool3d, lambda m: (F.adaptive_avg_pool3d, (m.output_size,), {}))
register_linear_module(
    nn.AvgPool1d, lambda m: (F.avg_pool1d, (m.kernel_size, m.stride, m.padding, m.ceil_mode, m.count_include_pad), {})
)
register_linear_module(nn.AvgPool2d, lambda m: (
    F.avg_pool2d, (m.kernel_size, m.stride, m.padding, m.ceil_mode, m.count_include_pad, m.divisor_override), {}
))
register_linear_module(nn.Flatten, lambda m: (torch.flatten, (m.start_dim, m.end_dim), {}))
