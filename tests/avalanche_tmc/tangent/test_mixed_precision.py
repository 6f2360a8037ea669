"""Mixed precision (issue 23): TangentModel's generic and fast paths under ``torch.autocast``
on CPU, the PyTorch behaviour that :mod:`avalanche_tmc.tangent.precision` works around, the
float32 path left bit for bit as it was, RescaledSquareLoss in float32, and
:class:`~avalanche_tmc.AutocastPlugin` in a TMC strategy (bfloat16, and float16 with its
GradScaler).

Tolerances. bfloat16 keeps 8 significant bits: one rounding changes a value by up to
``2**-8`` (0.39%) of itself; float16 keeps 11 (``2**-11``, 0.05%). The tiny networks below
are 4 to 6 layers deep, and their outputs are compared with float32's relative to the
largest float32 logit; measured (TinyResNet, TinyTransformer, the fallback network, both
paths): 0.4-0.7% in bfloat16, 0.05-0.08% in float16. The bound is 5 roundings
(``5 * 2**-8`` = 2.0%, ``5 * 2**-11`` = 0.24%): three times the measured error, and well
under the size of the tangent term ``J·δ`` (checked > 10% of the output, so a dropped or
wrong tangent fails). The gradients of ``δ`` are compared by direction: cosine similarity
with float32's above 0.995 (measured > 0.9995 in bfloat16, > 0.99999 in float16) and norms
within 5%.
"""

import contextlib
import warnings

import pytest
import torch
import torch.nn.functional as F
from avalanche.core import SupervisedPlugin
from avalanche.evaluation.metrics import accuracy_metrics, loss_metrics
from avalanche.training.plugins import EvaluationPlugin
from torch import nn
from torch.func import jvp

import avalanche_tmc.tangent.model as model_module
import avalanche_tmc.tangent.plan as plan_module
from avalanche_tmc import AutocastPlugin, RescaledSquareLoss, TangentModel, TMCStrategy
from avalanche_tmc.tangent.precision import (
    NORMALIZATIONS,
    MatchNormDtypes,
    autocast_enabled,
    match_tangents,
    matched_tangent_dtypes,
)
from tests.helpers import (
    TinyResNet,
    TinyTransformer,
    digits_benchmark,
    digits_splits,
    quiet_evaluator,
    random_delta,
    randomize_batchnorm,
    small_benchmark,
)

warnings.filterwarnings("ignore", message="No loggers specified")

TOLERANCE = {torch.bfloat16: 5 * 2.0 ** -8, torch.float16: 5 * 2.0 ** -11}
"""Largest output error allowed, relative to the largest float32 logit (module docstring)."""

MIN_GRAD_COSINE = 0.995


