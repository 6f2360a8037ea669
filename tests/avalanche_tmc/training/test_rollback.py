"""The one rollback mechanism: a ``TrainingTransaction`` records the template's state and
every part that owns state, and puts them back when the ``with`` block fails (on the tests'
``device``)."""

import warnings

import pytest
import torch
from avalanche.core import SupervisedPlugin

from avalanche_tmc import TrainingFreeClassifier, TrainingFreeStrategy, penultimate
from avalanche_tmc.distributed import train_parallel
from avalanche_tmc.training.protocols import RollbackLearner, RollbackPart
from avalanche_tmc.training.rollback import TrainingTransaction, check_new_experience_ids, check_train_epochs
from tests.helpers import NUM_CLASSES, TinyResNet, learned_of, quiet_evaluator, small_benchmark, tmc, train_seeded

warnings.filterwarnings("ignore", message="No loggers specified")


class _Counter(SupervisedPlugin):
    """A plugin that owns state (iterations seen), taking part in transactions."""

    def __init__(self):
        super().__init__()
        self.seen = 0

    def after_training_iteration(self, strategy, **kwargs):
        self.seen += 1

    def snapshot(self, strategy):
        return self.seen

    def restore(self, strategy, snapshot):
        self.seen = snapshot


def test_every_part_and_the_template_go_back_when_the_block_fails(device):
    counter = _Counter()
    strategy = tmc(plugins=[counter], device=device)
    assert isinstance(counter, RollbackPart) and isinstance(strategy.tangent_plugin, RollbackPart)
    assert not isinstance(strategy, RollbackLearner)  # its learned state lives in the tangent plugin
    bm = small_benchmark()
    strategy.train(bm.train_stream[0])
    seen, iterations, criterion = counter.seen, strategy.clock.train_iterations, strategy._criterion
    with pytest.raises(RuntimeError, match="stop here"):
        with TrainingTransaction.around(strategy):
            strategy.train(bm.train_stream[1])
            strategy._criterion = None
            raise RuntimeError("stop here")
    assert counter.seen == seen > 0 and strategy.clock.train_iterations == iterations
    assert strategy._criterion is criterion
    assert strategy.tangent_plugin.composition.keys == [0]


def test_a_finished_block_keeps_what_it_did(device):
    strategy = tmc(device=device)
    with TrainingTransaction.around(strategy):
        strategy.train(small_benchmark().train_stream[0])
    assert strategy.tangent_plugin.composition.keys == [0]


def test_experience_ids_and_epochs_are_checked():
    class Exp:
        def __init__(self, key):
            self.current_experience = key

    with pytest.raises(KeyError, match="Experience 1 was already trained and composed"):
        check_new_experience_ids([Exp(0), Exp(1)], {1})
    with pytest.raises(KeyError, match="appears twice"):
        check_new_experience_ids([Exp(0), Exp(0)], set())
    check_new_experience_ids([Exp(0), Exp(1)], {2})
    assert check_train_epochs(3) == 3
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="train_epochs must be an integer >= 1"):
            check_train_epochs(bad)


def training_free(**kwargs) -> TrainingFreeStrategy:
    torch.manual_seed(0)
    model = TrainingFreeClassifier(penultimate(TinyResNet(num_classes=3)), NUM_CLASSES)
    return TrainingFreeStrategy(model=model, ridge_lambda=1.0, train_mb_size=8, evaluator=quiet_evaluator(),
                                **kwargs)


