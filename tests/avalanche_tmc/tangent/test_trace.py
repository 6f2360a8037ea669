"""Tracing: modules with a rule stay whole, a submodule fx cannot trace is kept whole and
named, a network fx cannot trace at all raises TracingError."""

import pytest
import torch
from torch import nn

from avalanche_tmc.tangent.trace import TracingError, trace_network


class Branchy(nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # control flow on values: fx cannot trace it
            return x
        return -x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(3, 3)
        self.branchy = Branchy()
        self.inner = nn.Sequential(nn.Linear(3, 3))

    def forward(self, x):
        return self.inner(self.branchy(self.fc(x)))


def test_failed_submodules_and_kept_modules_are_single_calls():
    graph, tracer = trace_network(Net(), keep_whole=lambda m: isinstance(m, nn.Sequential))
    calls = [n.target for n in graph.nodes if n.op == "call_module"]
    assert calls == ["fc", "branchy", "inner"]  # nn.Sequential kept whole, as asked
    assert tracer.failed == ["branchy"]
    graph, _ = trace_network(Net(), keep_whole=lambda m: False)
    assert [n.target for n in graph.nodes if n.op == "call_module"] == ["fc", "branchy", "inner.0"]


def test_a_network_fx_cannot_trace_raises_and_keeps_its_mode():
    net = Branchy().train()
    with pytest.raises(TracingError, match="could not trace Branchy"):
        trace_network(net, keep_whole=lambda m: False)
    assert net.training
    torch.testing.assert_close(net(torch.ones(2)), torch.ones(2))
