"""Rules of the layers bilinear in input and weights: convolutions and linear layers
(``nn.Conv1d/2d/3d``, ``nn.Linear``, timm's ``Conv2dSame``, ``F.conv*d``, ``F.linear``)."""

from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._ops import needs_grad, same_format
from ..registry import Call, NotApplicable, RuleResult, register_rule
from ._dense import dense_rule
from ._padding import is_timm_conv2d_same, pad_same, zero_pad

__all__ = [
    "bilinear_rule", "bilinear_module", "bilinear_function", "conv_apply", "pad_same", "zero_pad", "conv_conf_of",
    "is_timm_conv2d_same", "bind", "conv_accumulate", "conv_input_grad", "fold_affine", "conv_tangent_forward",
    "conv_tangent", "tangent_node_applies",
]

_CONV = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}
_CONV_FUNCTION_DIMS = {F.conv1d: 1, F.conv2d: 2, F.conv3d: 3}


def _pair(value: Any) -> Tuple[int, int]:
    return (value, value) if isinstance(value, int) else tuple(value)


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


def conv_apply(x: Tensor, weight: Tensor, bias: Optional[Tensor], conf: Dict[str, Any]) -> Tensor:
    """The convolution or linear layer ``conf`` (see :func:`conv_conf_of`) of ``x``."""
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


def _tuple(value: Any, dim: int) -> List[int]:
    return [value] * dim if isinstance(value, int) else list(value)


def _mkldnn_accumulates(out: Tensor, x: Tensor, weight: Tensor, bias: Optional[Tensor], conf: Dict[str, Any]) -> bool:
    """Whether oneDNN can add a 2-D convolution of ``x`` into ``out`` (its "add" post-op):
    CPU float32 tensors in one layout (contiguous or channels-last alike; a weight and bias
    that are dense in one of them), numeric padding."""
    if not (torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled):
        return False
    if conf["dim"] != 2 or isinstance(conf["padding"], str) or out.requires_grad:
        return False
    tensors = (out, x, weight) if bias is None else (out, x, weight, bias)
    if any(t.device.type != "cpu" or t.dtype != torch.float32 for t in tensors):
        return False
    if (bias is not None and not bias.is_contiguous()) or not (
        weight.is_contiguous() or weight.is_contiguous(memory_format=torch.channels_last)
    ):
        return False
    for fmt in (torch.channels_last, torch.contiguous_format):
        if out.is_contiguous(memory_format=fmt) and x.is_contiguous(memory_format=fmt):
            return True
    return False


def conv_accumulate(out: Optional[Tensor], x: Tensor, weight: Tensor, bias: Optional[Tensor],
                    conf: Dict[str, Any]) -> Tensor:
    """``out + conv(x, weight, bias)``, written into ``out`` (a tensor this rule made and no
    one else holds; None: the convolution alone). On CPU float32 the convolution adds into
    ``out`` itself (oneDNN's post-op): no second activation-sized tensor and no pass of
    its own for the sum."""
    if out is None:
        return conv_apply(x, weight, bias, conf)
    if _center_tap(x, weight, conf) is None and _mkldnn_accumulates(out, x, weight, bias, conf):
        return torch.ops.mkldnn._convolution_pointwise_.binary(
            out, x, weight, bias, _tuple(conf["padding"], 2), _tuple(conf["stride"], 2),
            _tuple(conf["dilation"], 2), conf["groups"], "add", None, None, [], None,
        )
    return out.add_(conv_apply(x, weight, bias, conf))


def conv_input_grad(grad: Tensor, weight: Tensor, shape: Sequence[int], strides: Sequence[int],
                    conf: Dict[str, Any]) -> Tensor:
    """The gradient w.r.t. the input of ``conv(input, weight)`` (an input of this shape and
    layout: its values are not needed, so the forward need not keep it)."""
    dim = conf["dim"]
    fake = torch.empty_strided(shape, strides, dtype=grad.dtype, device=grad.device)  # never read
    return torch.ops.aten.convolution_backward(
        grad, fake, weight, None, _tuple(conf["stride"], dim), _tuple(conf["padding"], dim),
        _tuple(conf["dilation"], dim), False, [0] * dim, conf["groups"], (True, False, False),
    )[0]