def assert_same_delta(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


class _InterruptAt(SupervisedPlugin):
    """Raises ``error`` at training iteration ``iteration`` of experience ``exp_id``."""

    def __init__(self, exp_id, iteration=0, error=KeyboardInterrupt):
        super().__init__()
        self.exp_id, self.iteration, self.error = exp_id, iteration, error

    def after_training_iteration(self, strategy, **kwargs):
        if strategy.experience.current_experience == self.exp_id and \
                strategy.clock.train_exp_iterations >= self.iteration:
            raise self.error("interrupted")


def _state(strategy):
    plugin = strategy.tangent_plugin
    return dict(keys=plugin.composition.keys, delta=strategy.model.delta,
                classes={k: set(v) for k, v in plugin.task_classes.items()}, labels=set(plugin._train_task_labels),
                in_training=plugin.in_training_exp, iterations=strategy.clock.train_iterations,
                is_training=strategy.is_training, experience=strategy.experience)


def _assert_same_state(a, b):
    assert_same_delta(a.pop("delta"), b.pop("delta"))
    assert a == b


@pytest.mark.parametrize("error", [KeyboardInterrupt, RuntimeError])
def test_interrupted_train_leaves_the_strategy_as_before(error, device):
    bm = small_benchmark(n_experiences=4, task_labels=True)
    interrupt = _InterruptAt(exp_id=2, error=error)
    strategy = tmc(plugins=[interrupt], device=device)
    strategy.train(bm.train_stream[0])
    before = _state(strategy)
    acc_before = strategy.eval(bm.test_stream[:1])
    with pytest.raises(error):
        strategy.train([bm.train_stream[1], bm.train_stream[2]])  # 1 finishes, 2 is interrupted
    _assert_same_state(_state(strategy), before)
    assert strategy.eval(bm.test_stream[:1]) == acc_before  # no half-trained δ mixed in
    interrupt.exp_id = None
    strategy.train([bm.train_stream[1], bm.train_stream[2]])
    assert strategy.tangent_plugin.composition.keys == [0, 1, 2]


def test_failed_train_leaves_the_training_free_head_as_before(device):
    bm = small_benchmark(n_experiences=4)
    interrupt = _InterruptAt(exp_id=2, error=KeyboardInterrupt)
    strategy = training_free(plugins=[interrupt], device=device)
    strategy.train(bm.train_stream[0])
    weight, keys, iterations = strategy.model.weight.clone(), strategy.statistics.keys, strategy.clock.train_iterations
    with pytest.raises(KeyboardInterrupt):
        strategy.train([bm.train_stream[1], bm.train_stream[2]])  # 1 finishes, 2 is interrupted
    assert strategy.statistics.keys == keys and torch.equal(strategy.model.weight, weight)
    assert strategy.clock.train_iterations == iterations
    strategy.model.num_classes = 2  # labels 2, 3 are now out of range: head_statistics raises
    with pytest.raises(ValueError, match="Targets must lie|Incompatible statistics"):
        strategy.train([bm.train_stream[1], bm.train_stream[2], bm.train_stream[3]])
    strategy.model.num_classes = NUM_CLASSES
    assert strategy.statistics.keys == keys and torch.equal(strategy.model.weight, weight)
    interrupt.exp_id = None
    strategy.train([bm.train_stream[1], bm.train_stream[2]])
    assert strategy.statistics.keys == [0, 1, 2]


class _CountIterations(SupervisedPlugin):
    def __init__(self):
        super().__init__()
        self.count = 0

    def after_training_iteration(self, strategy, **kwargs):
        self.count += 1


@pytest.mark.parametrize("learner", ["tmc", "training_free"])
def test_duplicate_experience_is_refused_before_training(learner, device):
    bm = small_benchmark()
    counter = _CountIterations()
    strategy = (tmc if learner == "tmc" else training_free)(plugins=[counter], device=device)
    strategy.train(bm.train_stream[0])
    done = counter.count
    with pytest.raises(KeyError, match="already"):
        strategy.train(bm.train_stream[0])
    with pytest.raises(KeyError, match="twice"):
        strategy.train([bm.train_stream[1], bm.train_stream[1]])
    assert counter.count == done  # refused before any training iteration


@pytest.fixture(scope="module")
def bm():
    return small_benchmark(n_experiences=4)


@pytest.mark.parametrize("learner", ["tmc", "training_free"])
def test_train_parallel_of_nothing_leaves_the_strategy_as_it_was(bm, learner, device):
    """Issue 21: train_parallel(strategy, []) emptied a TrainingFreeStrategy's statistics."""
    strategy = train_seeded((tmc if learner == "tmc" else training_free)(device=device), bm.train_stream[:1])
    composition = learned_of(strategy)
    report = train_parallel(strategy, [])
    assert report.experiences == []
    assert learned_of(strategy) is composition and composition.keys == [0]
    strategy.train(bm.train_stream[1])  # the next experience is added to experience 0, not alone
    assert learned_of(strategy).keys == [0, 1]
