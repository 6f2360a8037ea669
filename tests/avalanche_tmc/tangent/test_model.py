"""TangentModel against independent computations of f_w and J·δ."""

import copy
import warnings

import pytest
import torch
from torch.func import functional_call, jacrev

from avalanche_tmc import TangentModel
from tests.avalanche_tmc.tangent.fast_vs_generic import assert_same, both, random_bn
from tests.helpers import TinyResNet, TinyTransformer, random_delta, randomize_batchnorm


def jacobian_times_delta(tm: TangentModel, x: torch.Tensor, delta) -> torch.Tensor:
    """J_w f(x)·δ from the full reverse-mode Jacobian (torch.func.jacrev)."""
    base = dict(tm.model.named_parameters())
    names = tm.linearized_names

    def f(*params):
        return functional_call(tm.model, dict(zip(names, params)), (x,))

    jac = jacrev(f, argnums=tuple(range(len(names))))(*(base[n] for n in names))
    out = 0
    for name, j in zip(names, jac):
        d = delta[name]
        out = out + (j * d).reshape(*j.shape[: j.dim() - d.dim()], -1).sum(-1)
    return out


@pytest.mark.parametrize("make", [lambda: randomize_batchnorm(TinyResNet()), TinyTransformer])
def test_zero_delta_is_exactly_the_base_model(make):
    torch.manual_seed(1)
    net = make()
    reference = copy.deepcopy(net).eval()
    tm = TangentModel(net)
    x = torch.randn(5, 1, 8, 8)
    with torch.no_grad():
        assert torch.equal(tm(x), reference(x))


@pytest.mark.parametrize("make", [lambda: randomize_batchnorm(TinyResNet()), TinyTransformer])
def test_tangent_output_matches_jacrev_jvp(make):
    torch.manual_seed(2)
    tm = TangentModel(make()).double()
    x = torch.randn(4, 1, 8, 8, dtype=torch.float64)
    delta = random_delta(tm, scale=0.05, seed=3)
    tm.load_delta(delta)
    with torch.no_grad():
        got = tm(x) - tm.base_forward(x)
    expected = jacobian_times_delta(tm, x, delta)
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-10)
    assert expected.abs().max() > 1e-3  # the check is not vacuous


def test_tangent_output_matches_finite_differences(tiny_resnet):
    tm = TangentModel(tiny_resnet).double()
    x = torch.randn(3, 1, 8, 8, dtype=torch.float64)
    delta = random_delta(tm, scale=1.0, seed=4)
    eps = 1e-6
    shifted = copy.deepcopy(tm.model)
    with torch.no_grad():
        for name, p in shifted.named_parameters():
            p.add_(eps * delta[name])
        fd = (shifted(x) - tm.model(x)) / eps
        tm.load_delta(delta)
        jvp = tm(x) - tm.base_forward(x)
    torch.testing.assert_close(jvp, fd, rtol=1e-4, atol=1e-6)


def test_batchnorm_uses_running_statistics_even_in_train_mode(tiny_resnet):
    reference = copy.deepcopy(tiny_resnet).eval()
    tm = TangentModel(tiny_resnet)
    tm.train()
    assert tm.training and not tm.model.training
    x = torch.randn(6, 1, 8, 8)
    before = tm.model.stem[1].running_mean.clone()
    out = tm(x)
    torch.testing.assert_close(out, reference(x))
    assert torch.equal(tm.model.stem[1].running_mean, before)


def test_output_is_linear_in_delta(tiny_transformer):
    tm = TangentModel(tiny_transformer).double()
    x = torch.randn(4, 1, 8, 8, dtype=torch.float64)
    d1, d2 = random_delta(tm, seed=5), random_delta(tm, seed=6)
    a, b = 0.7, -1.3
    with torch.no_grad():
        base = tm.base_forward(x)
        h1 = tm.forward_with(x, d1) - base
        h2 = tm.forward_with(x, d2) - base
        combo = {n: a * d1[n] + b * d2[n] for n in d1}
        h12 = tm.forward_with(x, combo) - base
    torch.testing.assert_close(h12, a * h1 + b * h2, rtol=1e-10, atol=1e-12)


def test_head_only_is_a_linear_head_on_frozen_features(tiny_resnet):
    tm = TangentModel(tiny_resnet, num_classes=5, linearize="head")
    assert tm.linearized_names == ("fc.weight", "fc.bias")
    delta = random_delta(tm, seed=7)
    tm.load_delta(delta)
    x = torch.randn(4, 1, 8, 8)
    features = {}

    def keep_features(module, inputs, output):
        features["h"] = inputs[0]

    tm.model.fc.register_forward_hook(keep_features)
    with torch.no_grad():
        base = tm.base_forward(x)
        expected = base + features["h"] @ delta["fc.weight"].T + delta["fc.bias"]
        with pytest.warns(UserWarning, match=r"\(fc\) do not fire"):  # the hook is only for base_forward here
            got = tm(x)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_start_at_leaves_the_stem_out(tiny_resnet):
    tm = TangentModel(tiny_resnet, start_at="block")
    assert not any(n.startswith("stem") for n in tm.linearized_names)
    assert "fc.weight" in tm.linearized_names and "block.0.weight" in tm.linearized_names
    with pytest.raises(ValueError, match="start_at"):
        TangentModel(TinyResNet(), start_at="nonexistent")


