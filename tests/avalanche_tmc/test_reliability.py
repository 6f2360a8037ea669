"""Reliability (issue 10) of the math and the tangent model: non-finite values and bad input
are refused at the boundary (the Rescaled Square Loss, delta and statistics compositions,
``TangentModel``, ``find_head``, Avalanche's dynamic models).

What remains of the cross-cutting reliability module: its training parts live beside the
modules they test (``tests/avalanche_tmc/training/``: divergence, all-or-nothing ``train()``,
task masks on every benchmark generator, forgetting, checkpoints) and its runner parts in
``tests/benchmarks/test_run_refusals.py``. These belong in ``compose/test_losses.py``,
``compose/test_deltas.py``, ``compose/test_statistics.py`` and ``tangent/test_model.py``."""

import warnings

import pytest
import torch
from torch import nn

from avalanche_tmc import (
    DeltaComposition,
    RescaledSquareLoss,
    StatisticsComposition,
    TangentModel,
    head_statistics,
)
from tests.helpers import NUM_CLASSES, TinyResNet, random_delta

warnings.filterwarnings("ignore", message="No loggers specified")


def assert_same_delta(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


# ---------------------------------------------------------------------------- NaN / inf
def test_rsl_only_minus_inf_is_masked():
    assert not torch.isfinite(RescaledSquareLoss()(torch.tensor([[float("nan"), 3.0, 0.0]]), torch.tensor([1])))
    assert not torch.isfinite(RescaledSquareLoss()(torch.tensor([[float("inf"), 3.0, 0.0]]), torch.tensor([1])))
    masked = RescaledSquareLoss(beta=5.0)(torch.tensor([[float("-inf"), 3.0, 0.0]]), torch.tensor([1]))
    assert masked.item() == pytest.approx((3.0 - 5.0) ** 2 / 2)


def test_composition_refuses_non_finite_components():
    tm = TangentModel(TinyResNet(), num_classes=NUM_CLASSES)
    good, bad = random_delta(tm, seed=1), random_delta(tm, seed=2)
    bad[next(iter(bad))].view(-1)[0] = float("inf")
    composition = DeltaComposition()
    composition.add("a", good)
    before = composition.composed()
    with pytest.raises(ValueError, match="not finite"):
        composition.add("b", bad)
    assert composition.keys == ["a"]
    assert_same_delta(composition.composed(), before)
    kept = DeltaComposition(keep_components=False)
    kept.add("a", good)
    with pytest.raises(ValueError, match="not finite"):
        kept.forget("a", bad)
    with pytest.raises(ValueError, match="positive finite"):
        composition.add("c", good, weight=float("nan"))


def test_a_float16_overflow_names_float16s_range_not_the_learning_rate():
    """Issue 30, case 22: after a float16 overflow the error suggested lowering the learning rate."""
    delta = {"w": torch.full((3,), 40000.0, dtype=torch.float16)}
    composition = DeltaComposition()
    composition.add(0, delta)
    with pytest.raises(ValueError, match="float16's range.*65504") as error:
        composition.add(1, delta, weight=2.0)  # 40000 + 80000 > 65504: the sum overflows
    assert "learning rate" not in str(error.value) and composition.keys == [0]
    with pytest.raises(ValueError, match="learning rate"):  # a NaN is still a divergence (or bad data)
        DeltaComposition().add(0, {"w": torch.tensor([float("nan")], dtype=torch.float16)})


def test_statistics_refuse_non_finite():
    features = torch.randn(6, 5)
    stats = head_statistics(features, torch.arange(6) % 3, 3)
    features[2, 1] = float("nan")
    composition = StatisticsComposition()
    with pytest.raises(ValueError, match="not finite"):
        composition.add(0, head_statistics(features, torch.arange(6) % 3, 3))
    assert len(composition) == 0
    composition.add(0, stats)


# ---------------------------------------------------------------------------- the head is the output layer
class _ProjectionAfterFc(nn.Module):
    """``fc`` makes the logits; ``proj`` (registered after it) is an auxiliary embedding."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, 16), nn.ReLU())
        self.fc = nn.Linear(16, 3)
        self.proj = nn.Linear(16, 32)

    def forward(self, x):
        return self.fc(self.body(x)) * 2.0

    def embed(self, x):
        return self.proj(self.body(x))


class _Untraceable(nn.Module):
    def __init__(self, linears=2):
        super().__init__()
        self.body = nn.Sequential(nn.Flatten(), nn.Linear(64, 16)) if linears == 2 else nn.Flatten()
        self.fc = nn.Linear(16 if linears == 2 else 64, 3)

    def forward(self, x):
        h = self.body(x)
        if h.sum() > 0:  # data-dependent control flow: torch.fx cannot trace it
            h = h * 1.0
        return self.fc(h)


class _ConvOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Linear(8, 8)
        self.out = nn.Conv2d(1, 3, 8)

    def forward(self, x):
        return self.out(self.embed(x)).flatten(1)


def test_find_head_finds_the_output_layer_not_the_last_registered():
    from avalanche_tmc import find_head

    assert find_head(_ProjectionAfterFc()) == "fc"
    tm = TangentModel(_ProjectionAfterFc(), num_classes=5)
    assert tm.head_name == "fc" and tm(torch.randn(2, 1, 8, 8)).shape == (2, 5)
    with pytest.raises(ValueError, match=r"head='proj' does not produce the model's output \('fc' does\)"):
        TangentModel(_ProjectionAfterFc(), num_classes=5, head="proj")
    with pytest.raises(ValueError, match=r"cannot be traced.*head='<module name>'.*\['body.1', 'fc'\]"):
        find_head(_Untraceable())
    assert find_head(_Untraceable(linears=1)) == "fc"
    assert TangentModel(_Untraceable(), num_classes=4, head="fc")(torch.randn(2, 1, 8, 8)).shape == (2, 4)
    with pytest.raises(ValueError, match=r"produced by 'out' \(Conv2d\), not an nn.Linear"):
        find_head(_ConvOutput())
    with pytest.raises(ValueError, match="names no module"):
        TangentModel(_ProjectionAfterFc(), num_classes=5, head="nope")


# ---------------------------------------------------------------------------- validation at the boundary
@pytest.mark.parametrize("kwargs", [dict(alpha=-1), dict(alpha=0), dict(beta=-25), dict(beta=float("nan")),
                                    dict(beta=float("inf")), dict(alpha=True), dict(beta="25")])
def test_rsl_refuses_bad_alpha_beta(kwargs):
    with pytest.raises(ValueError, match="> 0 and finite"):
        RescaledSquareLoss(**kwargs)


def test_rsl_refuses_float_bool_and_out_of_range_targets():
    logits = torch.randn(2, 3)
    with pytest.raises(TypeError, match="integer class indices.*torch.float32"):
        RescaledSquareLoss()(logits, torch.tensor([0.7, 1.9]))
    with pytest.raises(TypeError, match="integer class indices.*torch.bool"):
        RescaledSquareLoss()(logits, torch.tensor([True, False]))
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        RescaledSquareLoss()(logits, torch.tensor([0, 3]))
    RescaledSquareLoss()(logits, torch.tensor([0, 2], dtype=torch.int32))  # any integer dtype is fine


@pytest.mark.parametrize("keep", [True, False])
def test_forget_with_a_different_delta_is_refused(keep):
    tm = TangentModel(TinyResNet(), num_classes=NUM_CLASSES)
    a, b = random_delta(tm, seed=1), random_delta(tm, seed=2)
    composition = DeltaComposition(keep_components=keep)
    composition.add(0, a)
    composition.add(1, b)
    before = composition.composed()
    if keep:
        with pytest.raises(ValueError, match="differs from the component kept"):
            composition.forget(0, b)
        assert composition.keys == [0, 1]
        assert_same_delta(composition.composed(), before)
    composition.forget(0, a)  # the right one is accepted (and needed without kept components)
    assert composition.keys == [1]


def test_forget_with_different_statistics_is_refused():
    s0 = head_statistics(torch.randn(6, 5), torch.arange(6) % 3, 3)
    s1 = head_statistics(torch.randn(6, 5), torch.arange(6) % 3, 3)
    composition = StatisticsComposition()
    composition.add(0, s0)
    composition.add(1, s1)
    with pytest.raises(ValueError, match="differ from the ones kept"):
        composition.forget(0, s1)
    assert composition.keys == [0, 1]
    composition.forget(0, s0)


def test_load_delta_is_atomic():
    tm = TangentModel(TinyResNet(), num_classes=NUM_CLASSES)
    good = random_delta(tm, seed=1)
    tm.load_delta(good)
    names = list(good)
    for bad_value, error in ((float("nan"), ValueError), ("text", TypeError)):
        bad = dict(random_delta(tm, seed=2))
        if isinstance(bad_value, str):
            bad[names[-1]] = bad_value
        else:
            bad[names[-1]] = bad[names[-1]].clone().fill_(bad_value)  # the last entry is the bad one
        with pytest.raises(error, match="Nothing was loaded"):
            tm.load_delta(bad)
        assert_same_delta(tm.delta, good)  # not one entry overwritten
    with pytest.raises(TypeError, match="real floating-point"):
        tm.load_delta(dict(good, **{names[-1]: torch.ones_like(good[names[-1]], dtype=torch.complex64)}))
    assert_same_delta(tm.delta, good)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(num_classes=0), ValueError, "num_classes must be a positive int"),
    (dict(num_classes=-3), ValueError, "num_classes must be a positive int"),
    (dict(num_classes=2.5), ValueError, "num_classes must be a positive int"),
    (dict(num_classes=True), ValueError, "num_classes must be a positive int"),
    (dict(linearize=123), TypeError, "linearize must be 'all', 'head', a list"),
    (dict(linearize=["fc", 3]), TypeError, "linearize must be"),
    (dict(linearize="everything"), ValueError, "is not understood"),
    (dict(head=3), TypeError, "head must be a module name"),
])
def test_tangent_model_refuses_bad_arguments(kwargs, error, message):
    with pytest.raises(error, match=message):
        TangentModel(TinyResNet(), **kwargs)


# ---------------------------------------------------------------------------- Avalanche's dynamic models
@pytest.mark.parametrize("make", ["IncrementalClassifier", "MultiHeadClassifier", "MultiTaskModule", "nested"])
def test_avalanche_dynamic_models_are_refused_with_advice(make):
    import avalanche.models as am

    if make == "IncrementalClassifier":
        model = am.IncrementalClassifier(in_features=16, initial_out_features=2)
    elif make == "MultiHeadClassifier":
        model = am.MultiHeadClassifier(in_features=16, initial_out_features=2)
    elif make == "MultiTaskModule":
        class MyMultiTask(am.MultiTaskModule):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(16, 2)

            def forward_single_task(self, x, task_label):
                return self.fc(x)

        model = MyMultiTask()
    else:
        model = nn.Sequential(nn.Linear(8, 16), am.IncrementalClassifier(in_features=16, initial_out_features=2))
    with pytest.raises(TypeError, match="fixed nn.Linear head over all classes.*TaskMaskPlugin"):
        TangentModel(model)