class Untraceable(nn.Module):
    """Convolution, BatchNorm, ReLU, convolution behind control flow on values: ``torch.fx``
    cannot trace it, so the fast path runs it whole under ``torch.func.jvp`` (``_jvp_module``)."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.bn = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 1)

    def forward(self, x):
        if bool(x.abs().sum() >= 0):
            x = self.conv2(torch.relu(self.bn(self.conv1(x))))
        return x


class FallbackNet(nn.Module):
    """Convolution + BatchNorm (fast-path rules: a bfloat16 value with a float32 tangent
    leaves them), then :class:`Untraceable` and a GroupNorm (no rule), then
    ``torch.cumsum`` (no rule: ``_jvp_call``) and a linear head."""

    def __init__(self, width: int = 4, num_classes: int = 3):
        super().__init__()
        self.conv = nn.Conv2d(1, width, 3, padding=1)
        self.bn = nn.BatchNorm2d(width)
        self.block = Untraceable(width)
        self.gn = nn.GroupNorm(2, width)
        self.fc = nn.Linear(width, num_classes)

    def forward(self, x):
        h = self.gn(self.block(self.bn(self.conv(x))))
        return self.fc(torch.cumsum(h, dim=1).mean(dim=(2, 3)))


NETWORKS = {
    "TinyResNet": lambda: randomize_batchnorm(TinyResNet(width=8)),
    "TinyTransformer": lambda: TinyTransformer(),
    "FallbackNet": lambda: randomize_batchnorm(FallbackNet()),
}


def tangent_model(name: str, implementation: str) -> TangentModel:
    torch.manual_seed(0)
    tm = TangentModel(NETWORKS[name](), implementation=implementation)
    tm.load_delta(random_delta(tm, scale=0.05, seed=1))
    return tm


def forward_backward(tm: TangentModel, x: torch.Tensor, dtype=None):
    """The output and the gradients of ``δ`` of a float32 loss, under autocast to ``dtype``
    (None: float32)."""
    tm.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype or torch.bfloat16, enabled=dtype is not None):
        out = tm(x)
    RescaledSquareLoss(beta=5.0)(out, torch.arange(x.shape[0]) % out.shape[1]).backward()
    return out.detach(), [p.grad.clone() for p in tm.delta_params]


def cosine(a, b) -> float:
    a = torch.cat([t.flatten() for t in a]).double()
    b = torch.cat([t.flatten() for t in b]).double()
    return float(a @ b / (a.norm() * b.norm()))


INPUT = torch.randn(6, 1, 8, 8, generator=torch.Generator().manual_seed(2))


# ---------------------------------------------------------------------------- the two paths


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("implementation", ["generic", "fast"])
@pytest.mark.parametrize("network", list(NETWORKS))
def test_autocast_output_and_delta_gradients_match_float32(network, implementation, dtype):
    tm = tangent_model(network, implementation)
    assert tm.implementation == implementation
    if network == "FallbackNet" and implementation == "fast":
        assert set(tm._plan.fallback_ops) >= {"block", "gn", "cumsum"}  # the jvp fallbacks are exercised
    reference, reference_grads = forward_backward(tm, INPUT)
    out, grads = forward_backward(tm, INPUT, dtype)

    assert out.dtype == dtype
    scale = reference.abs().max()
    with torch.no_grad():
        tangent_term = reference - tm.base_forward(INPUT)
    assert tangent_term.abs().max() > 0.1 * scale  # a dropped tangent would be far outside the tolerance
    error = float((out.float() - reference).abs().max() / scale)
    assert error <= TOLERANCE[dtype], f"max error {error:.4%} of the largest logit"
    assert error > 0  # autocast did compute in lower precision

    assert all(p.dtype == torch.float32 for p in tm.delta_params)
    assert all(g.dtype == torch.float32 for g in grads)
    assert cosine(grads, reference_grads) > MIN_GRAD_COSINE
    norm, reference_norm = (torch.cat([g.flatten() for g in gs]).norm() for gs in (grads, reference_grads))
    assert abs(float(norm / reference_norm) - 1) < 0.05


@pytest.mark.parametrize("network", list(NETWORKS))
def test_fast_and_generic_paths_agree_under_autocast(network):
    fast, generic = tangent_model(network, "fast"), tangent_model(network, "generic")
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
        a, b = fast(INPUT), generic(INPUT)
    reference = generic(INPUT).detach()
    assert float((a.float() - b.float()).abs().max() / reference.abs().max()) <= TOLERANCE[torch.bfloat16]


def test_float32_is_bit_identical_with_and_without_the_precision_code(monkeypatch):
    results = {}
    for label in ("with", "without"):
        if label == "without":
            for module in (model_module, plan_module):
                monkeypatch.setattr(module, "matched_tangent_dtypes", lambda device_type: contextlib.nullcontext())
            monkeypatch.setattr(plan_module, "match_tangents", lambda primals, tangents: tuple(tangents))
        for network in NETWORKS:
            for implementation in ("generic", "fast"):
                results[label, network, implementation] = forward_backward(tangent_model(network, implementation),
                                                                           INPUT)
    for (label, network, implementation), (out, grads) in results.items():
        if label == "with":
            other_out, other_grads = results["without", network, implementation]
            assert torch.equal(out, other_out), (network, implementation)
            assert all(torch.equal(g, h) for g, h in zip(grads, other_grads)), (network, implementation)


def test_the_mode_is_entered_only_under_autocast():
    assert not autocast_enabled("cpu")
    assert isinstance(matched_tangent_dtypes("cpu"), contextlib.nullcontext)
    with torch.autocast("cpu", torch.bfloat16):
        assert autocast_enabled("cpu")
        assert isinstance(matched_tangent_dtypes("cpu"), MatchNormDtypes)
        assert isinstance(matched_tangent_dtypes("meta"), contextlib.nullcontext)  # no autocast there


class ConvConvNorm(nn.Module):
    """As in ConvNeXt: a convolution whose input carries a tangent, then LayerNorm."""

    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 2, stride=2)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1)
        self.norm = nn.LayerNorm(8)
        self.fc = nn.Linear(8, 3)

    def forward(self, x):
        return self.fc(self.norm(self.conv2(self.conv1(x)).permute(0, 2, 3, 1)).mean(dim=(1, 2)))


@pytest.mark.parametrize("implementation", ["generic", "fast"])
def test_output_dtype_without_gradients(implementation):
    """Evaluation (no gradients) under autocast: the output in the autocast dtype, as with
    gradients. Without gradients the convolution/linear rules batch primal and tangent into
    one product and add the bias themselves: a float32 bias added outside autocast left the
    primal in float32 beside a bfloat16 tangent, and layer_norm_rule, given the pair, raised
    "expected scalar type Float but found BFloat16" (ConvNeXt evaluated under AutocastPlugin)."""
    tm = tangent_model("TinyResNet", implementation)
    torch.manual_seed(0)
    conv_norm = TangentModel(ConvConvNorm(), implementation=implementation)
    with torch.no_grad(), torch.autocast("cpu", torch.bfloat16):
        assert tm(INPUT).dtype == torch.bfloat16
        assert conv_norm(INPUT).dtype == torch.bfloat16


# ---------------------------------------------------------------------------- why the fix is needed


def _norm_calls():
    channels = 4
    gen = torch.Generator().manual_seed(0)
    weight, bias = torch.rand(channels, generator=gen) + 0.5, torch.randn(channels, generator=gen)
    mean, var = torch.randn(channels, generator=gen), torch.rand(channels, generator=gen) + 0.5
    ln_weight, ln_bias = torch.rand(5, generator=gen) + 0.5, torch.randn(5, generator=gen)
    return {
        F.batch_norm: lambda x: F.batch_norm(x, mean, var, weight, bias, False, 0.0, 1e-5),
        F.layer_norm: lambda x: F.layer_norm(x, (5,), ln_weight, ln_bias),
        F.group_norm: lambda x: F.group_norm(x, 2, weight, bias),
        F.instance_norm: lambda x: F.instance_norm(x, None, None, weight, bias),
    }


@pytest.mark.parametrize("norm", NORMALIZATIONS, ids=lambda f: f.__name__)
def test_pytorch_gives_a_float32_tangent_to_a_bfloat16_normalisation(norm):
    """The PyTorch behaviour that precision.py works around. If this fails, PyTorch now keeps
    the tangent in the primal's dtype: MatchNormDtypes may no longer be needed."""
    x = torch.randn(2, 4, 5, 5).bfloat16()
    with torch.autocast("cpu", torch.bfloat16):
        primal, tangent = jvp(_norm_calls()[norm], (x,), (torch.randn_like(x),))
        assert (primal.dtype, tangent.dtype) == (torch.bfloat16, torch.float32)
        with MatchNormDtypes():
            primal_fixed, tangent_fixed = jvp(_norm_calls()[norm], (x,), (torch.randn_like(x),))
    assert (primal_fixed.dtype, tangent_fixed.dtype) == (torch.bfloat16, torch.bfloat16)
    assert torch.equal(primal_fixed, primal)  # the same kernel, computing in float32: the same values


