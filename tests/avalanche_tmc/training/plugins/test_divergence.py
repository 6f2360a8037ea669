"""``DivergenceGuardPlugin`` on a template of Avalanche's own: it stops the experience at the
first non-finite loss or ``δ``, and a training transaction leaves the strategy as before."""

import warnings

import pytest
import torch
from avalanche.training.templates import SupervisedTemplate

from avalanche_tmc import DivergenceError, RescaledSquareLoss, TangentModel, TangentPlugin
from avalanche_tmc.training.plugins.divergence import DivergenceGuardPlugin, trained_tensors
from avalanche_tmc.training.rollback import TrainingTransaction
from tests.helpers import NUM_CLASSES, TinyResNet, quiet_evaluator, small_benchmark, tensor_dataset

warnings.filterwarnings("ignore", message="No loggers specified")


def _template(device, lr: float = 1e-2):
    torch.manual_seed(0)
    model = TangentModel(TinyResNet(num_classes=3), num_classes=NUM_CLASSES)
    plugin = TangentPlugin()
    strategy = SupervisedTemplate(model=model, optimizer=torch.optim.Adam(model.delta_parameters(), lr=lr),
                                  criterion=RescaledSquareLoss(), train_mb_size=8, train_epochs=1,
                                  plugins=[DivergenceGuardPlugin(), plugin], evaluator=quiet_evaluator(),
                                  device=device)
    return strategy, plugin


def test_trained_tensors_are_the_delta_of_a_tangent_model_else_the_trainable_parameters():
    tangent = TangentModel(TinyResNet(num_classes=3), num_classes=NUM_CLASSES)
    symbol, named = trained_tensors(tangent)
    assert symbol == "δ" and [n for n, _ in named] == list(tangent.linearized_names)
    net = TinyResNet()
    net.fc.requires_grad_(False)
    symbol, named = trained_tensors(net)
    assert [n for n, _ in named] == [n for n, p in net.named_parameters() if not n.startswith("fc.")]


def test_a_non_finite_loss_stops_before_the_step_and_the_transaction_restores(tmp_path, device):
    strategy, plugin = _template(device)
    strategy.train(small_benchmark().train_stream[0])
    delta, keys = strategy.model.delta, plugin.composition.keys
    poisoned = small_benchmark(train=tensor_dataset(nan_at=slice(0, NUM_CLASSES)))
    with pytest.raises(DivergenceError, match=r"Experience 1: training diverged at iteration 1 \(epoch 1\): "
                                              r"the loss is nan.*lr=0\.01"):
        with TrainingTransaction.around(strategy):
            strategy.train(poisoned.train_stream[1], shuffle=False)
    assert plugin.composition.keys == keys == [0]
    for name in delta:
        assert torch.equal(strategy.model.delta[name], delta[name]), name


def test_a_step_that_makes_delta_non_finite_stops_and_the_plugin_rolls_back(device):
    strategy, plugin = _template(device)
    bm = small_benchmark()
    strategy.train(bm.train_stream[0])
    delta = strategy.model.delta
    strategy.optimizer.param_groups[0]["lr"] = 1e30
    with pytest.raises(DivergenceError, match="Experience 1: training diverged at iteration"):
        strategy.train(bm.train_stream[1])
    assert plugin.rollback(strategy)  # a template of Avalanche's own: the plugin's transaction
    assert not plugin.rollback(strategy)  # nothing left to undo
    assert plugin.composition.keys == [0]
    for name in delta:
        assert torch.equal(strategy.model.delta[name], delta[name]), name
