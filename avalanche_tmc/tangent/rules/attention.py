"""Rules of attention: softmax and scaled dot-product attention (whose fused kernels have
no forward-mode derivative)."""

import math
from typing import Any, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .._ops import add_tangents
from ..precision import autocast_enabled
from ..registry import Call, RuleResult, register_rule
from ..tree import tree_flatten
from ._pairs import pair_buffer, wants_pair
from .conv_linear import bind

__all__ = ["softmax", "attention_rule", "AttentionTangent", "scaled_dot_product_attention"]

aten = torch.ops.aten


@register_rule(F.softmax, torch.softmax, "softmax")
def softmax(call: Call) -> RuleResult:
    """``softmax(x, dim)``: ``dy = y ⊙ (dx − Σ y ⊙ dx)`` (only ``x`` with a tangent, no
    dtype conversion; else: jvp)."""
    args, kwargs, d_args = call.args, call.kwargs, call.d_args
    # (d_kwargs mirrors the keywords, {"dim": None} for ``softmax(x, dim=1)``: only a
    # tangent in it, not the keyword itself, needs jvp)
    if not all(t is None for t in tree_flatten((d_args[1:], call.d_kwargs))[0]):
        return None
    dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
    # F.softmax traces with its defaults spelled out: _stacklevel (a warning's) and dtype=None
    extra = {k: v for k, v in kwargs.items() if k != "dim" and not (k == "_stacklevel" or (k == "dtype" and v is None))}
    if dim is None or extra or len(args) > 2:
        return None
    y = torch.softmax(args[0], dim)
    dx = d_args[0]
    if dx is None:
        return y, None
    if dx.dtype == y.dtype == args[0].dtype and not autocast_enabled(y.device.type):
        # the Jacobian diag(y) − y·yᵀ is symmetric: softmax's backward kernel, one pass
        return y, aten._softmax_backward_data(dx, y, dim, y.dtype)
    weighted = y * dx
    return y, weighted - y * weighted.sum(dim, keepdim=True)


def attention_rule(
    q: Tensor, k: Tensor, v: Tensor, dq: Optional[Tensor], dk: Optional[Tensor], dv: Optional[Tensor],
    attn_mask: Optional[Tensor] = None, is_causal: bool = False, scale: Optional[float] = None,
) -> Tuple[Tensor, Optional[Tensor]]:
    """``softmax(q·kᵀ·s + mask)·v`` (scaled dot-product attention without dropout) and its
    tangent ``dP·v + P·dv`` with ``dP = P ⊙ (dS − Σ P ⊙ dS)``, ``dS = (dq·kᵀ + q·dkᵀ)·s``.

    The work is that of TAFT's tangent attention without its waste: no ``N×N×N`` product
    (``Σ P ⊙ dS`` is a row sum, not ``diag(dS·Pᵀ)``) and no tensor larger than ``N×N`` per
    head. ``dP`` is softmax's backward kernel applied to ``dS`` (the softmax Jacobian
    ``diag(P) − PPᵀ`` is symmetric): one pass instead of four. The products are batched
    matrix products on 3-D views, each input made contiguous once (``q`` and ``v`` serve
    two products each); the scale rides on the products (``alpha``) and the two terms of
    ``dS`` and of the output tangent accumulate in place (``baddbmm_``; a product's backward
    keeps its inputs, not its output, so this is safe in a training step too)."""
    if autocast_enabled(q.device.type) or any(
        t is not None and (t.dtype != q.dtype or t.requires_grad) for t in (k, v, attn_mask)
    ) or q.requires_grad:
        return _attention_unfused(q, k, v, dq, dk, dv, attn_mask, is_causal, scale)
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    batch, n, m = q.shape[:-2], q.shape[-2], k.shape[-2]
    qb, kb, vb = _broadcast(q, k, v)
    q3, k3, v3 = (t.reshape((-1,) + t.shape[-2:]) for t in (qb, kb, vb))
    kt = k3.transpose(1, 2)
    scores = torch.baddbmm(q3.new_empty(()), q3, kt, beta=0.0, alpha=scale)
    if is_causal:
        causal = torch.ones(n, m, dtype=torch.bool, device=q.device).tril()
        scores.masked_fill_(~causal, float("-inf"))
    if attn_mask is not None:
        mask = attn_mask.expand(batch + (n, m)).reshape(-1, n, m)
        if mask.dtype == torch.bool:
            scores.masked_fill_(~mask, float("-inf"))
        else:
            scores.add_(mask)
    probs = torch.softmax(scores, dim=-1)
    out = torch.bmm(probs, v3).view(batch + (n, v.shape[-1]))
    # at inference, output and tangent go side by side into a (2, B, N, H, D) buffer (see
    # ._pairs): heads merged back, ``o.transpose(1, 2).reshape(B, N, H·D)``, are then views
    # of its halves (the copy that reshape made is made here) and the projection multiplies
    # both at once
    buf = pair_buffer(out, (batch[0], n, batch[1], v.shape[-1])) if out.dim() == 4 and wants_pair(dq, dk, dv) else None
    if buf is not None:
        out = buf[0].transpose(1, 2).copy_(out)
    dq3 = None if dq is None else dq.expand(qb.shape).reshape(q3.shape)
    dk3 = None if dk is None else dk.expand(kb.shape).reshape(k3.shape)
    dv3 = None if dv is None else dv.expand(vb.shape).reshape(v3.shape)
    if dq3 is None and dk3 is None and dv3 is None:
        return out, None
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in (dq3, dk3, dv3)):
        d_out = AttentionTangent.apply(dq3, dk3, dv3, q3, k3, v3, probs, scale)
    else:
        d_out = _attention_tangent(dq3, dk3, dv3, q3, k3, v3, probs, scale)
    d_out = d_out.view(out.shape)
    return out, (d_out if buf is None else buf[1].transpose(1, 2).copy_(d_out))


