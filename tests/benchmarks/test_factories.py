"""The command line's default factories: the tiny preset's network and benchmark, the same
weights at every call (so components from separate processes compose), unknown options refused."""

import pytest
import torch

from benchmarks.factories import data, model


def test_the_command_line_default_factories_build_the_tiny_preset():
    net = model(tasks=2)
    bm = data(tasks=2)
    assert len(bm.train_stream) == 2
    x = bm.train_stream[0].dataset[0][0].unsqueeze(0)
    assert net.eval()(x).shape == (1, 10)
    again = model(tasks=2)
    assert all(torch.equal(a, b) for a, b in zip(net.state_dict().values(), again.state_dict().values()))
    with pytest.raises(TypeError):
        model(colour=1)
