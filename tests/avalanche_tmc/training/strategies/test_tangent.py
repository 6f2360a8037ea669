"""TMC / TME / TMC-Seq strategies on a small real Avalanche benchmark (sklearn digits).

Each test compares what the strategy reports with an independent computation: components
trained inside a continual run against the same experience trained alone, forgetting
against a run that never saw the task, Avalanche's accuracy metric against accuracy
recomputed by hand from the components. On the tests' ``device``.
"""

import copy

import pytest
import torch
from avalanche.core import SupervisedPlugin
from avalanche.evaluation.metrics import accuracy_metrics
from avalanche.training.plugins import EvaluationPlugin

from avalanche_tmc import TangentModel, TMCSeqStrategy, TMCStrategy, TMEStrategy, compose
from tests.helpers import NUM_CLASSES, TinyResNet, digits_benchmark, digits_splits, tmc

EPOCHS = 2


@pytest.fixture(scope="module")
def digits():
    pre, train, test = digits_splits(seed=0, pretrain_per_class=0)
    # a small slice keeps the tests fast: 15 train / 8 test images per class
    def take(split, per_class):
        x, y = split
        idx = torch.cat([torch.nonzero(torch.as_tensor(y) == c)[:per_class, 0] for c in range(10)])
        return x[idx.numpy()], y[idx.numpy()]

    return take(train, 15), take(test, 8)


@pytest.fixture(scope="module")
def backbone():
    torch.manual_seed(0)
    return TinyResNet(width=6, num_classes=10)


def make_strategy(cls, backbone, device, **kwargs):
    model = TangentModel(copy.deepcopy(backbone), num_classes=10)
    evaluator = EvaluationPlugin(accuracy_metrics(experience=True, stream=True), loggers=[])
    return cls(model=model, lr=1e-2, train_mb_size=16, train_epochs=EPOCHS, eval_mb_size=64,
               evaluator=evaluator, device=device, **kwargs)


def train_all(strategy, experiences):
    for experience in experiences:
        strategy.train(experience, shuffle=False)  # deterministic order: runs are comparable


def assert_deltas_close(a, b, **tol):
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], **tol)


def by_hand_accuracy(model, experience, logits_fn):
    device = next(model.parameters()).device
    x = torch.stack([experience.dataset[i][0] for i in range(len(experience.dataset))]).to(device)
    y = torch.tensor([experience.dataset[i][1] for i in range(len(experience.dataset))]).to(device)
    with torch.no_grad():
        return (logits_fn(model, x).argmax(1) == y).float().mean().item()


def test_components_equal_independent_training_and_compose_to_the_mean(digits, backbone, device):
    bm = digits_benchmark(*digits, n_experiences=3)
    strategy = make_strategy(TMCStrategy, backbone, device)
    train_all(strategy, bm.train_stream)
    for exp in bm.train_stream:
        alone = make_strategy(TMCStrategy, backbone, device)
        alone.train(exp, shuffle=False)
        assert_deltas_close(strategy.components[exp.current_experience], alone.components[exp.current_experience])
    expected = compose(list(strategy.components.values()))
    assert_deltas_close(strategy.model.delta, expected)
    assert any(v.abs().max() > 0 for v in expected.values())


def test_forget_equals_the_run_that_never_saw_the_task(digits, backbone, device):
    bm = digits_benchmark(*digits, n_experiences=3)
    full = make_strategy(TMCStrategy, backbone, device)
    train_all(full, bm.train_stream)
    full.forget(1)
    without = make_strategy(TMCStrategy, backbone, device)
    train_all(without, [bm.train_stream[0], bm.train_stream[2]])
    assert_deltas_close(full.model.delta, without.model.delta, rtol=1e-5, atol=1e-6)
    acc_full = full.eval(bm.test_stream)
    acc_without = without.eval(bm.test_stream)
    key = "Top1_Acc_Stream/eval_phase/test_stream/Task000"
    assert acc_full[key] == pytest.approx(acc_without[key], abs=1e-6)