def _attention_tangent(dq: Optional[Tensor], dk: Optional[Tensor], dv: Optional[Tensor], q: Tensor, k: Tensor,
                       v: Tensor, probs: Tensor, scale: float) -> Tensor:
    """``dP·v + P·dv`` on 3-D (batch·heads, tokens, features) tensors, without autograd."""
    d_scores = None
    if dq is not None:
        d_scores = torch.baddbmm(probs.new_empty(()), dq, k.transpose(1, 2), beta=0.0, alpha=scale)
    if dk is not None:
        if d_scores is None:
            d_scores = torch.baddbmm(probs.new_empty(()), q, dk.transpose(1, 2), beta=0.0, alpha=scale)
        else:
            d_scores = d_scores.baddbmm_(q, dk.transpose(1, 2), alpha=scale)
    d_out = None
    if d_scores is not None:
        d_out = torch.bmm(aten._softmax_backward_data(d_scores, probs, -1, probs.dtype), v)
    if dv is not None:
        d_out = torch.bmm(probs, dv) if d_out is None else d_out.baddbmm_(probs, dv)
    return d_out


class AttentionTangent(torch.autograd.Function):
    """The attention tangent as a function of ``(dq, dk, dv)`` (linear in them) with its
    adjoint written out: ``g_dv = Pᵀ·g``, ``g_dS = s·P ⊙ (G − Σ P ⊙ G)`` with ``G = g·vᵀ``
    (softmax's backward kernel), ``g_dq = g_dS·k``, ``g_dk = g_dSᵀ·q``. Autograd, left to
    itself, saves the tangent intermediates too (``dP``: ``N×N`` per head and layer, e.g.
    7 MB per ViT-S/16 block at 224 px, batch 8); this saves only the primal ``q``, ``k``,
    ``v`` and ``P``, which the backward needs anyway."""

    @staticmethod
    def forward(ctx: Any, dq: Optional[Tensor], dk: Optional[Tensor], dv: Optional[Tensor], q: Tensor, k: Tensor,
                v: Tensor, probs: Tensor, scale: float) -> Tensor:
        ctx.scale = scale
        ctx.save_for_backward(q, k, v, probs)
        return _attention_tangent(dq, dk, dv, q, k, v, probs, scale)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tuple[Optional[Tensor], ...]:
        q, k, v, probs = ctx.saved_tensors
        need_dq, need_dk, need_dv = ctx.needs_input_grad[:3]
        g_dq = g_dk = g_dv = None
        if need_dv:
            g_dv = torch.bmm(probs.transpose(1, 2), grad)
        if need_dq or need_dk:
            g_scores = aten._softmax_backward_data(torch.bmm(grad, v.transpose(1, 2)), probs, -1, probs.dtype)
            empty = g_scores.new_empty(())
            if need_dq:
                g_dq = torch.baddbmm(empty, g_scores, k, beta=0.0, alpha=ctx.scale)
            if need_dk:
                g_dk = torch.baddbmm(empty, g_scores.transpose(1, 2), q, beta=0.0, alpha=ctx.scale)
        return g_dq, g_dk, g_dv, None, None, None, None, None


def _broadcast(q: Tensor, k: Tensor, v: Tensor) -> Tuple[Tensor, Tensor, Tensor]:
    """``q``, ``k``, ``v`` with their batch dimensions broadcast to one shape."""
    batch = torch.broadcast_shapes(q.shape[:-2], k.shape[:-2], v.shape[:-2])
    return tuple(t.expand(batch + t.shape[-2:]) for t in (q, k, v))  # type: ignore[return-value]


def _attention_unfused(
    q: Tensor, k: Tensor, v: Tensor, dq: Optional[Tensor], dk: Optional[Tensor], dv: Optional[Tensor],
    attn_mask: Optional[Tensor] = None, is_causal: bool = False, scale: Optional[float] = None,
) -> Tuple[Tensor, Optional[Tensor]]:
    """The same with out-of-place operations (under autocast; primals with gradients)."""
    scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale
    if is_causal:
        n, m = q.shape[-2], k.shape[-2]
        causal = torch.ones(n, m, dtype=torch.bool, device=q.device).tril()
        scores = scores.masked_fill(~causal, float("-inf"))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else scores + attn_mask
    probs = torch.softmax(scores, dim=-1)
    out = probs @ v
    d_scores = add_tangents(
        None if dq is None else dq @ k.transpose(-2, -1), None if dk is None else q @ dk.transpose(-2, -1)
    )
    terms = []
    if d_scores is not None:
        d_scores = d_scores * scale
        weighted = probs * d_scores
        d_probs = weighted - probs * weighted.sum(-1, keepdim=True)
        terms.append(d_probs @ v)
    if dv is not None:
        terms.append(probs @ dv)
    return out, add_tangents(*terms)


@register_rule(F.scaled_dot_product_attention)
def scaled_dot_product_attention(call: Call) -> RuleResult:
    """``F.scaled_dot_product_attention`` without dropout, GQA or a mask tangent (else: jvp)."""
    names = ["query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"]
    values, d_values = bind(names, call)
    if values.get("dropout_p", 0.0) or values.get("enable_gqa", False) or d_values.get("attn_mask") is not None:
        return None
    return attention_rule(
        values["query"], values["key"], values["value"], d_values.get("query"), d_values.get("key"),
        d_values.get("value"), values.get("attn_mask"), values.get("is_causal", False), values.get("scale"),
    )
