"""The decay on δ of the tangent strategies (``decay``, ``decay_kind``) and TME's own β.

Every run trains a tiny tangent MLP in float64 on one experience, three minibatches, and
records the minibatch, ``δ``, its gradient and the loss before each optimizer step. They are
checked against computations made here: the linearized MLP and the RSL written out by
hand, the ``"norm"`` penalty's gradient ``decay · δ / sqrt(1e-6 + ‖δ‖²)``, and Adam and
AdamW steps replayed by hand."""

import math

import pytest
import torch
import torch.nn.functional as F
from avalanche.core import SupervisedPlugin
from torch import nn
from torch.utils.data import TensorDataset

from avalanche_tmc import (
    DECAY_KINDS,
    NORM_DECAY_EPSILON,
    AutocastPlugin,
    DeltaDecayPlugin,
    TangentModel,
    TMCSeqStrategy,
    TMCStrategy,
    TMEStrategy,
)
from avalanche_tmc.training.plugins.delta_decay import delta_norm_penalty
from tests.helpers import quiet_evaluator, small_benchmark, tensor_dataset

LR = 1e-2
NUM_CLASSES = 4
MB_SIZE = 8  # 24 samples: three steps, the last two from a δ that is not 0
BETAS, EPS = (0.9, 0.999), 1e-8  # Adam's and AdamW's defaults
STRATEGIES = [TMCStrategy, TMEStrategy, TMCSeqStrategy]


class Recorder(SupervisedPlugin):
    """Before each optimizer step: the minibatch, the loss, δ and its gradient (copies)."""

    def __init__(self):
        super().__init__()
        self.steps = []

    def before_update(self, strategy, **kwargs):
        params = list(strategy.model.delta_params)
        assert all(p.grad is not None for p in params), "a step was skipped"
        self.steps.append(dict(x=strategy.mb_x.detach().clone(), y=strategy.mb_y.detach().clone(),
                               loss=strategy.loss.detach().clone().reshape(()),
                               delta=[p.detach().clone() for p in params], grad=[p.grad.clone() for p in params]))


@pytest.fixture(scope="module")
def experience():
    data = tensor_dataset(24, seed=0)
    train = TensorDataset(data.tensors[0].double(), data.tensors[1])
    train.targets = data.targets
    return small_benchmark(n_experiences=1, train=train).train_stream[0]


def tiny_model() -> TangentModel:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Flatten(), nn.Linear(64, 6), nn.Tanh(), nn.Linear(6, NUM_CLASSES)).double()
    return TangentModel(net)


def run(experience, cls=TMCStrategy, plugins=(), **kwargs):
    """A strategy trained on ``experience`` (in order) and its recorder."""
    recorder = Recorder()
    strategy = cls(model=tiny_model(), lr=LR, train_mb_size=MB_SIZE, train_epochs=1, evaluator=quiet_evaluator(),
                   plugins=[*plugins, recorder], **kwargs)
    strategy.train(experience, shuffle=False)
    assert len(recorder.steps) == 3
    return strategy, recorder


# ---------------------------------------------------------------------------- independent computations


def hand_logits(model: TangentModel, x: torch.Tensor, delta):
    """The MLP linearized at its weights, ``f(x) + J δ``, written out by hand (in float64)."""
    net = model.model
    w1, b1, w2, b2 = (t.double() for t in (net[1].weight, net[1].bias, net[3].weight, net[3].bias))
    d = {n: t.double() for n, t in zip(model.linearized_names, delta)}
    x = x.double().flatten(1)
    a = torch.tanh(x @ w1.T + b1)
    da = (1 - a ** 2) * (x @ d["1.weight"].T + d["1.bias"])
    return a @ w2.T + b2 + da @ w2.T + a @ d["3.weight"].T + d["3.bias"]


def hand_rsl(logits, y, beta):
    """``(1/K)((f_y − β)² + Σ_{i≠y} f_i²)`` (α = 1), averaged over the batch."""
    return ((logits - beta * F.one_hot(y, logits.shape[1]).to(logits.dtype)) ** 2).sum(1).div(logits.shape[1]).mean()


