"""What the method registry's builders share (benchmarks.methods.builders): the layers a statistics
head may read, the first-session adaptation candidates, the schedule's milestones, the
other β and fused optimizer kernels."""

import pytest
import torch

from avalanche_tmc import Adaptation
from benchmarks import methods
from benchmarks.methods import builders


def test_feature_layers_are_the_chain_stages_with_parameters_before_the_head():
    from torch import nn

    from benchmarks.networks.trunk import ChainSegment

    chain = ChainSegment([("conv", nn.Conv2d(1, 4, 3)), ("act", nn.ReLU()), ("bn", nn.BatchNorm2d(4)),
                          ("pool", nn.AdaptiveAvgPool2d(1)), ("fc", nn.Linear(4, 3))])
    assert builders.feature_layers(chain) == ["stages.conv", "stages.bn", None]
    plain = nn.Sequential(nn.Conv2d(1, 4, 3), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3))
    assert builders.feature_layers(plain) == ["0", None]
    cfg = methods.TrainConfig(num_classes=3, epochs=1)
    grid = builders.adaptation_candidates(chain, cfg)
    assert [c.layer for c in builders.layer_candidates(chain, cfg)] == ["stages.conv", "stages.bn", None]
    trainings = {c.training() for c in grid if c.how != "none"}
    common = dict(batch_size=cfg.batch_size, beta=cfg.beta)
    assert trainings == {  # nine trainings, each read at every layer
        *(Adaptation("fine-tune", lr, epochs, train_from=part, **common)
          for part in (None, "stages.conv") for lr in (1e-3, 1e-2) for epochs in (2, 5)),  # half: by count
        Adaptation("tangent", 1e-3, 5, **common)}
    assert len(grid) == 3 + 8 * 3 + 1


def test_decay_milestones_and_the_other_beta():
    assert builders.decay_milestones(20, (0.5, 0.75)) == [10, 15]
    assert builders.decay_milestones(5, (0.5, 0.75)) == [2, 3]
    assert builders.decay_milestones(1, (0.5, 0.75)) == []
    assert (builders.other_beta(25.0), builders.other_beta(5.0)) == (5.0, 25.0)


@pytest.mark.parametrize("make", [lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
                                  lambda ps: torch.optim.Adam(ps, lr=0.01)], ids=["sgd", "adam"])
def test_fused_kernels_make_the_same_updates(make):
    from benchmarks.methods.builders import use_fused_kernels  # noqa: F401

    torch.manual_seed(0)
    start = [torch.randn(5, 3, dtype=torch.float64), torch.randn(7, dtype=torch.float64)]
    runs = []
    for fused in (False, True):
        params = [torch.nn.Parameter(t.clone()) for t in start]
        opt = make(params)
        if fused:
            assert use_fused_kernels(opt) and opt.param_groups[0]["fused"]
        for step in range(4):
            for p in params:
                p.grad = torch.sin(p.detach() * (step + 1))
            opt.step()
        runs.append(params)
    for a, b in zip(*runs):
        torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-12)
    assert use_fused_kernels(opt) is False  # refused once it has state
