"""``TangentPlugin`` refuses what would compose nonsense (issue 21): an experience without a
training step (its component would be δ = 0 and dilute the others), a base network that
changed since the components were trained."""

import warnings

import pytest
import torch
from avalanche.core import SupervisedPlugin

from tests.helpers import NUM_CLASSES, TinyResNet, small_benchmark, tmc, train_seeded

warnings.filterwarnings("ignore", message="No loggers specified")


@pytest.fixture(scope="module")
def bm():
    return small_benchmark(n_experiences=4)


class _StopAtOnce(SupervisedPlugin):
    def before_training_epoch(self, strategy, **kwargs):
        strategy.stop_training()


def test_an_experience_without_a_training_step_is_not_composed(bm, device):
    strategy = train_seeded(tmc(device=device), bm.train_stream[:1])
    before = strategy.composed_delta
    strategy.plugins.append(_StopAtOnce())
    with pytest.raises(ValueError, match="no training step"):
        strategy.train(bm.train_stream[1])
    assert strategy.tangent_plugin.composition.keys == [0]
    assert all(torch.equal(before[n], strategy.composed_delta[n]) for n in before)


def test_a_base_changed_after_training_is_refused(bm, device):
    """Issue 21: loading other base weights into the wrapped network went unnoticed at evaluation."""
    strategy = train_seeded(tmc(device=device), bm.train_stream[:1])
    torch.manual_seed(7)
    strategy.model.model.load_state_dict(TinyResNet(num_classes=NUM_CLASSES).state_dict())
    with pytest.raises(ValueError, match="changed since the components were trained"):
        strategy.eval(bm.test_stream)
    with pytest.raises(ValueError, match="changed since the components were trained"):
        strategy.train(bm.train_stream[1])
    assert strategy.tangent_plugin.composition.keys == [0]
