"""One ``DivergenceError`` for every learner: each strategy kind raises it on a diverging run
and is then exactly as before the ``train()`` call (tensors compared; on the tests'
``device``), and the command line maps it to its documented exit code."""

import warnings

import pytest
import torch
from torch import nn

from avalanche_tmc import (
    Adaptation,
    AdaptThenComposeStrategy,
    DivergenceError,
    TangentModel,
    TMCSeqStrategy,
    TMCStrategy,
    TMEStrategy,
    TrainingFreeClassifier,
    TrainingFreeStrategy,
    penultimate,
)
from avalanche_tmc.cli import EXIT_TRAINING, main
from tests.avalanche_tmc import cli_factories
from tests.helpers import NUM_CLASSES, TinyResNet, quiet_evaluator, small_benchmark, tensor_dataset, tmc

warnings.filterwarnings("ignore", message="No loggers specified")

NAN_BENCHMARK = dict(train=tensor_dataset(nan_at=slice(0, NUM_CLASSES)))  # every experience holds a NaN image


def assert_same_tensors(a, b):
    """The same names and bit for bit the same values (compared on the CPU: Avalanche moves
    a strategy's model to its device when train() starts, before a copy taken earlier)."""
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name].cpu(), b[name].cpu()), name


def test_divergence_error_is_also_the_types_the_learners_raised_before():
    error = DivergenceError("diverged")
    assert isinstance(error, RuntimeError)  # the tangent plugin's
    assert isinstance(error, FloatingPointError)  # the adaptation's
    assert isinstance(error, ValueError)  # the training-free head's


@pytest.mark.parametrize("cls", [TMCStrategy, TMEStrategy, TMCSeqStrategy])
def test_a_diverging_tangent_experience_raises_and_rolls_back(cls, device):
    bm = small_benchmark()
    torch.manual_seed(0)
    strategy = cls(model=TangentModel(TinyResNet(num_classes=3), num_classes=NUM_CLASSES), lr=1e-2,
                   train_mb_size=8, evaluator=quiet_evaluator(), device=device)
    strategy.train(bm.train_stream[0])
    delta, composed = strategy.model.delta, strategy.tangent_plugin.composition.composed()
    optimizer_state = {id(p): {k: v.clone() for k, v in s.items()} for p, s in strategy.optimizer.state.items()}
    iterations = strategy.clock.train_iterations
    strategy.optimizer.param_groups[0]["lr"] = 1e30
    with pytest.raises(DivergenceError, match=r"Experience 1: training diverged at iteration \d+ \(epoch 1\)"):
        strategy.train(bm.train_stream[1])
    assert strategy.tangent_plugin.composition.keys == [0]
    assert_same_tensors(strategy.model.delta, delta)
    assert_same_tensors(strategy.tangent_plugin.composition.composed(), composed)
    assert strategy.clock.train_iterations == iterations
    assert strategy.optimizer.param_groups[0]["lr"] == 1e30  # the learning rate set before the call stays
    restored = {id(p): s for p, s in strategy.optimizer.state.items()}
    assert restored.keys() == optimizer_state.keys()
    for key, state in optimizer_state.items():
        assert_same_tensors(restored[key], state)


def _training_free(device) -> TrainingFreeStrategy:
    torch.manual_seed(0)
    model = TrainingFreeClassifier(penultimate(TinyResNet(num_classes=3)), NUM_CLASSES)
    return TrainingFreeStrategy(model=model, ridge_lambda=1.0, train_mb_size=8, evaluator=quiet_evaluator(),
                                device=device)


def test_non_finite_features_raise_and_the_training_free_head_rolls_back(device):
    clean, poisoned = small_benchmark(), small_benchmark(**NAN_BENCHMARK)
    strategy = _training_free(device)
    strategy.train(clean.train_stream[0])
    weight, summed = strategy.model.weight.clone(), strategy.statistics.summed()
    with pytest.raises(DivergenceError, match="Experience 1: the features of training iteration 1 hold NaN"):
        strategy.train(poisoned.train_stream[1], shuffle=False)
    assert strategy.statistics.keys == [0]
    assert torch.equal(strategy.model.weight, weight)
    assert_same_tensors(strategy.statistics.summed(), summed)