def rsl_and_gradient(model, step, beta):
    """The RSL at the recorded δ and minibatch, and its gradient in δ (autograd on the hand forward)."""
    delta = [d.double().requires_grad_(True) for d in step["delta"]]
    loss = hand_rsl(hand_logits(model, step["x"], delta), step["y"], beta)
    return loss.detach(), list(torch.autograd.grad(loss, delta))


def hand_adam(steps, decay=0.0, decoupled=False):
    """Adam (``decay · δ`` added to the gradient) or AdamW (``δ(1 − lr·decay)``) replayed by hand
    on the recorded gradients from δ = 0: the δ after every step."""
    delta = [torch.zeros_like(g) for g in steps[0]["grad"]]
    m = [torch.zeros_like(g) for g in delta]
    v = [torch.zeros_like(g) for g in delta]
    after = []
    for t, step in enumerate(steps, start=1):
        new = []
        for i, (d, g) in enumerate(zip(delta, step["grad"])):
            if decoupled:
                d = d * (1 - LR * decay)
            else:
                g = g + decay * d
            m[i] = BETAS[0] * m[i] + (1 - BETAS[0]) * g
            v[i] = BETAS[1] * v[i] + (1 - BETAS[1]) * g * g
            m_hat, v_hat = m[i] / (1 - BETAS[0] ** t), v[i] / (1 - BETAS[1] ** t)
            new.append(d - LR * m_hat / (v_hat.sqrt() + EPS))
        delta = new
        after.append(delta)
    return after


def norm_of(tensors):
    return math.sqrt(sum(float((t.detach() ** 2).sum()) for t in tensors))


def assert_all_close(a, b, **tol):
    assert len(a) == len(b)
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, rtol=1e-9, atol=1e-12, **tol)


def assert_replay(strategy, recorder, after):
    """The replayed δ after each step is the recorded δ before the next one, and the trained component."""
    for k in range(len(after) - 1):
        assert_all_close(recorder.steps[k + 1]["delta"], after[k])
    assert_all_close(list(strategy.components[0].values()), after[-1])


# ---------------------------------------------------------------------------- (a) "norm", the authors' penalty


@pytest.mark.parametrize("cls", STRATEGIES)
def test_norm_adds_the_penalty_to_the_loss_and_its_gradient(experience, cls):
    decay = 0.5
    strategy, recorder = run(experience, cls, decay=decay, decay_kind="norm")
    assert isinstance(strategy.delta_decay, DeltaDecayPlugin) and strategy.delta_decay.decay == decay
    assert type(strategy.optimizer) is torch.optim.Adam and strategy.optimizer.param_groups[0]["weight_decay"] == 0
    beta = strategy._criterion.beta
    for k, step in enumerate(recorder.steps):
        rsl, rsl_grad = rsl_and_gradient(strategy.model, step, beta)
        norm = math.sqrt(NORM_DECAY_EPSILON + norm_of(step["delta"]) ** 2)
        # (Avalanche's loss is float32, its gradient float64)
        torch.testing.assert_close(step["loss"], (rsl + decay * norm).float(), rtol=1e-6, atol=0)
        expected = [g + decay * d / norm for g, d in zip(rsl_grad, step["delta"])]
        assert_all_close(step["grad"], expected)
        if k:  # from a δ that is not 0, the penalty's pull is there (the test can fail)
            assert norm_of(step["delta"]) > 1e-3
            assert norm_of([e - g for e, g in zip(expected, rsl_grad)]) == pytest.approx(decay, rel=1e-3)
    # and the step that follows is Adam's on that gradient
    assert_replay(strategy, recorder, hand_adam(recorder.steps))


def test_the_plugin_alone_equals_the_strategy_option(experience):
    strategy, _ = run(experience, decay=0.5)
    alone, _ = run(experience, plugins=[DeltaDecayPlugin(0.5)])
    assert all(torch.equal(a, b) for a, b in zip(strategy.components[0].values(), alone.components[0].values()))


