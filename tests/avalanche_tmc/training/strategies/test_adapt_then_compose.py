"""``AdaptThenComposeStrategy``: adapt once, then compose by statistics, checked against the
closed-form ridge on the adapted features of every experience; forgetting is exact except
for the experience the network was adapted on; a failed ``train()`` leaves the features
unadapted. On the tests' ``device``."""


import pytest
import torch
from torch.utils.data import TensorDataset

from avalanche_tmc import Adaptation, AdaptThenComposeStrategy, adapt_features
from avalanche_tmc.training.adaptation import TangentFeatures
from tests.helpers import digits_splits, quiet_evaluator, seeded_resnet


def strategy(adaptation=Adaptation(lr=0.05, epochs=2, batch_size=16), **kwargs) -> AdaptThenComposeStrategy:
    return AdaptThenComposeStrategy(network=seeded_resnet(), num_classes=10, adaptation=adaptation,
                                    evaluator=quiet_evaluator(), **kwargs)


def features_of(model_features, experiences, dtype=torch.float64, device="cpu"):
    """The features (and a bias column) of ``experiences`` computed on ``device``, and their labels, on the CPU."""
    xs, ys = [], []
    for exp in experiences:
        data = exp.dataset
        x = torch.stack([data[i][0] for i in range(len(data))]).to(device)
        xs.append(model_features(x).flatten(1).to(dtype).cpu())
        ys.append(torch.tensor([int(data[i][1]) for i in range(len(data))]))
    phi = torch.cat(xs)
    return torch.cat([phi, torch.ones_like(phi[:, :1])], 1), torch.cat(ys)


def closed_form_ridge(phi, y, lam):
    targets = torch.nn.functional.one_hot(y, 10).to(phi.dtype)
    return torch.linalg.solve(phi.T @ phi + lam * torch.eye(phi.shape[1], dtype=phi.dtype), phi.T @ targets)


@pytest.mark.parametrize("how", ["fine-tune", "tangent"])
def test_head_after_a_run_is_the_closed_form_on_all_experiences_adapted_features(digits3, how, device):
    learner = strategy(Adaptation(how=how, lr=0.05 if how == "fine-tune" else 1e-2, epochs=2, batch_size=16),
                       device=device)
    for exp in digits3.train_stream:
        learner.train(exp)
    assert learner.adapted_on == 0 and learner.adaptation_choice.how == how
    features = learner.model.features
    if how == "tangent":
        assert isinstance(features, TangentFeatures) and any(v.abs().max() > 0 for v in features.delta.values())
    phi, y = features_of(features, digits3.train_stream, device=device)
    expected = closed_form_ridge(phi, y, learner.model.ridge_lambda)
    torch.testing.assert_close(learner.model.weight.double().cpu(), expected, rtol=1e-3, atol=1e-4)
    # and the adapted features differ from the pre-trained ones (the adaptation did something)
    unadapted = adapt_features(seeded_resnet(), digits3.train_stream[0].dataset, Adaptation(how="none"), device)
    pretrained, _ = features_of(unadapted, digits3.train_stream[:1], device=device)
    assert not torch.allclose(pretrained, features_of(features, digits3.train_stream[:1], device=device)[0])


def test_forgetting_a_later_experience_equals_never_adding_it(digits3, device):
    full, without = strategy(device=device), strategy(device=device)
    for exp in digits3.train_stream:
        full.train(exp)
        if exp.current_experience != 1:
            without.train(exp)
    full.forget(1)
    assert full.model.ridge_lambda == pytest.approx(without.model.ridge_lambda, rel=1e-9)
    torch.testing.assert_close(full.model.weight, without.model.weight, rtol=1e-4, atol=1e-5)


def test_forgetting_the_adaptation_experience_is_refused_unless_inexact(digits3, device):
    learner = strategy(device=device)
    for exp in digits3.train_stream[:2]:
        learner.train(exp)
    with pytest.raises(ValueError, match="adapted the feature network"):
        learner.forget(0)
    with pytest.warns(UserWarning, match="not the model that never saw it"):
        learner.forget(0, inexact=True)
    assert list(learner.components) == [1]


