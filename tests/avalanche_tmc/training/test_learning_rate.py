"""The default learning rate does no harm to a trained network, and a climbing loss warns
(issue 31, item 1).

A small CNN trained on digits (its own head kept) is continued with TMC: at the default
learning rate (the paper's 1e-4) it keeps its accuracy and nothing warns; at 1e-2 the RSL
climbs, accuracy collapses, and :class:`~avalanche_tmc.LossIncreaseWarning` says so once,
with the numbers a separate recorder measured. The rule itself is checked on made-up loss
traces, and the defaults' one vocabulary (strategies, command line, README quick start)."""

import re
import warnings
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from avalanche.core import SupervisedPlugin
from torch import nn

from avalanche_tmc import (
    DEFAULT_LR,
    DivergenceGuardPlugin,
    LossIncreaseWarning,
    TangentModel,
    TMCSeqStrategy,
    TMCStrategy,
    TMEStrategy,
)
from avalanche_tmc.cli import build_parser
from avalanche_tmc.factories.models import small_cnn
from tests.helpers import TinyResNet, digits_benchmark, digits_splits, quiet_evaluator

ROOT = Path(__file__).resolve().parents[3]


# ---------------------------------------------------------------------------- one vocabulary


def test_the_default_learning_rate_is_the_papers():
    assert DEFAULT_LR == 1e-4
    for cls in (TMCStrategy, TMEStrategy, TMCSeqStrategy):
        torch.manual_seed(0)
        strategy = cls(model=TangentModel(TinyResNet(num_classes=3), num_classes=4), evaluator=None)
        assert strategy.optimizer.param_groups[0]["lr"] == DEFAULT_LR, cls.__name__
        assert isinstance(strategy.divergence_guard, DivergenceGuardPlugin)
        assert strategy.divergence_guard in strategy.plugins


def test_the_command_line_default_says_why_it_differs():
    parser = build_parser()
    args = parser.parse_args(["train-component", "--experience", "0", "--out", "x"])
    assert args.lr == 1e-2  # its default network gets a new head (docs/usage.md, "Default learning rates")
    train = next(a for a in parser._subparsers._group_actions[0].choices["train-component"]._actions
                 if "--lr" in a.option_strings)
    assert "DEFAULT_LR" in train.help and "1e-4" in train.help and "new head" in train.help


def test_the_readme_quick_start_passes_its_learning_rate_with_a_reason():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    calls = re.findall(r"Strategy\((?:[^()]|\([^()]*\))*?\blr=([0-9.e-]+),\s*#([^\n]*)", readme)
    assert calls, "the quick start's strategy passes lr= explicitly"
    for value, comment in calls:
        if float(value) != DEFAULT_LR:
            assert "new head" in comment and "1e-4" in comment, comment


# ---------------------------------------------------------------------------- the rule, on made-up traces


def _fake_strategy(lr: float = 0.01):
    model = nn.Linear(2, 2)
    return SimpleNamespace(model=model, optimizer=torch.optim.Adam(model.parameters(), lr=lr), loss=None,
                           experience=SimpleNamespace(current_experience=None), clock=None)


def _run_experience(guard: DivergenceGuardPlugin, strategy, experience_id, epochs):
    """Drive the guard's callbacks as Avalanche's loop does: ``epochs`` is a list of loss lists."""
    strategy.experience.current_experience = experience_id
    guard.before_training_exp(strategy)
    for losses in epochs:
        guard.before_training_epoch(strategy)
        for value in losses:
            strategy.loss = torch.tensor(float(value))
            guard.after_training_iteration(strategy)
    guard.after_training_exp(strategy)


def _warnings_of(run):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run()
    return [w for w in caught if issubclass(w.category, LossIncreaseWarning)]


@pytest.mark.parametrize("epochs, warns, numbers", [
    ([[10, 30, 30], [21, 21]], True, ("21", "10", "2.1")),  # last epoch's mean 21 > 2 x the first loss 10
    ([[10, 30, 30], [19, 19]], False, None),                # 19 < 20: no warning
    ([[10, 40, 40]], True, ("30", "10", "3.0")),            # one epoch: its mean, the first loss included
    ([[10, 40, 40], []], True, ("30", "10", "3.0")),        # an empty last epoch: the one before it
    ([[10, 1000, 1000], [5, 5]], False, None),              # a spike that training recovers from
    ([[60, 55], [40, 30]], False, None),                    # a falling loss
])
def test_the_rule(epochs, warns, numbers):
    guard, strategy = DivergenceGuardPlugin(), _fake_strategy()
    caught = _warnings_of(lambda: _run_experience(guard, strategy, 3, epochs))
    assert len(caught) == int(warns)
    if warns:
        message = str(caught[0].message)
        last, first, ratio = numbers
        assert f"Experience 3: the training loss ended far above where it started: {last} " in message
        assert f"against {first} (the first iteration" in message and f"{ratio} times" in message
        assert "lr=0.01" in message and "docs/usage.md" in message and "lower it" in message