def test_the_norm_is_over_every_tensor_together():
    a = torch.tensor([3.0, 0.0], dtype=torch.float64, requires_grad=True)
    b = torch.tensor([[4.0]], dtype=torch.float64, requires_grad=True)
    penalty = delta_norm_penalty([a, b])
    assert float(penalty) == pytest.approx(math.sqrt(1e-6 + 25.0), rel=1e-12)
    penalty.backward()
    torch.testing.assert_close(a.grad, torch.tensor([3.0, 0.0], dtype=torch.float64) / math.sqrt(1e-6 + 25.0))
    torch.testing.assert_close(b.grad, torch.tensor([[4.0]], dtype=torch.float64) / math.sqrt(1e-6 + 25.0))
    zero = torch.zeros(3, requires_grad=True)  # at δ = 0 (where components start) the gradient is 0, not NaN
    delta_norm_penalty([zero]).backward()
    assert torch.equal(zero.grad, torch.zeros(3))


# ---------------------------------------------------------------------------- (b) "squared", (c) "decoupled"


@pytest.mark.parametrize("kind, optimizer, decay", [("squared", torch.optim.Adam, 20.0),
                                                    ("decoupled", torch.optim.AdamW, 5.0)])
def test_squared_is_adams_weight_decay_and_decoupled_a_hand_adamw_step(experience, kind, optimizer, decay):
    """"squared": ``decay · δ`` added to the gradient, Adam's ``weight_decay``; "decoupled":
    ``δ ← δ(1 − lr·decay)`` then Adam's update, AdamW's."""
    strategy, recorder = run(experience, decay=decay, decay_kind=kind)
    assert strategy.delta_decay is None
    assert type(strategy.optimizer) is optimizer and strategy.optimizer.param_groups[0]["weight_decay"] == decay
    for step in recorder.steps:  # the loss and its gradient are the RSL's alone: the optimizer decays
        rsl, rsl_grad = rsl_and_gradient(strategy.model, step, strategy._criterion.beta)
        torch.testing.assert_close(step["loss"], rsl.float(), rtol=1e-6, atol=0)
        assert_all_close(step["grad"], rsl_grad)
    after = hand_adam(recorder.steps, decay=decay, decoupled=kind == "decoupled")
    assert_replay(strategy, recorder, after)
    # neither plain Adam nor the other kind of decay (the test can fail)
    for other in (hand_adam(recorder.steps), hand_adam(recorder.steps, decay=decay, decoupled=kind != "decoupled")):
        assert norm_of([a - b for a, b in zip(after[-1], other[-1])]) > 1e-4


# ---------------------------------------------------------------------------- (d) off by default


def test_no_decay_is_bit_identical_to_the_strategy_without_it(experience):
    # the strategy as built before the decay existed: its own Adam(δ, lr) on the same model
    model = tiny_model()
    recorder = Recorder()
    today = TMCStrategy(model=model, optimizer=torch.optim.Adam(model.delta_parameters(), lr=LR),
                        train_mb_size=MB_SIZE, train_epochs=1, evaluator=quiet_evaluator(), plugins=[recorder])
    today.train(experience, shuffle=False)
    reference = list(today.components[0].values())
    assert norm_of(reference) > 1e-3
    runs = [run(experience)[0]] + [run(experience, decay=0.0, decay_kind=kind)[0] for kind in DECAY_KINDS]
    runs.append(run(experience, plugins=[DeltaDecayPlugin(0.0)])[0])
    for strategy in runs:
        assert strategy.delta_decay is None and type(strategy.optimizer) is torch.optim.Adam
        assert all(torch.equal(a, b) for a, b in zip(strategy.components[0].values(), reference))
        assert "decay" not in strategy.component_settings()


def test_a_decay_is_recorded_in_the_component_settings():
    strategy = TMCStrategy(model=tiny_model(), decay=1e-5)
    assert strategy.component_settings() == dict(mode="tmc", weighting="mean", decay=1e-5, decay_kind="norm")


# ---------------------------------------------------------------------------- (e) refusals