def test_a_diverging_adaptation_raises_and_leaves_the_features_unadapted(device):
    bm = small_benchmark(**NAN_BENCHMARK)
    torch.manual_seed(0)
    strategy = AdaptThenComposeStrategy(network=TinyResNet(num_classes=NUM_CLASSES), num_classes=NUM_CLASSES,
                                        adaptation=Adaptation(lr=0.05, epochs=1, batch_size=4), ridge_lambda=1.0,
                                        train_mb_size=8, evaluator=quiet_evaluator(), device=device)
    features = strategy.model.features
    state = {n: t.clone() for n, t in features.state_dict().items()}
    with pytest.raises(DivergenceError, match=r"The adaptation diverged at epoch 1 \(loss nan\)"):
        strategy.train(bm.train_stream[0])
    assert strategy.model.features is features and strategy.adapted_on is None
    assert_same_tensors(features.state_dict(), state)
    assert len(strategy.statistics) == 0 and strategy.model.weight.numel() == 0


def nan_model(**options) -> nn.Module:
    """``cli_factories.model`` whose BatchNorm mean is NaN: every feature is NaN."""
    net = cli_factories.model(**options)
    net[2].running_mean[0] = float("nan")
    return net


@pytest.mark.parametrize("method, model, message", [
    ("tmc", "tests.avalanche_tmc.cli_factories:model", "training diverged"),
    ("stats-ridge", "tests.avalanche_tmc.training.test_divergence:nan_model", "hold NaN/inf")])
def test_the_command_line_exits_with_the_training_code_on_divergence(method, model, message, tmp_path, capsys):
    lr = ["--lr", "1e30"] if method == "tmc" else []
    code = main(["train-component", "--method", method, "--experience", "0", "--out", str(tmp_path), "--epochs", "1",
                 "--batch-size", "16", "--quiet", "--model", model, "--data", "tests.avalanche_tmc.cli_factories:data",
                 "--option", "tasks=3", *lr])
    assert code == EXIT_TRAINING == 6
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_diverged_experience_is_stopped_and_nothing_composed(device):
    bm = small_benchmark()
    strategy = tmc(device=device)
    strategy.train(bm.train_stream[0])
    composed = strategy.composed_delta
    model_delta = strategy.model.delta
    strategy.optimizer.param_groups[0]["lr"] = 1e30
    with pytest.raises(DivergenceError, match=r"Experience 1: training diverged at iteration \d+ \(epoch 1\)"):
        strategy.train(bm.train_stream[1])
    assert strategy.tangent_plugin.composition.keys == [0]
    assert_same_tensors(strategy.composed_delta, composed)
    assert_same_tensors(strategy.model.delta, model_delta)
    assert not strategy.tangent_plugin.in_training_exp
    strategy.optimizer.param_groups[0]["lr"] = 1e-2
    strategy.train(bm.train_stream[1])  # and it can be trained again normally
    assert strategy.tangent_plugin.composition.keys == [0, 1]


def test_nan_input_stops_the_experience(device):
    bm = small_benchmark(train=tensor_dataset(nan_at=slice(0, NUM_CLASSES)))
    strategy = tmc(device=device)
    with pytest.raises(DivergenceError, match="Experience 0.*loss is nan"):
        strategy.train(bm.train_stream[0], shuffle=False)
    assert len(strategy.tangent_plugin.composition) == 0
    assert all(torch.count_nonzero(v) == 0 for v in strategy.model.delta.values())


def test_training_free_head_refuses_nan_features(device):
    bm = small_benchmark(train=tensor_dataset(nan_at=slice(0, NUM_CLASSES)))
    strategy = _training_free(device)
    with pytest.raises(DivergenceError, match="Experience 0: the features of training iteration 1 hold NaN"):
        strategy.train(bm.train_stream[0], shuffle=False)
    assert len(strategy.statistics) == 0
    assert strategy.model.weight.numel() == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float16, torch.bfloat16])
def test_all_finite_agrees_with_the_element_wise_check_even_when_the_sums_overflow(dtype):
    from avalanche_tmc.training.divergence import all_finite

    big = torch.finfo(dtype).max
    cases = {
        "small": [torch.randn(5, 3).to(dtype), torch.randn(7).to(dtype)],
        "sum overflows, all finite": [torch.full((4,), big, dtype=dtype), torch.full((3,), big, dtype=dtype)],
        "inf cancelling": [torch.tensor([float("inf")], dtype=dtype), torch.tensor([-float("inf")], dtype=dtype)],
        "one nan": [torch.randn(6).to(dtype), torch.tensor([0.0, float("nan")], dtype=dtype)],
        "one -inf": [torch.tensor([1.0, -float("inf")], dtype=dtype)],
        "empty": [torch.zeros(0, dtype=dtype)],
        "none": [],
    }
    for name, tensors in cases.items():
        expected = all(bool(torch.isfinite(t).all()) for t in tensors)
        assert all_finite(tensors) is expected, name
    assert all_finite(iter([torch.ones(2, dtype=dtype), torch.ones(3, dtype=torch.float64)]))  # mixed, a generator
