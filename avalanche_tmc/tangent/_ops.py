"""Small helpers shared by the rules and the plan interpreter (tensor sums, layouts, the
out-of-place name of an in-place method, attribute paths, a ``torch.func.jvp`` that is
right under ``torch.inference_mode``)."""

from typing import Any, Callable, Optional, Tuple

import torch
from torch import Tensor, nn
from torch.func import jvp
from torch.utils._pytree import tree_map

__all__ = ["add_tangents", "expand_to", "needs_grad", "same_format", "out_of_place", "resolve_attr", "forward_jvp"]


def forward_jvp(f: Callable[..., Any], primals: Tuple[Any, ...], tangents: Tuple[Any, ...]) -> Tuple[Any, Any]:
    """``torch.func.jvp(f, primals, tangents)``, also right under ``torch.inference_mode``.

    torch 2.11 silently drops the tangent of a ``jvp`` evaluated in inference mode (the
    output is right, the tangent is not: measured on 2.11.0+cu130, on the CPU, by the
    transformer-rule tests' inference checks; 2.13 computes it). In inference mode the
    ``jvp`` therefore runs outside it, under ``no_grad`` (nothing is recorded either way),
    on copies of the inference tensors among its arguments."""
    if not torch.is_inference_mode_enabled():
        return jvp(f, primals, tangents)

    def normal(value: Any) -> Any:
        return value.clone() if isinstance(value, Tensor) and value.is_inference() else value

    with torch.inference_mode(False), torch.no_grad():
        return jvp(f, tree_map(normal, primals), tree_map(normal, tangents))


def add_tangents(*tangents: Optional[Tensor]) -> Optional[Tensor]:
    """The sum of the tangents that are not None (None when all are)."""
    present = [t for t in tangents if t is not None]
    if not present:
        return None
    out = present[0]
    for t in present[1:]:
        out = out + t
    return out


def expand_to(t: Optional[Tensor], like: Tensor) -> Optional[Tensor]:
    """``t`` broadcast to the shape of ``like`` (None stays None)."""
    if t is None or t.shape == like.shape:
        return t
    return t.expand_as(like)


def needs_grad(*tensors: Optional[Tensor]) -> bool:
    """Whether autograd records an operation on any of ``tensors``."""
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def same_format(t: Tensor, like: Tensor) -> Tensor:
    """``t`` with the strides of ``like``: a weight computed from others must keep the
    layout of the network's own weight, or the convolution may take a much slower
    kernel (measured: 10x for a channels-last depthwise convolution)."""
    if t.stride() == like.stride():
        return t
    out = torch.empty_like(like, dtype=t.dtype)
    return out.copy_(t)


def out_of_place(method: str) -> str:
    """The out-of-place tensor method of ``method`` (``add_`` -> ``add``, ``__iadd__`` ->
    ``__add__``); other names unchanged."""
    if method.endswith("_") and not method.startswith("__"):
        return method[:-1]
    if method.startswith("__i"):
        return "__" + method[3:]
    return method


def resolve_attr(model: nn.Module, target: str) -> Any:
    """The attribute of ``model`` at the dotted path ``target``."""
    obj: Any = model
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj
