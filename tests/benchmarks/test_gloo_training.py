"""The runner's --parallel: a group's experiences trained by 2 worker processes, composed
into the runner's strategy stage by stage, against the sequential run with the same
per-experience seeds; groups that cannot run in parallel fall back; a failing worker
fails the group with its message."""

from dataclasses import replace

import pytest
import torch

from avalanche_tmc.distributed import ParallelTrainingError, train_parallel
from benchmarks.methods import TrainConfig, method_groups
from benchmarks.methods.strategy import build_strategy
from benchmarks.runner.gloo_training import ParallelTrainer, make_trainer, parallelisable
from tests.helpers import TinyResNet, digits_benchmark, digits_splits, randomize_batchnorm

GROUPS = {g.name: g for g in method_groups()}


@pytest.fixture(scope="module")
def setup():
    _, train, test = digits_splits(seed=0)
    bm = digits_benchmark(train, test, n_experiences=3)
    torch.manual_seed(0)
    top = randomize_batchnorm(TinyResNet(num_classes=3))
    cfg = TrainConfig(num_classes=10, epochs=1, batch_size=32, lr_tangent=1e-2)
    return bm, top, cfg


@pytest.fixture
def one_thread():
    """Workers get one thread each; the reference too, so both compute the same numbers."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _state(strategy):
    if hasattr(strategy, "tangent_plugin"):
        return strategy.composed_delta
    return dict(strategy.statistics.summed(), weight=strategy.model.weight)


@pytest.mark.parametrize("name", ["tangent", "stats-ridge"])
def test_parallel_group_equals_the_seeded_sequential_run_after_every_stage(setup, one_thread, name):
    bm, top, cfg = setup
    group = GROUPS[name]
    torch.manual_seed(cfg.seed)
    strategy = build_strategy(group, top, cfg, None)
    trainer = make_trainer(strategy, group, bm, top, cfg, processes=2)
    assert isinstance(trainer, ParallelTrainer)
    reference = build_strategy(group, top, cfg, None)
    for exp in bm.train_stream:
        trainer(strategy, exp)
        train_parallel(reference, [exp], seed=cfg.seed)  # one process: seeded by cfg.seed + experience id
        mine, theirs = _state(strategy), _state(reference)
        for key, value in theirs.items():
            assert torch.equal(mine[key], value), (exp.current_experience, key)
    assert [r["assignment"] for r in trainer.reports] == [{"0": [0], "1": [1, 2]}] * 2
    assert trainer.reports[0]["bytes_reduced"] > 0 and trainer.seconds > 0
    trainer.close()


def test_groups_that_cannot_run_in_parallel_train_sequentially(setup, capsys):
    bm, top, cfg = setup
    for name, expected in (("tangent", True), ("tmc-fc", True), ("ncm", True), ("tmc-seq", False),
                           ("naive", False), ("joint-tangent", False)):
        strategy = build_strategy(GROUPS[name], top, cfg, None)
        assert parallelisable(GROUPS[name], strategy) is expected, name
    strategy = build_strategy(GROUPS["tmc-seq"], top, cfg, None)
    train = make_trainer(strategy, GROUPS["tmc-seq"], bm, top, cfg, processes=2)
    assert "tmc-seq: trained sequentially" in capsys.readouterr().out
    train(strategy, bm.train_stream[0])
    assert strategy.tangent_plugin.composition.keys == [0]
    assert not isinstance(make_trainer(strategy, GROUPS["tangent"], bm, top, cfg, processes=1), ParallelTrainer)


def test_a_failing_worker_fails_the_group_with_its_message(setup, one_thread):
    bm, top, cfg = setup
    cfg = replace(cfg, lr_tangent=1e30)  # diverges
    strategy = build_strategy(GROUPS["tangent"], top, cfg, None)
    trainer = make_trainer(strategy, GROUPS["tangent"], bm, top, cfg, processes=2)
    with pytest.raises(ParallelTrainingError, match=r"rank \d failed on experience \d \(DivergenceError"):
        trainer(strategy, bm.train_stream[0])
    assert len(strategy.tangent_plugin.composition) == 0
