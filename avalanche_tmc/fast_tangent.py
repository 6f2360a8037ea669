"""The fast path of :class:`~avalanche_tmc.tangent.TangentModel`: a traced network run
as (primal, tangent) pairs.

What it is for: computing ``f_w(x) + J_w f(x)·δ`` faster than one ``torch.func.jvp``
over the whole network, with the same numbers. The network is traced once with
``torch.fx`` into a list of operations; each operation is then evaluated on a pair
``(value, tangent)`` by a rule written for it:

* convolutions and linear layers (``nn.Conv1d/2d/3d``, ``nn.Linear``, ``F.conv*d``,
  ``F.linear``): the primal and the tangent share the weight (``W·[x; dx]`` in one call
  during inference), ``δW·x`` and ``W·dx`` fuse into one convolution over the
  channel-concatenated ``[dx, x]`` when no gradient is needed;
* BatchNorm on running statistics, the common activations (ReLU, ReLU6/Hardtanh,
  SiLU, GELU, Sigmoid, Tanh, Hardswish, Hardsigmoid) through their backward kernels,
  max/average pooling, and operations linear in their input (add, view, flatten,
  cat, mean, dropout in eval, ...);
* operations before the first linearized parameter carry no tangent at all (a frozen
  prefix costs one plain forward, with no autograd graph);
* anything else (LayerNorm, attention, custom modules, modules fx cannot trace) is
  evaluated with ``torch.func.jvp`` for that operation alone, so every ``nn.Module``
  keeps working.

Only ``δ`` ever needs gradients: the primal pass builds no autograd graph, and the
backward of a training step goes through the tangent operations only.

The plan refers to modules, parameters and buffers by name and looks them up in the
model at every call, so moving the model to another device, loading a state dict or
re-estimating BatchNorm statistics in place is seen by the next call.

This module imports torch only.
"""

import math
import operator
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, fx, nn
from torch.func import functional_call, jvp

__all__ = ["TangentPlan", "TracingError", "build_plan"]

aten = torch.ops.aten


class TracingError(RuntimeError):
    """The network could not be traced into a plan (the generic path is used instead)."""


# --------------------------------------------------------------------------------------
# Tracing
# --------------------------------------------------------------------------------------


class _FallbackTracer(fx.Tracer):
    """``torch.fx`` tracer that keeps a submodule whole (a leaf) when tracing into it
    fails, e.g. attention blocks that unpack ``x.shape`` or pad by computed sizes."""

    def __init__(self, leaf_types: Tuple[type, ...]):
        super().__init__()
        self.leaf_types = leaf_types
        self.failed: List[str] = []

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        if isinstance(m, self.leaf_types) and _has_own_rule(m):
            return True
        return super().is_leaf_module(m, module_qualified_name)

    def call_module(self, m: nn.Module, forward: Callable, args: Tuple, kwargs: Dict) -> Any:
        if self.is_leaf_module(m, self.path_of_module(m)):
            return super().call_module(m, forward, args, kwargs)
        depth = len(self.module_stack)
        nodes_before = len(self.graph.nodes)
        try:
            return super().call_module(m, forward, args, kwargs)
        except Exception:  # noqa: BLE001 - any failure inside: keep the module whole
            while len(self.module_stack) > depth:  # fx does not unwind it on errors
                self.module_stack.popitem(last=True)
            for node in reversed(list(self.graph.nodes)[nodes_before:]):  # the failed attempt
                self.graph.erase_node(node)
            name = self.path_of_module(m)
            self.failed.append(name)
            return self.create_proxy("call_module", name, args, kwargs)


# --------------------------------------------------------------------------------------
# Rules: each takes primal args, tangent args and returns (primal, tangent)
# --------------------------------------------------------------------------------------

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_MODULES = (nn.Conv1d, nn.Conv2d, nn.Conv3d)
_BN_MODULES = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
_RULE_MODULES = _CONV_MODULES + (nn.Linear,) + _BN_MODULES + (nn.LayerNorm,)


def _is_timm_conv2d_same(m: nn.Module) -> bool:
    """timm's ``Conv2dSame``: TensorFlow "same" padding computed from the input size,
    then a plain convolution (both linear, so the convolution rule applies)."""
    return type(m).__name__ == "Conv2dSame" and type(m).__module__.startswith("timm.")


def _same_padding(size: int, kernel: int, stride: int, dilation: int) -> int:
    return max((math.ceil(size / stride) - 1) * stride + (kernel - 1) * dilation + 1 - size, 0)


