"""What the tangent package's tests share: the fast path against the generic
``torch.func.jvp`` path on the same network and δ, in float64."""

import copy

import torch
from torch import nn

from avalanche_tmc import TangentModel
from tests.helpers import random_delta


def both(net: nn.Module, **kwargs):
    """(generic, fast) tangent models of ``net`` (float64)."""
    net = net.double()
    generic = TangentModel(copy.deepcopy(net), implementation="generic", **kwargs)
    fast = TangentModel(copy.deepcopy(net), implementation="fast", **kwargs)
    assert fast.implementation == "fast" and generic.implementation == "generic"
    return generic, fast


def assert_same(
    generic: TangentModel, fast: TangentModel, x: torch.Tensor, scale: float = 0.1, seed: int = 0, quick=False
):
    """Same outputs and same gradients w.r.t. δ, at δ = 0 and at a random δ, with the
    wrapper in train and in eval mode (``quick``: random δ, train mode only)."""
    gen = torch.Generator().manual_seed(seed)
    for delta_scale in (scale,) if quick else (0.0, scale):
        delta = {k: v * delta_scale for k, v in random_delta(generic, 1.0, seed).items()}
        generic.load_delta(delta)
        fast.load_delta(delta)
        for train in (True,) if quick else (True, False):
            generic.train(train)
            fast.train(train)
            for tm in (generic, fast):
                for p in tm.delta_parameters():
                    p.grad = None
            out_g, out_f = generic(x), fast(x)
            torch.testing.assert_close(out_f, out_g, rtol=1e-10, atol=1e-12)
            weights = torch.randn(out_g.shape, generator=gen, dtype=out_g.dtype)
            (out_g * weights).sum().backward()
            (out_f * weights).sum().backward()
            for name, pg, pf in zip(generic.linearized_names, generic.delta_parameters(), fast.delta_parameters()):
                assert pf.grad is not None, name
                torch.testing.assert_close(pf.grad, pg.grad, rtol=1e-9, atol=1e-11, msg=name)
    tangent = generic(x) - generic.base_forward(x)
    assert tangent.abs().max() > 1e-4  # the comparison is not vacuous


def random_bn(net: nn.Module) -> nn.Module:
    """``net`` with random BatchNorm running statistics (BatchNorm2d layers)."""
    gen = torch.Generator().manual_seed(0)
    for module in net.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.copy_(torch.randn(module.num_features, generator=gen) * 0.1)
            module.running_var.copy_(torch.rand(module.num_features, generator=gen) + 0.5)
    return net