def test_the_warning_names_the_training_and_the_rate_as_set_not_as_scheduled():
    """Issue 59, item 3: a run of several methods warned "lr=3.0000000000000004e-05 ... lower it
    (1e-4)": the rate after the schedule's cuts, advice above it, and no word of which method
    and seed. The message now says the label, the rate as set and as cut, and advises a tenth
    of the rate as set."""
    guard, strategy = DivergenceGuardPlugin(label="tme, seed 2"), _fake_strategy(lr=3e-3)

    def cut_then_climb():
        strategy.experience.current_experience = 1
        guard.before_training_exp(strategy)
        for group in strategy.optimizer.param_groups:
            group["lr"] = 3e-3 * 0.01  # the schedule's two cuts
        guard.before_training_epoch(strategy)
        for value in (10, 40, 40):
            strategy.loss = torch.tensor(float(value))
            guard.after_training_iteration(strategy)
        guard.after_training_exp(strategy)

    (caught,) = _warnings_of(cut_then_climb)
    message = str(caught.message)
    assert message.startswith("tme, seed 2, experience 1: the training loss ended far above")
    assert "lr=0.003 as set for the experience, 3e-05 after the schedule's cuts" in message
    assert "lower it, e.g. to 0.0003" in message and "1e-4" not in message


def test_once_per_strategy_and_a_factor_of_ones_own():
    guard, strategy = DivergenceGuardPlugin(), _fake_strategy()
    caught = _warnings_of(lambda: [_run_experience(guard, strategy, e, [[10, 50]]) for e in range(3)])
    assert len(caught) == 1 and "Experience 0:" in str(caught[0].message) and guard.warned
    # warned once, every rise recorded (the runner marks each such row in its table)
    assert [(e, first, mean) for e, first, mean, _ in guard.loss_rises] == [(0, 10.0, 30.0), (1, 10.0, 30.0),
                                                                           (2, 10.0, 30.0)]
    # a stricter factor warns where the default does not; None turns the warning off
    assert len(_warnings_of(lambda: _run_experience(DivergenceGuardPlugin(1.5), _fake_strategy(), 0,
                                                    [[10, 20, 20]]))) == 1
    assert not _warnings_of(lambda: _run_experience(DivergenceGuardPlugin(), _fake_strategy(), 0, [[10, 20, 20]]))
    assert not _warnings_of(lambda: _run_experience(DivergenceGuardPlugin(None), _fake_strategy(), 0, [[10, 99]]))
    for bad in (1.0, 0.5, float("inf"), float("nan"), True, "2"):
        with pytest.raises(ValueError, match="loss_increase_factor"):
            DivergenceGuardPlugin(bad)


# ---------------------------------------------------------------------------- a trained network


@pytest.fixture(scope="module")
def trained_cnn():
    """A 128-wide small CNN trained on the 400 pre-training digits, its held-out accuracy,
    and the class-incremental benchmark of the other digits (5 experiences)."""
    pretrain, train, test = digits_splits(seed=0)
    x, y = torch.as_tensor(pretrain[0]), torch.as_tensor(pretrain[1])
    net = small_cnn(num_classes=10, width=128, seed=0).train()
    optimizer = torch.optim.Adam(net.parameters(), lr=3e-3)
    gen = torch.Generator().manual_seed(0)
    for _ in range(30):
        for idx in torch.randperm(len(y), generator=gen).split(32):
            optimizer.zero_grad()
            nn.functional.cross_entropy(net(x[idx]), y[idx]).backward()
            optimizer.step()
    net.eval()
    with torch.no_grad():
        accuracy = float((net(torch.as_tensor(test[0])).argmax(1).numpy() == test[1]).mean())
    return net, accuracy, digits_benchmark(train, test, n_experiences=5)