def _pad_same(x: Tensor, conf: Dict[str, Any]) -> Tensor:
    pad: List[int] = []
    for axis in range(conf["dim"] - 1, -1, -1):  # F.pad lists the last axis first
        total = _same_padding(
            x.shape[2 + axis], conf["kernel_size"][axis], conf["stride"][axis], conf["dilation"][axis]
        )
        pad += [total // 2, total - total // 2]
    return F.pad(x, pad) if any(pad) else x


def _has_own_rule(m: nn.Module) -> bool:
    """Modules evaluated by a rule of this module (their forward is the stock one)."""
    if _is_timm_conv2d_same(m):
        return True
    for base in _RULE_MODULES:
        if isinstance(m, base):
            return type(m).forward is base.forward
    return type(m) in _ACTIVATION_MODULES or type(m) in _IDENTITY_MODULES or type(m) in _POOL_MODULES


def _add_tangents(*tangents: Optional[Tensor]) -> Optional[Tensor]:
    present = [t for t in tangents if t is not None]
    if not present:
        return None
    out = present[0]
    for t in present[1:]:
        out = out + t
    return out


def _center_tap(x: Tensor, weight: Tensor, conf: Dict[str, Any]) -> Optional[Tuple[int, int]]:
    """The one kernel tap a 2-D convolution uses on a 1x1 input with a 1x1 output (a
    network's last blocks on small images), or None."""
    if conf["dim"] != 2 or x.shape[-2:] != (1, 1) or isinstance(conf["padding"], str):
        return None
    taps = []
    for k, p, s, d in zip(weight.shape[-2:], _pair(conf["padding"]), _pair(conf["stride"]), _pair(conf["dilation"])):
        if d != 1 or not 0 <= p < k or (1 + 2 * p - k) // s + 1 != 1:
            return None
        taps.append(p)
    return taps[0], taps[1]


def _pair(value: Any) -> Tuple[int, int]:
    return (value, value) if isinstance(value, int) else tuple(value)


def _conv_apply(x: Tensor, weight: Tensor, bias: Optional[Tensor], conf: Dict[str, Any]) -> Tensor:
    if conf["kind"] == "linear":
        return F.linear(x, weight, bias)
    tap = _center_tap(x, weight, conf)
    if tap is not None:
        # On a 1x1 input the convolution is a matrix product with its centre tap (or a
        # per-channel scale, depthwise): much faster than the convolution kernels.
        flat = x.reshape(x.shape[0], x.shape[1])
        center = weight[:, :, tap[0], tap[1]]
        if conf["groups"] == 1:
            return F.linear(flat, center, bias).view(x.shape[0], -1, 1, 1)
        if conf["groups"] == x.shape[1] == weight.shape[0]:
            out = flat * center[:, 0]
            return (out if bias is None else out + bias).view(x.shape[0], -1, 1, 1)
    return _CONV[conf["dim"]](
        x, weight, bias, conf["stride"], conf["padding"], conf["dilation"], conf["groups"]
    )


def bilinear_rule(
    x: Tensor,
    dx: Optional[Tensor],
    weight: Tensor,
    d_weight: Optional[Tensor],
    bias: Optional[Tensor],
    d_bias: Optional[Tensor],
    conf: Dict[str, Any],
) -> Tuple[Tensor, Optional[Tensor]]:
    """``y = W·x + b`` and ``dy = W·dx + δW·x + δb`` for a convolution or linear layer.

    Without gradients the primal and tangent inputs go through ``W`` in one call
    (batch-concatenated: one larger kernel instead of two). With gradients the three
    products stay separate, so the backward computes only what ``δ`` needs (no
    gradient for the primal half). Concatenating ``[dx, x]`` along channels against
    ``[W, δW]`` was measured too and was slower on CPU (ResNet-18: 3.7x vs 2.7x a plain
    forward).
    """
    has_weight_tangent = d_weight is not None
    fuse = not torch.is_grad_enabled() or not (
        (dx is not None and dx.requires_grad) or (has_weight_tangent and d_weight.requires_grad)
    )
    if dx is None:
        y = _conv_apply(x, weight, bias, conf)
        if not has_weight_tangent:
            return y, (None if d_bias is None else d_bias.expand_as(y))
        return y, _conv_apply(x, d_weight, d_bias, conf)
    if fuse:
        both = _conv_apply(torch.cat([x, dx], 0), weight, None, conf)
        y, dy = both[: x.shape[0]], both[x.shape[0]:]
        if bias is not None:
            y = y + (bias if conf["kind"] == "linear" else bias.view(1, -1, *([1] * conf["dim"])))
    else:
        y = _conv_apply(x, weight, bias, conf)
        dy = _conv_apply(dx, weight, None, conf)
    if has_weight_tangent:
        dy = dy + _conv_apply(x, d_weight, d_bias, conf)
    elif d_bias is not None:
        dy = dy + (d_bias if conf["kind"] == "linear" else d_bias.view(1, -1, *([1] * conf["dim"])))
    return y, dy


def batchnorm_rule(
    x: Tensor,
    dx: Optional[Tensor],
    mean: Tensor,
    var: Tensor,
    weight: Optional[Tensor],
    d_weight: Optional[Tensor],
    bias: Optional[Tensor],
    d_bias: Optional[Tensor],
    eps: float,
) -> Tuple[Tensor, Optional[Tensor]]:
    """BatchNorm on running statistics: an affine map of ``x`` that is also affine in
    ``(γ, β)``, so ``dy = γ/σ·dx + δγ·x̂ + δβ``. The ``dx`` term is a product with a
    constant (autograd keeps the per-channel scale, not ``dx``); the ``δγ`` term is one
    batch_norm kernel on ``x``."""
    y = F.batch_norm(x, mean, var, weight, bias, False, 0.0, eps)
    terms = []
    if dx is not None:
        scale = torch.rsqrt(var + eps)
        if weight is not None:
            scale = scale * weight
        terms.append(dx * scale.view(1, -1, *([1] * (x.dim() - 2))))
    if d_weight is not None:
        terms.append(F.batch_norm(x, mean, var, d_weight, d_bias, False, 0.0, eps))
        d_bias = None
    if d_bias is not None:
        terms.append(d_bias.view(1, -1, *([1] * (x.dim() - 2))).expand_as(y))
    return y, _add_tangents(*terms)


FOLD_MAX_WEIGHT_RATIO = 0.5
"""Fold BatchNorm into a convolution's tangent weights (inference) only when the weight
has at most this many elements per element of the layer's input batch (folding costs
passes over the weights, and saves passes over the activations). Folded weights are not
cached across calls: a cache keyed on tensor versions would miss changes made through
``.data``, and a stale base point is a silent wrong answer."""


def _needs_grad(*tensors: Optional[Tensor]) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _same_format(t: Tensor, like: Tensor) -> Tensor:
    """``t`` with the strides of ``like``: a weight computed from others must keep the
    layout of the network's own weight, or the convolution may take a much slower
    kernel (measured: 10x for a channels-last depthwise convolution)."""
    if t.stride() == like.stride():
        return t
    out = torch.empty_like(like, dtype=t.dtype)
    return out.copy_(t)


def fold_batchnorm_into_tangent(
    conv: Tuple[Tensor, Optional[Tensor], Optional[Tensor], Optional[Tensor]],
    norm: Tuple[Tensor, Tensor, Optional[Tensor], Optional[Tensor], Optional[Tensor], Optional[Tensor]],
    eps: float,
) -> Tuple[Tensor, Optional[Tensor], Optional[Tensor]]:
    """Weights of the tangent of ``BN(conv(·))``: ``(s·W, s·δW + (δγ/σ)·W, offset)`` with
    ``s = γ/σ`` and ``offset = s·δb + δβ + (δγ/σ)(b − μ)`` (None where a term is absent)."""
    weight, d_weight, bias, d_bias = conv
    mean, var, gamma, d_gamma, _, d_beta = norm
    inv = torch.rsqrt(var + eps)
    scale = inv if gamma is None else gamma * inv
    shape = (-1,) + (1,) * (weight.dim() - 1)
    weight_x: Optional[Tensor] = None
    if d_weight is not None:
        weight_x = d_weight * scale.view(shape)
    if d_gamma is not None:
        gamma_term = weight * (d_gamma * inv).view(shape)
        weight_x = gamma_term if weight_x is None else weight_x + gamma_term
    offsets = []
    if d_bias is not None:
        offsets.append(d_bias * scale)
    if d_beta is not None:
        offsets.append(d_beta)
    if d_gamma is not None:
        offsets.append(d_gamma * inv * ((bias if bias is not None else 0.0) - mean))
    weight_dx = _same_format(weight * scale.view(shape), weight)
    return weight_dx, None if weight_x is None else _same_format(weight_x, weight), _add_tangents(*offsets)


def conv_batchnorm_rule(
    x: Tensor,
    dx: Optional[Tensor],
    conv: Tuple[Tensor, Optional[Tensor], Optional[Tensor], Optional[Tensor]],
    conf: Dict[str, Any],
    norm: Tuple[Tensor, Tensor, Optional[Tensor], Optional[Tensor], Optional[Tensor], Optional[Tensor]],
    eps: float,
) -> Tuple[Tensor, Optional[Tensor]]:
    """A convolution followed by BatchNorm on running statistics, with the BatchNorm
    folded into the tangent's weights (:func:`fold_batchnorm_into_tangent`):
    ``dy = conv(dx, s·W) + conv(x, s·δW + (δγ/σ)·W) + offset``.

    Two convolutions and no elementwise BatchNorm pass on the tangent. The primal is the
    unfused ``BN(conv(x, W) + b)``, so ``f_w`` is exactly the network's own output.
    """
    weight, _, bias, _ = conv
    mean, var, gamma, _, beta, _ = norm
    z = _conv_apply(x, weight, bias, conf)
    y = F.batch_norm(z, mean, var, gamma, beta, False, 0.0, eps)
    weight_dx, weight_x, offset = fold_batchnorm_into_tangent(conv, norm, eps)
    terms = []
    if dx is not None:
        terms.append(_conv_apply(dx, weight_dx, offset, conf))
        offset = None
    if weight_x is not None:
        terms.append(_conv_apply(x, weight_x, offset, conf))
        offset = None
    if offset is not None:
        terms.append(offset.view(1, -1, *([1] * conf["dim"])).expand_as(y))
    return y, _add_tangents(*terms)


def layer_norm_rule(
    x: Tensor,
    dx: Optional[Tensor],
    normalized_shape: Sequence[int],
    weight: Optional[Tensor],
    d_weight: Optional[Tensor],
    bias: Optional[Tensor],
    d_bias: Optional[Tensor],
    eps: float,
) -> Tuple[Tensor, Optional[Tensor]]:
    """LayerNorm: ``dy = γ·rstd·(dx − mean(dx) − x̂·mean(dx·x̂)) + δγ·x̂ + δβ``.

    The Jacobian of the normalisation, ``rstd·(I − 1/n − x̂x̂ᵀ/n)``, is symmetric, so its
    product with ``dx`` is LayerNorm's own backward kernel applied to ``dx`` (one fused
    pass instead of five)."""
    x_hat, mean, rstd = aten.native_layer_norm(x, list(normalized_shape), None, None, eps)
    y = x_hat
    if weight is not None:
        y = y * weight
    if bias is not None:
        y = y + bias
    terms = []
    if dx is not None:
        d_hat = aten.native_layer_norm_backward(
            dx, x, list(normalized_shape), mean, rstd, None, None, [True, False, False]
        )[0]
        terms.append(d_hat if weight is None else d_hat * weight)
    if d_weight is not None:
        terms.append(x_hat * d_weight)
    if d_bias is not None:
        terms.append(d_bias.expand_as(y))
    return y, _add_tangents(*terms)


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
    d_scores = _add_tangents(
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
    return out, _add_tangents(*terms)


def _silu_slope(x: Tensor) -> Tensor:
    # aten.silu_backward has no derivative of its own, so a training step could not
    # differentiate through it: the slope σ(x)(1 + x(1 − σ(x))) written out instead.
    s = torch.sigmoid(x)
    return s * (1 + x * (1 - s))


# activation name -> (primal function, tangent(dx, x, y, kwargs))
_ACTIVATIONS: Dict[str, Tuple[Callable, Callable]] = {
    "relu": (F.relu, lambda dx, x, y, kw: aten.threshold_backward(dx, y, 0)),
    "hardtanh": (
        lambda x, min_val=-1.0, max_val=1.0, **_: F.hardtanh(x, min_val, max_val),
        lambda dx, x, y, kw: aten.hardtanh_backward(dx, x, kw.get("min_val", -1.0), kw.get("max_val", 1.0)),
    ),
    "relu6": (F.relu6, lambda dx, x, y, kw: aten.hardtanh_backward(dx, x, 0.0, 6.0)),
    "silu": (F.silu, lambda dx, x, y, kw: dx * _silu_slope(x)),
    "gelu": (
        lambda x, approximate="none", **_: F.gelu(x, approximate=approximate),
        lambda dx, x, y, kw: aten.gelu_backward(dx, x, approximate=kw.get("approximate", "none")),
    ),
    "sigmoid": (torch.sigmoid, lambda dx, x, y, kw: aten.sigmoid_backward(dx, y)),
    "tanh": (torch.tanh, lambda dx, x, y, kw: aten.tanh_backward(dx, y)),
    "hardswish": (F.hardswish, lambda dx, x, y, kw: aten.hardswish_backward(dx, x)),
    # aten.hardsigmoid_backward has no derivative of its own: the slope written out
    "hardsigmoid": (F.hardsigmoid, lambda dx, x, y, kw: dx * ((x > -3.0) & (x < 3.0)).to(dx.dtype) / 6.0),
}

_ACTIVATION_MODULES: Dict[type, Callable[[nn.Module], Tuple[str, Dict[str, Any]]]] = {
    nn.ReLU: lambda m: ("relu", {}),
    nn.ReLU6: lambda m: ("relu6", {}),
    nn.Hardtanh: lambda m: ("hardtanh", {"min_val": m.min_val, "max_val": m.max_val}),
    nn.SiLU: lambda m: ("silu", {}),
    nn.GELU: lambda m: ("gelu", {"approximate": m.approximate}),
    nn.Sigmoid: lambda m: ("sigmoid", {}),
    nn.Tanh: lambda m: ("tanh", {}),
    nn.Hardswish: lambda m: ("hardswish", {}),
    nn.Hardsigmoid: lambda m: ("hardsigmoid", {}),
}

_ACTIVATION_FUNCTIONS: Dict[Any, str] = {}
for _name in ("relu", "relu6", "silu", "gelu", "hardtanh", "hardswish", "hardsigmoid"):
    _ACTIVATION_FUNCTIONS[getattr(F, _name)] = _name
for _name in ("relu", "sigmoid", "tanh"):
    _ACTIVATION_FUNCTIONS[getattr(torch, _name)] = _name
    _ACTIVATION_FUNCTIONS[getattr(F, _name, None)] = _name
_ACTIVATION_FUNCTIONS.pop(None, None)
_ACTIVATION_FUNCTIONS[F.relu_] = "relu"
_ACTIVATION_FUNCTIONS[torch.relu_] = "relu"
_ACTIVATION_METHODS = {"relu": "relu", "relu_": "relu", "sigmoid": "sigmoid", "tanh": "tanh"}

_IDENTITY_MODULES = (nn.Identity, nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout)

_POOL_MODULES = {
    nn.AdaptiveAvgPool1d: lambda m: (F.adaptive_avg_pool1d, (m.output_size,), {}),
    nn.AdaptiveAvgPool2d: lambda m: (F.adaptive_avg_pool2d, (m.output_size,), {}),
    nn.AdaptiveAvgPool3d: lambda m: (F.adaptive_avg_pool3d, (m.output_size,), {}),
    nn.AvgPool1d: lambda m: (F.avg_pool1d, (m.kernel_size, m.stride, m.padding, m.ceil_mode, m.count_include_pad), {}),
    nn.AvgPool2d: lambda m: (
        F.avg_pool2d, (m.kernel_size, m.stride, m.padding, m.ceil_mode, m.count_include_pad, m.divisor_override), {}
    ),
    nn.Flatten: lambda m: (torch.flatten, (m.start_dim, m.end_dim), {}),
    nn.MaxPool2d: lambda m: ("max_pool2d", (m.kernel_size, m.stride, m.padding, m.dilation, m.ceil_mode), {}),
}

# Operations linear in their first tensor argument (the others must carry no tangent).
_LINEAR_FUNCTIONS = {
    torch.flatten, torch.reshape, torch.permute, torch.transpose, torch.squeeze, torch.unsqueeze,
    torch.mean, torch.sum, torch.chunk, torch.split, torch.unbind, torch.narrow, torch.select,
    torch.neg, operator.neg, operator.getitem, torch.roll, torch.movedim,
    F.adaptive_avg_pool1d, F.adaptive_avg_pool2d, F.adaptive_avg_pool3d,
    F.avg_pool1d, F.avg_pool2d, F.avg_pool3d, F.dropout, F.dropout1d, F.dropout2d, F.dropout3d,
    F.pixel_shuffle, F.pixel_unshuffle, F.interpolate,
    torch.nn.functional.adaptive_avg_pool2d,
}
_LINEAR_METHODS = {
    "view", "reshape", "flatten", "permute", "transpose", "contiguous", "squeeze", "unsqueeze",
    "expand", "expand_as", "view_as", "reshape_as", "mean", "sum", "chunk", "split", "unbind",
    "narrow", "select", "clone", "neg", "repeat", "t", "flip", "roll", "movedim", "unflatten",
}
_NO_TANGENT_METHODS = {"size", "dim", "numel", "type_as", "to", "float", "double", "half"}
_NO_TANGENT_FUNCTIONS = {getattr, len, torch.numel}
_ADD_FUNCTIONS = {operator.add, operator.iadd, torch.add}
_ADD_METHODS = {"add", "add_", "__add__", "__iadd__", "__radd__"}
_SUB_FUNCTIONS = {operator.sub, operator.isub, torch.sub}
_SUB_METHODS = {"sub", "sub_", "__sub__", "__isub__"}
_MUL_FUNCTIONS = {operator.mul, operator.imul, torch.mul}
_MUL_METHODS = {"mul", "mul_", "__mul__", "__imul__", "__rmul__"}
_DIV_FUNCTIONS = {operator.truediv, operator.itruediv, torch.div}
_DIV_METHODS = {"div", "div_", "__truediv__", "__itruediv__"}
_CAT_FUNCTIONS = {torch.cat, torch.stack, torch.concat}
_MATMUL_FUNCTIONS = {torch.matmul, operator.matmul, torch.bmm, torch.mm}
_MATMUL_METHODS = {"matmul", "bmm", "mm", "__matmul__"}
_SOFTMAX_FUNCTIONS = {F.softmax, torch.softmax}


# --------------------------------------------------------------------------------------
# The plan
# --------------------------------------------------------------------------------------


@dataclass
class _Ref:
    index: int


@dataclass
class _Step:
    op: str  # how to evaluate (see TangentPlan._run_step)
    target: Any
    args: Any
    kwargs: Dict[str, Any]
    extra: Dict[str, Any] = field(default_factory=dict)


def _subst(value: Any, table: List[Any], tangent: bool = False) -> Any:
    """``value`` with every reference replaced by its entry of ``table``. With
    ``tangent=True`` (the tangent table) constants become None: they have no tangent."""
    if isinstance(value, _Ref):
        return table[value.index]
    if isinstance(value, (list, tuple)):
        items = [_subst(v, table, tangent) for v in value]
        return items if isinstance(value, list) else tuple(items)
    if isinstance(value, dict):
        return {k: _subst(v, table, tangent) for k, v in value.items()}
    if tangent:
        return None
    if isinstance(value, slice):
        return slice(_subst(value.start, table), _subst(value.stop, table), _subst(value.step, table))
    return value


def _subst_tangent(value: Any, table: List[Any]) -> Any:
    return _subst(value, table, tangent=True)


def tree_flatten(value: Any) -> Tuple[List[Any], Any]:
    """Leaves of nested lists/tuples/dicts (None is a leaf) and the structure."""
    if isinstance(value, (list, tuple)):
        leaves: List[Any] = []
        specs = []
        for v in value:
            sub, spec = tree_flatten(v)
            leaves.extend(sub)
            specs.append((len(sub), spec))
        return leaves, (type(value), specs)
    if isinstance(value, dict):
        leaves, spec = tree_flatten(list(value.values()))
        return leaves, (dict, (list(value.keys()), spec))
    return [value], None


def tree_unflatten(leaves: List[Any], spec: Any) -> Any:
    """Inverse of :func:`tree_flatten`."""
    if spec is None:
        return leaves[0]
    kind, inner = spec
    if kind is dict:
        keys, list_spec = inner
        return dict(zip(keys, tree_unflatten(leaves, list_spec)))
    out, start = [], 0
    for count, sub in inner:
        out.append(tree_unflatten(leaves[start:start + count], sub))
        start += count
    return out if kind is list else tuple(out)


def _resolve_attr(model: nn.Module, target: str) -> Any:
    obj: Any = model
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


class TangentPlan:
    """A traced network evaluated as (primal, tangent) pairs: ``f_w(x) + J_w f(x)·δ``.

    Built by :func:`build_plan`; used by :class:`~avalanche_tmc.tangent.TangentModel`
    (``implementation="fast"``). ``fallback_ops`` lists the operations evaluated with
    ``torch.func.jvp`` because no rule covers them (for information).
    """

    def __init__(self, steps: List[_Step], output: Any, linearized: Sequence[str], aliases: Dict[str, str]):
        self.steps = steps
        self.output = output
        self.linearized = tuple(linearized)
        self.aliases = aliases  # second name of a shared (tied) parameter -> its first name
        self.fallback_ops = [self._describe(s) for s in steps if s.extra.get("rule") in ("jvp_module", "jvp")]

    @staticmethod
    def _describe(step: _Step) -> str:
        target = step.target
        return target if isinstance(target, str) else getattr(target, "__name__", repr(target))

    def __call__(self, model: nn.Module, x: Tensor, tangents: Mapping[str, Tensor]) -> Tensor:
        """``f_w(x) + J_w f(x)·δ`` for ``model`` (the traced network) and ``δ`` given
        as linearized parameter name -> tensor."""
        if self.aliases:  # a tied parameter gets its tangent under every name it is used by
            tangents = dict(tangents)
            tangents.update({a: tangents[c] for a, c in self.aliases.items() if c in tangents})
        primal: List[Any] = [None] * len(self.steps)
        tangent: List[Any] = [None] * len(self.steps)
        for i, step in enumerate(self.steps):
            primal[i], tangent[i] = self._run_step(step, model, x, tangents, primal, tangent)
        out, d_out = _subst(self.output, primal), _subst_tangent(self.output, tangent)
        if not isinstance(out, Tensor):
            raise TypeError(
                f"TangentModel needs a model that returns one tensor of logits, got {type(out).__name__}."
            )
        return out if d_out is None else out + d_out

    # ------------------------------------------------------------------ one step
    def _run_step(self, step, model, x, tangents, primal, tangent) -> Tuple[Any, Any]:
        op = step.op
        if op == "input":
            return x, None
        if op == "constant":
            return step.target, None
        if op == "attr":
            value = _resolve_attr(model, step.target)
            return value, tangents.get(step.target)
        args = _subst(step.args, primal)
        kwargs = _subst(step.kwargs, primal)
        d_args = _subst_tangent(step.args, tangent)
        d_kwargs = _subst_tangent(step.kwargs, tangent)
        if op == "module":
            return self._run_module(step, model, args, kwargs, d_args, d_kwargs, tangents)
        return self._run_call(step, args, kwargs, d_args, d_kwargs)

    def _module_tangents(self, step: _Step, tangents: Mapping[str, Tensor]) -> Dict[str, Tensor]:
        return {local: tangents[full] for local, full in step.extra["params"] if full in tangents}

    def _run_conv_batchnorm(self, step, model, x, dx, tangents):
        conv_name, conf, norm = step.extra["conv"], step.extra["conf"], step.extra["norm"]
        conv = _resolve_attr(model, conv_name)
        prefix = conv_name + "."
        if conf.get("same"):
            x = _pad_same(x, conf)
            dx = None if dx is None else _pad_same(dx, conf)
        conv_values = (conv.weight, tangents.get(prefix + "weight"), conv.bias, tangents.get(prefix + "bias"))
        if norm[0] == "module":
            bn = _resolve_attr(model, norm[1])
            p = norm[1] + "."
            values = (
                bn.running_mean, bn.running_var, bn.weight, tangents.get(p + "weight"), bn.bias,
                tangents.get(p + "bias"),
            )
            eps = bn.eps
        else:  # F.batch_norm(input, mean, var, weight, bias, training, momentum, eps) on attributes
            _, names, eps = norm
            got = {k: (_resolve_attr(model, n) if n is not None else None) for k, n in names.items()}
            d_got = {k: (tangents.get(n) if n is not None else None) for k, n in names.items()}
            values = (got["mean"], got["var"], got["weight"], d_got["weight"], got["bias"], d_got["bias"])
        if _needs_grad(dx, *conv_values[1::2], values[3], values[5]):
            # Training: the unfused rules measured faster (autograd through the folded
            # weights costs more than the BatchNorm passes it saves).
            z, dz = bilinear_rule(x, dx, *conv_values, conf)
            return batchnorm_rule(z, dz, *values, eps)
        if conv_values[0].numel() > FOLD_MAX_WEIGHT_RATIO * x.numel():
            # Folding rebuilds weights larger than the activations it saves passes over
            # (e.g. ResNet's late layers on small images).
            z, dz = bilinear_rule(x, dx, *conv_values, conf)
            return batchnorm_rule(z, dz, *values, eps)
        return conv_batchnorm_rule(x, dx, conv_values, conf, values, eps)

    def _run_module(self, step, model, args, kwargs, d_args, d_kwargs, tangents):
        if step.extra["rule"] == "conv_bn":
            return self._run_conv_batchnorm(step, model, args[0], d_args[0], tangents)
        module = _resolve_attr(model, step.target) if step.target else model
        rule = step.extra["rule"]
        d_params = self._module_tangents(step, tangents)
        x = args[0] if args else None
        dx = d_args[0] if d_args else None
        if rule == "bilinear":
            conf = step.extra["conf"]
            if conf.get("same"):
                x = _pad_same(x, conf)
                dx = None if dx is None else _pad_same(dx, conf)
            return bilinear_rule(
                x, dx, module.weight, d_params.get("weight"), module.bias, d_params.get("bias"), conf
            )
        if rule == "batchnorm":
            return batchnorm_rule(
                x, dx, module.running_mean, module.running_var, module.weight, d_params.get("weight"),
                module.bias, d_params.get("bias"), module.eps,
            )
        if rule == "layer_norm":
            return layer_norm_rule(
                x, dx, module.normalized_shape, module.weight, d_params.get("weight"), module.bias,
                d_params.get("bias"), module.eps,
            )
        if rule == "activation":
            name, kw = step.extra["activation"](module)
            return _activation(name, x, dx, kw)
        if rule == "identity":
            return x, dx
        if rule == "pool":
            fn, fargs, fkw = step.extra["pool"](module)
            if fn == "max_pool2d":
                return _max_pool2d(x, dx, *fargs)
            y = fn(x, *fargs, **fkw)
            return y, (None if dx is None else fn(dx, *fargs, **fkw))
        # jvp_module: the module evaluated whole under torch.func.jvp
        flat, spec = tree_flatten((args, kwargs))
        d_flat, _ = tree_flatten((d_args, d_kwargs))
        if not d_params and all(t is None for t in d_flat):
            return module(*args, **kwargs), None
        names = list(d_params)
        positions = [i for i, t in enumerate(d_flat) if t is not None]
        own = dict(module.named_parameters())

        def f(*values: Tensor):
            inputs = list(flat)
            for i, v in zip(positions, values[len(names):]):
                inputs[i] = v
            call_args, call_kwargs = tree_unflatten(inputs, spec)
            return functional_call(module, dict(zip(names, values[: len(names)])), call_args, call_kwargs)

        primals = tuple(own[n] for n in names) + tuple(flat[i] for i in positions)
        tangents_in = tuple(d_params[n] for n in names) + tuple(d_flat[i] for i in positions)
        return jvp(f, primals, tangents_in)

    def _run_call(self, step, args, kwargs, d_args, d_kwargs):
        target, op = step.target, step.op
        if op == "method":
            fn = getattr(args[0], target)
        else:
            fn = target
        rule = step.extra["rule"]
        flat_d, _ = tree_flatten((d_args, d_kwargs))
        if all(t is None for t in flat_d) or rule == "no_tangent":
            if op == "method" and target.endswith("_") and not target.startswith("__"):
                fn = getattr(args[0], target[:-1])  # never modify a stored primal in place
            value = fn(*args[1:], **kwargs) if op == "method" else fn(*args, **kwargs)
            return value, None
        if rule == "activation":
            return _activation(step.extra["activation"], args[0], d_args[0], kwargs, args[1:])
        if rule == "add":
            y = args[0] + args[1]
            return y, _broadcast_sum(y, d_args[0], d_args[1], sign=1.0)
        if rule == "sub":
            y = args[0] - args[1]
            return y, _broadcast_sum(y, d_args[0], d_args[1], sign=-1.0)
        if rule == "mul":
            a, b = args[0], args[1]
            y = a * b
            da, db = d_args[0], d_args[1]
            terms = [da * b if da is not None else None, a * db if db is not None else None]
            return y, _expand_to(_add_tangents(*terms), y)
        if rule == "div":
            a, b = args[0], args[1]
            y = a / b
            if d_args[1] is not None:
                return self._jvp_call(fn, op, args, kwargs, d_args, d_kwargs)
            return y, _expand_to(d_args[0] / b, y)
        if rule == "matmul" and len(args) == 2 and not kwargs:
            a, b = args
            da, db = d_args
            return a @ b, _add_tangents(None if da is None else da @ b, None if db is None else a @ db)
        if rule == "softmax" and not d_kwargs and all(t is None for t in tree_flatten(d_args[1:])[0]):
            dim = kwargs.get("dim", args[1] if len(args) > 1 else None)
            if dim is not None and kwargs.keys() <= {"dim"}:
                y = torch.softmax(args[0], dim)
                weighted = y * d_args[0]
                return y, weighted - y * weighted.sum(dim, keepdim=True)
        if rule == "cat":
            tensors = args[0]
            d_tensors = [t if t is not None else torch.zeros_like(p) for p, t in zip(tensors, d_args[0])]
            return fn(tensors, *args[1:], **kwargs), fn(d_tensors, *args[1:], **kwargs)
        if rule == "linear_in_first":
            others = tree_flatten((d_args[1:], d_kwargs))[0]
            if all(t is None for t in others):
                if op == "method":
                    y = getattr(args[0], _out_of_place(target))(*args[1:], **kwargs)
                    dy = getattr(d_args[0], _out_of_place(target))(*args[1:], **kwargs)
                else:
                    y = fn(*args, **kwargs)
                    dy = fn(d_args[0], *args[1:], **kwargs)
                return y, dy
        if rule == "bilinear":
            try:
                return _bilinear_call(step.extra["conf"], args, kwargs, d_args, d_kwargs)
            except _UseJvp:
                pass
        if rule == "batchnorm":
            bn = _batchnorm_call(args, kwargs, d_args, d_kwargs)
            if bn is not None:
                return bn
        if rule == "layer_norm":
            return _layer_norm_call(args, kwargs, d_args, d_kwargs)
        if rule == "max_pool2d" and not kwargs.get("return_indices") and len(args) < 7:
            names = ["kernel_size", "stride", "padding", "dilation", "ceil_mode"]
            values = {"stride": None, "padding": 0, "dilation": 1, "ceil_mode": False}
            values.update(dict(zip(names, args[1:])))
            values.update({k: v for k, v in kwargs.items() if k in names})
            return _max_pool2d(args[0], d_args[0], *(values[n] for n in names))
        if rule == "attention":
            attention = _attention_call(args, kwargs, d_args, d_kwargs)
            if attention is not None:
                return attention
        return self._jvp_call(fn, op, args, kwargs, d_args, d_kwargs)

    @staticmethod
    def _jvp_call(fn, op, args, kwargs, d_args, d_kwargs):
        call_args = args[1:] if op == "method" else args
        d_call = d_args[1:] if op == "method" else d_args
        if op == "method":
            method = fn.__name__
            target_name = _out_of_place(method)
            first = [args[0]]
            first_d = [d_args[0]]

            def call(self_value, *rest, **kw):
                return getattr(self_value, target_name)(*rest, **kw)

            flat, spec = tree_flatten((first + list(call_args), kwargs))
            d_flat, _ = tree_flatten((first_d + list(d_call), d_kwargs))
            fn_of = call
        else:
            flat, spec = tree_flatten((list(call_args), kwargs))
            d_flat, _ = tree_flatten((list(d_call), d_kwargs))
            fn_of = fn
        positions = [i for i, t in enumerate(d_flat) if t is not None]

        def f(*values: Tensor):
            inputs = list(flat)
            for i, v in zip(positions, values):
                inputs[i] = v
            a, kw = tree_unflatten(inputs, spec)
            return fn_of(*a, **kw)

        return jvp(f, tuple(flat[i] for i in positions), tuple(d_flat[i] for i in positions))


def _out_of_place(method: str) -> str:
    if method.endswith("_") and not method.startswith("__"):
        return method[:-1]
    if method.startswith("__i"):
        return "__" + method[3:]
    return method


def _expand_to(t: Optional[Tensor], like: Tensor) -> Optional[Tensor]:
    if t is None or t.shape == like.shape:
        return t
    return t.expand_as(like)


def _broadcast_sum(y: Tensor, da: Optional[Tensor], db: Optional[Tensor], sign: float) -> Optional[Tensor]:
    if db is not None and sign < 0:
        db = -db
    return _expand_to(_add_tangents(da, db), y)


def _activation(name: str, x: Tensor, dx: Optional[Tensor], kw: Dict[str, Any], extra_args=()) -> Tuple[Tensor, Any]:
    primal_fn, tangent_fn = _ACTIVATIONS[name]
    kw = {k: v for k, v in kw.items() if k != "inplace"}
    if name == "hardtanh" and extra_args:
        kw = dict(zip(("min_val", "max_val"), extra_args[:2]), **kw)
    elif name == "gelu" and extra_args:
        kw = {"approximate": extra_args[0], **kw}
    y = primal_fn(x, **kw)
    if dx is None:
        return y, None
    return y, tangent_fn(dx, x, y, kw)


def _max_pool2d(x, dx, kernel_size, stride, padding, dilation, ceil_mode):
    y, indices = F.max_pool2d(x, kernel_size, stride, padding, dilation, ceil_mode, return_indices=True)
    if dx is None:
        return y, None
    flat = dx.flatten(2)
    dy = flat.gather(2, indices.flatten(2)).view_as(y)
    return y, dy


def _conv_conf_of(module: nn.Module) -> Dict[str, Any]:
    if isinstance(module, nn.Linear):
        return {"kind": "linear"}
    if module.padding_mode != "zeros":
        raise TracingError("padding modes other than zeros use the generic path")
    same = _is_timm_conv2d_same(module)
    return {
        "kind": "conv",
        "dim": len(module.kernel_size),
        "stride": module.stride,
        "padding": (0,) * len(module.kernel_size) if same else module.padding,
        "dilation": module.dilation,
        "groups": module.groups,
        "same": same,
        "kernel_size": module.kernel_size,
    }


_CONV_FUNCTION_DIMS = {F.conv1d: 1, F.conv2d: 2, F.conv3d: 3}


def _bind(names: Sequence[str], args, kwargs, d_args, d_kwargs, only_named: bool = False):
    """Primal and tangent values of a call's arguments by parameter name."""
    values = dict(zip(names, args))
    values.update({k: v for k, v in kwargs.items() if not only_named or k in names})
    d_values = dict(zip(names, d_args))
    d_values.update({k: v for k, v in d_kwargs.items() if not only_named or k in names})
    return values, d_values


def _bilinear_call(conf_dim, args, kwargs, d_args, d_kwargs):
    names = ["input", "weight", "bias"]
    if conf_dim == 0:
        values, d_values = _bind(names, args, kwargs, d_args, d_kwargs, only_named=True)
        conf = {"kind": "linear"}
    else:
        names = names + ["stride", "padding", "dilation", "groups"]
        values, d_values = _bind(names, args, kwargs, d_args, d_kwargs)
        padding = values.get("padding", 0)
        if isinstance(padding, str):
            raise _UseJvp()
        conf = {
            "kind": "conv",
            "dim": conf_dim,
            "stride": values.get("stride", 1),
            "padding": padding,
            "dilation": values.get("dilation", 1),
            "groups": values.get("groups", 1),
        }
    return bilinear_rule(
        values["input"], d_values.get("input"), values["weight"], d_values.get("weight"),
        values.get("bias"), d_values.get("bias"), conf,
    )


class _UseJvp(Exception):
    pass


def _batchnorm_call(args, kwargs, d_args, d_kwargs):
    names = ["input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps"]
    values, d_values = _bind(names, args, kwargs, d_args, d_kwargs)
    if values.get("training", False) or values.get("running_mean") is None or values.get("running_var") is None:
        return None
    if d_values.get("running_mean") is not None or d_values.get("running_var") is not None:
        return None
    return batchnorm_rule(
        values["input"], d_values.get("input"), values["running_mean"], values["running_var"],
        values.get("weight"), d_values.get("weight"), values.get("bias"), d_values.get("bias"),
        values.get("eps", 1e-5),
    )


def _layer_norm_call(args, kwargs, d_args, d_kwargs):
    names = ["input", "normalized_shape", "weight", "bias", "eps"]
    values, d_values = _bind(names, args, kwargs, d_args, d_kwargs)
    return layer_norm_rule(
        values["input"], d_values.get("input"), values["normalized_shape"], values.get("weight"),
        d_values.get("weight"), values.get("bias"), d_values.get("bias"), values.get("eps", 1e-5),
    )


def _attention_call(args, kwargs, d_args, d_kwargs):
    names = ["query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa"]
    values, d_values = _bind(names, args, kwargs, d_args, d_kwargs)
    if values.get("dropout_p", 0.0) or values.get("enable_gqa", False) or d_values.get("attn_mask") is not None:
        return None
    return attention_rule(
        values["query"], values["key"], values["value"], d_values.get("query"), d_values.get("key"),
        d_values.get("value"), values.get("attn_mask"), values.get("is_causal", False), values.get("scale"),
    )


_BINARY_RULES = (
    ("add", _ADD_METHODS, _ADD_FUNCTIONS),
    ("sub", _SUB_METHODS, _SUB_FUNCTIONS),
    ("mul", _MUL_METHODS, _MUL_FUNCTIONS),
    ("div", _DIV_METHODS, _DIV_FUNCTIONS),
)
_METHOD_RULES = (
    (_NO_TANGENT_METHODS, "no_tangent"), (_LINEAR_METHODS, "linear_in_first"), (_MATMUL_METHODS, "matmul"),
    ({"softmax"}, "softmax"),
)
_FUNCTION_RULES = (
    (_NO_TANGENT_FUNCTIONS, "no_tangent"), (_CAT_FUNCTIONS, "cat"), (_LINEAR_FUNCTIONS, "linear_in_first"),
    (_MATMUL_FUNCTIONS, "matmul"), (_SOFTMAX_FUNCTIONS, "softmax"), ({F.batch_norm}, "batchnorm"),
    ({F.layer_norm}, "layer_norm"), ({F.max_pool2d, torch.max_pool2d}, "max_pool2d"),
    ({F.scaled_dot_product_attention}, "attention"),
)


def _classify_call(node: fx.Node) -> Dict[str, Any]:
    """The rule of a call_function / call_method node (``jvp``: the fallback)."""
    target, is_method = node.target, node.op == "call_method"
    activations = _ACTIVATION_METHODS if is_method else _ACTIVATION_FUNCTIONS
    if target in activations:
        return {"rule": "activation", "activation": activations[target]}
    for rule, methods, functions in _BINARY_RULES:
        if target in (methods if is_method else functions):
            return {"rule": rule if len(node.args) == 2 and not node.kwargs else "jvp"}
    for targets, rule in _METHOD_RULES if is_method else _FUNCTION_RULES:
        if target in targets:
            return {"rule": rule}
    if not is_method and target is F.linear:
        return {"rule": "bilinear", "conf": 0}
    if not is_method and target in _CONV_FUNCTION_DIMS:
        return {"rule": "bilinear", "conf": _CONV_FUNCTION_DIMS[target]}
    return {"rule": "jvp"}


def _classify_module(module: nn.Module) -> Dict[str, Any]:
    if _has_own_rule(module):
        if isinstance(module, _CONV_MODULES + (nn.Linear,)):
            try:
                return {"rule": "bilinear", "conf": _conv_conf_of(module)}
            except TracingError:
                return {"rule": "jvp_module"}
        if isinstance(module, _BN_MODULES):
            if module.running_mean is None or module.running_var is None:
                return {"rule": "jvp_module"}
            return {"rule": "batchnorm"}
        if isinstance(module, nn.LayerNorm):
            return {"rule": "layer_norm"}
        if type(module) in _ACTIVATION_MODULES:
            return {"rule": "activation", "activation": _ACTIVATION_MODULES[type(module)]}
        if type(module) in _IDENTITY_MODULES:
            return {"rule": "identity"}
        if type(module) in _POOL_MODULES:
            return {"rule": "pool", "pool": _POOL_MODULES[type(module)]}
    return {"rule": "jvp_module"}


def _is_in_place(node: fx.Node, model: nn.Module) -> bool:
    if node.op == "call_method":
        return node.target.endswith("_") and not node.target.startswith("__") or node.target.startswith("__i")
    if node.op == "call_function":
        name = getattr(node.target, "__name__", "")
        return (
            node.target in (operator.iadd, operator.isub, operator.imul, operator.itruediv)
            or bool(node.kwargs.get("inplace"))
            or (name.endswith("_") and not name.startswith("__"))
        )
    if node.op == "call_module":
        return bool(getattr(model.get_submodule(node.target), "inplace", False))
    return False


def _check_in_place(graph: fx.Graph, model: nn.Module) -> None:
    """The plan evaluates in-place operations out of place; that is only right when
    nothing reads the mutated tensor afterwards except through the operation's result."""
    order = {node: i for i, node in enumerate(graph.nodes)}
    for node in graph.nodes:
        if not _is_in_place(node, model):
            continue
        if not node.users:
            raise TracingError(f"in-place operation {node.target} whose result is unused")
        mutated = node.args[0] if node.args else None
        if isinstance(mutated, fx.Node) and any(
            user is not node and order[user] > order[node] for user in mutated.users
        ):
            raise TracingError(f"tensor read after the in-place operation {node.target}")


def _count_uses(steps: List[_Step], output: Any) -> List[int]:
    uses = [0] * len(steps)

    def visit(value: Any) -> None:
        if isinstance(value, _Ref):
            uses[value.index] += 1
        elif isinstance(value, (list, tuple)):
            for v in value:
                visit(v)
        elif isinstance(value, dict):
            for v in value.values():
                visit(v)
        elif isinstance(value, slice):
            visit([value.start, value.stop, value.step])

    for step in steps:
        visit(step.args)
        visit(step.kwargs)
    visit(output)
    return uses


def _batchnorm_function_spec(step: _Step, steps: List[_Step]) -> Optional[Tuple[Any, Dict[str, Optional[str]], float]]:
    """Names of ``F.batch_norm(input, mean, var, weight, bias, False, momentum, eps)``
    arguments when every tensor is a model attribute and it runs on running statistics."""
    names = ["input", "mean", "var", "weight", "bias", "training", "momentum", "eps"]
    kw_alias = {"running_mean": "mean", "running_var": "var"}
    values = dict(zip(names, step.args))
    values.update({kw_alias.get(k, k): v for k, v in step.kwargs.items()})
    if values.get("training", False) is not False or not isinstance(values.get("input"), _Ref):
        return None
    out: Dict[str, Optional[str]] = {}
    for key in ("mean", "var", "weight", "bias"):
        value = values.get(key)
        if value is None and key in ("weight", "bias"):
            out[key] = None
        elif isinstance(value, _Ref) and steps[value.index].op == "attr":
            out[key] = steps[value.index].target
        else:
            return None
    eps = values.get("eps", 1e-5)
    return values["input"], out, eps if isinstance(eps, float) else 1e-5


def _fuse_conv_batchnorm(steps: List[_Step], output: Any, model: nn.Module) -> None:
    """Merge each convolution whose only user is a BatchNorm on running statistics
    into one ``conv_bn`` step (see :func:`conv_batchnorm_rule`)."""
    uses = _count_uses(steps, output)
    for i, step in enumerate(steps):
        rule = step.extra.get("rule")
        if step.op == "module" and rule == "batchnorm":
            if len(step.args) != 1 or step.kwargs or not isinstance(step.args[0], _Ref):
                continue
            source = step.args[0]
            norm: Any = ("module", step.target)
        elif step.op == "function" and rule == "batchnorm":
            spec = _batchnorm_function_spec(step, steps)
            if spec is None:
                continue
            source, names, eps = spec
            norm = ("function", names, eps)
        else:
            continue
        conv_step = steps[source.index]
        if (
            conv_step.op != "module"
            or conv_step.extra.get("rule") != "bilinear"
            or conv_step.extra["conf"]["kind"] != "conv"
            or uses[source.index] != 1
            or len(conv_step.args) != 1
            or conv_step.kwargs
        ):
            continue
        params = list(conv_step.extra["params"])
        if norm[0] == "module":
            params += step.extra["params"]
        steps[i] = _Step(
            "module", step.target if norm[0] == "module" else conv_step.target, conv_step.args, {},
            {"rule": "conv_bn", "conv": conv_step.target, "conf": conv_step.extra["conf"], "norm": norm,
             "params": params},
        )
        steps[source.index] = _Step("constant", None, (), {})  # computed inside the fused step


def build_plan(model: nn.Module, linearized: Sequence[str]) -> TangentPlan:
    """Trace ``model`` (in eval mode) into a :class:`TangentPlan` for the given
    linearized parameter names. Raises :class:`TracingError` when the network cannot be
    traced (the caller then uses the generic ``torch.func.jvp`` path)."""
    tracer = _FallbackTracer(_RULE_MODULES)
    was_training = model.training
    model.eval()
    try:
        graph = tracer.trace(model)
    except Exception as err:  # noqa: BLE001 - any tracing failure: generic path
        raise TracingError(f"torch.fx could not trace {type(model).__name__}: {err}") from err
    finally:
        model.train(was_training)
    _check_in_place(graph, model)
    for node in reversed(list(graph.nodes)):
        if node.op not in ("placeholder", "output") and not node.users:
            graph.erase_node(node)
    first_name: Dict[int, str] = {}
    aliases: Dict[str, str] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        if id(param) in first_name:
            aliases[name] = first_name[id(param)]
        else:
            first_name[id(param)] = name
    linearized_set = set(linearized) | {a for a, c in aliases.items() if c in linearized}
    param_names = {n for n, _ in model.named_parameters(remove_duplicate=False)}
    index: Dict[fx.Node, int] = {}
    steps: List[_Step] = []
    output: Any = None
    placeholders = 0

    def ref(arg: Any) -> Any:
        return fx.node.map_arg(arg, lambda n: _Ref(index[n]))

    for node in graph.nodes:
        if node.op == "output":
            output = ref(node.args[0])
            continue
        if node.op == "placeholder":
            if placeholders == 0:
                steps.append(_Step("input", None, (), {}))
            else:
                if not node.args:
                    raise TracingError("the network takes more than one required input")
                steps.append(_Step("constant", node.args[0], (), {}))
            placeholders += 1
        elif node.op == "get_attr":
            try:
                value = _resolve_attr(model, node.target)
                steps.append(_Step("attr", node.target, (), {}))
            except AttributeError:
                value = _resolve_attr(tracer.root, node.target)
                steps.append(_Step("constant", value, (), {}))
        elif node.op == "call_module":
            module = model.get_submodule(node.target)
            extra = _classify_module(module)
            prefix = node.target + "." if node.target else ""
            extra["params"] = [
                (local, prefix + local) for local, _ in module.named_parameters() if prefix + local in linearized_set
            ]
            steps.append(_Step("module", node.target, ref(node.args), ref(dict(node.kwargs)), extra))
        elif node.op in ("call_function", "call_method"):
            extra = _classify_call(node)
            op = "function" if node.op == "call_function" else "method"
            steps.append(_Step(op, node.target, ref(node.args), ref(dict(node.kwargs)), extra))
        else:  # pragma: no cover - fx has no other node kinds
            raise TracingError(f"unexpected fx node {node.op}")
        index[node] = len(steps) - 1
    _fuse_conv_batchnorm(steps, output, model)
    used_params = {s.target for s in steps if s.op == "attr" and s.target in param_names}
    for s in steps:
        if s.op == "module":
            prefix = s.target + "." if s.target else ""
            used_params.update(prefix + n for n, _ in model.get_submodule(s.target).named_parameters())
            if s.extra.get("rule") == "conv_bn":
                conv_prefix = s.extra["conv"] + "."
                used_params.update(conv_prefix + n for n, _ in model.get_submodule(s.extra["conv"]).named_parameters())
    missing = set(linearized) - {aliases.get(n, n) for n in used_params}
    if missing:
        raise TracingError(f"the trace does not use linearized parameters {sorted(missing)[:3]}")
    return TangentPlan(steps, output, linearized, aliases)
