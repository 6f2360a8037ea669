"""What the method registry's builders share (benchmarks.builders): the layers a statistics
head may read and the first-session adaptation candidates."""

from avalanche_tmc import Adaptation
from benchmarks import builders, methods


def test_feature_layers_are_the_chain_stages_with_parameters_before_the_head():
    from torch import nn

    from benchmarks.trunk import ChainSegment

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