class _LossRecorder(SupervisedPlugin):
    """Every training loss, by experience and epoch (an independent record of the guard's numbers)."""

    def __init__(self):
        super().__init__()
        self.losses = []

    def after_training_iteration(self, strategy, **kwargs):
        self.losses.append((strategy.experience.current_experience, strategy.clock.train_exp_epochs,
                            strategy.loss.item()))

    def first_and_last_epoch(self, experience):
        rows = [(epoch, loss) for e, epoch, loss in self.losses if e == experience]
        last = max(epoch for epoch, _ in rows)
        return rows[0][1], float(np.mean([loss for epoch, loss in rows if epoch == last]))


def _continue(net, benchmark, **lr):
    """TMC over the benchmark (2 epochs an experience, the network's own head kept): final
    stream accuracy, the LossIncreaseWarnings and the loss record."""
    import copy

    torch.manual_seed(0)
    recorder = _LossRecorder()
    strategy = TMCStrategy(model=TangentModel(copy.deepcopy(net)), train_mb_size=32, train_epochs=2,
                           eval_mb_size=256, evaluator=quiet_evaluator(), plugins=[recorder], **lr)

    def run():
        for experience in benchmark.train_stream:
            torch.manual_seed(100 + experience.current_experience)
            strategy.train(experience)

    caught = _warnings_of(run)
    accuracy = strategy.eval(benchmark.test_stream)["Top1_Acc_Stream/eval_phase/test_stream/Task000"]
    return accuracy, caught, recorder


def test_the_default_learning_rate_keeps_a_trained_network(trained_cnn):
    net, trained_accuracy, benchmark = trained_cnn
    assert trained_accuracy >= 0.95
    accuracy, caught, recorder = _continue(net, benchmark)  # the default lr
    assert not caught
    assert accuracy >= trained_accuracy - 0.02  # measured: 0.98 against 0.98
    for e in range(5):  # the loss falls in every experience
        first, last = recorder.first_and_last_epoch(e)
        assert last < first


def test_a_learning_rate_too_large_wrecks_it_and_warns_once(trained_cnn):
    net, trained_accuracy, benchmark = trained_cnn
    accuracy, caught, recorder = _continue(net, benchmark, lr=1e-2)
    assert accuracy < trained_accuracy - 0.5  # measured: 0.29 against 0.99
    assert len(caught) == 1
    first, last = recorder.first_and_last_epoch(0)
    assert last > 2 * first  # the loss climbed in the first experience already
    message = str(caught[0].message)
    assert message.startswith(f"Experience 0: the training loss ended far above where it started: {last:.4g} "
                              f"(mean of the last epoch) against {first:.4g} (the first iteration")
    assert "lr=0.01" in message and "Choosing the learning rate" in message


def test_watching_records_a_non_finite_sgd_training_and_lets_it_finish(trained_cnn):
    """Issue 59, item 1: Avalanche's Naive at a learning rate far too large goes non-finite.
    The default guard stops it (DivergenceError); ``stop_on_non_finite=False`` (what the
    runner gives its SGD baselines) lets every experience train, records each one that went
    non-finite once (its last loss inf) and warns once, naming the rate as set."""
    import copy

    from avalanche.training import Naive

    from avalanche_tmc import DivergenceError

    net, _, benchmark = trained_cnn

    def naive(guard):
        model = copy.deepcopy(net)
        return Naive(model, torch.optim.SGD(model.parameters(), lr=1e30), nn.CrossEntropyLoss(), train_mb_size=32,
                     train_epochs=1, evaluator=quiet_evaluator(), plugins=[guard])

    torch.manual_seed(0)
    with pytest.raises(DivergenceError, match="Experience 0: training diverged"):
        naive(DivergenceGuardPlugin()).train(benchmark.train_stream[0])
    watch = DivergenceGuardPlugin(stop_on_non_finite=False, label="naive, seed 0")
    strategy = naive(watch)
    caught = _warnings_of(lambda: [strategy.train(e) for e in benchmark.train_stream[:2]])
    assert [(e, mean) for e, _, mean, _ in watch.loss_rises] == [(0, float("inf")), (1, float("inf"))]
    assert all(lr == 1e30 for *_, lr in watch.loss_rises)
    assert len(caught) == 1 and str(caught[0].message).startswith("naive, seed 0, experience 0: training diverged")
    assert not all(torch.isfinite(p).all() for p in strategy.model.parameters())  # trained on, not rolled back