def test_only_delta_receives_gradients(tiny_resnet):
    tm = TangentModel(tiny_resnet)
    tm(torch.randn(2, 1, 8, 8)).square().sum().backward()
    assert all(p.grad is not None for p in tm.delta_parameters())
    assert all(p.grad is None for p in tm.model.parameters())


def test_delta_roundtrip_and_bad_delta_errors(tiny_resnet):
    tm = TangentModel(tiny_resnet)
    delta = random_delta(tm, seed=8)
    tm.load_delta(delta)
    for name, value in tm.delta.items():
        assert torch.equal(value, delta[name])
    bad_shape = dict(delta, **{"fc.weight": torch.zeros(9, 9)})
    with pytest.raises(ValueError, match="wrong shapes"):
        tm.load_delta(bad_shape)
    missing = {k: v for k, v in delta.items() if k != "fc.bias"}
    with pytest.raises(ValueError, match="missing"):
        tm.load_delta(missing)
    tm.zero_delta()
    assert all(torch.count_nonzero(v) == 0 for v in tm.delta.values())


def test_fingerprint_tracks_the_base_point(tiny_resnet):
    a = TangentModel(copy.deepcopy(tiny_resnet), num_classes=4)
    b = TangentModel(copy.deepcopy(tiny_resnet), num_classes=4)
    c = TangentModel(copy.deepcopy(tiny_resnet), num_classes=4, head_seed=1)
    assert a.base_fingerprint() == b.base_fingerprint() != c.base_fingerprint()


def test_forward_hooks_fire_on_the_generic_path_and_the_fast_path_warns_once():
    """A hook on a module of the wrapped network: the generic path calls the module, so the
    hook fires (on the primal/dual tensors); the fast path runs the traced graph, so it does
    not, and TangentModel says so once, naming the hooked module and the way out."""
    torch.manual_seed(0)
    calls = []
    net = TinyResNet(num_classes=3)
    net.stem.register_forward_hook(lambda module, inputs, output: calls.append(output.shape))
    x = torch.randn(2, 1, 8, 8)
    generic = TangentModel(copy.deepcopy(net), implementation="generic")
    generic(x)
    assert calls == [torch.Size([2, 4, 8, 8])]
    fast = TangentModel(net, implementation="fast")
    calls.clear()  # (tracing the network called the hook once, on fx proxies)
    with pytest.warns(UserWarning, match=r"\(stem\) do not fire on TangentModel's fast path.*implementation='generic'"):
        out = fast(x)
    assert calls == []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fast(x)  # once per model
    torch.testing.assert_close(out, generic(x))  # the same numbers either way
    calls.clear()
    fast.use_implementation("generic")(x)
    assert len(calls) == 1
    unhooked = TangentModel(TinyResNet(num_classes=3), implementation="fast")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        unhooked(x)  # no hook, no warning


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
    generic, fast = both(random_bn(__import__("torchvision").models.mobilenet_v2()), num_classes=5)
    fast.to(memory_format=torch.channels_last)
    x = torch.randn(2, 3, 32, 32, dtype=torch.float64)
    assert_same(generic, fast, x.contiguous(memory_format=torch.channels_last), scale=0.01, quick=True)


def test_channels_last_option_converts_weights_delta_and_inputs():
    torch.manual_seed(9)
    net = random_bn(__import__("torchvision").models.mobilenet_v2()).double()
    generic = TangentModel(copy.deepcopy(net), num_classes=5, implementation="generic")
    fast = TangentModel(copy.deepcopy(net), num_classes=5, channels_last=True)
    weight = fast.model.features[0][0].weight  # the 3x3 stem convolution
    assert weight.is_contiguous(memory_format=torch.channels_last) and not weight.is_contiguous()
    assert fast.delta_params[0].stride() == dict(fast.model.named_parameters())[fast.linearized_names[0]].stride()
    assert_same(generic, fast, torch.randn(2, 3, 32, 32, dtype=torch.float64), scale=0.01, quick=True)


@pytest.mark.parametrize("make", [lambda: randomize_batchnorm(TinyResNet()), TinyTransformer])
def test_a_tangent_model_with_its_plan_saves_and_loads_whole(make, tmp_path):
    """torch.save of the whole model (as checkpointing libraries do) keeps the fast path: its
    rules are module-level functions, no lambdas."""
    torch.manual_seed(17)
    tm = TangentModel(make())
    tm.load_delta(random_delta(tm, 0.1, 3))
    torch.save(tm, tmp_path / "tm.pt")
    loaded = torch.load(tmp_path / "tm.pt", weights_only=False)
    assert loaded.implementation == "fast"
    x = torch.randn(3, 1, 8, 8)
    assert torch.equal(loaded(x), tm(x))