def test_sample_weighting_composes_by_experience_size(digits, backbone, device):
    x, y = digits[0]
    keep = (y != 0) | (torch.arange(len(y)).numpy() % 3 == 0)  # class 0 under-represented
    bm = digits_benchmark((x[keep], y[keep]), digits[1], n_experiences=2)
    strategy = make_strategy(TMCStrategy, backbone, device, weighting="samples")
    train_all(strategy, bm.train_stream)
    sizes = [len(e.dataset) for e in bm.train_stream]
    assert sizes[0] != sizes[1]
    expected = compose(list(strategy.components.values()), sizes)
    assert_deltas_close(strategy.model.delta, expected)


@pytest.mark.parametrize("task_labels", [False, True])
def test_tme_accuracy_is_the_softmax_ensemble_of_the_components(digits, backbone, task_labels, device):
    bm = digits_benchmark(*digits, n_experiences=3, task_labels=task_labels)
    strategy = make_strategy(TMEStrategy, backbone, device)
    train_all(strategy, bm.train_stream)
    metrics = strategy.eval(bm.test_stream)
    deltas = list(strategy.components.values())
    for exp in bm.test_stream:
        allowed = torch.zeros(10, dtype=torch.bool, device=device)
        allowed[sorted(exp.classes_in_this_experience) if task_labels else slice(None)] = True

        def ensemble_then_select(m, x):
            probs = torch.stack([torch.softmax(m.forward_with(x, d), dim=1) for d in deltas]).mean(0)
            return probs.masked_fill(~allowed, -1.0)

        expected = by_hand_accuracy(strategy.model, exp, ensemble_then_select)
        key = f"Top1_Acc_Exp/eval_phase/test_stream/Task{exp.task_label:03d}/Exp{exp.current_experience:03d}"
        assert metrics[key] == pytest.approx(expected, abs=1e-6)


def test_trained_tme_evaluates_as_tmc_after_switching_mode(digits, backbone, device):
    bm = digits_benchmark(*digits, n_experiences=2)
    tme = make_strategy(TMEStrategy, backbone, device, beta=25.0)  # TMC's β: the same components
    train_all(tme, bm.train_stream)
    tmc = make_strategy(TMCStrategy, backbone, device)
    train_all(tmc, bm.train_stream)
    tme.tangent_plugin.mode = "tmc"
    key = "Top1_Acc_Stream/eval_phase/test_stream/Task000"
    assert tme.eval(bm.test_stream)[key] == pytest.approx(tmc.eval(bm.test_stream)[key], abs=1e-6)
    with pytest.raises(ValueError, match="TMC-Seq"):
        tme.tangent_plugin.mode = "tmc-seq"


def test_task_incremental_evaluation_masks_to_the_task_classes(digits, backbone, device):
    bm = digits_benchmark(*digits, n_experiences=5, task_labels=True)
    strategy = make_strategy(TMCStrategy, backbone, device)
    train_all(strategy, bm.train_stream)
    metrics = strategy.eval(bm.test_stream)
    gains = []
    for exp in bm.test_stream:
        classes = torch.tensor(sorted(exp.classes_in_this_experience), device=device)

        def masked(m, x):
            out = torch.full((len(x), 10), float("-inf"), device=x.device)
            out[:, classes] = m(x)[:, classes]
            return out

        expected = by_hand_accuracy(strategy.model, exp, masked)
        task = exp.task_label
        got = metrics[f"Top1_Acc_Exp/eval_phase/test_stream/Task{task:03d}/Exp{exp.current_experience:03d}"]
        assert got == pytest.approx(expected, abs=1e-6)
        # a sample right under the full argmax is right within its task: masking never hurts
        unmasked = by_hand_accuracy(strategy.model, exp, lambda m, x: m(x))
        assert got >= unmasked - 1e-9
        gains.append(got - unmasked)
    assert sum(gains) > 0  # and here it did act


class _DeltaAtStart(SupervisedPlugin):
    """Records the model's δ when each experience starts training."""

    def __init__(self):
        super().__init__()
        self.starts = []

    def before_training_epoch(self, strategy, **kwargs):
        if strategy.clock.train_exp_epochs == 0:
            self.starts.append(strategy.model.delta)