def test_with_a_separate_adaptation_set_every_experience_is_forgotten_exactly(digits3, device):
    pretrain, _, _ = digits_splits(seed=0, pretrain_per_class=20)
    adaptation_set = TensorDataset(torch.as_tensor(pretrain[0]), torch.as_tensor(pretrain[1]))
    full, without = (strategy(adaptation_data=adaptation_set, device=device) for _ in range(2))
    for exp in digits3.train_stream:
        full.train(exp)
        if exp.current_experience != 0:
            without.train(exp)
    assert full.adapted_on == without.adapted_on == "adaptation set"
    full.forget(0)  # no refusal, no warning: exact
    torch.testing.assert_close(full.model.weight, without.model.weight, rtol=1e-4, atol=1e-5)


def test_a_failed_train_call_leaves_the_features_unadapted(digits3, device):
    learner = strategy(device=device)
    before = learner.model.features

    def boom(**kwargs):
        raise RuntimeError("interrupted")

    learner.training_epoch, saved = boom, learner.training_epoch
    with pytest.raises(RuntimeError, match="interrupted"):
        learner.train(digits3.train_stream[0])
    learner.training_epoch = saved
    assert learner.model.features is before and learner.adapted_on is None
    learner.train(digits3.train_stream[0])
    assert learner.adapted_on == 0


def test_head_read_at_an_earlier_layer_is_the_closed_form_on_that_layers_pooled_output(digits3, device):
    learner = strategy(Adaptation(how="none", layer="block"), device=device)
    for exp in digits3.train_stream:
        learner.train(exp)
    net = seeded_resnet().eval().to(device)
    with torch.no_grad():
        phi, y = features_of(lambda x: net.block(net.stem(x)).mean((2, 3)), digits3.train_stream, device=device)
    expected = closed_form_ridge(phi, y, learner.model.ridge_lambda)
    torch.testing.assert_close(learner.model.weight.double().cpu(), expected, rtol=1e-3, atol=1e-4)


def test_avalanches_contract_stop_training_forward_callbacks_and_refusals(digits3, device):
    """As TrainingFreeStrategy (tests/avalanche_tmc/training/strategies/test_training_free.py): a plugin's
    stop_training() ends the statistics pass, the forward callbacks fire once per batch, and arguments the
    strategy cannot honour are refused with what to do."""
    from avalanche.core import SupervisedPlugin
    from avalanche.training.plugins import LRSchedulerPlugin

    class StopAfterOne(SupervisedPlugin):
        def __init__(self):
            super().__init__()
            self.forwards = self.iterations = 0

        def after_forward(self, strategy, **kwargs):
            self.forwards += 1

        def after_training_iteration(self, strategy, **kwargs):
            self.iterations += 1
            strategy.stop_training()

    stopper = StopAfterOne()
    learner = strategy(Adaptation("none"), plugins=[stopper], train_mb_size=32, device=device)
    learner.train(digits3.train_stream[0])
    assert stopper.iterations == stopper.forwards == 1 < len(digits3.train_stream[0].dataset) / 32
    assert float(learner.statistics.summed()["class_count"].sum()) == 32  # the one batch seen
    with pytest.raises(ValueError, match="train_epochs=1 or leave it out"):
        strategy(train_epochs=3)
    sgd = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    with pytest.raises(ValueError, match="remove it from plugins"):
        strategy(plugins=[LRSchedulerPlugin(torch.optim.lr_scheduler.StepLR(sgd, step_size=1))])


def test_bad_arguments_are_refused_with_advice():
    with pytest.raises(ValueError, match="replace it first"):
        AdaptThenComposeStrategy(network=seeded_resnet(), num_classes=7)
    with pytest.raises(TypeError, match="Adaptation"):
        AdaptThenComposeStrategy(network=seeded_resnet(), num_classes=10, adaptation=[])


def test_the_statistics_belong_to_the_given_network():
    net = seeded_resnet()
    learner = AdaptThenComposeStrategy(network=net, num_classes=10, evaluator=quiet_evaluator())
    assert learner.base_network() is net and learner.model.features is not net
