"""Adapt once, then compose by statistics (avalanche_tmc.adaptation), checked against
closed forms computed independently on the adapted network's features."""

import copy
from dataclasses import replace

import pytest
import torch
from torch.utils.data import TensorDataset

from avalanche_tmc import Adaptation, AdaptThenComposeStrategy, LayerFeatures, adapt_features, select_adaptation
from avalanche_tmc.adaptation import TangentFeatures, stratified_holdout
from tests.helpers import TinyResNet, digits_benchmark, digits_splits, quiet_evaluator


@pytest.fixture(scope="module")
def digits():
    _, train, test = digits_splits(seed=0, pretrain_per_class=0)
    return digits_benchmark(train, test, n_experiences=3)


def network(seed: int = 0) -> TinyResNet:
    torch.manual_seed(seed)
    return TinyResNet(width=8, num_classes=10)


def strategy(adaptation=Adaptation(lr=0.05, epochs=2, batch_size=16), **kwargs) -> AdaptThenComposeStrategy:
    return AdaptThenComposeStrategy(network=network(), num_classes=10, adaptation=adaptation,
                                    evaluator=quiet_evaluator(), **kwargs)


def features_of(model_features, experiences, dtype=torch.float64):
    xs, ys = [], []
    for exp in experiences:
        data = exp.dataset
        x = torch.stack([data[i][0] for i in range(len(data))])
        xs.append(model_features(x).flatten(1).to(dtype))
        ys.append(torch.tensor([int(data[i][1]) for i in range(len(data))]))
    phi = torch.cat(xs)
    return torch.cat([phi, torch.ones_like(phi[:, :1])], 1), torch.cat(ys)


def closed_form_ridge(phi, y, lam):
    targets = torch.nn.functional.one_hot(y, 10).to(phi.dtype)
    return torch.linalg.solve(phi.T @ phi + lam * torch.eye(phi.shape[1], dtype=phi.dtype), phi.T @ targets)


@pytest.mark.parametrize("how", ["fine-tune", "tangent"])
def test_head_after_a_run_is_the_closed_form_on_all_experiences_adapted_features(digits, how):
    learner = strategy(Adaptation(how=how, lr=0.05 if how == "fine-tune" else 1e-2, epochs=2, batch_size=16))
    for exp in digits.train_stream:
        learner.train(exp)
    assert learner.adapted_on == 0 and learner.adaptation_choice.how == how
    features = learner.model.features
    if how == "tangent":
        assert isinstance(features, TangentFeatures) and any(v.abs().max() > 0 for v in features.delta.values())
    phi, y = features_of(features, digits.train_stream)
    expected = closed_form_ridge(phi, y, learner.model.ridge_lambda)
    torch.testing.assert_close(learner.model.weight.double(), expected, rtol=1e-3, atol=1e-4)
    # and the adapted features differ from the pre-trained ones (the adaptation did something)
    pretrained, _ = features_of(adapt_features(network(), digits.train_stream[0].dataset, Adaptation(how="none")),
                                digits.train_stream[:1])
    assert not torch.allclose(pretrained, features_of(features, digits.train_stream[:1])[0])


def test_forgetting_a_later_experience_equals_never_adding_it(digits):
    full, without = strategy(), strategy()
    for exp in digits.train_stream:
        full.train(exp)
        if exp.current_experience != 1:
            without.train(exp)
    full.forget(1)
    assert full.model.ridge_lambda == pytest.approx(without.model.ridge_lambda, rel=1e-9)
    torch.testing.assert_close(full.model.weight, without.model.weight, rtol=1e-4, atol=1e-5)


def test_forgetting_the_adaptation_experience_is_refused_unless_inexact(digits):
    learner = strategy()
    for exp in digits.train_stream[:2]:
        learner.train(exp)
    with pytest.raises(ValueError, match="adapted the feature network"):
        learner.forget(0)
    with pytest.warns(UserWarning, match="not the model that never saw it"):
        learner.forget(0, inexact=True)
    assert list(learner.components) == [1]


