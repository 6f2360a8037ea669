"""Mixed precision: keeping each tangent in its primal's dtype under ``torch.autocast``.

What it is for: :class:`~avalanche_tmc.tangent.TangentModel` under ``torch.autocast``
(bfloat16 on CPU, float16/bfloat16 on CUDA). Its ``torch.func.jvp`` evaluations (the
generic path, and the fast path's per-operation fallbacks) must see every tangent in the
dtype of its primal, or the next layer fails.

Why it is needed (PyTorch's behaviour, seen in torch 2.13): the normalisation layers
``batch_norm``, ``layer_norm``, ``group_norm`` and ``instance_norm`` accept a
bfloat16/float16 input with float32 weights and running statistics (a mixed-dtype kernel
that computes in float32) and return a primal in the *input's* dtype; their forward-mode
derivative, though, is computed from the float32 weights and comes out in **float32**. The
next layer's autocast cast (``_to_copy`` to bfloat16) is a no-op on the bfloat16 primal, so
the float32 tangent reaches the next convolution beside its bfloat16 weight: "Input type
(torch.FloatTensor) and weight type (CPUBFloat16Type) should be the same". Any network
with BatchNorm fails on the generic path under autocast.

The fix (:func:`matched_tangent_dtypes`): while autocast is enabled, a
``TorchFunctionMode`` computes those four functions, when the input's dtype differs from
their weights' (or running statistics') floating dtype, as
``func(x.to(weight_dtype), ...).to(x.dtype)``: explicit casts, which carry primal and
tangent alike, so both leave in the input's dtype. The numbers are those of the
mixed-dtype kernel, which computes in float32 internally anyway. Without autocast the mode
is not entered (one check: the float32 path is untouched).

This module imports torch only.
"""

import contextlib
from typing import Any, Callable, ContextManager, Dict, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor
from torch.overrides import TorchFunctionMode

__all__ = ["NORMALIZATIONS", "autocast_enabled", "matched_tangent_dtypes", "match_tangents", "MatchNormDtypes"]

NORMALIZATIONS: Tuple[Callable[..., Tensor], ...] = (F.batch_norm, F.layer_norm, F.group_norm, F.instance_norm)
"""The functions whose mixed-dtype kernels return a tangent of another dtype than the primal."""


def autocast_enabled(device_type: str) -> bool:
    """Whether ``torch.autocast`` is enabled for ``device_type`` (``"cpu"``, ``"cuda"``...);
    False for a device type autocast does not know (``"meta"``)."""
    try:
        return bool(torch.is_autocast_enabled(device_type))
    except TypeError:  # torch < 2.4: no device argument
        if device_type == "cpu":
            return bool(torch.is_autocast_cpu_enabled())
        return device_type == "cuda" and bool(torch.is_autocast_enabled())
    except RuntimeError:  # a device type without autocast
        return False


def _weight_dtype(values: Sequence[Any]) -> Optional[torch.dtype]:
    """The one floating dtype of the tensors among ``values`` (None if none or several)."""
    dtypes = {v.dtype for v in values if isinstance(v, Tensor) and v.is_floating_point()}
    return dtypes.pop() if len(dtypes) == 1 else None


class MatchNormDtypes(TorchFunctionMode):
    """Computes :data:`NORMALIZATIONS` on an input cast to their weights' dtype, then casts
    the result back to the input's dtype, so primal and tangent leave in the same dtype
    (see the module docstring). Every other function runs unchanged."""

    def __torch_function__(self, func: Callable[..., Any], types: Sequence[type], args: Tuple[Any, ...] = (),
                           kwargs: Optional[Dict[str, Any]] = None) -> Any:
        kwargs = kwargs or {}
        if func in NORMALIZATIONS:
            positional = bool(args)
            x = args[0] if positional else kwargs.get("input")
            others = list(args[1:]) + [v for k, v in kwargs.items() if k != "input"]
            target = _weight_dtype(others)
            if isinstance(x, Tensor) and x.is_floating_point() and target is not None and x.dtype != target:
                if positional:
                    out = func(x.to(target), *args[1:], **kwargs)
                else:
                    out = func(*args, **{**kwargs, "input": x.to(target)})
                return out.to(x.dtype)
        return func(*args, **kwargs)


def matched_tangent_dtypes(device_type: str) -> ContextManager[Any]:
    """A :class:`MatchNormDtypes` mode while autocast is enabled for ``device_type``, else a
    no-op context. Enter it inside the function given to ``torch.func.jvp``."""
    if autocast_enabled(device_type):
        return MatchNormDtypes()
    return contextlib.nullcontext()


def match_tangents(primals: Sequence[Tensor], tangents: Sequence[Tensor]) -> Tuple[Tensor, ...]:
    """``tangents``, each cast to its primal's floating dtype where they differ (a fast-path
    rule may pair a bfloat16 value with a float32 tangent: ``γ/σ·dx`` promotes to float32), so
    that ``torch.func.jvp`` starts from matched pairs as the generic path does."""
    return tuple(
        t.to(p.dtype) if t.dtype != p.dtype and p.is_floating_point() and t.is_floating_point() else t
        for p, t in zip(primals, tangents)
    )
