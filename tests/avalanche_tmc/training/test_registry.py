"""The strategy registry (avalanche_tmc.training.registry): one name per strategy, built the
same way by a user, the command line and the runner."""

import pytest
import torch
from avalanche.training.plugins import ReplayPlugin
from avalanche.training.supervised import Naive

from avalanche_tmc import (
    TangentModel,
    TMCSeqStrategy,
    TMCStrategy,
    TMEStrategy,
    TrainingFreeStrategy,
    create_strategy,
    list_strategies,
    register_strategy,
    strategy_spec,
)
from avalanche_tmc.cli.strategies import methods as cli_methods
from tests.helpers import NUM_CLASSES, TinyResNet, quiet_evaluator, small_benchmark


def _net():
    torch.manual_seed(0)
    return TinyResNet(num_classes=NUM_CLASSES)


def test_the_library_registers_its_strategies_by_family():
    assert set(list_strategies("tangent")) >= {"tmc", "tme", "tmc-seq", "tmc-fc"}
    assert set(list_strategies("training-free")) >= {"stats-ridge", "ranpac", "ncm", "adapt-then-compose"}
    # --method offers exactly the strategies whose components can be written as files
    assert cli_methods() == list_strategies(component_files=True) == ("tmc", "tmc-fc", "stats-ridge", "ranpac", "ncm")


@pytest.mark.parametrize("name, kind, linearize", [
    ("tmc", TMCStrategy, "all"), ("tme", TMEStrategy, "all"), ("tmc-seq", TMCSeqStrategy, "all"),
    ("tmc-fc", TMCStrategy, "head")])
def test_tangent_names_build_their_strategy_on_the_tangent_model_they_say(name, kind, linearize):
    strategy = create_strategy(name, _net(), lr=1e-2, evaluator=quiet_evaluator())
    assert type(strategy) is kind
    assert strategy.model.linearized_names == TangentModel(_net(), linearize=linearize).linearized_names


@pytest.mark.parametrize("name, head, projection", [("stats-ridge", "ridge", None), ("ranpac", "ridge", 16),
                                                    ("ncm", "ncm", None)])
def test_training_free_names_build_the_head_they_say(name, head, projection):
    strategy = create_strategy(name, _net(), projection_dim=16, seed=3, evaluator=quiet_evaluator())
    assert isinstance(strategy, TrainingFreeStrategy)
    model = strategy.model
    assert (model.head, model.projection_dim, model.num_classes, model.seed) == (head, projection, NUM_CLASSES, 3)


def test_a_registered_strategy_trains_as_the_class_it_builds():
    """create_strategy("tmc", ...) and TMCStrategy(...) on the same network and seed learn the
    same components."""
    bm = small_benchmark(n_experiences=2)
    built = create_strategy("tmc", _net(), lr=1e-2, train_mb_size=8, train_epochs=1, evaluator=quiet_evaluator())
    direct = TMCStrategy(model=TangentModel(_net()), lr=1e-2, train_mb_size=8, train_epochs=1,
                         evaluator=quiet_evaluator())
    for strategy in (built, direct):
        for exp in bm.train_stream:
            torch.manual_seed(exp.current_experience)
            strategy.train(exp)
    for name, value in direct.composed_delta.items():
        assert torch.equal(built.composed_delta[name], value)


def test_importing_baselines_registers_avalanche_s_strategies_the_same_way():
    import baselines  # noqa: F401

    assert set(list_strategies("non-linear")) >= {"naive", "er", "lwf", "ewc", "der", "joint", "soup", "ens-l",
                                                  "ens-sm"}
    assert strategy_spec("joint-tangent").family == "tangent" and strategy_spec("slda").family == "training-free"
    er = create_strategy("er", _net(), mem_size=40, evaluator=quiet_evaluator())
    assert type(er) is Naive and [p.mem_size for p in er.plugins if isinstance(p, ReplayPlugin)] == [40]
    assert create_strategy("ens-sm", _net(), evaluator=quiet_evaluator()).combine == "ens-sm"


