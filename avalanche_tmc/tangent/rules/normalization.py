"""Rules of the normalisation layers: BatchNorm on running statistics, LayerNorm, and a
convolution followed by BatchNorm (the fused step that
:func:`~avalanche_tmc.tangent.passes.fuse_conv_batchnorm` makes)."""

from typing import Any, Optional, Sequence, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .._ops import add_tangents, needs_grad, resolve_attr
from ..registry import Call, NotApplicable, Rule, RuleResult, register_rule
from ._layernorm import layer_norm_tangent
from .activations import activation_in_place, activation_kwargs
from .conv_linear import bilinear_rule, bind, conv_apply, conv_tangent, fold_affine, pad_same, tangent_node_applies

__all__ = [
    "batchnorm_rule", "layer_norm_rule", "FOLD_MAX_WEIGHT_RATIO", "fold_batchnorm_into_tangent",
    "conv_batchnorm_rule", "CONV_BATCHNORM", "batchnorm_module", "batchnorm_function", "layer_norm_module",
    "layer_norm_function",
]

aten = torch.ops.aten


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
    return y, add_tangents(*terms)


def _running_statistics(module: nn.Module) -> None:
    if module.running_mean is None or module.running_var is None:
        raise NotApplicable("BatchNorm without running statistics normalises by the batch's")


@register_rule(nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, subclasses=True, configure=_running_statistics)
def batchnorm_module(call: Call) -> RuleResult:
    """``nn.BatchNorm1d/2d/3d`` with running statistics (the wrapped network is in eval mode)."""
    module = call.fn
    d_params = call.param_tangents()
    x, dx = call.first_input()
    return batchnorm_rule(
        x, dx, module.running_mean, module.running_var, module.weight, d_params.get("weight"),
        module.bias, d_params.get("bias"), module.eps,
    )


