"""The convolution, BatchNorm and clamp rules' speed and memory choices (issue 23), each
against the generic torch.func.jvp path in float64 (outputs and δ-gradients), plus what
they save for the backward."""

import torch
from torch import nn

from tests.avalanche_tmc.tangent.fast_vs_generic import assert_same, both


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
