"""Reliability (issue 10): divergence is stopped, never composed; bad input is refused at
the boundary; a failed ``train()`` leaves the strategy as before the call; every
Avalanche 0.6 benchmark generator works with the plugins and the analytic head."""

import re
import warnings

import pytest
import torch
from avalanche.core import SupervisedPlugin
from torch import nn
from torch.utils.data import TensorDataset

from avalanche_tmc import (
    DeltaComposition,
    DivergenceError,
    RescaledSquareLoss,
    StatisticsComposition,
    TangentModel,
    head_statistics,
)
from avalanche_tmc.analytic import AnalyticClassifier, AnalyticHeadStrategy, penultimate
from tests.helpers import NUM_CLASSES, TinyResNet, quiet_evaluator, random_delta, small_benchmark, tensor_dataset, tmc

warnings.filterwarnings("ignore", message="No loggers specified")

def analytic(**kwargs) -> AnalyticHeadStrategy:
    torch.manual_seed(0)
    model = AnalyticClassifier(penultimate(TinyResNet(num_classes=3)), NUM_CLASSES)
    return AnalyticHeadStrategy(model=model, ridge_lambda=1.0, train_mb_size=8, evaluator=quiet_evaluator(),
                                **kwargs)


def assert_same_delta(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name


# ---------------------------------------------------------------------------- 1. NaN / inf
def test_rsl_only_minus_inf_is_masked():
    assert not torch.isfinite(RescaledSquareLoss()(torch.tensor([[float("nan"), 3.0, 0.0]]), torch.tensor([1])))
    assert not torch.isfinite(RescaledSquareLoss()(torch.tensor([[float("inf"), 3.0, 0.0]]), torch.tensor([1])))
    masked = RescaledSquareLoss(beta=5.0)(torch.tensor([[float("-inf"), 3.0, 0.0]]), torch.tensor([1]))
    assert masked.item() == pytest.approx((3.0 - 5.0) ** 2 / 2)


def test_diverged_experience_is_stopped_and_nothing_composed():
    bm = small_benchmark()
    strategy = tmc()
    strategy.train(bm.train_stream[0])
    composed = strategy.composed_delta
    model_delta = strategy.model.delta
    strategy.optimizer.param_groups[0]["lr"] = 1e30
    with pytest.raises(DivergenceError, match=r"Experience 1: training diverged at iteration \d+ \(epoch 1\)"):
        strategy.train(bm.train_stream[1])
    assert strategy.tangent_plugin.composition.keys == [0]
    assert_same_delta(strategy.composed_delta, composed)
    assert_same_delta(strategy.model.delta, model_delta)
    assert not strategy.tangent_plugin.in_training_exp
    strategy.optimizer.param_groups[0]["lr"] = 1e-2
    strategy.train(bm.train_stream[1])  # and it can be trained again normally
    assert strategy.tangent_plugin.composition.keys == [0, 1]


def test_nan_input_stops_the_experience():
    bm = small_benchmark(train=tensor_dataset(nan_at=slice(0, NUM_CLASSES)))
    strategy = tmc()
    with pytest.raises(DivergenceError, match="Experience 0.*loss is nan"):
        strategy.train(bm.train_stream[0], shuffle=False)
    assert len(strategy.tangent_plugin.composition) == 0
    assert all(torch.count_nonzero(v) == 0 for v in strategy.model.delta.values())


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


def test_statistics_refuse_non_finite():
    features = torch.randn(6, 5)
    stats = head_statistics(features, torch.arange(6) % 3, 3)
    features[2, 1] = float("nan")
    composition = StatisticsComposition()
    with pytest.raises(ValueError, match="not finite"):
        composition.add(0, head_statistics(features, torch.arange(6) % 3, 3))
    assert len(composition) == 0
    composition.add(0, stats)


def test_analytic_head_refuses_nan_features():
    bm = small_benchmark(train=tensor_dataset(nan_at=slice(0, NUM_CLASSES)))
    strategy = analytic()
    with pytest.raises(ValueError, match="Experience 0: the features of training iteration 1 hold NaN"):
        strategy.train(bm.train_stream[0], shuffle=False)
    assert len(strategy.statistics) == 0
    assert strategy.model.weight.numel() == 0


# ---------------------------------------------------------------------------- 2. every benchmark generator
def _cls(dataset):
    from avalanche.benchmarks.utils import as_classification_dataset
    return as_classification_dataset(dataset)


def _with_task(dataset, task):
    from avalanche.benchmarks.utils import _make_taskaware_classification_dataset
    return _make_taskaware_classification_dataset(dataset, task_labels=task)


def _two_halves(seed):
    """Two datasets with disjoint classes {0, 1} and {2, 3}."""
    full = tensor_dataset(24, seed=seed)
    parts = []
    for classes in ((0, 1), (2, 3)):
        idx = [i for i, y in enumerate(full.targets) if y in classes]
        part = TensorDataset(full.tensors[0][idx], full.tensors[1][idx])
        part.targets = [full.targets[i] for i in idx]
        parts.append(part)
    return parts


def _generators():
    import avalanche.benchmarks as B

    train, test = tensor_dataset(24), tensor_dataset(16, seed=1)
    (tr0, tr1), (te0, te1) = _two_halves(0), _two_halves(1)
    return {
        # name: (benchmark, task-incremental?)
        "nc_benchmark": (lambda: B.nc_benchmark(train, test, n_experiences=2, task_labels=False, seed=0), False),
        "nc_benchmark-task": (lambda: B.nc_benchmark(train, test, n_experiences=2, task_labels=True, seed=0), True),
        "ni_benchmark": (lambda: B.ni_benchmark(train, test, n_experiences=2, seed=0), False),
        "class_incremental_benchmark": (lambda: B.class_incremental_benchmark(
            {"train": _cls(train), "test": _cls(test)}, num_experiences=2), False),
        "new_instances_benchmark": (lambda: B.new_instances_benchmark(_cls(train), _cls(test), num_experiences=2),
                                    False),
        "benchmark_from_datasets": (lambda: B.benchmark_from_datasets(
            train=[_cls(tr0), _cls(tr1)], test=[_cls(te0), _cls(te1)]), False),
        "task_incremental_benchmark": (lambda: B.task_incremental_benchmark(B.benchmark_from_datasets(
            train=[_cls(tr0), _cls(tr1)], test=[_cls(te0), _cls(te1)])), True),
        "with_task_labels": (lambda: B.with_task_labels(B.benchmark_from_datasets(
            train=[_with_task(tr0, 0), _with_task(tr1, 1)], test=[_with_task(te0, 0), _with_task(te1, 1)])), True),
        "data_incremental_benchmark": (lambda: B.data_incremental_benchmark(B.nc_benchmark(
            train, test, n_experiences=2, task_labels=False, seed=0), experience_size=8), False),
        "tensors_benchmark": (lambda: B.tensors_benchmark(
            [(tr0.tensors[0], tr0.tensors[1]), (tr1.tensors[0], tr1.tensors[1])],
            [(te0.tensors[0], te0.tensors[1]), (te1.tensors[0], te1.tensors[1])], task_labels=[0, 1]), True),
        "dataset_benchmark": (lambda: B.dataset_benchmark([tr0, tr1], [te0, te1]), False),
    }


GENERATORS = list(_generators())


def _expected_classes(experience):
    ys = [int(experience.dataset[i][1]) for i in range(len(experience.dataset))]
    return set(ys)


@pytest.mark.parametrize("name", GENERATORS)
@pytest.mark.parametrize("learner", ["tmc", "analytic"])
def test_every_benchmark_generator_works(name, learner):
    make, task_il = _generators()[name]
    bm = make()
    strategy = tmc() if learner == "tmc" else analytic()
    train = list(bm.train_stream)
    for exp in train:
        strategy.train(exp)
    metrics = strategy.eval(bm.test_stream)
    assert any(k.startswith("Top1_Acc_Stream") for k in metrics)
    plugin = strategy.tangent_plugin if learner == "tmc" else strategy.plugins[0]
    assert plugin.uses_task_mask() == task_il
    learned = strategy.tangent_plugin.composition.keys if learner == "tmc" else strategy.statistics.keys
    assert learned == [exp.current_experience for exp in train]
    for exp in train:  # the recorded classes are the ones in the data
        tasks = set(int(t) for t in getattr(exp.dataset, "targets_task_labels", [0] * len(exp.dataset)))
        for task in tasks:
            assert _expected_classes(exp) <= plugin.task_classes[task]


# ---------------------------------------------------------------------------- 3. all-or-nothing train()
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
def test_interrupted_train_leaves_the_strategy_as_before(error):
    bm = small_benchmark(n_experiences=4, task_labels=True)
    interrupt = _InterruptAt(exp_id=2, error=error)
    strategy = tmc(plugins=[interrupt])
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


def test_failed_train_leaves_the_analytic_head_as_before():
    bm = small_benchmark(n_experiences=4)
    interrupt = _InterruptAt(exp_id=2, error=KeyboardInterrupt)
    strategy = analytic(plugins=[interrupt])
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


@pytest.mark.parametrize("learner", ["tmc", "analytic"])
def test_duplicate_experience_is_refused_before_training(learner):
    bm = small_benchmark()
    counter = _CountIterations()
    strategy = tmc(plugins=[counter]) if learner == "tmc" else analytic(plugins=[counter])
    strategy.train(bm.train_stream[0])
    done = counter.count
    with pytest.raises(KeyError, match="already"):
        strategy.train(bm.train_stream[0])
    with pytest.raises(KeyError, match="twice"):
        strategy.train([bm.train_stream[1], bm.train_stream[1]])
    assert counter.count == done  # refused before any training iteration


# ---------------------------------------------------------------------------- 4. the head is the output layer
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


# ---------------------------------------------------------------------------- 5. validation at the boundary
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


def test_strategy_refuses_bad_lr():
    for lr in (-1e-3, 0.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="lr must be a positive finite number"):
            tmc(lr=lr)


@pytest.mark.parametrize("argv, message", [
    (["--beta", "-25"], "--beta: must be in"),
    (["--beta", "nan"], "--beta: must be in"),
    (["--epochs", "-1"], "--epochs: must be at least 1"),
    (["--epochs", "0"], "--epochs: must be at least 1"),
    (["--tasks", "two"], "--tasks: expected a positive integer"),
    (["--batch-size", "0"], "--batch-size: must be at least 1"),
    (["--lr-tangent", "1e30"], r"--lr-tangent: must be in \(0, 1\]"),
    (["--lr-tangent", "-0.001"], "--lr-tangent: must be in"),
    (["--lr", "inf"], r"--lr: must be in \(0, 10\]"),
    (["--milestones", "15,10"], "milestones must be increasing"),
])
def test_runner_refuses_bad_arguments(argv, message, capsys):
    from benchmarks import run

    with pytest.raises(SystemExit):
        run.parse_args(argv)
    assert re.search(message, capsys.readouterr().err)


def test_runner_accepts_good_arguments():
    from benchmarks import run

    args = run.parse_args(["--beta", "5", "--epochs", "2", "--lr-tangent", "1e-3", "--lr", "0.05",
                           "--milestones", "10,15"])
    assert (args.beta, args.epochs, args.lr_tangent, args.lr, args.milestones) == (5.0, 2, 1e-3, 0.05, "10,15")


# ---------------------------------------------------------------------------- 6. Avalanche's dynamic models
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


# ---------------------------------------------------------------------------- 7. replay and forgetting
@pytest.mark.parametrize("learner", ["tmc", "analytic"])
def test_forget_is_refused_when_later_experiences_replayed_it(learner):
    from avalanche.training.plugins import ReplayPlugin

    bm = small_benchmark(n_experiences=4)
    replay = ReplayPlugin(mem_size=8)
    strategy = tmc(plugins=[replay]) if learner == "tmc" else analytic(plugins=[replay])
    for exp in bm.train_stream:
        strategy.train(exp)
    keys = lambda: strategy.tangent_plugin.composition.keys if learner == "tmc" else strategy.statistics.keys  # noqa
    with pytest.raises(ValueError, match=r"Cannot forget experience 0 exactly.*\[1, 2, 3\].*ReplayPlugin.*"
                                         r"forget\(3\), forget\(2\), forget\(1\), then forget\(0\)"):
        strategy.forget(0)
    assert keys() == [0, 1, 2, 3]
    strategy.forget(3)  # the most recent one is exact
    with pytest.raises(ValueError, match=r"experiences \[1, 2\]"):
        strategy.forget(0)
    strategy.forget(2)
    strategy.forget(1)
    strategy.forget(0)
    assert keys() == []


def test_forget_without_replay_is_unchanged():
    bm = small_benchmark(n_experiences=4)
    strategy = tmc()
    for exp in bm.train_stream:
        strategy.train(exp)
    strategy.forget(0)
    assert strategy.tangent_plugin.composition.keys == [1, 2, 3]


# ---------------------------------------------------------------------------- 8. checkpoint and resume
def test_checkpoint_after_two_experiences_resumes_in_a_new_process(tmp_path):
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ckpt, resumed, full = (str(tmp_path / n) for n in ("ckpt.pkl", "resumed.pt", "full.pt"))
    for mode, out in (("first", ""), ("resume", resumed), ("full", full)):
        done = subprocess.run([sys.executable, "-m", "tests.avalanche_tmc.checkpoint_job", mode, ckpt, out],
                              capture_output=True, text=True, cwd=root)
        assert done.returncode == 0, done.stderr[-2000:]
    assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")] == []  # the atomic write left no temp file
    a, b = torch.load(resumed), torch.load(full)
    assert a["keys"] == b["keys"] == [0, 1, 2, 3]
    assert_same_delta(a["delta"], b["delta"])
    for key in b["components"]:
        assert_same_delta(a["components"][key], b["components"][key])


def test_failed_checkpoint_keeps_the_previous_file(tmp_path):
    from avalanche_tmc.checkpoint import save_checkpoint

    path = tmp_path / "ckpt.pkl"
    path.write_bytes(b"previous")
    strategy = tmc()
    strategy.unpicklable = (i for i in range(3))
    with pytest.raises(Exception):
        save_checkpoint(strategy, str(path))
    assert path.read_bytes() == b"previous"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt.pkl"]


def test_report_files_are_written_atomically(tmp_path, monkeypatch):
    from benchmarks import report

    rows = [dict(dataset="d", scenario="class", tasks=1, backbone="b", method="tmc", model="composed",
                 after_task=1, eval_exp="all", accuracy=0.5, train_seconds=1.0, eval_seconds=0.1)]
    path = report.write_csv(rows, tmp_path / "results.csv")
    before = path.read_bytes()

    class Boom(Exception):
        pass

    def fail_midway(self, _rows):
        raise Boom()

    monkeypatch.setattr(report.csv.DictWriter, "writerows", fail_midway)
    with pytest.raises(Boom):
        report.write_csv(rows * 2, path)
    assert path.read_bytes() == before  # the old file is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.csv"]  # and no temporary left


def test_runner_checks_the_output_folder_before_training(tmp_path):
    import os

    from benchmarks import run

    file_in_the_way = tmp_path / "file"
    file_in_the_way.write_text("x")
    with pytest.raises(SystemExit, match="not writable"):  # found before any data is loaded
        run.main(["--dataset", "digits", "--out", str(file_in_the_way / "out")])
    locked = tmp_path / "locked"
    locked.mkdir()
    os.chmod(locked, 0o500)
    try:
        if not os.access(locked, os.W_OK):  # (root can write anywhere)
            with pytest.raises(SystemExit, match="not writable"):
                run.main(["--dataset", "digits", "--out", str(locked / "out")])
    finally:
        os.chmod(locked, 0o700)