def _per_channel(v: Tensor, dim: int) -> Tensor:
    return v.view(-1, *([1] * dim))


def fold_affine(
    weight: Tensor, d_weight: Optional[Tensor], d_bias: Optional[Tensor], affine: Optional[Tuple[Tensor, ...]],
    d_gamma: Optional[Tensor], d_beta: Optional[Tensor],
) -> Tuple[Tensor, Optional[Tensor], Optional[Tensor]]:
    """Weights of the tangent of ``A(conv(·))`` for a per-output-channel affine map ``A``
    (BatchNorm on running statistics: ``affine = (s, 1/σ, b − μ)``, ``s = γ/σ``; None: no
    map): ``(s·W, s·δW + (δγ/σ)·W, s·δb + δβ + (δγ/σ)(b − μ))``, None where a term is absent."""
    if affine is None:
        return weight, d_weight, d_bias
    scale, inv, shift = affine
    shape = (-1,) + (1,) * (weight.dim() - 1)
    weight_x: Optional[Tensor] = None
    if d_weight is not None:
        weight_x = d_weight * scale.view(shape)
    if d_gamma is not None:
        gamma_term = weight * (d_gamma * inv).view(shape)
        weight_x = gamma_term if weight_x is None else weight_x.add_(gamma_term)
    offset: Optional[Tensor] = None if d_bias is None else d_bias * scale
    if d_beta is not None:
        offset = d_beta.clone() if offset is None else offset + d_beta
    if d_gamma is not None:
        gamma_offset = d_gamma * inv * shift
        offset = gamma_offset if offset is None else offset + gamma_offset
    weight_dx = same_format(weight * scale.view(shape), weight)
    return weight_dx, None if weight_x is None else same_format(weight_x, weight), offset


def conv_tangent_forward(
    x: Tensor, dx: Optional[Tensor], weight: Tensor, d_weight: Optional[Tensor], d_bias: Optional[Tensor],
    conf: Dict[str, Any], affine: Optional[Tuple[Tensor, ...]] = None, d_gamma: Optional[Tensor] = None,
    d_beta: Optional[Tensor] = None,
) -> Optional[Tensor]:
    """``A'·(conv(dx, W) + conv(x, δW) + δb) + δA(conv(x, W))`` without autograd: the folded
    weights (:func:`fold_affine`), then one convolution added into the other."""
    weight_dx, weight_x, offset = fold_affine(weight, d_weight, d_bias, affine, d_gamma, d_beta)
    out = None if weight_x is None else conv_apply(x, weight_x, offset, conf)
    if dx is not None:
        out = conv_accumulate(out, dx, weight_dx, offset if out is None else None, conf)
    if out is None and offset is not None:
        probe = conv_apply(x[:1], weight, None, conf)  # the output's shape
        return _per_channel(offset, conf["dim"]).expand(x.shape[0], *probe.shape[1:])
    return out


