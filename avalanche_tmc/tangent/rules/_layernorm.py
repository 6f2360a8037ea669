"""LayerNorm's tangent in LayerNorm's own kernels, forward and backward (used by
:func:`~avalanche_tmc.tangent.rules.normalization.layer_norm_rule`).

``y = γ ⊙ x̂ + β`` with ``x̂ = (x − μ)·rstd``; its tangent is
``dy = γ ⊙ J·dx + δγ ⊙ x̂ + δβ`` where ``J = rstd·(I − 1/n − x̂x̂ᵀ/n)`` is symmetric, so
``J·dx`` is LayerNorm's backward kernel applied to ``dx``, and ``δγ ⊙ x̂ + δβ`` is LayerNorm's
forward kernel with ``(δγ, δβ)`` as its affine parameters. The backward of the whole
tangent (what a training step needs) is *one* backward kernel: ``J·(γ ⊙ g)`` for ``dx``,
``Σ g ⊙ x̂`` for ``δγ`` and ``Σ g`` for ``δβ`` are exactly what
``native_layer_norm_backward(g, x, ..., γ, β)`` returns. Autograd, left to itself,
differentiates the forward-kernel formulation through LayerNorm's double backward (some
twenty small kernels per layer: measured 18 ms of a 200 ms ViT-Tiny training step);
:class:`LayerNormTangent` gives it the one kernel instead.

This module imports torch only."""

from typing import Any, List, Optional, Sequence, Tuple

import torch
from torch import Tensor

from ..precision import autocast_enabled
from ._pairs import pair_buffer

__all__ = ["LayerNormTangent", "layer_norm_tangent"]

aten = torch.ops.aten


def _tangent(dx: Optional[Tensor], d_weight: Optional[Tensor], d_bias: Optional[Tensor], x: Tensor,
             shape: List[int], mean: Tensor, rstd: Tensor, weight: Optional[Tensor], eps: float,
             out: Optional[Tensor] = None) -> Tensor:
    """``γ ⊙ J·dx + δγ ⊙ x̂ + δβ`` (``dx`` or ``δγ`` given), without autograd; written
    into ``out`` when given."""
    base: Optional[Tensor] = None
    if d_weight is not None:
        base = aten.native_layer_norm(x, shape, d_weight, d_bias, eps)[0]
        d_bias = None
    if dx is None:
        return base if out is None else out.copy_(base)
    j_dx = aten.native_layer_norm_backward(dx, x, shape, mean, rstd, None, None, [True, False, False])[0]
    if base is None and d_bias is not None:
        base = d_bias.expand_as(j_dx)
    if base is None:
        if weight is None:
            return j_dx if out is None else out.copy_(j_dx)
        return j_dx.mul_(weight) if out is None else torch.mul(j_dx, weight, out=out)
    if out is None:
        out = base if base.is_contiguous() else torch.empty_like(j_dx)
    return torch.add(base, j_dx, out=out) if weight is None else torch.addcmul(base, j_dx, weight, out=out)


class LayerNormTangent(torch.autograd.Function):
    """``dy = γ ⊙ J·dx + δγ ⊙ x̂ + δβ`` as a function of ``(dx, δγ, δβ)`` whose backward is one
    LayerNorm backward kernel (see the module docstring). The primal quantities (``x``,
    ``μ``, ``rstd``, ``γ``, ``β``) carry no gradient."""

    @staticmethod
    def forward(ctx: Any, dx: Optional[Tensor], d_weight: Optional[Tensor], d_bias: Optional[Tensor], x: Tensor,
                shape: List[int], mean: Tensor, rstd: Tensor, weight: Optional[Tensor], bias: Optional[Tensor],
                eps: float) -> Tensor:
        ctx.shape = shape
        ctx.save_for_backward(x, mean, rstd, weight, bias)
        return _tangent(dx, d_weight, d_bias, x, shape, mean, rstd, weight, eps)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tuple[Optional[Tensor], ...]:
        x, mean, rstd, weight, bias = ctx.saved_tensors
        need = list(ctx.needs_input_grad[:3])
        g_dx, g_weight, g_bias = aten.native_layer_norm_backward(
            grad.contiguous(), x, ctx.shape, mean, rstd, weight, bias, need
        )
        return (g_dx if need[0] else None, g_weight if need[1] else None, g_bias if need[2] else None,
                None, None, None, None, None, None, None)


def layer_norm_tangent(
    x: Tensor,
    dx: Optional[Tensor],
    normalized_shape: Sequence[int],
    weight: Optional[Tensor],
    d_weight: Optional[Tensor],
    bias: Optional[Tensor],
    d_bias: Optional[Tensor],
    eps: float,
) -> Optional[Tuple[Tensor, Optional[Tensor]]]:
    """``(y, dy)`` of LayerNorm in its own kernels, or None where this does not apply
    (autocast, a primal with gradients, mixed dtypes, ``δγ`` without ``γ`` or ``δβ``
    without ``β``): the caller then computes it its own way."""
    primals = [t for t in (x, weight, bias) if t is not None]
    tangents = [t for t in (dx, d_weight, d_bias) if t is not None]
    if (autocast_enabled(x.device.type) or any(t.requires_grad for t in primals)
            or any(t.dtype != x.dtype for t in primals + tangents)
            or (d_weight is not None and weight is None) or (d_bias is not None and bias is None)):
        return None
    shape = list(normalized_shape)
    if not tangents or (dx is None and d_weight is None):
        y = aten.native_layer_norm(x, shape, weight, bias, eps)[0]
        return y, (None if d_bias is None else d_bias.expand_as(y))
    if torch.is_grad_enabled() and any(t.requires_grad for t in tangents):
        y, mean, rstd = aten.native_layer_norm(x, shape, weight, bias, eps)
        return y, LayerNormTangent.apply(dx, d_weight, d_bias, x, shape, mean, rstd, weight, bias, eps)
    # inference: primal and tangent side by side in one buffer (see ._pairs), for the next linear layer
    buf = pair_buffer(x)
    stats = x.shape[: x.dim() - len(shape)] + (1,) * len(shape)
    mean, rstd = x.new_empty(stats), x.new_empty(stats)
    aten.native_layer_norm.out(x, shape, weight, bias, eps, out0=buf[0], out1=mean, out2=rstd)
    return buf[0], _tangent(dx, d_weight, d_bias, x, shape, mean, rstd, weight, eps, out=buf[1])
