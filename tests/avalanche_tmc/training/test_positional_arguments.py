"""Issue 61, class 7: after Avalanche's three positional arguments (model, optimizer,
criterion) a positional value meant another parameter in each strategy
(``TMCStrategy(model, None, None, 0.01)`` set lr, ``TMEStrategy(...)`` beta; Naive's order
``(..., 64, 3)`` became lr 64 and β 3): it is refused, naming the keywords. And a factory's
count or seed is a whole number, never cut down (``n_experiences=2.7`` gave 2)."""

import pytest
import torch
from torch import nn

from avalanche_tmc import (
    AdaptThenComposeStrategy,
    TangentModel,
    TMCSeqStrategy,
    TMCStrategy,
    TMEStrategy,
    TrainingFreeStrategy,
    create_strategy,
)
from avalanche_tmc.factories import digits, image_folder, read_image_folder


def _net():
    return nn.Sequential(nn.Flatten(), nn.Linear(4, 3))


@pytest.mark.parametrize("cls", [TMCStrategy, TMEStrategy, TMCSeqStrategy])
def test_a_fourth_positional_argument_is_refused_with_the_keywords(cls):
    model = TangentModel(_net())
    for extra, named in (((0.01,), "lr" if cls is not TMEStrategy else "beta"), ((64, 3), "train_mb_size")):
        with pytest.raises(TypeError, match=f"by keyword only: {len(extra)} more positional.*{named}"):
            cls(model, None, None, *extra)
    strategy = cls(model, None, None, lr=0.01, beta=5.0)  # the three, then keywords: as before
    assert strategy.model is model


def test_the_training_free_strategies_and_the_baselines_refuse_it_too():
    with pytest.raises(TypeError, match="by keyword only"):
        TrainingFreeStrategy(_net(), None, None, 3)
    with pytest.raises(TypeError, match="by keyword only"):
        AdaptThenComposeStrategy(_net(), None, None, 3)
    import baselines  # noqa: F401  (registers Soup and Avalanche's baselines)
    from baselines.composition import IndependentFineTuneStrategy

    with pytest.raises(TypeError, match="IndependentFineTuneStrategy takes model, optimizer, criterion by position"):
        IndependentFineTuneStrategy(_net(), torch.optim.SGD(_net().parameters(), lr=0.1), nn.CrossEntropyLoss(), 32)


def test_counts_and_seeds_of_the_factories_are_whole_numbers(tmp_path):
    with pytest.raises(ValueError, match=r"n_experiences=2.7: give a whole number"):
        digits(n_experiences=2.7)
    assert len(digits(n_experiences=2.0).train_stream) == 2
    for c in range(2):
        (tmp_path / f"c{c}").mkdir()
        for i in range(4):
            (tmp_path / f"c{c}" / f"{i}.png").write_bytes(b"")
    with pytest.raises(ValueError, match=r"n_experiences=2.7"):
        image_folder(root=tmp_path, n_experiences=2.7)
    with pytest.raises(ValueError, match=r"seed=-1: give a whole number of at least 0"):
        read_image_folder(tmp_path, seed=-1)


def test_num_classes_of_another_type_says_so():
    with pytest.raises(TypeError, match=r"num_classes='10' \(str\): give the number of classes as an int"):
        create_strategy("tmc", nn.Sequential(nn.Flatten(), nn.Linear(4, 10)), num_classes="10")


def test_the_three_positional_arguments_are_model_optimizer_criterion_in_every_strategy():
    """Soup's constructor had lr third: Avalanche's positional call (model, optimizer,
    criterion) put the criterion in lr."""
    import baselines  # noqa: F401
    from baselines.composition import IndependentFineTuneStrategy

    net = _net()
    criterion = nn.CrossEntropyLoss()
    soup = IndependentFineTuneStrategy(net, torch.optim.SGD(net.parameters(), lr=0.1), criterion)
    assert soup._criterion is criterion


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("name", ["soup", "naive", "er", "tmc"])
def test_a_device_this_machine_lacks_is_refused_when_built(name):
    import baselines  # noqa: F401

    with pytest.raises(ValueError, match="device cuda: no cuda device on this machine"):
        create_strategy(name, _net(), device="cuda")
    with pytest.raises(ValueError, match="device meta: a meta device holds shapes, no values"):
        create_strategy(name, _net(), device="meta")
