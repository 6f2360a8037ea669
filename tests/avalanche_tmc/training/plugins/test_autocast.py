"""``AutocastPlugin`` on the edges of training (issue 30): float16 loss scaling that skips
every step of an experience (a δ of exactly 0 would be composed) or many of them (reported),
and autocast left on every exit path, a forward that raises included (training and
evaluation, on this package's strategies and on Avalanche's own)."""

import warnings

import pytest
import torch
from avalanche.benchmarks import nc_benchmark
from avalanche.core import SupervisedPlugin
from avalanche.training import Naive
from torch import nn
from torch.utils.data import TensorDataset

from avalanche_tmc import AutocastPlugin, TangentModel, TMCStrategy
from tests.helpers import NUM_CLASSES, TinyResNet, quiet_evaluator, small_benchmark, tensor_dataset

warnings.filterwarnings("ignore", message="No loggers specified")


class StepCounter(SupervisedPlugin):
    """Counts, independently of the plugin, the optimizer steps that changed a trained tensor."""

    def __init__(self):
        super().__init__()
        self.taken = self.skipped = 0
        self._before = None

    def before_update(self, strategy, **kwargs):
        self._before = [p.detach().clone() for p in strategy.model.parameters() if p.requires_grad]

    def after_update(self, strategy, **kwargs):
        after = [p.detach() for p in strategy.model.parameters() if p.requires_grad]
        moved = any(not torch.equal(a, b) for a, b in zip(after, self._before))
        self.taken += moved
        self.skipped += not moved


def _tmc(plugins, epochs=1):
    torch.manual_seed(0)
    return TMCStrategy(model=TangentModel(TinyResNet(num_classes=3), num_classes=NUM_CLASSES), lr=1e-2,
                       train_mb_size=8, train_epochs=epochs, evaluator=quiet_evaluator(), plugins=plugins)


def _no_autocast_left():
    """Autocast is off in this thread: an unrelated float32 product is float32."""
    return not torch.is_autocast_enabled("cpu") and (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float32


# ---------------------------------------------------------------------------- case 3: skipped steps


def test_float16_refuses_an_experience_whose_every_step_was_skipped():
    """One short experience: the GradScaler, calibrating down from 2**16, skips both steps;
    δ = 0 was composed without a word."""
    plugin, counter = AutocastPlugin(torch.float16), StepCounter()
    strategy = _tmc([counter, plugin])
    with pytest.raises(ValueError, match=r"Experience 0: float16 loss scaling skipped all 2 optimizer steps.*"
                                         r"init_scale.*bfloat16"):
        strategy.train(small_benchmark().train_stream[0])
    assert counter.taken == 0 and counter.skipped == 2  # what the plugin says, counted independently
    assert strategy.tangent_plugin.composition.keys == []  # nothing composed: as before the call
    assert plugin.scaler is None
    assert _no_autocast_left()


def test_float16_refuses_it_on_an_avalanche_template_too():
    torch.manual_seed(0)
    net = TinyResNet(num_classes=NUM_CLASSES)
    strategy = Naive(model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1), train_mb_size=8,
                     evaluator=quiet_evaluator(), plugins=[AutocastPlugin(torch.float16, init_scale=2.0 ** 40)])
    with pytest.raises(ValueError, match="skipped all 2 optimizer steps"):
        strategy.train(small_benchmark().train_stream[0])
    assert _no_autocast_left()


def test_float16_reports_a_large_fraction_of_skipped_steps():
    plugin, counter = AutocastPlugin(torch.float16), StepCounter()
    strategy = _tmc([counter, plugin], epochs=6)  # 12 steps, the first ones skipped while the scale calibrates
    with pytest.warns(RuntimeWarning, match=r"Experience 0: float16 loss scaling skipped (\d+) of 12 optimizer "
                                            r"steps.*init_scale=.*bfloat16") as record:
        strategy.train(small_benchmark().train_stream[0])
    skipped = [w for w in record if "loss scaling skipped" in str(w.message)]
    assert len(skipped) == 1
    assert 0 < counter.skipped < 12 and counter.skipped + counter.taken == 12
    assert f"skipped {counter.skipped} of 12" in str(skipped[0].message)
    assert (plugin.steps_taken, plugin.steps_skipped) == (counter.taken, counter.skipped)
    assert strategy.tangent_plugin.composition.keys == [0]


