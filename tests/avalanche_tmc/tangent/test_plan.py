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
