"""The convolution, BatchNorm and clamp rules' speed and memory choices (issue 23), each
against the generic torch.func.jvp path in float64 (outputs and δ-gradients), plus what
they save for the backward."""

import copy

import pytest
import torch
from torch import nn

from avalanche_tmc import TangentModel
from avalanche_tmc.tangent.rules.conv_linear import conv_accumulate, conv_apply
from tests.avalanche_tmc.tangent.fast_vs_generic import assert_same, both, random_bn
from tests.helpers import random_delta, randomize_batchnorm


def _saved_tensors(fn):
    """Every tensor autograd saves while ``fn`` runs."""
    saved = []

    def pack(t):
        saved.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return saved


def test_clamps_at_their_bounds_match_the_generic_path():
    """The ReLU6/Hardtanh tangent reads its slope from the output (min < y < max exactly
    where min < x < max): inputs exactly at the bounds and beyond them."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(2, 3, 1), nn.ReLU6(), nn.Conv2d(3, 3, 1), nn.Hardtanh(-0.5, 0.25),
                        nn.Flatten(), nn.Linear(48, 2))
    generic, fast = both(net)
    x = torch.randn(2, 2, 4, 4, dtype=torch.float64) * 8
    with torch.no_grad():  # the first convolution's outputs hit 0 and 6 exactly
        conv = fast.model[0]
        conv.weight.zero_()
        conv.weight[:, 0, 0, 0] = 1.0
        conv.bias.zero_()
        generic.model.load_state_dict(fast.model.state_dict())
    x[0, 0, 0, :2] = torch.tensor([0.0, 6.0])
    assert_same(generic, fast, x)


def test_the_clamp_tangent_saves_the_output_the_next_layer_saves_anyway():
    torch.manual_seed(1)
    _, fast = both(nn.Sequential(nn.Conv2d(2, 3, 1), nn.ReLU6(), nn.Conv2d(3, 3, 3), nn.Flatten(),
                                 nn.Linear(12, 2)))
    x = torch.randn(2, 2, 4, 4, dtype=torch.float64) * 4
    with torch.no_grad():
        pre = fast.model[0](x)
    post = pre.clamp(0, 6)
    saved = _saved_tensors(lambda: fast(x))
    assert any(t.shape == post.shape and torch.equal(t, post) for t in saved)
    assert not any(t.shape == pre.shape and torch.equal(t, pre) for t in saved)


# ---------------------------------------------------------------------------- the convolution's tangent node


def _conv_bn(conv: nn.Module, bn: nn.Module, tail: int) -> nn.Module:
    if getattr(bn, "affine", False):
        with torch.no_grad():
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.normal_()
    return random_bn(nn.Sequential(nn.Conv2d(3, 4, 1), nn.ReLU(), conv, bn, nn.ReLU6(), nn.Flatten(),
                                   nn.Linear(tail, 3)))


CONV_BN = {
    "dense_3x3_bias": lambda: _conv_bn(nn.Conv2d(4, 6, 3, padding=1), nn.BatchNorm2d(6), 384),
    "depthwise_strided": lambda: _conv_bn(nn.Conv2d(4, 4, 3, stride=2, padding=1, groups=4, bias=False),
                                          nn.BatchNorm2d(4), 64),
    "grouped_dilated": lambda: _conv_bn(nn.Conv2d(4, 6, 3, dilation=2, groups=2), nn.BatchNorm2d(6), 96),
    "batchnorm_without_affine": lambda: _conv_bn(nn.Conv2d(4, 5, 1, bias=False), nn.BatchNorm2d(5, affine=False),
                                                 320),
    "conv_without_batchnorm": lambda: _conv_bn(nn.Conv2d(4, 5, 3, stride=2), nn.Identity(), 45),
}

LINEARIZE = {
    "all": "all",
    "batchnorm_only": lambda n: n.startswith("3."),  # δγ, δβ alone; no tangent enters the convolution
    "conv_only": lambda n: n.startswith("2."),  # δW, δb alone
    "after_the_conv": lambda n: n.startswith(("3.", "6.")),  # dx = 0 into the fused step's convolution
    "before_the_conv": lambda n: n.startswith(("0.", "6.")),  # dx only, no parameter of its own
}


@pytest.mark.parametrize("linearize", sorted(LINEARIZE))
@pytest.mark.parametrize("name", sorted(CONV_BN))
def test_convolution_and_batchnorm_tangents_match_the_generic_path(name, linearize):
    """The fused step's single autograd node (folded weights, the input gradient through
    s·W, the weight gradient mapped back to δW, δb, δγ, δβ) for every subset of δ."""
    if name in ("conv_without_batchnorm", "batchnorm_without_affine") and linearize == "batchnorm_only":
        pytest.skip("no BatchNorm parameters to linearize")
    torch.manual_seed(4)
    generic, fast = both(CONV_BN[name](), linearize=LINEARIZE[linearize])
    assert_same(generic, fast, torch.randn(2, 3, 8, 8, dtype=torch.float64))


def test_convolutions_in_one_and_three_dimensions():
    torch.manual_seed(5)
    net = nn.Sequential(nn.Conv1d(2, 3, 3, padding=1), nn.BatchNorm1d(3), nn.ReLU(), nn.Flatten(), nn.Linear(24, 2))
    generic, fast = both(randomize_batchnorm(net))
    assert_same(generic, fast, torch.randn(3, 2, 8, dtype=torch.float64))
    net = nn.Sequential(nn.Conv3d(2, 3, 3, stride=2), nn.BatchNorm3d(3), nn.Flatten(), nn.Linear(24, 2))
    generic, fast = both(randomize_batchnorm(net))
    assert_same(generic, fast, torch.randn(3, 2, 5, 5, 5, dtype=torch.float64))


def test_the_training_step_keeps_the_convolution_input_not_its_tangent():
    """What a training step saves for a convolution + BatchNorm: its input x (for δW, δγ),
    never the tangent dx (the input gradient needs only the weight) nor the convolution's
    output (δγ's gradient is read from the weight gradient)."""
    torch.manual_seed(6)
    net = randomize_batchnorm(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.Conv2d(4, 4, 3),
                                            nn.BatchNorm2d(4), nn.Flatten(), nn.Linear(144, 2)))
    _, fast = both(net)
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    with torch.no_grad():
        z1 = fast.model[0](x)
        h1 = fast.model[1](z1)
        z2 = fast.model[2](h1)
    saved = [t for t in _saved_tensors(lambda: fast(x)) if t.dim() == 4 and t.shape[0] == 2]
    assert any(torch.equal(t, x) for t in saved if t.shape == x.shape)
    assert any(torch.equal(t, h1) for t in saved if t.shape == h1.shape)
    assert not any(torch.equal(t, z) for z in (z1, z2) for t in saved if t.shape == z.shape)
    assert len(saved) == 2  # x and h1: no tangent-sized tensor


