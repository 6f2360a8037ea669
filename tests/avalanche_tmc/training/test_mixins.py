"""The one rollback mechanism: a ``TrainingTransaction`` records the template's state and
every part that owns state, and puts them back when the ``with`` block fails."""

import warnings

import pytest
from avalanche.core import SupervisedPlugin

from avalanche_tmc.training.mixins import TrainingTransaction, check_new_experience_ids, check_train_epochs
from avalanche_tmc.training.protocols import RollbackLearner, RollbackPart
from tests.helpers import small_benchmark, tmc

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


def test_every_part_and_the_template_go_back_when_the_block_fails():
    counter = _Counter()
    strategy = tmc(plugins=[counter])
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


def test_a_finished_block_keeps_what_it_did():
    strategy = tmc()
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