def test_with_a_separate_adaptation_set_every_experience_is_forgotten_exactly(digits):
    pretrain, _, _ = digits_splits(seed=0, pretrain_per_class=20)
    adaptation_set = TensorDataset(torch.as_tensor(pretrain[0]), torch.as_tensor(pretrain[1]))
    full, without = strategy(adaptation_data=adaptation_set), strategy(adaptation_data=adaptation_set)
    for exp in digits.train_stream:
        full.train(exp)
        if exp.current_experience != 0:
            without.train(exp)
    assert full.adapted_on == without.adapted_on == "adaptation set"
    full.forget(0)  # no refusal, no warning: exact
    torch.testing.assert_close(full.model.weight, without.model.weight, rtol=1e-4, atol=1e-5)


def test_adaptation_is_deterministic_for_a_seed(digits):
    data = digits.train_stream[0].dataset
    x = torch.stack([data[i][0] for i in range(8)])
    for how in ("fine-tune", "tangent"):
        a = adapt_features(network(), data, Adaptation(how=how, lr=1e-2, epochs=1, seed=3))
        b = adapt_features(network(), data, Adaptation(how=how, lr=1e-2, epochs=1, seed=3))
        c = adapt_features(network(), data, Adaptation(how=how, lr=1e-2, epochs=1, seed=4))
        assert torch.equal(a(x), b(x)) and not torch.equal(a(x), c(x))


def test_adaptation_never_modifies_the_given_network(digits):
    net = network()
    before = copy.deepcopy(net.state_dict())
    adapt_features(net, digits.train_stream[0].dataset, Adaptation(lr=0.1, epochs=1))
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())


def test_train_from_adapts_only_the_later_parameters(digits):
    net = network()
    features = adapt_features(net, digits.train_stream[0].dataset, Adaptation(lr=0.1, epochs=1, train_from="block"))
    adapted = dict(features.named_parameters())
    for name, value in net.named_parameters():
        if name.startswith("stem."):
            assert torch.equal(adapted[name], value)
        elif name.startswith("block.") and value.dim() > 1:
            assert not torch.equal(adapted[name], value)
    with pytest.raises(ValueError, match="names no module"):
        adapt_features(net, digits.train_stream[0].dataset, Adaptation(train_from="nowhere"))


def test_selection_looks_only_at_a_held_out_part_of_the_adaptation_data(digits):
    data = digits.train_stream[0].dataset
    kept, held = stratified_holdout([int(data[i][1]) for i in range(len(data))], 0.25, seed=0)
    assert not set(kept) & set(held) and sorted(kept + held) == list(range(len(data)))
    seen = []
    real = adapt_features

    def recording(net, subset, adaptation, device="cpu"):
        seen.append(list(subset.indices))
        return real(net, subset, adaptation, device)

    import avalanche_tmc.training.adaptation as module

    module.adapt_features, saved = recording, module.adapt_features
    try:
        candidates = [Adaptation(how="none"), Adaptation(lr=0.05, epochs=2), Adaptation(lr=1e30, epochs=1)]
        best, scores = select_adaptation(network(), data, candidates, val_fraction=0.25, seed=0)
    finally:
        module.adapt_features = saved
    assert all(indices == kept for indices in seen)  # adapted on the kept part only
    assert [c for c, _ in scores] == candidates and scores[2][1] == 0.0  # the diverged candidate scores 0
    assert best is max(scores, key=lambda item: item[1])[0]


def test_bad_arguments_are_refused_with_advice():
    with pytest.raises(ValueError, match="how must be one of"):
        Adaptation(how="magic")
    with pytest.raises(ValueError, match="positive finite lr"):
        Adaptation(lr=-1.0)
    with pytest.raises(ValueError, match="replace it first"):
        AdaptThenComposeStrategy(network=network(), num_classes=7)
    with pytest.raises(TypeError, match="Adaptation"):
        AdaptThenComposeStrategy(network=network(), num_classes=10, adaptation=[])


def test_a_failed_train_call_leaves_the_features_unadapted(digits):
    learner = strategy()
    before = learner.model.features

    def boom(**kwargs):
        raise RuntimeError("interrupted")

    learner.training_epoch, saved = boom, learner.training_epoch
    with pytest.raises(RuntimeError, match="interrupted"):
        learner.train(digits.train_stream[0])
    learner.training_epoch = saved
    assert learner.model.features is before and learner.adapted_on is None
    learner.train(digits.train_stream[0])
    assert learner.adapted_on == 0