def test_the_mode_passes_keyword_inputs_and_leaves_matched_dtypes_alone():
    calls = _norm_calls()
    x = torch.randn(2, 4, 5, 5)
    with MatchNormDtypes():
        assert torch.equal(calls[F.batch_norm](x), _norm_calls()[F.batch_norm](x))  # float32: unchanged
        keyword = F.layer_norm(input=x.bfloat16(), normalized_shape=(5,), weight=torch.ones(5), bias=torch.zeros(5))
    assert keyword.dtype == torch.bfloat16
    assert torch.equal(keyword, F.layer_norm(x.bfloat16(), (5,), torch.ones(5), torch.zeros(5)))


def test_match_tangents_casts_floating_tangents_to_their_primals_dtype():
    primals = (torch.zeros(2, dtype=torch.bfloat16), torch.zeros(2), torch.zeros(2, dtype=torch.long))
    tangents = (torch.ones(2), torch.ones(2, dtype=torch.bfloat16), torch.ones(2))
    assert [t.dtype for t in match_tangents(primals, tangents)] == [torch.bfloat16, torch.float32, torch.float32]


@pytest.mark.parametrize("implementation", ["generic", "fast"])
def test_without_the_fix_a_batchnorm_network_fails_under_autocast(monkeypatch, implementation):
    """The regression test: remove the precision code and the generic path (TinyResNet) and
    the fast path's jvp fallbacks (FallbackNet) fail as issue 23 found them."""
    for module in (model_module, plan_module):
        monkeypatch.setattr(module, "matched_tangent_dtypes", lambda device_type: contextlib.nullcontext())
    monkeypatch.setattr(plan_module, "match_tangents", lambda primals, tangents: tuple(tangents))
    tm = tangent_model("TinyResNet" if implementation == "generic" else "FallbackNet", implementation)
    with pytest.raises(RuntimeError, match="Input type .* and weight type .* should be the same"):
        with torch.autocast("cpu", torch.bfloat16):
            tm(INPUT)


