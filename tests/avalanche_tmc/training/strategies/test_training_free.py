"""TrainingFreeStrategy: the head after a continual run equals the closed form on the
union of the data; forgetting equals the run without the experience; NCM by hand. On the
tests' ``device``."""

import copy

import pytest
import torch
import torch.nn.functional as F
from avalanche.core import SupervisedPlugin
from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.training.plugins import EarlyStoppingPlugin, EvaluationPlugin, LRSchedulerPlugin

from avalanche_tmc import TrainingFreeClassifier, TrainingFreeStrategy, penultimate
from tests.helpers import TinyResNet, digits_benchmark, digits_splits


@pytest.fixture(scope="module")
def setup():
    _, train, test = digits_splits(seed=0, pretrain_per_class=0)
    torch.manual_seed(0)
    net = TinyResNet(width=8, num_classes=10)
    return digits_benchmark(train, test, n_experiences=3), penultimate(net)


def strategy_for(features, device, **kwargs):
    model = TrainingFreeClassifier(copy.deepcopy(features), 10, **{k: kwargs.pop(k) for k in ("head", "projection_dim")
                                                               if k in kwargs})
    evaluator = EvaluationPlugin(accuracy_metrics(stream=True, experience=True), loggers=[])
    return TrainingFreeStrategy(model=model, evaluator=evaluator, device=device, **kwargs)


def stacked(experiences):
    xs, ys = [], []
    for exp in experiences:
        for i in range(len(exp.dataset)):
            x, y = exp.dataset[i][0], exp.dataset[i][1]
            xs.append(x)
            ys.append(y)
    return torch.stack(xs), torch.tensor(ys)


@pytest.mark.parametrize("projection_dim", [None, 64])
def test_continual_head_equals_ridge_on_the_union(setup, projection_dim, device):
    bm, features = setup
    strategy = strategy_for(features, device, projection_dim=projection_dim, ridge_lambda=0.5)
    for exp in bm.train_stream:
        strategy.train(exp)
    x, y = stacked(bm.train_stream)
    phi = strategy.model.embed(x.to(device)).double().cpu()
    target = F.one_hot(y, 10).double()
    expected = torch.linalg.solve(phi.T @ phi + 0.5 * torch.eye(phi.shape[1], dtype=torch.float64), phi.T @ target)
    torch.testing.assert_close(strategy.model.weight.double().cpu(), expected, rtol=1e-4, atol=1e-5)


def test_forget_equals_never_learning_and_gcv_picks_lambda(setup, device):
    bm, features = setup
    full = strategy_for(features, device)
    for exp in bm.train_stream:
        full.train(exp)
    assert full.model.ridge_lambda is not None and full.model.ridge_lambda > 0
    full.forget(1)
    without = strategy_for(features, device)
    for exp in (bm.train_stream[0], bm.train_stream[2]):
        without.train(exp)
    torch.testing.assert_close(full.model.weight, without.model.weight, rtol=1e-4, atol=1e-5)
    key = "Top1_Acc_Stream/eval_phase/test_stream/Task000"
    assert full.eval(bm.test_stream)[key] == pytest.approx(without.eval(bm.test_stream)[key], abs=1e-6)


def test_ncm_predicts_the_nearest_class_mean_by_cosine(setup, device):
    bm, features = setup
    strategy = strategy_for(features, device, head="ncm")
    strategy.train(bm.train_stream[0])
    features = copy.deepcopy(features).to(device)  # the same features, on the strategy's device
    x, y = stacked([bm.train_stream[0]])
    x, y = x.to(device), y.to(device)
    phi = features(x).flatten(1)
    seen = sorted(bm.train_stream[0].classes_in_this_experience)
    means = torch.stack([phi[y == c].mean(0) for c in seen])
    seen_classes = torch.tensor(seen, device=device)
    expected = seen_classes[(F.normalize(phi, dim=1) @ F.normalize(means, dim=1).T).argmax(1)]
    xt = stacked([bm.test_stream[0]])[0].to(device)
    phit = features(xt).flatten(1)
    expected_test = seen_classes[(F.normalize(phit, dim=1) @ F.normalize(means, dim=1).T).argmax(1)]
    assert torch.equal(strategy.model(x).argmax(1), expected)
    assert torch.equal(strategy.model(xt).argmax(1), expected_test)  # unseen classes are never predicted


def test_errors(setup):
    _, features = setup
    with pytest.raises(ValueError, match="head"):
        TrainingFreeClassifier(features, 10, head="svm")
    with pytest.raises(TypeError, match="TrainingFreeClassifier"):
        TrainingFreeStrategy(model=features)


