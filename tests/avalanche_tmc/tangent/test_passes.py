"""The plan's graph passes: in-place operations, use counts, convolution + BatchNorm fusion
(whose numbers test_rules.py and test_plan.py compare with the generic path)."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from avalanche_tmc.tangent import TracingError, build_plan
from avalanche_tmc.tangent.passes import count_uses
from avalanche_tmc.tangent.rules.normalization import CONV_BATCHNORM
from avalanche_tmc.tangent.steps import Ref, Step


def _plan(net):
    return build_plan(net.eval(), [n for n, _ in net.named_parameters()])


def test_a_convolution_used_once_by_a_batchnorm_is_fused():
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4))
    plan = _plan(net)
    fused = [s for s in plan.steps if s.rule is CONV_BATCHNORM]
    assert [(s.target, s.conf["conv"]) for s in fused] == [("1", "0"), ("4", "3")]
    assert [s.op for s in plan.steps].count("constant") == 2  # the convolutions' own steps


def test_a_convolution_with_a_second_user_is_not_fused():
    class TwoUsers(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)
            self.bn = nn.BatchNorm2d(4)

        def forward(self, x):
            h = self.conv(x)
            return self.bn(h) + h

    assert not any(s.rule is CONV_BATCHNORM for s in _plan(TwoUsers()).steps)


def test_functional_batchnorm_on_attributes_is_fused():
    class Functional(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)
            self.weight = nn.Parameter(torch.ones(4))
            self.register_buffer("mean", torch.zeros(4))
            self.register_buffer("var", torch.ones(4))

        def forward(self, x):
            return F.batch_norm(self.conv(x), self.mean, self.var, self.weight, None, False, 0.1, 1e-3)

    fused = [s for s in _plan(Functional()).steps if s.rule is CONV_BATCHNORM]
    assert len(fused) == 1
    assert fused[0].conf["norm"] == ("function", {"mean": "mean", "var": "var", "weight": "weight", "bias": None}, 1e-3)


def test_count_uses_counts_references_in_nested_arguments_and_the_output():
    steps = [Step("input", None, (), {}), Step("function", torch.cat, ([Ref(0), Ref(0)],), {}),
             Step("method", "view", (Ref(1), slice(Ref(0), None)), {"dim": Ref(1)})]
    assert count_uses(steps, (Ref(2), Ref(1))) == [3, 3, 1]


def test_in_place_operations_read_afterwards_are_refused():
    class ReadAfter(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(3, 3)

        def forward(self, x):
            h = self.fc(x)
            g = h.add_(1.0)
            return g + h

    with pytest.raises(TracingError, match="read after the in-place operation add_"):
        _plan(ReadAfter())