# ---------------------------------------------------------------------------- the loss


def test_rescaled_square_loss_computes_16_bit_logits_in_float32():
    gen = torch.Generator().manual_seed(0)
    logits = (torch.randn(16, 10, generator=gen) * 10).bfloat16().requires_grad_()
    targets = torch.randint(0, 10, (16,), generator=gen)
    loss = RescaledSquareLoss(beta=25.0)(logits, targets)
    exact = RescaledSquareLoss(beta=25.0)(logits.detach().double(), targets)
    assert loss.dtype == torch.float32
    assert abs(float(loss) - float(exact)) <= 1e-6 * float(exact)  # float32 arithmetic, not bfloat16's 0.4%
    in_bf16 = ((logits.detach() - 25.0 * F.one_hot(targets, 10).bfloat16()) ** 2).sum(1).mean() / 10
    assert abs(float(in_bf16) - float(exact)) > 1e-6 * float(exact)  # what computing in bfloat16 would give
    loss.backward()
    assert logits.grad.dtype == torch.bfloat16


# ---------------------------------------------------------------------------- the plugin


class Probe(SupervisedPlugin):
    """Records, at the end of each forward (before AutocastPlugin's, when it comes first),
    whether autocast is on and the output's dtype; raises there when ``fail`` is set."""

    def __init__(self, fail: bool = False):
        super().__init__()
        self.seen, self.seen_in_eval, self.fail = [], [], fail

    def _record(self, strategy, seen):
        seen.append((autocast_enabled(torch.device(strategy.device).type), strategy.mb_output.dtype))
        if self.fail:
            raise RuntimeError("probe")

    def after_forward(self, strategy, **kwargs):
        self._record(strategy, self.seen)

    def after_eval_forward(self, strategy, **kwargs):
        self._record(strategy, self.seen_in_eval)


class Recorder(SupervisedPlugin):
    """The dtypes of the loss, the gradients and the optimizer state at each update."""

    def __init__(self):
        super().__init__()
        self.loss_dtypes, self.grad_dtypes, self.state_dtypes = set(), set(), set()

    def before_update(self, strategy, **kwargs):
        self.loss_dtypes.add(strategy.loss.dtype)
        self.grad_dtypes.update(p.grad.dtype for p in strategy.model.delta_params if p.grad is not None)

    def after_update(self, strategy, **kwargs):
        self.state_dtypes.update(v.dtype for s in strategy.optimizer.state.values() for v in s.values()
                                 if torch.is_tensor(v) and v.is_floating_point() and v.dim() > 0)


def _run(dtype, device, implementation="fast", epochs=2):
    """Two experiences of scikit-learn's digits, seeded; float32 when ``dtype`` is None."""
    _, train, test = digits_splits(seed=0, pretrain_per_class=0)
    benchmark = digits_benchmark(train, test, n_experiences=2)
    torch.manual_seed(0)
    tm = TangentModel(TinyResNet(width=8, num_classes=10), implementation=implementation)
    probe, recorder, after = Probe(), Recorder(), Probe()
    plugins = [probe, recorder] + ([AutocastPlugin(dtype)] if dtype is not None else []) + [after]
    evaluator = EvaluationPlugin(accuracy_metrics(stream=True), loss_metrics(stream=True), loggers=[])
    strategy = TMCStrategy(model=tm, lr=1e-2, train_mb_size=32, train_epochs=epochs, eval_mb_size=256,
                           device=device, plugins=plugins, evaluator=evaluator)
    for experience in benchmark.train_stream:
        torch.manual_seed(100 + experience.current_experience)
        strategy.train(experience)
    metrics = strategy.eval(benchmark.test_stream)
    accuracy = next(v for k, v in metrics.items() if k.startswith("Top1_Acc_Stream"))
    loss = next(v for k, v in metrics.items() if "Loss_Stream" in k)
    delta = torch.cat([v.flatten() for v in strategy.composed_delta.values()]).cpu()
    return dict(strategy=strategy, probe=probe, after=after, recorder=recorder, accuracy=accuracy, loss=loss,
                delta=delta)