@register_rule(F.batch_norm)
def batchnorm_function(call: Call) -> RuleResult:
    """``F.batch_norm`` on running statistics that carry no tangent (else: jvp)."""
    names = ["input", "running_mean", "running_var", "weight", "bias", "training", "momentum", "eps"]
    values, d_values = bind(names, call)
    if values.get("training", False) or values.get("running_mean") is None or values.get("running_var") is None:
        return None
    if d_values.get("running_mean") is not None or d_values.get("running_var") is not None:
        return None
    return batchnorm_rule(
        values["input"], d_values.get("input"), values["running_mean"], values["running_var"],
        values.get("weight"), d_values.get("weight"), values.get("bias"), d_values.get("bias"),
        values.get("eps", 1e-5),
    )


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
    pass instead of five). Computed by :func:`._layernorm.layer_norm_tangent` where it applies."""
    fast = layer_norm_tangent(x, dx, normalized_shape, weight, d_weight, bias, d_bias, eps)
    if fast is not None:
        return fast
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
    return y, add_tangents(*terms)


@register_rule(nn.LayerNorm, subclasses=True)
def layer_norm_module(call: Call) -> RuleResult:
    """``nn.LayerNorm``."""
    module = call.fn
    d_params = call.param_tangents()
    x, dx = call.first_input()
    return layer_norm_rule(
        x, dx, module.normalized_shape, module.weight, d_params.get("weight"), module.bias,
        d_params.get("bias"), module.eps,
    )


@register_rule(F.layer_norm)
def layer_norm_function(call: Call) -> RuleResult:
    """``F.layer_norm``."""
    names = ["input", "normalized_shape", "weight", "bias", "eps"]
    values, d_values = bind(names, call)
    return layer_norm_rule(
        values["input"], d_values.get("input"), values["normalized_shape"], values.get("weight"),
        d_values.get("weight"), values.get("bias"), d_values.get("bias"), values.get("eps", 1e-5),
    )


FOLD_MAX_WEIGHT_RATIO = 0.5
"""Fold BatchNorm into a convolution's tangent weights (inference and training step alike)
only when the weight has at most this many elements per element of the layer's input
batch (folding costs passes over the weights, and saves passes over the activations;
measured at 112 px: 4 and 32 instead of 0.5 left MobileNetV2 unchanged and made ResNet-18
inference 1.6-1.8x slower). Folded weights are not
cached across calls: a cache keyed on tensor versions would miss changes made through
``.data``, and a stale base point is a silent wrong answer."""


def _batchnorm_affine(
    conv_bias: Optional[Tensor], mean: Tensor, var: Tensor, gamma: Optional[Tensor], eps: float
) -> Tuple[Tensor, Tensor, Tensor]:
    """``(s, 1/σ, b − μ)`` of BatchNorm on running statistics after a convolution with bias
    ``b`` (see :func:`~avalanche_tmc.tangent.rules.conv_linear.fold_affine`)."""
    inv = torch.rsqrt(var + eps)
    return (inv if gamma is None else gamma * inv), inv, (-mean if conv_bias is None else conv_bias - mean)


def _batchnorm_in_place(
    z: Tensor, mean: Tensor, var: Tensor, gamma: Optional[Tensor], beta: Optional[Tensor], eps: float
) -> Tensor:
    """BatchNorm on running statistics written into ``z`` (a convolution's output no one
    else holds; the same numbers as ``F.batch_norm``) where autograd does not record it."""
    if (torch.is_grad_enabled() and z.requires_grad) or torch.is_autocast_enabled(z.device.type):
        return F.batch_norm(z, mean, var, gamma, beta, False, 0.0, eps)
    empty = z.new_empty(0)
    return aten.native_batch_norm.out(
        z, gamma, beta, mean, var, False, 0.0, eps, out=z, save_mean=empty, save_invstd=empty.clone()
    )[0]


def fold_batchnorm_into_tangent(
    conv: Tuple[Tensor, Optional[Tensor], Optional[Tensor], Optional[Tensor]],
    norm: Tuple[Tensor, Tensor, Optional[Tensor], Optional[Tensor], Optional[Tensor], Optional[Tensor]],
    eps: float,
) -> Tuple[Tensor, Optional[Tensor], Optional[Tensor]]:
    """Weights of the tangent of ``BN(conv(·))``: ``(s·W, s·δW + (δγ/σ)·W, offset)`` with
    ``s = γ/σ`` and ``offset = s·δb + δβ + (δγ/σ)(b − μ)`` (None where a term is absent)."""
    weight, d_weight, bias, d_bias = conv
    mean, var, gamma, d_gamma, _, d_beta = norm
    affine = _batchnorm_affine(bias, mean, var, gamma, eps)
    return fold_affine(weight, d_weight, d_bias, affine, d_gamma, d_beta)


def conv_batchnorm_rule(
    x: Tensor,
    dx: Optional[Tensor],
    conv: Tuple[Tensor, Optional[Tensor], Optional[Tensor], Optional[Tensor]],
    conf: Any,
    norm: Tuple[Tensor, Tensor, Optional[Tensor], Optional[Tensor], Optional[Tensor], Optional[Tensor]],
    eps: float,
) -> Tuple[Tensor, Optional[Tensor]]:
    """A convolution followed by BatchNorm on running statistics, with the BatchNorm
    folded into the tangent's weights (:func:`fold_batchnorm_into_tangent`):
    ``dy = conv(dx, s·W) + conv(x, s·δW + (δγ/σ)·W) + offset``, the first convolution
    added into the second's output.

    Two convolutions and no elementwise BatchNorm pass or sum on the tangent; in a training
    step one autograd node (:func:`~avalanche_tmc.tangent.rules.conv_linear.conv_tangent`) that
    keeps only ``x``. The primal is the unfused ``BN(conv(x, W) + b)``, so ``f_w`` is
    exactly the network's own output.
    """
    weight, d_weight, bias, d_bias = conv
    mean, var, gamma, d_gamma, beta, d_beta = norm
    y = _batchnorm_in_place(conv_apply(x, weight, bias, conf), mean, var, gamma, beta, eps)
    affine = _batchnorm_affine(bias, mean, var, gamma, eps)
    return y, conv_tangent(x, dx, weight, d_weight, d_bias, conf, affine, d_gamma, d_beta)


def _conv_batchnorm_step(call: Call) -> RuleResult:
    """The fused step: ``call.conf`` holds the convolution's module name (``"conv"``) and
    configuration (``"conf"``), and the BatchNorm (``"norm"``): ``("module", name)`` or
    ``("function", {"mean"|"var"|"weight"|"bias": attribute name or None}, eps)``."""
    model, tangents = call.model, call.tangents
    x, dx = call.args[0], call.d_args[0]
    conv_name, conf, norm = call.conf["conv"], call.conf["conf"], call.conf["norm"]
    conv = resolve_attr(model, conv_name)
    prefix = conv_name + "."
    if conf.get("same"):
        x = pad_same(x, conf)
        dx = None if dx is None else pad_same(dx, conf)
    conv_values = (conv.weight, tangents.get(prefix + "weight"), conv.bias, tangents.get(prefix + "bias"))
    if norm[0] == "module":
        bn = resolve_attr(model, norm[1])
        p = norm[1] + "."
        values = (
            bn.running_mean, bn.running_var, bn.weight, tangents.get(p + "weight"), bn.bias,
            tangents.get(p + "bias"),
        )
        eps = bn.eps
    else:  # F.batch_norm(input, mean, var, weight, bias, training, momentum, eps) on attributes
        _, names, eps = norm
        got = {k: (resolve_attr(model, n) if n is not None else None) for k, n in names.items()}
        d_got = {k: (tangents.get(n) if n is not None else None) for k, n in names.items()}
        values = (got["mean"], got["var"], got["weight"], d_got["weight"], got["bias"], d_got["bias"])
    if needs_grad(dx, *conv_values[1::2], values[3], values[5]) and not tangent_node_applies(x, conv_values[0], conf):
        z, dz = bilinear_rule(x, dx, *conv_values, conf)  # autograd through each operation
        y, dy = batchnorm_rule(z, dz, *values, eps)
    elif conv_values[0].numel() > FOLD_MAX_WEIGHT_RATIO * x.numel():
        # Folding rebuilds weights larger than the activations it saves passes over
        # (e.g. ResNet's late layers on small images).
        z, dz = bilinear_rule(x, dx, *conv_values, conf)
        y, dy = batchnorm_rule(z, dz, *values, eps)
    else:
        y, dy = conv_batchnorm_rule(x, dx, conv_values, conf, values, eps)
    act = call.conf.get("act")
    if act is None:
        return y, dy
    # y and dy are this step's own tensors: the activation is computed into them
    return activation_in_place(act[2], y, dy, activation_kwargs(act, model))


CONV_BATCHNORM = Rule(_conv_batchnorm_step)
"""The rule of a fused convolution + BatchNorm step (not registered for a target: the
graph pass :func:`~avalanche_tmc.tangent.passes.fuse_conv_batchnorm` places it)."""
