"""Rules of attention: softmax and scaled dot-product attention (whose fused kernels have
no forward-mode derivative)."""

import math
from typing import Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor

from .._ops import add_tangents
from ..registry import Call, RuleResult, register_rule
from ..tree import tree_flatten
from .linear import bind

__all__ = ["softmax", "attention_rule", "scaled_dot_product_attention"]


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
    if d_args[0] is None:
        return y, None
    weighted = y * d_args[0]
    return y, weighted - y * weighted.sum(dim, keepdim=True)


def attention_rule(
    q: Tensor, k: Tensor, v: Tensor, dq: Optional[Tensor], dk: Optional[Tensor], dv: Optional[Tensor],
    attn_mask: Optional[Tensor] = None, is_causal: bool = False, scale: Optional[float] = None,
) -> Tuple[Tensor, Optional[Tensor]]:
    """``softmax(q·kᵀ·s + mask)·v`` (scaled dot-product attention without dropout) and its
    tangent ``dP·v + P·dv`` with ``dP = P ⊙ (dS − Σ P ⊙ dS)``, ``dS = (dq·kᵀ + q·dkᵀ)·s``."""
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