class _ConvTangent(torch.autograd.Function):
    """The tangent of a convolution (optionally followed by a per-channel affine map: BatchNorm
    on running statistics) as one autograd node: forward :func:`conv_tangent_forward`;
    backward the input gradient through the folded weight (``dx`` is not kept) and the
    weight gradient from ``x``, mapped back to ``δW``, ``δb``, ``δγ``, ``δβ``."""

    @staticmethod
    def forward(ctx: Any, x: Tensor, dx: Optional[Tensor], d_weight: Optional[Tensor], d_bias: Optional[Tensor],
                d_gamma: Optional[Tensor], d_beta: Optional[Tensor], weight: Tensor,
                affine: Optional[Tuple[Tensor, ...]], conf: Dict[str, Any]) -> Tensor:
        out = conv_tangent_forward(x, dx, weight, d_weight, d_bias, conf, affine, d_gamma, d_beta)
        ctx.conf, ctx.affine = conf, affine
        ctx.dx_layout = None if dx is None else (dx.shape, dx.stride())
        ctx.d_weight_stride = None if d_weight is None else d_weight.stride()
        ctx.save_for_backward(x if (d_weight is not None or d_gamma is not None) else None, weight)
        return out

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> Tuple[Optional[Tensor], ...]:
        x, weight = ctx.saved_tensors
        conf, affine = ctx.conf, ctx.affine
        dim = conf["dim"]
        needs = ctx.needs_input_grad
        wshape = (-1,) + (1,) * (weight.dim() - 1)
        grad_dx = grad_w = grad_b = grad_g = grad_beta = None
        if needs[1]:
            weight_dx = weight if affine is None else same_format(weight * affine[0].view(wshape), weight)
            grad_dx = conv_input_grad(grad, weight_dx, *ctx.dx_layout, conf)
        g_weight = None
        if needs[2] or needs[4]:
            g_weight = torch.ops.aten.convolution_backward(
                grad, x, weight, None, _tuple(conf["stride"], dim), _tuple(conf["padding"], dim),
                _tuple(conf["dilation"], dim), False, [0] * dim, conf["groups"], (False, True, False),
            )[1]
        g_sum = grad.sum([0] + list(range(2, grad.dim()))) if (needs[3] or needs[4] or needs[5]) else None
        if affine is None:
            grad_w, grad_b = g_weight, g_sum
        else:
            scale, inv, shift = affine
            if needs[2]:
                grad_w = g_weight * scale.view(wshape)
            if needs[3]:
                grad_b = g_sum * scale
            if needs[4]:
                grad_g = inv * ((weight * g_weight).sum(list(range(1, weight.dim()))) + g_sum * shift)
            if needs[5]:
                grad_beta = g_sum
        if grad_w is not None and ctx.d_weight_stride is not None and grad_w.stride() != ctx.d_weight_stride:
            grad_w = torch.empty_strided(grad_w.shape, ctx.d_weight_stride, dtype=grad_w.dtype,
                                         device=grad_w.device).copy_(grad_w)
        return None, grad_dx, grad_w, grad_b, grad_g, grad_beta, None, None, None


def tangent_node_applies(x: Tensor, weight: Tensor, conf: Dict[str, Any]) -> bool:
    """Whether a training step uses :func:`conv_tangent`'s single autograd node: not under
    autocast (autograd through each dtype conversion instead), and not on a 1x1 input
    (there the forward is a matrix product with the centre tap, whose autograd is cheap;
    the convolution backward kernels measured up to 4 ms for one 5x5 depthwise layer of
    EfficientNet-Lite0 at 32 px)."""
    return not torch.is_autocast_enabled(x.device.type) and _center_tap(x, weight, conf) is None


