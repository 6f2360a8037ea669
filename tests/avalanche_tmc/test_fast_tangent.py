"""The fast path (traced plan) against the generic torch.func.jvp path, in float64.

Each case builds the same network twice, once per implementation, loads the same δ and
compares outputs and gradients w.r.t. δ: layer by layer (one rule each), on whole
torchvision/timm networks, and on networks that need the per-operation fallback.
"""

import copy

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from avalanche_tmc import TangentModel
from avalanche_tmc.fast_tangent import TracingError
from tests.helpers import TinyResNet, TinyTransformer, random_delta, randomize_batchnorm


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


@pytest.mark.parametrize("make", [lambda: randomize_batchnorm(TinyResNet()), TinyTransformer])
def test_tiny_networks(make):
    torch.manual_seed(1)
    generic, fast = both(make())
    assert_same(generic, fast, torch.randn(4, 1, 8, 8, dtype=torch.float64))


def test_linearize_subset_and_start_at():
    torch.manual_seed(2)
    net = randomize_batchnorm(TinyResNet())
    generic, fast = both(net, start_at="block")
    assert_same(generic, fast, torch.randn(3, 1, 8, 8, dtype=torch.float64))
    generic, fast = both(randomize_batchnorm(TinyResNet()), linearize="head")
    assert_same(generic, fast, torch.randn(3, 1, 8, 8, dtype=torch.float64))


def _random_bn(net: nn.Module) -> nn.Module:
    gen = torch.Generator().manual_seed(0)
    for module in net.modules():
        if isinstance(module, nn.BatchNorm2d):
            module.running_mean.copy_(torch.randn(module.num_features, generator=gen) * 0.1)
            module.running_var.copy_(torch.rand(module.num_features, generator=gen) + 0.5)
    return net


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
    generic, fast = both(_random_bn(net), num_classes=7)
    assert fast._plan.fallback_ops == [], fast._plan.fallback_ops
    assert_same(generic, fast, torch.randn(2, 3, 32, 32, dtype=torch.float64), scale=0.01, quick=True)


class DataDependent(nn.Module):
    """A forward fx cannot trace at the top level (control flow on tensor values)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        if x.sum() > 0:
            return self.fc(x)
        return self.fc(-x)


class MutatesInPlace(nn.Module):
    """An in-place update whose result is not used: evaluating it out of place would be wrong."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        h = self.fc(x)
        h.mul_(2.0)
        return h


@pytest.mark.parametrize("cls", [DataDependent, MutatesInPlace])
def test_untraceable_networks_use_the_generic_path(cls):
    with pytest.raises(TracingError):
        TangentModel(cls(), implementation="fast")
    tm = TangentModel(cls())
    assert tm.implementation == "generic"
    x = torch.randn(2, 4)
    torch.testing.assert_close(tm(x), tm.model(x))  # δ = 0: the base network


def test_untraceable_submodule_is_evaluated_whole():
    class Shapes(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(4, 4)

        def forward(self, x):
            h = self.fc(x)
            if h.sum() > 0:  # control flow on values: fx cannot trace it
                return torch.tanh(h)
            return torch.sigmoid(h)

    torch.manual_seed(4)
    net = nn.Sequential(nn.Linear(4, 4), Shapes(), nn.Linear(4, 2))
    net[0].bias.data.fill_(5.0)  # the tanh branch
    generic, fast = both(net)
    assert fast._plan.fallback_ops == ["1"]
    assert_same(generic, fast, torch.randn(3, 4, dtype=torch.float64))


def test_plan_sees_later_changes_of_the_base_weights_and_statistics():
    torch.manual_seed(5)
    generic, fast = both(randomize_batchnorm(TinyResNet()))
    new_state = randomize_batchnorm(TinyResNet(), seed=9).double().state_dict()
    generic.model.load_state_dict(new_state)
    fast.model.load_state_dict(new_state)
    assert_same(generic, fast, torch.randn(2, 1, 8, 8, dtype=torch.float64))


def test_deepcopy_and_switching_implementation():
    torch.manual_seed(6)
    net = randomize_batchnorm(TinyResNet()).double()
    tm = TangentModel(net)
    tm.load_delta(random_delta(tm, 0.1, 1))
    clone = copy.deepcopy(tm)
    x = torch.randn(2, 1, 8, 8, dtype=torch.float64)
    fast_out = clone(x)
    clone.use_implementation("generic")
    assert clone.implementation == "generic"
    torch.testing.assert_close(fast_out, clone(x), rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="implementation"):
        TangentModel(TinyResNet(), implementation="compiled")


def test_channels_last_memory_format_gives_the_same_numbers():
    torch.manual_seed(7)
    generic, fast = both(_random_bn(__import__("torchvision").models.mobilenet_v2()), num_classes=5)
    fast.to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    assert_same(generic, fast, x.contiguous(memory_format=torch.channels_last), scale=0.01, quick=True)


def test_channels_last_option_converts_weights_delta_and_inputs():
    torch.manual_seed(9)
    net = _random_bn(__import__("torchvision").models.mobilenet_v2()).double()
    generic = TangentModel(copy.deepcopy(net), num_classes=5, implementation="generic")
    fast = TangentModel(copy.deepcopy(net), num_classes=5, channels_last=True)
    weight = fast.model.features[0][0].weight  # the 3x3 stem convolution
    assert weight.is_contiguous(memory_format=torch.channels_last) and not weight.is_contiguous()
    assert fast.delta_params[0].stride() == dict(fast.model.named_parameters())[fast.linearized_names[0]].stride()
    assert_same(generic, fast, torch.randn(2, 3, 32, 32, dtype=torch.float64), scale=0.01, quick=True)


class Tied(nn.Module):
    """Two layers sharing one weight (as tied embeddings and output layers do)."""

    def __init__(self):
        super().__init__()
        self.first = nn.Linear(4, 4)
        self.second = nn.Linear(4, 4)
        self.second.weight = self.first.weight
        self.head = nn.Linear(4, 3)

    def forward(self, x):
        return self.head(torch.tanh(self.second(torch.tanh(self.first(x)))))


def test_tied_parameters_get_their_tangent_at_every_use():
    torch.manual_seed(10)
    generic, fast = both(Tied())
    assert fast._plan.aliases == {"second.weight": "first.weight"}
    assert_same(generic, fast, torch.randn(3, 4, dtype=torch.float64))
