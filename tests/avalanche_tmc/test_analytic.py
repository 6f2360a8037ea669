"""AnalyticHeadStrategy: the head after a continual run equals the closed form on the
union of the data; forgetting equals the run without the experience; NCM by hand."""

import copy

import pytest
import torch
import torch.nn.functional as F
from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.training.plugins import EvaluationPlugin

from avalanche_tmc.analytic import AnalyticClassifier, AnalyticHeadStrategy, penultimate
from tests.helpers import TinyResNet, digits_benchmark, digits_splits


@pytest.fixture(scope="module")
def setup():
    _, train, test = digits_splits(seed=0, pretrain_per_class=0)
    torch.manual_seed(0)
    net = TinyResNet(width=8, num_classes=10)
    return digits_benchmark(train, test, n_experiences=3), penultimate(net)


def strategy_for(features, **kwargs):
    model = AnalyticClassifier(copy.deepcopy(features), 10, **{k: kwargs.pop(k) for k in ("head", "projection_dim")
                                                               if k in kwargs})
    evaluator = EvaluationPlugin(accuracy_metrics(stream=True, experience=True), loggers=[])
    return AnalyticHeadStrategy(model=model, evaluator=evaluator, **kwargs)


def stacked(experiences):
    xs, ys = [], []
    for exp in experiences:
        for i in range(len(exp.dataset)):
            x, y = exp.dataset[i][0], exp.dataset[i][1]
            xs.append(x)
            ys.append(y)
    return torch.stack(xs), torch.tensor(ys)


@pytest.mark.parametrize("projection_dim", [None, 64])
def test_continual_head_equals_ridge_on_the_union(setup, projection_dim):
    bm, features = setup
    strategy = strategy_for(features, projection_dim=projection_dim, ridge_lambda=0.5)
    for exp in bm.train_stream:
        strategy.train(exp)
    x, y = stacked(bm.train_stream)
    phi = strategy.model.embed(x).double()
    target = F.one_hot(y, 10).double()
    expected = torch.linalg.solve(phi.T @ phi + 0.5 * torch.eye(phi.shape[1], dtype=torch.float64), phi.T @ target)
    torch.testing.assert_close(strategy.model.weight.double(), expected, rtol=1e-4, atol=1e-5)


def test_forget_equals_never_learning_and_gcv_picks_lambda(setup):
    bm, features = setup
    full = strategy_for(features)
    for exp in bm.train_stream:
        full.train(exp)
    assert full.model.ridge_lambda is not None and full.model.ridge_lambda > 0
    full.forget(1)
    without = strategy_for(features)
    for exp in (bm.train_stream[0], bm.train_stream[2]):
        without.train(exp)
    torch.testing.assert_close(full.model.weight, without.model.weight, rtol=1e-4, atol=1e-5)
    key = "Top1_Acc_Stream/eval_phase/test_stream/Task000"
    assert full.eval(bm.test_stream)[key] == pytest.approx(without.eval(bm.test_stream)[key], abs=1e-6)


def test_ncm_predicts_the_nearest_class_mean_by_cosine(setup):
    bm, features = setup
    strategy = strategy_for(features, head="ncm")
    strategy.train(bm.train_stream[0])
    x, y = stacked([bm.train_stream[0]])
    phi = features(x).flatten(1)
    seen = sorted(bm.train_stream[0].classes_in_this_experience)
    means = torch.stack([phi[y == c].mean(0) for c in seen])
    expected = torch.tensor(seen)[(F.normalize(phi, dim=1) @ F.normalize(means, dim=1).T).argmax(1)]
    xt, _ = stacked([bm.test_stream[0]])
    phit = features(xt).flatten(1)
    expected_test = torch.tensor(seen)[(F.normalize(phit, dim=1) @ F.normalize(means, dim=1).T).argmax(1)]
    assert torch.equal(strategy.model(x).argmax(1), expected)
    assert torch.equal(strategy.model(xt).argmax(1), expected_test)  # unseen classes are never predicted


def test_errors(setup):
    _, features = setup
    with pytest.raises(ValueError, match="head"):
        AnalyticClassifier(features, 10, head="svm")
    with pytest.raises(TypeError, match="AnalyticClassifier"):
        AnalyticHeadStrategy(model=features)