def test_tmc_seq_starts_from_the_previous_composition_and_refuses_forget(digits, backbone, device):
    bm = digits_benchmark(*digits, n_experiences=3)
    recorder = _DeltaAtStart()
    strategy = make_strategy(TMCSeqStrategy, backbone, device, plugins=[recorder])
    composed_before = []
    for exp in bm.train_stream:
        composed_before.append(strategy.model.delta)
        strategy.train(exp, shuffle=False)
    assert all(torch.count_nonzero(v) == 0 for v in recorder.starts[0].values())
    for start, before in zip(recorder.starts[1:], composed_before[1:]):
        assert_deltas_close(start, before)
        assert any(torch.count_nonzero(v) for v in start.values())
    with pytest.raises(ValueError, match="TMC-Seq"):
        strategy.forget(0)


def test_tmc_starts_every_component_at_zero(digits, backbone, device):
    bm = digits_benchmark(*digits, n_experiences=3)
    recorder = _DeltaAtStart()
    strategy = make_strategy(TMCStrategy, backbone, device, plugins=[recorder])
    train_all(strategy, bm.train_stream)
    assert len(recorder.starts) == 3
    for start in recorder.starts:
        assert all(torch.count_nonzero(v) == 0 for v in start.values())


def test_periodic_evaluation_does_not_disturb_training(digits, backbone, device):
    bm = digits_benchmark(*digits, n_experiences=2)
    plain = make_strategy(TMCStrategy, backbone, device)
    train_all(plain, bm.train_stream)
    periodic = make_strategy(TMCStrategy, backbone, device, eval_every=1)
    for exp in bm.train_stream:
        periodic.train(exp, eval_streams=[bm.test_stream], shuffle=False)
    assert_deltas_close(plain.model.delta, periodic.model.delta)


def test_o1_memory_mode_and_errors(digits, backbone, device):
    bm = digits_benchmark(*digits, n_experiences=2)
    strategy = make_strategy(TMCStrategy, backbone, device, keep_components=False)
    train_all(strategy, bm.train_stream)
    with pytest.raises(RuntimeError, match="not stored"):
        strategy.components
    with pytest.raises(ValueError, match="keep_components"):
        make_strategy(TMEStrategy, backbone, device, keep_components=False)
    with pytest.raises(TypeError, match="TangentModel"):
        TMCStrategy(model=copy.deepcopy(backbone))


def test_strategy_refuses_bad_lr():
    for lr in (-1e-3, 0.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="lr must be a positive finite number"):
            tmc(lr=lr)


@pytest.mark.parametrize("epochs", [0, -1, 1.5, True])
def test_zero_training_epochs_are_refused(epochs):
    """Issue 21: train_epochs=0 composed a zero δ with weight 1, diluting the others."""
    with pytest.raises(ValueError, match="train_epochs must be an integer >= 1"):
        TMCStrategy(model=TangentModel(TinyResNet(num_classes=3), num_classes=NUM_CLASSES), train_epochs=epochs)


@pytest.mark.parametrize("strategy", [TMCStrategy, TMEStrategy, TMCSeqStrategy])
def test_every_tangent_strategy_takes_avalanche_s_positional_call(strategy):
    """``Strategy(model, optimizer, criterion)``, as Avalanche's strategies are called: each
    lands where it belongs (TME's own ``beta`` once took the model); TME's RSL default stays 5."""
    from avalanche_tmc import RescaledSquareLoss

    model = TangentModel(TinyResNet(num_classes=NUM_CLASSES))
    optimizer = torch.optim.Adam(model.delta_parameters(), lr=1e-3)
    criterion = RescaledSquareLoss(beta=7.0)
    built = strategy(model, optimizer, criterion)
    assert (built.model, built.optimizer, built._criterion) == (model, optimizer, criterion)
    assert TMEStrategy(model=TangentModel(TinyResNet(num_classes=NUM_CLASSES)))._criterion.beta == 5.0