# ---------------------------------------------------------------------------- Avalanche's strategy contract


class _Recorder(SupervisedPlugin):
    """Counts forward callbacks and training iterations; stops training after ``stop_at``
    iterations (as EarlyStoppingPlugin does, through ``stop_training()``); doubles the input
    in ``before_forward`` to check that the features see a changed ``mb_x``."""

    def __init__(self, stop_at=None, scale=1.0):
        super().__init__()
        self.stop_at, self.scale = stop_at, scale
        self.n_before = self.n_after = self.iterations = 0
        self.losses = []

    def before_forward(self, strategy, **kwargs):
        self.n_before += 1
        strategy.mbatch[0] = strategy.mbatch[0] * self.scale

    def after_forward(self, strategy, **kwargs):
        self.n_after += 1
        assert strategy.mb_output.shape == (len(strategy.mb_y), 10)

    def after_training_iteration(self, strategy, **kwargs):
        self.iterations += 1
        self.losses.append(float(strategy.loss))
        if self.stop_at is not None and self.iterations >= self.stop_at:
            strategy.stop_training()


def _all_stats(strategy):
    return strategy.statistics.summed()


def test_stop_training_ends_the_pass_and_keeps_the_batches_seen(setup, device):
    bm, features = setup
    recorder = _Recorder(stop_at=2)
    strategy = strategy_for(features, device, plugins=[recorder], train_mb_size=32)
    strategy.train(bm.train_stream[0])
    assert recorder.iterations == 2 < len(bm.train_stream[0].dataset) / 32
    # the statistics are those of the first two batches exactly (the loader does not shuffle here: compare counts)
    assert float(_all_stats(strategy)["class_count"].sum()) == 64
    # the next experience trains again (Avalanche resets the flag between experiences)
    recorder.stop_at = None
    strategy.train(bm.train_stream[1])
    assert recorder.iterations == 2 + -(-len(bm.train_stream[1].dataset) // 32)


def test_forward_callbacks_fire_and_see_the_changed_input(setup, device):
    bm, features = setup
    plain, doubled = _Recorder(), _Recorder(scale=2.0)
    a = strategy_for(features, device, plugins=[plain])
    b = strategy_for(features, device, plugins=[doubled])
    a.train(bm.train_stream[0])
    b.train(bm.train_stream[0])
    batches = -(-len(bm.train_stream[0].dataset) // 256)
    assert plain.n_before == plain.n_after == plain.iterations == batches
    # the features were computed from the doubled images: other statistics
    assert not torch.allclose(_all_stats(a)["gram"], _all_stats(b)["gram"])
    # the logged loss is the criterion of the head before this experience (no head yet: log(10))
    assert plain.losses[0] == pytest.approx(torch.log(torch.tensor(10.0)).item(), rel=1e-5)


def test_avalanche_keyword_arguments_are_taken_or_refused_with_what_to_do(setup, device):
    bm, features = setup
    strategy = strategy_for(features, device, train_epochs=1, eval_every=1)
    strategy.train(bm.train_stream[0], eval_streams=[bm.test_stream[0]])
    with pytest.raises(ValueError, match="train_epochs=1 or leave it out"):
        strategy_for(features, device, train_epochs=2)
    with pytest.raises(ValueError, match="leave optimizer out"):
        strategy_for(features, device, optimizer=torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1))
    scheduler = LRSchedulerPlugin(torch.optim.lr_scheduler.StepLR(
        torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=0.1), step_size=1))
    with pytest.raises(ValueError, match="LRSchedulerPlugin has no learning rate to schedule: remove it"):
        strategy_for(features, device, plugins=[scheduler])


def test_avalanche_run_strategy_and_early_stopping(setup, capsys, device):
    """Avalanche's own helper (``tests.training.test_strategy_utils.run_strategy``, installed with
    avalanche-lib) and its EarlyStoppingPlugin run on the strategy."""
    import importlib.util
    from pathlib import Path

    import avalanche

    path = Path(avalanche.__file__).parents[1] / "tests" / "training" / "test_strategy_utils.py"
    spec = importlib.util.spec_from_file_location("avalanche_test_strategy_utils", path)  # (our `tests` hides it)
    helper = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(helper)
    run_strategy = helper.run_strategy
    bm, features = setup
    strategy = strategy_for(features, device, plugins=[EarlyStoppingPlugin(patience=1, val_stream_name="test_stream")])
    run_strategy(bm, strategy)
    assert "Top1_Acc_Stream/eval_phase/test_stream" in capsys.readouterr().out
    assert list(strategy.components) == [0, 1, 2]