def test_no_report_when_no_step_is_skipped():
    """bfloat16 never skips; float16 starting from a calibrated scale skips none either."""
    for dtype, init_scale in ((torch.bfloat16, 2.0 ** 16), (torch.float16, 2.0 ** 8)):
        plugin, counter = AutocastPlugin(dtype, init_scale=init_scale), StepCounter()
        strategy = _tmc([counter, plugin], epochs=2)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)
            strategy.train(small_benchmark().train_stream[0])
        assert (plugin.steps_taken, plugin.steps_skipped) == (counter.taken, 0) == (4, 0)


# ---------------------------------------------------------------------------- case 4: every exit path


class RaiseIn(SupervisedPlugin):
    """Raises in one callback of the forward window (placed before AutocastPlugin, it runs
    while autocast is entered)."""

    def __init__(self, where):
        super().__init__()
        setattr(self, where, self._raise)

    @staticmethod
    def _raise(strategy, **kwargs):
        raise RuntimeError("raised in the forward window")


def _bad_stream():
    """Three-channel images for a one-channel network: the convolution raises inside the forward."""
    y = torch.arange(8) % NUM_CLASSES
    bad = TensorDataset(torch.randn(8, 3, 8, 8), y)
    bad.targets = y.tolist()
    return nc_benchmark(bad, bad, n_experiences=1, task_labels=False, seed=0,
                        fixed_class_order=list(range(NUM_CLASSES)))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_eval_that_raises_inside_a_forward_leaves_no_autocast(dtype):
    strategy = _tmc([AutocastPlugin(dtype, init_scale=2.0 ** 8)])
    with pytest.raises(RuntimeError, match="channels|expected input"):
        strategy.eval(_bad_stream().test_stream)
    assert _no_autocast_left()
    strategy.train(small_benchmark().train_stream[0])  # the strategy goes on
    assert _no_autocast_left()


@pytest.mark.parametrize("where", ["after_forward", "after_eval_forward"])
def test_a_callback_that_raises_in_the_forward_window_leaves_no_autocast(where):
    """On Avalanche's own template (nothing rolls back), training and evaluation."""
    torch.manual_seed(0)
    net = TinyResNet(num_classes=NUM_CLASSES)
    plugin = AutocastPlugin()
    strategy = Naive(model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1), train_mb_size=8,
                     evaluator=quiet_evaluator(), plugins=[RaiseIn(where), plugin])
    bm = small_benchmark()
    with pytest.raises(RuntimeError, match="forward window"):
        if where == "after_forward":
            strategy.train(bm.train_stream[0])
        else:
            strategy.eval(bm.test_stream)
    assert _no_autocast_left() and not plugin.active
    # nothing of the plugin stays on the strategy outside its calls
    assert not {"_train_exp", "_eval_exp"} & set(vars(strategy))


def test_a_model_that_raises_in_training_on_an_avalanche_template_leaves_no_autocast():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 4, 3), nn.Flatten(), nn.LazyLinear(NUM_CLASSES))
    net(torch.zeros(1, 1, 8, 8))
    strategy = Naive(model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.1), train_mb_size=8,
                     evaluator=quiet_evaluator(), plugins=[AutocastPlugin()])
    with pytest.raises(RuntimeError):
        strategy.train(_bad_stream().train_stream[0])
    assert _no_autocast_left()
    strategy.train(nc_benchmark(tensor_dataset(), tensor_dataset(), n_experiences=1, task_labels=False,
                                seed=0).train_stream[0])
    assert _no_autocast_left()
