"""The plan (tracing, the interpreter, its graph passes) against the generic path, in float64:
whole tiny networks, subsets of linearized parameters, networks fx cannot trace, tied
parameters, and base weights changed after the plan was built."""

import pytest
import torch
from torch import nn

from avalanche_tmc import TangentModel
from avalanche_tmc.tangent import TracingError
from tests.avalanche_tmc.tangent.fast_vs_generic import assert_same, both
from tests.helpers import TinyResNet, TinyTransformer, randomize_batchnorm


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



def maybe_mask(x):
    """Like timm's resolve_self_attn_mask without a mask: None."""
    return None


def add_mask(x, mask):
    return x if mask is None else x + mask


def scaled_with_size(x):
    return x * 2.0, x.shape[-1]


torch.fx.wrap("maybe_mask")
torch.fx.wrap("add_mask")
torch.fx.wrap("scaled_with_size")


def test_fallback_of_a_function_whose_output_is_not_only_tensors():
    """jvp takes tensors only: a function without a rule that returns None, or a tensor
    beside a number, still runs on the fallback (the other values get no tangent)."""

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 3)

        def forward(self, x):
            h = self.a(x)
            h = add_mask(h, maybe_mask(h))
            scaled = scaled_with_size(h)
            return self.b(torch.tanh(scaled[0] / scaled[1]))

    torch.manual_seed(0)
    net = Net().double()
    fast = TangentModel(net, implementation="fast")
    generic = TangentModel(net, implementation="generic")
    assert set(fast._plan.fallback_ops) == {"maybe_mask", "add_mask", "scaled_with_size"}
    with torch.no_grad():
        for p in fast.delta_parameters():
            p.normal_(0, 0.1)
    generic.load_delta(fast.delta)
    x = torch.randn(5, 4, dtype=torch.float64)
    torch.testing.assert_close(fast(x), generic(x), rtol=1e-12, atol=1e-12)
    assert not torch.allclose(fast(x), net(x))  # the tangent term is there


def test_each_value_is_released_after_its_last_use_and_never_before():
    from avalanche_tmc.tangent.plan import release_schedule
    from avalanche_tmc.tangent.steps import iter_refs

    torch.manual_seed(0)
    tm = TangentModel(randomize_batchnorm(TinyResNet()), implementation="fast")
    plan = tm._plan
    schedule = release_schedule(plan.steps, plan.output)
    released_at = {j: i for i, js in enumerate(schedule) for j in js}
    output_refs = {r.index for r in iter_refs(plan.output)}
    assert set(released_at) == set(range(len(plan.steps))) - output_refs  # each value once, but the output's
    for i, step in enumerate(plan.steps):
        for ref in iter_refs((step.args, step.kwargs, step.conf)):
            assert released_at.get(ref.index, len(plan.steps)) >= i  # alive when step i reads it
    residual = [j for j, i in released_at.items() if i - j > 1]
    assert residual, "a value read by a later, non-adjacent step (the residual) is kept until then"