def test_layer_features_are_the_pooled_output_of_that_layer(digits):
    net = network().eval()
    x = torch.stack([digits.train_stream[0].dataset[i][0] for i in range(8)])
    with torch.no_grad():
        stem = net.stem(x)
        torch.testing.assert_close(LayerFeatures(net, "stem")(x), stem.mean((2, 3)))
        torch.testing.assert_close(LayerFeatures(net, "block")(x), net.block(stem).mean((2, 3)))
        torch.testing.assert_close(LayerFeatures(net, "fc")(x), net(x))
    with pytest.raises(ValueError, match="has no module 'nowhere'"):
        LayerFeatures(net, "nowhere")


def test_head_read_at_an_earlier_layer_is_the_closed_form_on_that_layers_pooled_output(digits):
    learner = strategy(Adaptation(how="none", layer="block"))
    for exp in digits.train_stream:
        learner.train(exp)
    net = network().eval()
    with torch.no_grad():
        phi, y = features_of(lambda x: net.block(net.stem(x)).mean((2, 3)), digits.train_stream)
    expected = closed_form_ridge(phi, y, learner.model.ridge_lambda)
    torch.testing.assert_close(learner.model.weight.double(), expected, rtol=1e-3, atol=1e-4)


def test_candidates_that_differ_only_in_the_layer_share_one_fine_tuning(digits, monkeypatch):
    import avalanche_tmc.training.adaptation as module

    data = digits.train_stream[0].dataset
    trained = Adaptation(lr=0.05, epochs=1, batch_size=16)
    candidates = [trained, replace(trained, layer="stem"), replace(trained, layer="block"), Adaptation(how="none")]
    alone = [select_adaptation(network(), data, [c], seed=0, projection_dim=64)[1][0] for c in candidates]
    calls = []
    real = module.fine_tune
    monkeypatch.setattr(module, "fine_tune", lambda *a, **k: calls.append(1) or real(*a, **k))
    best, scores = select_adaptation(network(), data, candidates, seed=0, projection_dim=64)
    assert len(calls) == 1  # one fine-tuning read at three layers
    assert scores == alone  # the same scores as each candidate selected on its own
    assert best is max(scores, key=lambda item: item[1])[0]


def test_a_tangent_adaptation_is_read_at_the_heads_input_only():
    with pytest.raises(ValueError, match="head's input only"):
        Adaptation(how="tangent", layer="block")
    assert "pooled block" in Adaptation(how="none", layer="block").describe()


@pytest.mark.parametrize("how", ["fine-tune", "tangent"])
def test_adapting_only_the_head_leaves_the_features_as_they_are(digits, how):
    from avalanche_tmc import penultimate

    data = digits.train_stream[0].dataset
    x = torch.stack([data[i][0] for i in range(8)])
    features = adapt_features(network(), data, Adaptation(how=how, lr=1e-2, epochs=1, train_from="fc"))
    torch.testing.assert_close(features(x), penultimate(network())(x), rtol=0, atol=0)


def test_avalanches_contract_stop_training_forward_callbacks_and_refusals(digits):
    """As AnalyticHeadStrategy (tests/avalanche_tmc/test_analytic.py): a plugin's stop_training()
    ends the statistics pass, the forward callbacks fire once per batch, and arguments the
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
    learner = strategy(Adaptation("none"), plugins=[stopper], train_mb_size=32)
    learner.train(digits.train_stream[0])
    assert stopper.iterations == stopper.forwards == 1 < len(digits.train_stream[0].dataset) / 32
    assert float(learner.statistics.summed()["class_count"].sum()) == 32  # the one batch seen
    with pytest.raises(ValueError, match="train_epochs=1 or leave it out"):
        strategy(train_epochs=3)
    sgd = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1)
    with pytest.raises(ValueError, match="remove it from plugins"):
        strategy(plugins=[LRSchedulerPlugin(torch.optim.lr_scheduler.StepLR(sgd, step_size=1))])