def test_unknown_names_duplicates_and_unknown_families_are_refused():
    with pytest.raises(KeyError, match="No strategy named 'icarl'; registered: tmc, tme"):
        create_strategy("icarl", _net())
    with pytest.raises(ValueError, match="already registered"):
        register_strategy("tmc", family="tangent", description="again")(lambda network, **options: None)
    with pytest.raises(ValueError, match="family 'linear' is not one of"):
        register_strategy("new-one", family="linear", description="?")
    assert "new-one" not in list_strategies()


@pytest.mark.parametrize("name", ["tmc", "tme", "tmc-seq", "tmc-fc"])
def test_tangent_strategies_take_num_classes_and_the_tangent_model_s_options(name):
    """Issue 42, B9: create_strategy("tmc", net, num_classes=10) failed with Avalanche's "unexpected keyword"."""
    net = _net()
    strategy = create_strategy(name, net, num_classes=NUM_CLASSES, head_seed=1, implementation="generic",
                               lr=1e-2, evaluator=quiet_evaluator())
    assert strategy.model.model.fc.out_features == NUM_CLASSES
    assert torch.equal(strategy.model.model.fc.weight, _net().fc.weight)  # the network's own head is kept
    replaced = create_strategy(name, _net(), num_classes=7, new_head=True, head_seed=2, evaluator=quiet_evaluator())
    assert replaced.model.model.fc.out_features == 7  # a new head of num_classes outputs, as TangentModel(net, 7)
    reference = TangentModel(_net(), 7, head_seed=2)
    assert torch.equal(replaced.model.model.fc.weight, reference.model.fc.weight)


@pytest.mark.parametrize("name", ["tmc", "tme", "tmc-seq", "tmc-fc"])
def test_a_head_of_another_size_than_num_classes_is_refused(name):
    """A 1000-way head on 10 classes trained silently."""
    with pytest.raises(ValueError, match=rf"head 'fc' has {NUM_CLASSES} outputs, but num_classes=10.*new_head=True"):
        create_strategy(name, _net(), num_classes=10, evaluator=quiet_evaluator())
    with pytest.raises(ValueError, match="give num_classes"):
        create_strategy(name, _net(), new_head=True, evaluator=quiet_evaluator())


@pytest.mark.parametrize("name, options, message", [
    ("stats-ridge", dict(num_classes=0), r"num_classes must be a positive int.*got 0"),
    ("ncm", dict(num_classes=-3), r"num_classes must be a positive int.*got -3"),
    ("ncm", dict(num_classes=2.5), r"num_classes must be a positive int.*got 2\.5"),
    ("ncm", dict(num_classes=True), r"num_classes must be a positive int.*got True"),
    ("ranpac", dict(projection_dim=0), r"projection_dim must be an int in 1\.\.16384.*got 0"),
    ("ranpac", dict(projection_dim=2.5), r"projection_dim must be an int in 1\.\.16384.*got 2\.5"),
    ("ranpac", dict(projection_dim=10 ** 6), r"projection_dim must be an int in 1\.\.16384.*got 1000000"),
    ("slda", dict(num_classes=0), r"num_classes must be a positive int.*got 0"),
])
def test_training_free_counts_are_refused_when_built_not_deep_in_training(name, options, message):
    """Issue 52, item 11: num_classes=0 became the head's 10, -3 or a projection_dim of 0, 2.5
    or 10**6 failed deep inside training."""
    import baselines  # noqa: F401  (registers slda)

    with pytest.raises(ValueError, match=message):
        create_strategy(name, _net(), evaluator=quiet_evaluator(), **options)


def test_the_projection_bound_is_the_command_line_s():
    from avalanche_tmc.cli.argtypes import MAX_PROJECTION_DIM
    from avalanche_tmc.models.training_free import MAX_PROJECTION_DIM as MODEL_BOUND

    assert MODEL_BOUND == MAX_PROJECTION_DIM
    strategy = create_strategy("ranpac", _net(), projection_dim=MAX_PROJECTION_DIM, num_classes=3,
                               evaluator=quiet_evaluator())
    assert (strategy.model.projection_dim, strategy.model.num_classes) == (MAX_PROJECTION_DIM, 3)
