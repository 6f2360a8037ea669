"""The checkout's command-line factories: the tiny preset's network and benchmark, the same
weights at every call (so components from separate processes compose), the seed reaching
the new head only, and the classes split into disjoint experiences."""

import torch

from avalanche_tmc import find_head
from benchmarks.runner.cli_factories import data, model


def test_the_command_line_default_factories_build_the_tiny_preset():
    net = model(tasks=2)
    bm = data(tasks=2)
    assert len(bm.train_stream) == 2
    x = bm.train_stream[0].dataset[0][0].unsqueeze(0)
    assert net.eval()(x).shape == (1, 10)
    again = model(tasks=2)
    assert all(torch.equal(a, b) for a, b in zip(net.state_dict().values(), again.state_dict().values()))


def test_the_seed_changes_the_new_head_and_nothing_else():
    a, b = model(tasks=2, seed=0), model(tasks=2, seed=1)
    differing = [n for (n, x), y in zip(a.state_dict().items(), b.state_dict().values()) if not torch.equal(x, y)]
    head = find_head(a)
    assert differing == [f"{head}.weight", f"{head}.bias"]


def test_the_experiences_split_the_classes():
    bm = data(tasks=5)
    classes = [set(torch.as_tensor(e.dataset.targets).tolist()) for e in bm.train_stream]
    assert [len(c) for c in classes] == [2] * 5
    assert set().union(*classes) == set(range(10))
