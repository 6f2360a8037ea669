"""The transformer rules of the fast path (linear layers, LayerNorm, softmax, attention,
GELU) against the generic ``torch.func.jvp`` path, in float64: outputs and δ-gradients in
a training step (``assert_same``) and the outputs at inference (no autograd, where the
rules write primal and tangent into shared buffers and accumulate in place), with every
combination of tangents present or absent (only some parameters linearized, frozen
prefixes, bias-free layers)."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from avalanche_tmc import TangentModel
from tests.avalanche_tmc.tangent.fast_vs_generic import assert_same, both
from tests.helpers import TinyTransformer, random_delta


def assert_same_inference(generic: TangentModel, fast: TangentModel, x: torch.Tensor, seed: int = 0) -> None:
    """Same ``f_w(x) + J·δ`` for a random δ under ``torch.inference_mode`` and ``no_grad``."""
    delta = random_delta(generic, 0.1, seed)
    for mode in (torch.inference_mode, torch.no_grad):
        with mode():
            expected = generic.forward_with(x, delta)
            got = fast.forward_with(x, delta)
        torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)
    with torch.no_grad():
        assert (expected - generic.base_forward(x)).abs().max() > 1e-4  # not vacuous


def check(net: nn.Module, x: torch.Tensor, allowed_fallbacks=(), **kwargs) -> None:
    generic, fast = both(net, **kwargs)
    assert set(fast._plan.fallback_ops) <= {"floordiv", "pow", *allowed_fallbacks}  # on sizes only
    assert_same(generic, fast, x.double())
    assert_same_inference(generic, fast, x.double())


class Dense(nn.Module):
    """Linear layers on 3-D, 2-D and 1-D inputs, with and without bias, by module and
    ``F.linear`` (with the weight as keyword), on a non-contiguous input, and on the
    output of another linear layer and of GELU (primal and tangent side by side in one
    buffer at inference: see rules/_pairs.py)."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(12, 8)
        self.b = nn.Linear(8, 8, bias=False)
        self.c = nn.Linear(8, 8)
        self.act = nn.GELU()
        self.w = nn.Parameter(torch.randn(6, 8) * 0.3)
        self.v = nn.Parameter(torch.randn(6) * 0.3)

    def forward(self, x):
        h = self.a(x.flatten(2).transpose(1, 2))  # (B, 4, 8) from a non-contiguous (B, 4, 12)
        h = self.c(self.act(self.b(h)))  # b and c get primal and tangent side by side
        h = F.gelu(h, approximate="tanh")
        h = F.linear(h.transpose(1, 2).mean(-1), weight=self.w)  # (B, 6)
        return h + F.linear(self.v, self.w.t()).sum()  # a 1-D input


@pytest.mark.parametrize("linearize", ["all", ["b"], ["a"], ["c"], ["w"], ["v"], ["a.bias"], ["c.bias"]])
def test_linear_layers(linearize):
    torch.manual_seed(0)
    check(Dense(), torch.randn(3, 12, 2, 2), linearize=linearize)


@pytest.mark.parametrize("linearize", ["all", ["norm1", "qkv"], ["proj"], ["mlp", "norm2"], ["head", "norm"]])
def test_tiny_transformer(linearize):
    """Softmax and matmuls of explicit attention, LayerNorm, GELU, with tangents on
    some of them only."""
    torch.manual_seed(0)
    check(TinyTransformer(), torch.randn(2, 1, 8, 8), linearize=linearize)


class Norms(nn.Module):
    """LayerNorm with and without affine parameters, over one and two dimensions."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.n1 = nn.LayerNorm(6)
        self.n2 = nn.LayerNorm(6, elementwise_affine=False)
        self.n3 = nn.LayerNorm((4, 6), bias=False)
        for p in (self.n1.weight, self.n1.bias, self.n3.weight):
            p.data.normal_(1.0, 0.3) if p.dim() and p is not self.n1.bias else p.data.normal_(0.0, 0.3)

    def forward(self, x):
        h = self.fc(x)
        h = self.n1(h) * 2 + self.n2(h)
        return self.n3(torch.tanh(h)).flatten(1)


@pytest.mark.parametrize("linearize", ["all", ["fc"], ["n1"], ["n3"], ["n1.bias"]])
def test_layer_norm(linearize):
    torch.manual_seed(0)
    check(Norms(), torch.randn(3, 4, 6), linearize=linearize)


class Attention(nn.Module):
    """``F.scaled_dot_product_attention`` with tangents on some of q, k, v, a causal mask,
    a boolean and an additive mask and a custom scale, on multi-head non-contiguous inputs."""

    def __init__(self, which: str):
        super().__init__()
        self.which = which
        self.q = nn.Linear(8, 8)
        self.k = nn.Linear(8, 8)
        self.v = nn.Linear(8, 8)
        self.out = nn.Linear(8, 3)
        self.register_buffer("bool_mask", torch.ones(5, 5, dtype=torch.bool).triu(-1))
        self.register_buffer("add_mask", torch.linspace(-1, 1, 25).view(5, 5))

    def forward(self, x):
        b, n, _ = x.shape
        heads = lambda t: t.view(b, n, 2, 4).transpose(1, 2)  # noqa: E731
        q, k, v = heads(self.q(x)), heads(x if self.which == "q" else self.k(x)), heads(self.v(x))
        if self.which == "broadcast":  # one key set for the whole batch
            k = k[:1]
        if self.which == "causal":
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        elif self.which == "bool_mask":
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=self.bool_mask)
        elif self.which == "add_mask":
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=self.add_mask, scale=0.3)
        else:
            o = F.scaled_dot_product_attention(q, k, v)
        return self.out(o.transpose(1, 2).reshape(b, n, 8).mean(1))


@pytest.mark.parametrize("which,linearize", [
    ("plain", "all"), ("plain", ["q"]), ("plain", ["k"]), ("plain", ["v"]), ("plain", ["q", "k"]),
    ("q", ["q", "out"]), ("broadcast", "all"), ("broadcast", ["k"]), ("causal", "all"), ("bool_mask", "all"),
    ("add_mask", "all"),
])
def test_scaled_dot_product_attention(which, linearize):
    torch.manual_seed(0)
    check(Attention(which), torch.randn(2, 5, 8), linearize=linearize)


@pytest.mark.parametrize("fused_attn", [True, False])
def test_timm_vit(fused_attn):
    """A small timm ViT through its fused (scaled_dot_product_attention) and its explicit
    (matmul, softmax) attention."""
    timm = pytest.importorskip("timm")
    torch.manual_seed(0)
    net = timm.create_model("vit_tiny_patch16_224", img_size=32, patch_size=8, depth=2, pretrained=False)
    for block in net.blocks:
        block.attn.fused_attn = fused_attn
    with torch.no_grad():
        for name, p in net.named_parameters():  # non-trivial LayerNorm affine parameters
            if "norm" in name:
                p.add_(torch.randn_like(p) * 0.2)
    # timm's explicit path calls two helpers of its own, left to jvp (the rules import torch only)
    check(net, torch.randn(2, 3, 32, 32), allowed_fallbacks={"resolve_self_attn_mask", "maybe_add_mask"})
