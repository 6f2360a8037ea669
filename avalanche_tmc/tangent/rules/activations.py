"""Rules of the elementwise activations: ReLU, ReLU6/Hardtanh, SiLU, GELU, Sigmoid, Tanh,
Hardswish, Hardsigmoid, through their backward kernels (one fused pass each).

An activation is registered once, as module, functions and tensor methods together, by
:func:`register_activation`.
"""

from typing import Any, Callable, Dict, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..precision import autocast_enabled
from ..registry import Call, RuleResult, register_rule
from ._pairs import pair_buffer, wants_pair

__all__ = ["ACTIVATIONS", "FUSABLE", "activation", "activation_in_place", "activation_kwargs", "register_activation"]

aten = torch.ops.aten

ACTIVATIONS: Dict[str, Tuple[Callable[..., Tensor], Callable[[Tensor, Tensor, Tensor, Dict[str, Any]], Tensor]]] = {}
"""Activation name -> (primal function, tangent ``(dx, x, y, kwargs) -> dy``)."""

_MODULE_KWARGS: Dict[type, Tuple[str, Callable[[nn.Module], Dict[str, Any]]]] = {}


def activation(
    name: str, x: Tensor, dx: Optional[Tensor], kw: Dict[str, Any], extra_args: Sequence[Any] = ()
) -> Tuple[Tensor, Any]:
    """``(y, dy)`` of the activation ``name`` (``extra_args``: a function call's positional
    arguments after the input, e.g. Hardtanh's bounds)."""
    primal_fn, tangent_fn = ACTIVATIONS[name]
    kw = {k: v for k, v in kw.items() if k != "inplace"}
    if name == "hardtanh" and extra_args:
        kw = dict(zip(("min_val", "max_val"), extra_args[:2]), **kw)
    elif name == "gelu" and extra_args:
        kw = {"approximate": extra_args[0], **kw}
    y = primal_fn(x, **kw)
    if dx is None:
        return y, None
    return y, tangent_fn(dx, x, y, kw)


FUSABLE = ("relu", "relu6", "hardtanh")
"""Activations whose primal and tangent :func:`activation_in_place` can compute into the
tensors it is given (a convolution + BatchNorm step's own outputs)."""


def activation_kwargs(spec: Tuple[Any, ...], model: nn.Module) -> Dict[str, Any]:
    """The keyword arguments of a fused activation ``spec = (op, target, name, extra_args,
    kwargs)`` (a module's are read from the module at every call, as its own rule does)."""
    op, target, name, extra_args, kw = spec
    if op == "module":
        module: Any = model
        for part in target.split("."):
            module = getattr(module, part)
        return _MODULE_KWARGS[type(module)][1](module)
    kw = {k: v for k, v in kw.items() if k != "inplace"}
    if name == "hardtanh" and extra_args:
        kw = dict(zip(("min_val", "max_val"), extra_args[:2]), **kw)
    return kw


def activation_in_place(name: str, y: Tensor, dy: Optional[Tensor], kw: Dict[str, Any]) -> Tuple[Tensor, Any]:
    """``(y, dy)`` of ReLU, ReLU6 or Hardtanh (:data:`FUSABLE`) applied to ``(y, dy)``, written
    into them where autograd records neither (the caller made both and no one else holds
    them): one buffer instead of two, and an in-place pass is faster than one into a new
    tensor. The slopes read the output, as the rules above."""
    lo, hi = (0.0, 0.0) if name == "relu" else (0.0, 6.0) if name == "relu6" else (
        kw.get("min_val", -1.0), kw.get("max_val", 1.0))
    in_place = not (torch.is_grad_enabled() and y.requires_grad) and not torch.is_autocast_enabled(y.device.type)
    if name == "relu":
        y = torch.relu_(y) if in_place else torch.relu(y)
    else:
        y = F.hardtanh_(y, lo, hi) if in_place else F.hardtanh(y, lo, hi)
    if dy is None:
        return y, None
    if (torch.is_grad_enabled() and dy.requires_grad) or 0 in dy.stride():  # (0: a broadcast δβ)
        return y, (aten.threshold_backward(dy, y, 0) if name == "relu" else aten.hardtanh_backward(dy, y, lo, hi))
    if name == "relu":
        return y, aten.threshold_backward.grad_input(dy, y, 0, grad_input=dy)
    return y, aten.hardtanh_backward.grad_input(dy, y, lo, hi, grad_input=dy)


def _activation_call(call: Call) -> RuleResult:
    if call.op == "module":
        name, module_kwargs = _MODULE_KWARGS[type(call.fn)]
        x, dx = call.first_input()
        return activation(name, x, dx, module_kwargs(call.fn))
    return activation(call.conf, call.args[0], call.d_args[0], call.kwargs, call.args[1:])


def register_activation(
    name: str,
    primal: Callable[..., Tensor],
    tangent: Callable[[Tensor, Tensor, Tensor, Dict[str, Any]], Tensor],
    targets: Sequence[Any] = (),
    module: Optional[type] = None,
    module_kwargs: Callable[[nn.Module], Dict[str, Any]] = lambda m: {},
) -> None:
    """Register the elementwise activation ``name``: ``primal(x, **kwargs)``, its
    ``tangent(dx, x, y, kwargs)``, for the functions and method names ``targets`` and the
    module class ``module`` (exactly that class; ``module_kwargs(m)`` gives its kwargs)."""
    ACTIVATIONS[name] = (primal, tangent)
    register_rule(*targets, conf=name)(_activation_call)
    if module is not None:
        _MODULE_KWARGS[module] = (name, module_kwargs)
        register_rule(module, conf=name)(_activation_call)