@pytest.fixture(scope="module")
def float32_run(device):
    return _run(None, device)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_a_tmc_strategy_trains_under_autocast_close_to_float32(float32_run, dtype, device):
    run = _run(dtype, device)
    # autocast was on during the forwards (training and evaluation), and off after them; the
    # evaluation outputs (no gradients) may be float32: see test_fast_path_output_dtype_without_gradients
    assert set(run["probe"].seen) == {(True, dtype)}
    assert {on for on, _ in run["probe"].seen_in_eval} == {True}
    # after the plugin's callbacks: autocast off and the output in float32, for the loss and the metrics
    assert set(run["after"].seen + run["after"].seen_in_eval) == {(False, torch.float32)}
    assert not autocast_enabled(device.type)
    # δ, its gradients and the optimizer state in float32; the loss in float32
    assert all(p.dtype == torch.float32 for p in run["strategy"].model.delta_params)
    assert run["recorder"].grad_dtypes == run["recorder"].state_dtypes == run["recorder"].loss_dtypes == {
        torch.float32}
    # training changed δ, as float32 training does
    delta, reference = run["delta"], float32_run["delta"]
    assert delta.norm() > 0.5 * reference.norm() > 0
    assert float(delta @ reference / (delta.norm() * reference.norm())) > 0.99
    assert abs(run["accuracy"] - float32_run["accuracy"]) <= 0.03
    assert abs(run["loss"] - float32_run["loss"]) <= 0.01 * float32_run["loss"]


def test_float32_run_has_no_autocast(float32_run):
    assert set(float32_run["probe"].seen + float32_run["probe"].seen_in_eval) == {(False, torch.float32)}


def test_float16_skips_the_steps_whose_gradients_overflow_and_lowers_the_scale():
    torch.manual_seed(0)
    tm = TangentModel(TinyResNet(num_classes=3), num_classes=4)
    plugin = AutocastPlugin(torch.float16, init_scale=2.0 ** 40)  # 2**40 × any gradient overflows float16
    strategy = TMCStrategy(model=tm, lr=1e-2, train_mb_size=8, train_epochs=1, evaluator=quiet_evaluator(),
                           plugins=[plugin])
    experience = small_benchmark().train_stream[0]  # 12 samples: 2 iterations
    # halved at each skipped step; with no step taken, δ = 0 is refused (issue 30, case 3;
    # tests/avalanche_tmc/training/plugins/test_autocast.py)
    with pytest.raises(ValueError, match=r"skipped all 2 optimizer steps.*init_scale=2\.0 \*\* 38\)"):
        strategy.train(experience)
    assert (plugin.steps_taken, plugin.steps_skipped) == (0, 2)
    assert all(torch.count_nonzero(d) == 0 for d in strategy.model.delta.values())  # no step was taken
    assert not any(strategy.optimizer.state.values())  # nor any optimizer state made


def test_float16_refuses_a_plugin_after_it_that_may_add_to_the_loss():
    class Regulariser(SupervisedPlugin):
        def before_backward(self, strategy, **kwargs):
            strategy.loss = strategy.loss + 0.0

    torch.manual_seed(0)
    for order, fails in (([AutocastPlugin(torch.float16), Regulariser()], True),
                         ([Regulariser(), AutocastPlugin(torch.float16, init_scale=2.0 ** 8)], False),
                         ([AutocastPlugin(torch.bfloat16), Regulariser()], False)):
        strategy = TMCStrategy(model=TangentModel(TinyResNet(num_classes=3), num_classes=4), train_mb_size=8,
                               evaluator=quiet_evaluator(), plugins=order)
        context = pytest.raises(ValueError, match=r"\['Regulariser'\] come after it") if fails else \
            contextlib.nullcontext()
        with context:
            strategy.train(small_benchmark().train_stream[0])


def test_a_failed_forward_leaves_no_autocast_behind_and_rolls_the_scale_back():
    torch.manual_seed(0)
    plugin = AutocastPlugin(torch.float16)
    strategy = TMCStrategy(model=TangentModel(TinyResNet(num_classes=3), num_classes=4), train_mb_size=8,
                           evaluator=quiet_evaluator(), plugins=[Probe(fail=True), plugin])
    with pytest.raises(RuntimeError, match="probe"):
        strategy.train(small_benchmark().train_stream[0])
    assert not torch.is_autocast_enabled("cpu") and not plugin.active
    assert plugin.scaler is None  # back as before the call


def test_autocast_plugin_refuses_other_dtypes():
    with pytest.raises(ValueError, match="bfloat16 or torch.float16"):
        AutocastPlugin(torch.float32)