@pytest.mark.parametrize("decay", [-1e-5, float("nan"), float("inf"), True, "1e-5", None])
def test_bad_decays_are_refused(decay):
    with pytest.raises(ValueError, match="decay must be a finite number >= 0"):
        TMCStrategy(model=tiny_model(), decay=decay)
    with pytest.raises(ValueError, match="decay must be a finite number >= 0"):
        DeltaDecayPlugin(decay)


@pytest.mark.parametrize("kind", ["l2", "Norm", "", None, 2])
def test_unknown_kinds_are_refused(kind):
    with pytest.raises(ValueError, match=r"decay_kind must be one of \('norm', 'squared', 'decoupled'\)"):
        TMCStrategy(model=tiny_model(), decay=1e-5, decay_kind=kind)


@pytest.mark.parametrize("kind, optimizer", [("squared", "Adam"), ("decoupled", "AdamW")])
def test_a_given_optimizer_refuses_the_kinds_it_replaces(kind, optimizer):
    model = tiny_model()
    with pytest.raises(ValueError, match=f"set weight_decay=0.001 on your optimizer.*torch.optim.{optimizer}"):
        TMCStrategy(model=model, optimizer=torch.optim.SGD(model.delta_parameters(), lr=0.1), decay=1e-3,
                    decay_kind=kind)


def test_a_given_optimizer_takes_the_norm_penalty():
    model = tiny_model()
    optimizer = torch.optim.SGD(model.delta_parameters(), lr=0.1)
    strategy = TMCStrategy(model=model, optimizer=optimizer, decay=1e-5)
    assert strategy.optimizer is optimizer and strategy.delta_decay.decay == 1e-5


def test_the_plugin_needs_a_tangent_model():
    strategy = type("Strategy", (), {"model": nn.Linear(2, 2)})()
    with pytest.raises(TypeError, match="decays the δ of a TangentModel"):
        DeltaDecayPlugin(1e-5).before_training(strategy)


# ---------------------------------------------------------------------------- float16 loss scaling


def test_the_penalty_comes_before_a_float16_autocast_plugin_and_is_scaled():
    decay = 0.5
    recorder = Recorder()  # after the autocast plugin: it sees the gradients unscaled
    strategy = TMCStrategy(model=tiny_model().float(), lr=LR, train_mb_size=MB_SIZE, train_epochs=1,
                           evaluator=quiet_evaluator(), decay=decay,
                           plugins=[AutocastPlugin(torch.float16, init_scale=64.0), recorder])
    order = [type(p) for p in strategy.plugins]
    assert order.index(DeltaDecayPlugin) < order.index(AutocastPlugin)
    strategy.train(small_benchmark(n_experiences=1, train=tensor_dataset(24, seed=0)).train_stream[0], shuffle=False)
    # the penalty's pull is whole: not scaled with the loss, it would come out divided by 64
    for step in recorder.steps[1:]:
        _, rsl_grad = rsl_and_gradient(strategy.model, step, strategy._criterion.beta)
        delta = [d.double() for d in step["delta"]]
        norm = math.sqrt(NORM_DECAY_EPSILON + norm_of(delta) ** 2)
        pull = [g.double() - r for g, r in zip(step["grad"], rsl_grad)]
        assert norm_of([p - decay * d / norm for p, d in zip(pull, delta)]) < 0.05 * decay  # float16's forward

    wrong = type("Strategy", (), {"plugins": [AutocastPlugin(torch.float16), DeltaDecayPlugin(1e-5)]})()
    with pytest.raises(ValueError, match="DeltaDecayPlugin"):
        wrong.plugins[0]._check_order(wrong)


# ---------------------------------------------------------------------------- (f) TME's own β


def test_tme_trains_with_the_papers_beta_5_and_tmc_with_25():
    assert TMEStrategy(model=tiny_model())._criterion.beta == 5.0
    assert TMCStrategy(model=tiny_model())._criterion.beta == 25.0
    assert TMCSeqStrategy(model=tiny_model())._criterion.beta == 25.0
    assert TMEStrategy(model=tiny_model(), beta=15.0)._criterion.beta == 15.0
