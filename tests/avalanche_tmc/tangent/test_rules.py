"""Each registered rule of the fast path against the generic torch.func.jvp path, in float64.

Each case builds the same network twice, once per implementation, loads the same δ and
compares outputs and gradients w.r.t. δ: layer by layer (one rule each), on whole
torchvision/timm networks, and on networks that need the per-operation fallback; and the
registry itself: a registered rule is used, an unregistered operation falls back.
"""

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from avalanche_tmc.tangent import register_rule, registered_rules, unregister_rule
from avalanche_tmc.tangent.registry import module_rule
from tests.avalanche_tmc.tangent.fast_vs_generic import assert_same, both, random_bn
from tests.helpers import random_delta, randomize_batchnorm


class Functional(nn.Module):
    """Operations met as functions and methods in traced forwards."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.scale = nn.Parameter(torch.randn(1, 4, 1, 1))
        self.shift = nn.Parameter(torch.randn(4))
        self.ln_weight = nn.Parameter(torch.randn(6) * 0.2 + 1)
        self.ln_bias = nn.Parameter(torch.randn(6) * 0.2)
        self.bn_weight = nn.Parameter(torch.rand(4) + 0.5)
        self.bn_bias = nn.Parameter(torch.randn(4))
        self.register_buffer("bn_mean", torch.randn(4))
        self.register_buffer("bn_var", torch.rand(4) + 0.5)
        self.fc_weight = nn.Parameter(torch.randn(5, 24) * 0.2)

    def forward(self, x):
        h = self.conv(x)
        h = F.batch_norm(h, self.bn_mean, self.bn_var, self.bn_weight, self.bn_bias, False, 0.1, 1e-5)
        h = h * self.scale + self.shift.view(1, -1, 1, 1)  # broadcasting product and sum
        h = torch.cat([F.relu(h), torch.sigmoid(h) / 2.0], dim=1) - 0.5
        a, b = h.chunk(2, dim=1)
        h = a * b + F.hardtanh(a, -0.5, 0.5) + F.gelu(b, approximate="tanh")
        h = F.max_pool2d(h, 2)
        h = F.avg_pool2d(h, 2).flatten(1)  # (B, 4 * 2 * 2 = 16) for 8x8 inputs
        tokens = h.view(h.shape[0], 4, 4)
        tokens = F.pad(tokens, (1, 1))  # (B, 4, 6)
        tokens = F.layer_norm(tokens, (6,), self.ln_weight, self.ln_bias)
        q, k, v = tokens, tokens * 2.0, torch.tanh(tokens)
        attn = F.scaled_dot_product_attention(q.unsqueeze(1), k.unsqueeze(1), v.unsqueeze(1)).squeeze(1)
        probs = torch.softmax(tokens @ tokens.transpose(-2, -1), dim=-1)
        mixed = (attn + probs @ v).reshape(h.shape[0], -1)
        return F.linear(mixed, self.fc_weight)


LAYERS = {
    "conv": lambda: nn.Sequential(nn.Conv2d(3, 5, 3, stride=2, padding=1), nn.Flatten(), nn.Linear(80, 3)),
    "conv_no_bias_dilated": lambda: nn.Sequential(
        nn.Conv2d(3, 4, 3, dilation=2, bias=False), nn.Flatten(), nn.Linear(64, 3)),
    "depthwise": lambda: nn.Sequential(
        nn.Conv2d(3, 6, 1), nn.Conv2d(6, 6, 3, padding=1, groups=6), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        nn.Linear(6, 3)),
    "grouped": lambda: nn.Sequential(
        nn.Conv2d(3, 6, 1), nn.Conv2d(6, 4, 3, groups=2), nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(16, 3)),
    "conv_on_1x1_input": lambda: nn.Sequential(  # the centre-tap shortcut: dense, depthwise, strided
        nn.AdaptiveAvgPool2d(1), nn.Conv2d(3, 6, 1), nn.Conv2d(6, 6, 3, padding=1, groups=6),
        nn.Conv2d(6, 4, 3, stride=2, padding=1), nn.Conv2d(4, 4, 3, padding=2, dilation=2), nn.Flatten(),
        nn.Linear(4, 3),
    ),
    "conv_same_string": lambda: nn.Sequential(nn.Conv2d(3, 4, 3, padding="same"), nn.Flatten(), nn.Linear(256, 3)),
    "batchnorm": lambda: randomize_batchnorm(
        nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(144, 3))),
    "batchnorm1d": lambda: nn.Sequential(nn.Flatten(), nn.Linear(192, 8), nn.BatchNorm1d(8), nn.Linear(8, 3)),
    "layernorm": lambda: nn.Sequential(nn.Flatten(), nn.Linear(192, 8), nn.LayerNorm(8), nn.Linear(8, 3)),
    "activations": lambda: nn.Sequential(
        nn.Conv2d(3, 4, 1), nn.ReLU(), nn.Conv2d(4, 4, 1), nn.ReLU6(), nn.Conv2d(4, 4, 1), nn.SiLU(),
        nn.Conv2d(4, 4, 1), nn.GELU(), nn.Conv2d(4, 4, 1), nn.Sigmoid(), nn.Conv2d(4, 4, 1), nn.Tanh(),
        nn.Conv2d(4, 4, 1), nn.Hardswish(), nn.Conv2d(4, 4, 1),
        nn.Hardtanh(-0.3, 0.4), nn.Dropout(0.5), nn.AvgPool2d(2), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(16, 3),
    ),
    "inplace_relu": lambda: nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(inplace=True), nn.Flatten(), nn.Linear(144, 3)),
    "functional": Functional,
    "unsupported_layer_falls_back": lambda: nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.ELU(), nn.InstanceNorm2d(4, affine=True), nn.Flatten(), nn.Linear(144, 3)
    ),
}


@pytest.mark.parametrize("name", sorted(LAYERS))
def test_each_rule_matches_the_generic_path(name):
    torch.manual_seed(0)
    generic, fast = both(LAYERS[name]())
    x = torch.randn(3, 3, 8, 8, dtype=torch.float64)
    assert_same(generic, fast, x)


def test_hardsigmoid_trains_where_the_generic_path_cannot():
    """torch.func.jvp through Hardsigmoid cannot be differentiated again
    (aten.hardsigmoid_backward has no derivative); the fast path can (and SiLU, whose
    slope it writes out for the same reason). Its gradient
    w.r.t. δ is Jᵀv, the ordinary gradient of f at w, computed here by autograd."""
    torch.manual_seed(8)
    net = nn.Sequential(
        nn.Conv2d(3, 4, 1), nn.Hardsigmoid(), nn.Conv2d(4, 4, 1), nn.SiLU(), nn.Flatten(), nn.Linear(256, 3)
    ).double()
    generic, fast = both(net)
    x = torch.randn(3, 3, 8, 8, dtype=torch.float64) * 3
    delta = random_delta(fast, 0.1, 2)
    generic.load_delta(delta)
    fast.load_delta(delta)
    out = fast(x)
    with torch.no_grad():  # aten.hardsigmoid_backward rounds its slope 1/6 to float32
        torch.testing.assert_close(out, generic(x), rtol=1e-7, atol=1e-9)
    with pytest.raises(RuntimeError, match="hardsigmoid_backward"):
        generic(x).sum().backward()
    v = torch.randn_like(out)
    (out * v).sum().backward()
    params = [dict(fast.model.named_parameters())[n].detach().requires_grad_() for n in fast.linearized_names]
    base = torch.func.functional_call(fast.model, dict(zip(fast.linearized_names, params)), (x,))
    expected = torch.autograd.grad((base * v).sum(), params)
    for got, want in zip(fast.delta_parameters(), expected):
        torch.testing.assert_close(got.grad, want, rtol=1e-7, atol=1e-9)  # float32 slope, as above


def test_unsupported_operations_are_reported_as_fallbacks():
    _, fast = both(LAYERS["unsupported_layer_falls_back"]())
    assert fast._plan.fallback_ops == ["1", "2"]  # ELU and InstanceNorm run under torch.func.jvp
    _, fast = both(LAYERS["activations"]())
    assert fast._plan.fallback_ops == []


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "tf_efficientnet_lite0", "vit"])
def test_whole_torchvision_and_timm_networks(name):
    import timm
    import torchvision

    torch.manual_seed(3)
    if name == "vit":
        net = timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, depth=2, pretrained=False)
        assert any(isinstance(m, nn.LayerNorm) for m in net.modules())
    elif name == "tf_efficientnet_lite0":
        net = timm.create_model(name, pretrained=False)
    else:
        net = getattr(torchvision.models, name)()
    generic, fast = both(random_bn(net), num_classes=7)
    assert fast._plan.fallback_ops == [], fast._plan.fallback_ops
    assert_same(generic, fast, torch.randn(2, 3, 32, 32, dtype=torch.float64), scale=0.01, quick=True)




# ---------------------------------------------------------------------------- the registry


class Gain(nn.Module):
    """A layer of the user's own: ``x · exp(w)`` (fx would trace into it: a mul and an exp)."""

    def __init__(self, n: int = 4):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(n) * 0.3)

    def forward(self, x):
        return x * torch.exp(self.weight)


