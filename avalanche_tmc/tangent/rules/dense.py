"""The tangent of a linear (dense) layer, ``y = W·x + b``: the rule of ``nn.Linear`` and
``F.linear`` (dispatched here by :func:`~avalanche_tmc.tangent.rules.linear.bilinear_rule`),
kept apart from the convolutions because transformers spend most of their time here."""

from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["dense_rule"]


def dense_rule(
    x: Tensor,
    dx: Optional[Tensor],
    weight: Tensor,
    d_weight: Optional[Tensor],
    bias: Optional[Tensor],
    d_bias: Optional[Tensor],
) -> Tuple[Tensor, Optional[Tensor]]:
    """``y = W·x + b`` and ``dy = W·dx + δW·x + δb``.

    Without gradients the primal and tangent inputs go through ``W`` in one call
    (batch-concatenated); with gradients the products stay separate, so the backward
    computes only what ``δ`` needs."""
    fuse = not torch.is_grad_enabled() or not (
        (dx is not None and dx.requires_grad) or (d_weight is not None and d_weight.requires_grad)
    )
    if dx is None:
        y = F.linear(x, weight, bias)
        if d_weight is None:
            return y, (None if d_bias is None else d_bias.expand_as(y))
        return y, F.linear(x, d_weight, d_bias)
    if fuse:
        both = F.linear(torch.cat([x, dx], 0), weight)
        y, dy = both[: x.shape[0]], both[x.shape[0]:]
        if bias is not None:
            y = y + bias
    else:
        y = F.linear(x, weight, bias)
        dy = F.linear(dx, weight)
    if d_weight is not None:
        dy = dy + F.linear(x, d_weight, d_bias)
    elif d_bias is not None:
        dy = dy + d_bias
    return y, dy