@pytest.mark.parametrize("channels_last", [True, False])
@pytest.mark.parametrize("groups,stride", [(1, 1), (8, 2), (8, 1), (2, 1)])
def test_a_convolution_added_into_its_output_in_float32(groups, stride, channels_last):
    """conv_accumulate (oneDNN's add post-op on CPU float32) against the convolution plus a
    sum, into a fresh tensor and into a batch slice of a larger one (the batched
    inference path writes into its own output)."""
    torch.manual_seed(7)
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    conf = {"kind": "conv", "dim": 2, "stride": (stride, stride), "padding": (1, 1), "dilation": (1, 1),
            "groups": groups}
    x = torch.randn(3, 8, 9, 9).contiguous(memory_format=fmt)
    weight = torch.randn(8, 8 // groups, 3, 3).contiguous(memory_format=fmt)
    bias = torch.randn(8)
    reference = conv_apply(x, weight, bias, conf)
    base = torch.randn(6, *reference.shape[1:]).contiguous(memory_format=fmt)
    expected = base[3:] + reference
    out = conv_accumulate(base[3:], x, weight, bias, conf)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(base[3:], expected, rtol=1e-5, atol=1e-5)  # written in place
    fresh = torch.randn_like(reference)
    torch.testing.assert_close(conv_accumulate(fresh.clone(), x, weight, None, conf), fresh + reference - bias.view(
        1, -1, 1, 1), rtol=1e-5, atol=1e-5)
    assert conv_accumulate(None, x, weight, bias, conf).shape == reference.shape


def test_float32_channels_last_training_matches_float64():
    """The float32 channels-last path (oneDNN kernels, the input gradient of a channels-last
    convolution through an uninitialised stand-in for dx) against float64 numbers; the
    gradient of δW is channels-last like δW."""
    import torchvision

    torch.manual_seed(8)
    net = randomize_batchnorm(torchvision.models.mobilenet_v2(num_classes=5))
    x = torch.randn(2, 3, 32, 32)
    results = {}
    for dtype in (torch.float64, torch.float32):
        tm = TangentModel(copy.deepcopy(net).to(dtype), implementation="fast", channels_last=dtype == torch.float32)
        tm.load_delta({k: v.to(dtype) for k, v in random_delta(tm, 0.01, 3).items()})
        out = tm(x.to(dtype))
        out.square().sum().backward()
        results[dtype] = (out, [p.grad for p in tm.delta_parameters()])
        if dtype == torch.float32:
            for p in tm.delta_parameters():
                if p.dim() == 4:
                    assert p.grad.is_contiguous(memory_format=torch.channels_last)
    out64, grads64 = results[torch.float64]
    out32, grads32 = results[torch.float32]
    torch.testing.assert_close(out32.double(), out64, rtol=1e-4, atol=1e-4)
    for g32, g64 in zip(grads32, grads64):
        torch.testing.assert_close(g32.double(), g64, rtol=2e-3, atol=2e-3 * float(g64.abs().max()))


def test_folded_weights_with_and_without_autograd_agree_and_keep_the_weight_layout():
    from avalanche_tmc.tangent.rules.normalization import fold_batchnorm_into_tangent

    torch.manual_seed(9)
    weight = torch.randn(6, 1, 3, 3).contiguous(memory_format=torch.channels_last)  # depthwise
    parts = [torch.randn_like(weight), torch.randn(6), torch.randn(6)]  # δW, b, δb
    norm = [torch.randn(6), torch.rand(6) + 0.5, torch.rand(6) + 0.5, torch.randn(6), torch.randn(6), torch.randn(6)]
    plain = fold_batchnorm_into_tangent((weight, *parts), tuple(norm), 1e-5)
    tracked = [t.clone().requires_grad_() for t in [parts[0], parts[2], norm[3], norm[5]]]
    with_grad = fold_batchnorm_into_tangent((weight, tracked[0], parts[1], tracked[1]),
                                            (*norm[:3], tracked[2], norm[4], tracked[3]), 1e-5)
    for a, b in zip(plain, with_grad):
        torch.testing.assert_close(a, b.detach())
    assert with_grad[1].requires_grad and with_grad[2].requires_grad
    for folded in plain[:2] + with_grad[:2]:
        assert folded.stride() == weight.stride()


def test_the_input_gradient_through_the_tangent_matches_the_generic_path():
    """An input that requires gradients (saliency, adversarial examples): the tangent's
    convolutions of x are differentiated too, with δ trained or frozen."""
    torch.manual_seed(10)
    net = randomize_batchnorm(nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU6(),
                                            nn.Conv2d(4, 4, 3, groups=4), nn.BatchNorm2d(4), nn.ReLU(),
                                            nn.Flatten(), nn.Linear(144, 2)))
    generic, fast = both(net)
    delta = random_delta(generic, 0.1, 1)
    for tm in (generic, fast):
        tm.load_delta(delta)
    for train_delta in (True, False):
        grads = []
        for tm in (generic, fast):
            tm.delta_params.requires_grad_(train_delta)
            x = torch.randn(2, 3, 8, 8, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
            x.requires_grad_()
            tm(x).square().sum().backward()
            grads.append(x.grad)
        torch.testing.assert_close(grads[1], grads[0], rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("shape,pad,channels_last", [
    ((2, 3, 5, 6), (0, 1, 0, 1), True), ((2, 3, 5, 6), (1, 2, 2, 1), False), ((2, 3, 7), (1, 0), False),
    ((1, 2, 3, 4, 5), (1, 1, 0, 2, 2, 0), True), ((2, 1, 1, 1), (2, 2, 2, 2), True)])
def test_zero_pad_is_f_pad_in_the_input_layout(shape, pad, channels_last):
    from avalanche_tmc.tangent.rules.conv_linear import zero_pad

    x = torch.randn(shape)
    fmt = torch.contiguous_format
    if channels_last:
        fmt = torch.channels_last if x.dim() == 4 else torch.channels_last_3d
        x = x.contiguous(memory_format=fmt)
    out = zero_pad(x, pad)
    assert torch.equal(out, torch.nn.functional.pad(x, list(pad)))
    assert out.is_contiguous(memory_format=fmt)


def test_timm_same_padding_at_inference_matches_the_generic_path():
    """Conv2dSame's padding of input and tangent written by zero_pad (no autograd)."""
    from timm.layers import Conv2dSame

    torch.manual_seed(11)
    net = randomize_batchnorm(nn.Sequential(Conv2dSame(3, 4, 3, stride=2), nn.BatchNorm2d(4), nn.ReLU6(),
                                            Conv2dSame(4, 4, 5, stride=2, groups=4), nn.Flatten(), nn.Linear(16, 2)))
    generic, fast = both(net)
    delta = random_delta(generic, 0.1, 3)
    for tm in (generic, fast):
        tm.load_delta(delta)
    x = torch.randn(2, 3, 8, 8, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(fast(x), generic(x), rtol=1e-10, atol=1e-12)
    assert_same(generic, fast, x, quick=True)


def test_a_convolution_added_into_its_output_with_strided_weight_and_bias():
    """Weights and biases that are views with gaps (a δ given as slices of a larger tensor)."""
    torch.manual_seed(12)
    conf = {"kind": "conv", "dim": 2, "stride": (1, 1), "padding": (1, 1), "dilation": (1, 1), "groups": 1}
    x = torch.randn(2, 4, 6, 6).contiguous(memory_format=torch.channels_last)
    weight = torch.randn(5, 8, 3, 3)[:, ::2]
    bias = torch.randn(10)[::2]
    base = torch.randn(2, 5, 6, 6).contiguous(memory_format=torch.channels_last)
    expected = base + conv_apply(x, weight.contiguous(), bias.contiguous(), conf)
    torch.testing.assert_close(conv_accumulate(base, x, weight, bias, conf), expected, rtol=1e-5, atol=1e-5)