def conv_tangent(
    x: Tensor, dx: Optional[Tensor], weight: Tensor, d_weight: Optional[Tensor], d_bias: Optional[Tensor],
    conf: Dict[str, Any], affine: Optional[Tuple[Tensor, ...]] = None, d_gamma: Optional[Tensor] = None,
    d_beta: Optional[Tensor] = None,
) -> Optional[Tensor]:
    """The tangent of ``A(conv(x, W) + b)`` (``A``: a per-channel affine map, see
    :func:`fold_affine`, or None): one autograd node when ``δ`` needs gradients
    (:class:`_ConvTangent`: it keeps ``x`` for the weight gradient, never ``dx``, and no
    activation-sized sums or BatchNorm passes), else :func:`conv_tangent_forward`."""
    if needs_grad(dx, d_weight, d_bias, d_gamma, d_beta) and not needs_grad(x):  # (x: an input gradient
        # through conv(x, ·) is not what the node computes; autograd records each operation then)
        return _ConvTangent.apply(x, dx, d_weight, d_bias, d_gamma, d_beta, weight, affine, conf)
    return conv_tangent_forward(x, dx, weight, d_weight, d_bias, conf, affine, d_gamma, d_beta)


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
    (batch-concatenated: one larger kernel instead of two) and ``conv(x, δW)`` is added
    into the tangent half (:func:`conv_accumulate`). With gradients the primal is computed
    alone and a convolution's tangent is one autograd node (:func:`conv_tangent`), so the
    backward computes only what ``δ`` needs and keeps ``x``, not ``dx``. Concatenating
    ``[dx, x]`` along channels against ``[W, δW]`` was measured too and was slower on CPU
    (ResNet-18: 3.7x vs 2.7x a plain forward).
    """
    if conf["kind"] == "linear":
        return dense_rule(x, dx, weight, d_weight, bias, d_bias)
    has_weight_tangent = d_weight is not None
    fuse = not torch.is_grad_enabled() or not (
        (dx is not None and dx.requires_grad) or (has_weight_tangent and d_weight.requires_grad)
    )
    if dx is None:
        y = conv_apply(x, weight, bias, conf)
        if not has_weight_tangent:
            return y, (None if d_bias is None else _channel_vector(d_bias, y, conf).expand_as(y))
        return y, conv_apply(x, d_weight, d_bias, conf)
    if not fuse and tangent_node_applies(x, weight, conf):
        # Training: one autograd node for the tangent (keeps x, not dx; no separate sum).
        return conv_apply(x, weight, bias, conf), conv_tangent(x, dx, weight, d_weight, d_bias, conf)
    if fuse:
        both = conv_apply(torch.cat([x, dx], 0), weight, None, conf)
        y, dy = both[: x.shape[0]], both[x.shape[0]:]
        if bias is not None:
            y = y + _channel_vector(bias, y, conf)
        if has_weight_tangent:  # added into dy, a part of this call's own output
            return y, conv_accumulate(dy, x, d_weight, d_bias, conf)
    else:
        y = conv_apply(x, weight, bias, conf)
        dy = conv_apply(dx, weight, None, conf)
    if has_weight_tangent:
        dy = dy + conv_apply(x, d_weight, d_bias, conf)
    elif d_bias is not None:
        dy = dy + _channel_vector(d_bias, dy, conf)
    return y, dy


def _channel_vector(vector: Tensor, like: Tensor, conf: Dict[str, Any]) -> Tensor:
    """A per-channel ``vector`` shaped to broadcast over ``like`` and in its dtype (under
    autocast a float32 bias beside a bfloat16 output would promote the sum to float32)."""
    return vector.to(like.dtype).view(1, -1, *([1] * conf["dim"]))


def conv_conf_of(module: nn.Module) -> Dict[str, Any]:
    """The configuration of a convolution or linear module that :func:`conv_apply` runs."""
    if isinstance(module, nn.Linear):
        return {"kind": "linear"}
    if module.padding_mode != "zeros":
        raise NotApplicable("padding modes other than zeros use the generic path")
    same = is_timm_conv2d_same(module)
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


@register_rule(nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.Linear, subclasses=True, matches=is_timm_conv2d_same,
               configure=conv_conf_of)
def bilinear_module(call: Call) -> RuleResult:
    """A convolution or linear module (timm's ``Conv2dSame`` padded first)."""
    module, conf = call.fn, call.conf
    d_params = call.param_tangents()
    x, dx = call.first_input()
    if conf.get("same"):
        x = pad_same(x, conf)
        dx = None if dx is None else pad_same(dx, conf)
    return bilinear_rule(x, dx, module.weight, d_params.get("weight"), module.bias, d_params.get("bias"), conf)


def bind(names: Sequence[str], call: Call, only_named: bool = False) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    """Primal and tangent values of a call's arguments by parameter name (``only_named``:
    keyword arguments not in ``names`` are left out)."""
    values = dict(zip(names, call.args))
    values.update({k: v for k, v in call.kwargs.items() if not only_named or k in names})
    d_values = dict(zip(names, call.d_args))
    d_values.update({k: v for k, v in call.d_kwargs.items() if not only_named or k in names})
    return values, d_values


@register_rule(F.linear, F.conv1d, F.conv2d, F.conv3d)
def bilinear_function(call: Call) -> RuleResult:
    """``F.linear`` and ``F.conv1d/2d/3d`` (a string padding such as ``"same"`` goes to jvp)."""
    names = ["input", "weight", "bias"]
    if call.target is F.linear:
        values, d_values = bind(names, call, only_named=True)
        conf: Dict[str, Any] = {"kind": "linear"}
    else:
        names = names + ["stride", "padding", "dilation", "groups"]
        values, d_values = bind(names, call)
        padding = values.get("padding", 0)
        if isinstance(padding, str):
            return None
        conf = {
            "kind": "conv",
            "dim": _CONV_FUNCTION_DIMS[call.target],
            "stride": values.get("stride", 1),
            "padding": padding,
            "dilation": values.get("dilation", 1),
            "groups": values.get("groups", 1),
        }
    return bilinear_rule(
        values["input"], d_values.get("input"), values["weight"], d_values.get("weight"),
        values.get("bias"), d_values.get("bias"), conf,
    )