def _silu_slope(x: Tensor) -> Tensor:
    # aten.silu_backward has no derivative of its own, so a training step could not
    # differentiate through it: the slope σ(x)(1 + x(1 − σ(x))) written out instead.
    s = torch.sigmoid(x)
    return s * (1 + x * (1 - s))


register_activation(
    "relu", F.relu, lambda dx, x, y, kw: aten.threshold_backward(dx, y, 0),
    (F.relu, torch.relu, F.relu_, torch.relu_, "relu", "relu_"), nn.ReLU,
)
register_activation(
    "hardtanh",
    lambda x, min_val=-1.0, max_val=1.0, **_: F.hardtanh(x, min_val, max_val),
    lambda dx, x, y, kw: aten.hardtanh_backward(dx, y, kw.get("min_val", -1.0), kw.get("max_val", 1.0)),
    (F.hardtanh,), nn.Hardtanh, lambda m: {"min_val": m.min_val, "max_val": m.max_val},
)
register_activation(
    # The slope read from the output y = clamp(x) (min < y < max exactly where min < x < max):
    # the backward saves y, which the next layer saves anyway, instead of x (measured:
    # MobileNetV2 at 112 px, batch 16: 426 -> 328 MB saved).
    "relu6", F.relu6, lambda dx, x, y, kw: aten.hardtanh_backward(dx, y, 0.0, 6.0), (F.relu6,), nn.ReLU6,
)
register_activation("silu", F.silu, lambda dx, x, y, kw: dx * _silu_slope(x), (F.silu,), nn.SiLU)
register_activation(
    "gelu",
    lambda x, approximate="none", **_: F.gelu(x, approximate=approximate),
    lambda dx, x, y, kw: aten.gelu_backward(dx, x, approximate=kw.get("approximate", "none")),
    (F.gelu,), nn.GELU, lambda m: {"approximate": m.approximate},
)


class GeluTangent(torch.autograd.Function):
    """GELU's tangent ``gelu'(x)·dx`` as a function of ``dx``, whose backward is
    ``gelu'(x)·g`` (the same kernel) and keeps only ``x``: autograd's own derivative of
    ``gelu_backward`` keeps ``dx`` too (for the derivative in ``x``, which is not needed
    here): one tensor of the MLP's width per block less in a training step."""

    @staticmethod
    def forward(ctx: Any, dx: Tensor, x: Tensor, approximate: str) -> Tensor:
        ctx.approximate = approximate
        ctx.save_for_backward(x)
        return aten.gelu_backward(dx, x, approximate=approximate)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tuple[Optional[Tensor], None, None]:
        (x,) = ctx.saved_tensors
        return aten.gelu_backward(grad, x, approximate=ctx.approximate), None, None


def _gelu_call(call: Call) -> RuleResult:
    """GELU; at inference its output and tangent go side by side into one buffer (see
    :mod:`._pairs`: the next linear layer multiplies both at once), through the ``out=``
    forms of ``gelu`` and ``gelu_backward``; in a training step the tangent is a
    :class:`GeluTangent`."""
    if call.op == "module":
        (x, dx), kw = call.first_input(), {"approximate": call.fn.approximate}
    else:
        x, dx = call.args[0], call.d_args[0]
        kw = dict(zip(("approximate",), call.args[1:]), **{k: v for k, v in call.kwargs.items() if k != "inplace"})
    if (dx is None or autocast_enabled(x.device.type) or set(kw) - {"approximate"}
            or dx.shape != x.shape or dx.dtype != x.dtype or x.requires_grad):
        return _activation_call(call)
    approximate = kw.get("approximate", "none")
    if not wants_pair(dx):  # a training step
        return F.gelu(x, approximate=approximate), GeluTangent.apply(dx, x, approximate)
    if not x.is_contiguous():
        return _activation_call(call)
    buf = pair_buffer(x)
    aten.gelu.out(x, approximate=approximate, out=buf[0])
    aten.gelu_backward.grad_input(dx, x, approximate=approximate, grad_input=buf[1])
    return buf[0], buf[1]


register_rule(F.gelu, conf="gelu", override=True)(_gelu_call)
register_rule(nn.GELU, conf="gelu", override=True)(_gelu_call)
register_activation(
    "sigmoid", torch.sigmoid, lambda dx, x, y, kw: aten.sigmoid_backward(dx, y),
    (torch.sigmoid, F.sigmoid, "sigmoid"), nn.Sigmoid,
)
register_activation(
    "tanh", torch.tanh, lambda dx, x, y, kw: aten.tanh_backward(dx, y), (torch.tanh, F.tanh, "tanh"), nn.Tanh,
)
register_activation(
    "hardswish", F.hardswish, lambda dx, x, y, kw: aten.hardswish_backward(dx, x), (F.hardswish,), nn.Hardswish,
)
register_activation(
    # aten.hardsigmoid_backward has no derivative of its own: the slope written out
    "hardsigmoid", F.hardsigmoid, lambda dx, x, y, kw: dx * ((x > -3.0) & (x < 3.0)).to(dx.dtype) / 6.0,
    (F.hardsigmoid,), nn.Hardsigmoid,
)
