"""Rules of max pooling: the tangent is gathered at the maxima's indices (average pooling is
linear in its input: :mod:`.shapes`)."""

from typing import Any, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..registry import Call, RuleResult, register_rule

__all__ = ["max_pool2d", "max_pool2d_module", "max_pool2d_function"]


def max_pool2d(
    x: Tensor, dx: Optional[Tensor], kernel_size: Any, stride: Any, padding: Any, dilation: Any, ceil_mode: bool,
    return_indices: bool = False,
) -> Tuple[Any, Any]:
    """2-D max pooling of ``x`` and the tangent at the positions of its maxima; with
    ``return_indices``, ``((y, indices), (dy, None))`` as the pooling itself returns."""
    y, indices = F.max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode, return_indices=True)
    dy = None if dx is None else dx.flatten(2).gather(2, indices.flatten(2)).view_as(y)
    return ((y, indices), (dy, None)) if return_indices else (y, dy)


@register_rule(nn.MaxPool2d)
def max_pool2d_module(call: Call) -> RuleResult:
    """``nn.MaxPool2d``."""
    m = call.fn
    x, dx = call.first_input()
    return max_pool2d(x, dx, m.kernel_size, m.stride, m.padding, m.dilation, m.ceil_mode, m.return_indices)


@register_rule(F.max_pool2d, torch.max_pool2d)
def max_pool2d_function(call: Call) -> RuleResult:
    """``F.max_pool2d`` / ``torch.max_pool2d`` without ``return_indices`` (else: jvp)."""
    args, kwargs = call.args, call.kwargs
    if kwargs.get("return_indices") or len(args) >= 7:
        return None
    names = ["kernel_size", "stride", "padding", "dilation", "ceil_mode"]
    values = {"stride": None, "padding": 0, "dilation": 1, "ceil_mode": False}
    values.update(dict(zip(names, args[1:])))
    values.update({k: v for k, v in kwargs.items() if k in names})
    return max_pool2d(args[0], call.d_args[0], *(values[n] for n in names))