def _gain_net():
    return nn.Sequential(nn.Linear(3, 4), Gain(), nn.Tanh(), nn.Linear(4, 2))


class Erf(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        return self.head(torch.erf(self.fc(x)) + self.fc(x).erf())


def test_a_registered_module_rule_is_used_and_matches_the_generic_path():
    calls = []

    @register_rule(Gain)
    def gain_rule(call):
        calls.append(call.target)
        x, dx, scale = call.args[0], call.d_args[0], torch.exp(call.fn.weight)
        d_weight = call.param_tangents().get("weight")
        y = x * scale
        terms = [t for t in (None if dx is None else dx * scale, None if d_weight is None else y * d_weight)
                 if t is not None]
        return y, sum(terms) if terms else None

    try:
        torch.manual_seed(11)
        generic, fast = both(_gain_net())
        assert fast._plan.fallback_ops == []
        assert [s.target for s in fast._plan.steps if s.rule is not None and s.rule.evaluate is gain_rule] == ["1"]
        assert_same(generic, fast, torch.randn(5, 3, dtype=torch.float64))
        assert calls and set(calls) == {"1"}
    finally:
        unregister_rule(Gain)
    _, fast = both(_gain_net())  # unregistered again: traced into, its exp falls back
    assert fast._plan.fallback_ops == ["exp"]


def test_a_registered_function_and_method_rule_is_used_and_matches_the_generic_path():
    calls = []

    @register_rule(torch.erf, "erf")
    def erf_rule(call):
        calls.append(call.op)
        x, dx = call.args[0], call.d_args[0]
        return torch.erf(x), dx * (2 / math.sqrt(math.pi)) * torch.exp(-x * x)

    try:
        torch.manual_seed(12)
        generic, fast = both(Erf())
        assert fast._plan.fallback_ops == []
        assert_same(generic, fast, torch.randn(5, 3, dtype=torch.float64))
        assert set(calls) == {"function", "method"}
    finally:
        unregister_rule(torch.erf, "erf")


def test_an_unregistered_operation_falls_back_to_jvp_and_is_listed():
    torch.manual_seed(13)
    generic, fast = both(Erf())
    assert fast._plan.fallback_ops == ["erf", "erf"]  # torch.erf and Tensor.erf
    assert_same(generic, fast, torch.randn(5, 3, dtype=torch.float64))


def test_a_rule_that_declines_leaves_the_call_to_jvp():
    @register_rule(torch.erf)
    def declining(call):
        return None

    try:
        torch.manual_seed(14)
        generic, fast = both(Erf())
        assert fast._plan.fallback_ops == ["erf"]  # the method; the function has a (declining) rule
        assert_same(generic, fast, torch.randn(5, 3, dtype=torch.float64))
    finally:
        unregister_rule(torch.erf)


def test_registry_lists_rules_and_refuses_ambiguous_registrations():
    entries = {(e.kind, e.target): e.rule for e in registered_rules()}
    assert entries[("module", nn.Conv2d)].name.endswith("linear.bilinear_module")
    assert entries[("function", F.conv2d)].name.endswith("linear.bilinear_function")
    assert entries[("method", "matmul")] is entries[("function", torch.matmul)]
    assert entries[("module", nn.BatchNorm2d)].subclasses and not entries[("module", nn.ReLU)].subclasses
    with pytest.raises(ValueError, match="already has the rule .*override=True"):
        register_rule(nn.Conv2d)(lambda call: None)
    with pytest.raises(TypeError, match="nn.Module subclass"):
        register_rule(int)
    with pytest.raises(TypeError, match="method's name"):
        register_rule(3)
    with pytest.raises(ValueError, match="needs at least one target"):
        register_rule()
    with pytest.raises(ValueError, match="has no registered rule"):
        unregister_rule(torch.erf)
    assert registered_rules()[0].kind == "module-if"  # timm's Conv2dSame, by a predicate


def test_override_replaces_a_rule_and_subclasses_keep_it_only_with_the_stock_forward():
    class Doubled(Gain):
        pass

    class Custom(Gain):
        def forward(self, x):
            return super().forward(x) * 2

    def first(call):
        return None

    def second(call):
        return None

    register_rule(Gain, subclasses=True)(first)
    try:
        register_rule(Gain, override=True, subclasses=True)(second)
        assert module_rule(Gain()).evaluate is second
        assert module_rule(Doubled()).evaluate is second
        assert module_rule(Custom()) is None
    finally:
        unregister_rule(Gain)
    assert module_rule(Gain()) is None


# ---------------------------------------------------------------------------- known defects (kept as they were)


class ConvertsDtype(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 2)

    def forward(self, x):
        return self.fc(x).double()


class PoolsWithIndices(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 2, 1)
        self.pool = nn.MaxPool2d(2, return_indices=True)

    def forward(self, x):
        return self.pool(self.conv(x))[0].flatten(1)


def test_dtype_conversions_keep_the_tangent():
    """(They were evaluated without a tangent: the fast path silently dropped J·δ.)"""
    torch.manual_seed(15)
    generic, fast = both(ConvertsDtype())
    assert_same(generic, fast, torch.randn(4, 3, dtype=torch.float64), quick=True)


def test_max_pool_module_returning_indices():
    """(The rule returned the output alone, so ``[0]`` took the first sample.)"""
    torch.manual_seed(16)
    generic, fast = both(PoolsWithIndices())
    assert_same(generic, fast, torch.randn(2, 3, 4, 4, dtype=torch.float64), quick=True)


class SoftmaxWithKeywords(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 4)

    def forward(self, x):
        h = self.fc(x)
        return F.softmax(h, dim=1) + h.softmax(dim=-1) + torch.softmax(h, 1)


def test_softmax_with_dim_as_keyword_uses_its_rule(monkeypatch):
    """``softmax(x, dim=1)`` went to torch.func.jvp at run time: the keyword's (empty) tangent
    entry looked like a tangent."""
    from avalanche_tmc.tangent import plan

    torch.manual_seed(17)
    generic, fast = both(SoftmaxWithKeywords())

    def refuse(call):
        raise AssertionError(f"{call.target} fell back to torch.func.jvp")

    monkeypatch.setattr(plan, "_jvp_call", refuse)
    assert_same(generic, fast, torch.randn(5, 3, dtype=torch.float64), quick=True)


def test_convolution_with_only_its_bias_linearized_after_an_input_without_tangent():
    """The first convolution (its input carries no tangent) with δ on its bias only: the
    tangent is the bias broadcast over the channels, in training and at inference."""
    from avalanche_tmc import TangentModel

    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(4 * 6 * 6, 3)).double()
    linearize = ["0.bias", "3.weight"]
    fast = TangentModel(net, implementation="fast", linearize=linearize)
    generic = TangentModel(net, implementation="generic", linearize=linearize)
    with torch.no_grad():
        for p in fast.delta_parameters():
            p.normal_()
    generic.load_delta(fast.delta)
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    torch.testing.assert_close(fast(x), generic(x))
    with torch.no_grad():
        torch.testing.assert_close(fast(x), generic(x))
