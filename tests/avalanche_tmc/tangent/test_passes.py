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
from tests.avalanche_tmc.tangent.fast_vs_generic import assert_same, both
from tests.helpers import randomize_batchnorm


def _plan(net):
    return build_plan(net.eval(), [n for n, _ in net.named_parameters()])


def test_a_convolution_used_once_by_a_batchnorm_is_fused():
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4))
    plan = _plan(net)
    fused = [s for s in plan.steps if s.rule is CONV_BATCHNORM]
    assert [(s.target, s.conf["conv"]) for s in fused] == [("1", "0"), ("4", "3")]
    assert [s.conf.get("act") for s in fused] == [("module", "2", "relu", (), {}), None]  # the ReLU joins
    assert [s.op for s in plan.steps].count("constant") == 3  # the convolutions' and the first BatchNorm's


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


class ConvBatchNormActivations(nn.Module):
    """Activations after convolution + BatchNorm: as modules (after Dropout and Identity, as
    timm's BatchNormAct2d), functions and methods, with bounds, used twice (not fused), and
    a GELU (not fusable)."""

    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList(nn.Conv2d(3 if i == 0 else 4, 4, 3, padding=1) for i in range(7))
        self.bns = nn.ModuleList(nn.BatchNorm2d(4) for _ in range(7))
        self.relu6 = nn.ReLU6(inplace=True)
        self.drop = nn.Sequential(nn.Dropout(0.2), nn.Identity())
        self.head = nn.Linear(4, 2)

    def forward(self, x):
        h = self.relu6(self.drop(self.bns[0](self.convs[0](x))))  # through Identity/Dropout
        h = F.relu(self.bns[1](self.convs[1](h)), inplace=True)
        h = F.hardtanh(self.bns[2](self.convs[2](h)), -0.5, 0.75)
        h = self.bns[3](self.convs[3](h)).relu()
        z = self.bns[4](self.convs[4](h))
        h = F.relu(z) + z  # z used twice: not fused
        h = F.gelu(self.bns[5](self.convs[5](h)))
        h = F.hardtanh(self.bns[6](self.convs[6](h)), min_val=-1.0, max_val=0.5)
        return self.head(h.mean((2, 3)))


def test_activations_after_a_convolution_and_batchnorm_join_the_fused_step():
    torch.manual_seed(0)
    net = randomize_batchnorm(ConvBatchNormActivations())
    fused = [s for s in _plan(net).steps if s.rule is CONV_BATCHNORM]
    assert [None if s.conf.get("act") is None else s.conf["act"][2] for s in fused] == [
        "relu6", "relu", "hardtanh", "relu", None, None, "hardtanh"]
    assert fused[2].conf["act"][4] == {"min_val": -0.5, "max_val": 0.75, "inplace": False}  # as fx records it
    assert fused[6].conf["act"][4] == {"min_val": -1.0, "max_val": 0.5, "inplace": False}
    generic, fast = both(net)
    x = torch.randn(2, 3, 6, 6, dtype=torch.float64) * 3
    assert_same(generic, fast, x)
    for linearize in (lambda n: n.startswith("bns."), lambda n: n.startswith("head"),
                      lambda n: n.startswith("bns.") and n.endswith("bias")):  # δβ alone: a broadcast tangent
        generic, fast = both(ConvBatchNormActivations().apply(lambda m: None), linearize=linearize)
        generic.model.load_state_dict(net.state_dict())
        fast.model.load_state_dict(net.state_dict())
        assert_same(generic, fast, x)
    with torch.no_grad():  # inference: the activation written into the step's own tensors
        torch.testing.assert_close(fast(x), generic(x), rtol=1e-10, atol=1e-12)


def test_a_fused_activation_reads_the_module_at_every_call():
    torch.manual_seed(1)
    net = randomize_batchnorm(nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.Hardtanh(-0.2, 0.2),
                                            nn.Flatten(), nn.Linear(16, 2)))
    generic, fast = both(net)
    x = torch.randn(2, 3, 4, 4, dtype=torch.float64)
    for tm in (generic, fast):
        tm.model[2].max_val = 0.7
    assert_same(generic, fast, x)


def test_fused_hardtanh_bounds_given_as_positional_arguments():
    from avalanche_tmc.tangent.rules.activations import activation_kwargs

    spec = ("function", F.hardtanh, "hardtanh", (-0.5, 0.75), {"inplace": True})
    assert activation_kwargs(spec, nn.Identity()) == {"min_val": -0.5, "max_val": 0.75}
