"""The comparison baselines on a small real Avalanche benchmark (sklearn digits).

Independent fine-tuning is checked against independent computations: each stored
fine-tuned model against a plain PyTorch training loop and against the experience
trained alone; Avalanche's accuracy and loss metrics for the soup and the two ensembles
against predictions recomputed by hand from the stored state dicts, with task-IL masking
applied after combining. The Avalanche built-ins are run end to end with the paper's
configuration.
"""

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from avalanche.core import SupervisedPlugin
from avalanche.evaluation.metrics import accuracy_metrics, loss_metrics
from avalanche.training.plugins import EvaluationPlugin, ReplayPlugin
from avalanche.training.plugins.ewc import EWCPlugin
from avalanche.training.plugins.lwf import LwFPlugin
from avalanche.training.supervised import DER, JointTraining
from torch import nn

from avalanche_tmc import RescaledSquareLoss, TangentModel, TaskMaskPlugin
from baselines import (
    BUILTIN_METHODS,
    COMBINE_MODES,
    IndependentFineTuneStrategy,
    make_builtin_strategy,
)
from tests.helpers import TinyResNet, digits_benchmark, digits_splits

LR, EPOCHS, MB = 0.05, 2, 16


def _take(split, per_class):
    x, y = split
    idx = torch.cat([torch.nonzero(torch.as_tensor(y) == c)[:per_class, 0] for c in range(10)])
    return x[idx.numpy()], y[idx.numpy()]


@pytest.fixture(scope="module")
def digits():
    pre, train, test = digits_splits(seed=0, pretrain_per_class=20)
    return pre, _take(train, 10), _take(test, 5)


@pytest.fixture(scope="module")
def backbone(digits):
    """A briefly pre-trained TinyResNet with a fresh 10-way head (a real starting point:
    fine-tuned models then disagree in interesting ways)."""
    torch.manual_seed(0)
    model = TinyResNet(width=6, num_classes=10)
    x, y = (torch.as_tensor(a) for a in digits[0])
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(5):
        for idx in torch.randperm(len(x)).split(32):
            opt.zero_grad()
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
    model.fc = nn.Linear(6, 10)
    return model.eval()


def evaluator(with_loss=False):
    metrics = [accuracy_metrics(experience=True, stream=True)]
    if with_loss:
        metrics.append(loss_metrics(experience=True))
    return EvaluationPlugin(*metrics, loggers=[])


def fine_tune_strategy(backbone, **kwargs):
    return IndependentFineTuneStrategy(
        model=copy.deepcopy(backbone), lr=LR, train_mb_size=MB, train_epochs=EPOCHS, eval_mb_size=64,
        evaluator=kwargs.pop("evaluator", None) or evaluator(), **kwargs,
    )


def train_all(strategy, experiences, **kwargs):
    for experience in experiences:
        strategy.train(experience, shuffle=False, **kwargs)  # deterministic order


def assert_states_close(a, b, **tol):
    assert a.keys() == b.keys()
    for name in a:
        torch.testing.assert_close(a[name], b[name], **tol)


def tensors(experience):
    data = experience.dataset
    x = torch.stack([data[i][0] for i in range(len(data))])
    y = torch.tensor([data[i][1] for i in range(len(data))])
    return x, y


def eval_logits(backbone, state, x):
    """Logits of a fresh copy of the network loaded with ``state`` (eval mode)."""
    model = copy.deepcopy(backbone)
    model.load_state_dict(state)
    with torch.no_grad():
        return model.eval()(x)


def hand_average(states):
    return {k: (sum(s[k] for s in states) / len(states) if v.is_floating_point() else v)
            for k, v in states[0].items()}


def exp_key(metric, exp):
    return f"{metric}/eval_phase/test_stream/Task{exp.task_label:03d}/Exp{exp.current_experience:03d}"


# ---------------------------------------------------------------- training


def test_fine_tuned_models_equal_independent_training(digits, backbone):
    bm = digits_benchmark(*digits[1:], n_experiences=3)
    strategy = fine_tune_strategy(backbone)
    train_all(strategy, bm.train_stream)
    assert list(strategy.fine_tuned) == [0, 1, 2]
    # experience 0 by a plain PyTorch loop: full model, BatchNorm in train mode, SGD+momentum
    model = copy.deepcopy(backbone).train()
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=0.9)
    x, y = tensors(bm.train_stream[0])
    for _ in range(EPOCHS):
        for idx in torch.arange(len(x)).split(MB):
            opt.zero_grad()
            F.cross_entropy(model(x[idx]), y[idx]).backward()
            opt.step()
    assert_states_close(strategy.fine_tuned[0], model.state_dict())
    # every experience: as if trained alone from the pre-trained weights
    pretrained = backbone.state_dict()
    for exp in bm.train_stream:
        alone = fine_tune_strategy(backbone)
        alone.train(exp, shuffle=False)
        got = strategy.fine_tuned[exp.current_experience]
        assert_states_close(got, alone.fine_tuned[exp.current_experience])
        assert not torch.equal(got["fc.weight"], pretrained["fc.weight"])
        assert not torch.equal(got["stem.1.running_mean"], pretrained["stem.1.running_mean"])  # BN trained
        steps = EPOCHS * math.ceil(len(exp.dataset) / MB)
        assert int(got["stem.1.num_batches_tracked"]) == int(pretrained["stem.1.num_batches_tracked"]) + steps
    # after training the model holds the soup
    assert_states_close(strategy.model.state_dict(), hand_average(list(strategy.fine_tuned.values())))


class _Recorder(SupervisedPlugin):
    """Logs the model under training after each epoch and the eval outputs that follow."""

    def __init__(self):
        super().__init__()
        self.log = []

    def after_training_epoch(self, strategy, **kwargs):
        self.log.append(("trained", strategy.experience.current_experience, copy.deepcopy(strategy.model.state_dict())))

    def before_eval(self, strategy, **kwargs):
        self.log.append(("eval", []))

    def after_eval_forward(self, strategy, **kwargs):
        self.log[-1][1].append(strategy.mb_output.clone())


def test_periodic_evaluation_combines_the_model_in_training_and_does_not_disturb_it(digits, backbone):
    bm = digits_benchmark(*digits[1:], n_experiences=2)
    plain = fine_tune_strategy(backbone)
    train_all(plain, bm.train_stream)
    recorder = _Recorder()
    periodic = fine_tune_strategy(backbone, eval_every=1, combine="ens-sm", plugins=[recorder])
    train_all(periodic, bm.train_stream, eval_streams=[bm.test_stream])
    for key in plain.fine_tuned:
        assert_states_close(plain.fine_tuned[key], periodic.fine_tuned[key])
    assert isinstance(periodic._criterion, nn.CrossEntropyLoss)
    # each eval during an experience = ensemble of the finished models + the model in training
    x = torch.cat([tensors(exp)[0] for exp in bm.test_stream])
    checked = 0
    for event, following in zip(recorder.log, recorder.log[1:]):
        if event[0] == "trained" and following[0] == "eval":
            members = [plain.fine_tuned[k] for k in range(event[1])] + [event[2]]
            probs = torch.stack([torch.softmax(eval_logits(backbone, s, x), dim=1) for s in members]).mean(0)
            torch.testing.assert_close(torch.cat(following[1]), probs.log(), rtol=1e-5, atol=1e-5)
            checked += 1
    assert checked == 2 * EPOCHS


# ---------------------------------------------------------------- evaluation


@pytest.mark.parametrize("task_labels", [False, True])
def test_soup_and_ensembles_match_by_hand(digits, backbone, task_labels):
    bm = digits_benchmark(*digits[1:], n_experiences=3, task_labels=task_labels)
    strategy = fine_tune_strategy(backbone, evaluator=evaluator(with_loss=True))
    train_all(strategy, bm.train_stream)
    states = [copy.deepcopy(s) for s in strategy.fine_tuned.values()]
    criterion = strategy._criterion
    results = {}
    for combine in (*COMBINE_MODES, "soup"):  # switching back and forth needs no retraining
        strategy.combine = combine
        metrics = strategy.eval(bm.test_stream)
        assert strategy._criterion is criterion  # Ens-SM's NLL is swapped back
        preds = []
        for exp in bm.test_stream:
            x, y = tensors(exp)
            allowed = torch.zeros(10, dtype=torch.bool)
            allowed[sorted(exp.classes_in_this_experience) if task_labels else slice(None)] = True
            if combine == "soup":
                out = eval_logits(backbone, hand_average(states), x)
            else:
                members = [eval_logits(backbone, s, x) for s in states]
                if combine == "ens-l":
                    out = torch.stack(members).mean(0)
                else:
                    out = torch.stack([torch.softmax(m, dim=1) for m in members]).mean(0).log()
            out = out.masked_fill(~allowed, float("-inf"))  # task-IL: mask after combining
            pred = out.argmax(1)
            preds.append(pred)
            assert metrics[exp_key("Top1_Acc_Exp", exp)] == pytest.approx((pred == y).float().mean().item(), abs=1e-6)
            loss = F.nll_loss(out, y) if combine == "ens-sm" else F.cross_entropy(out, y)
            assert metrics[exp_key("Loss_Exp", exp)] == pytest.approx(loss.item(), rel=1e-4)
        results.setdefault(combine, []).append(torch.cat(preds))
    torch.testing.assert_close(results["soup"][0], results["soup"][1])
    # the three combinations are genuinely different predictors here
    assert not torch.equal(results["soup"][0], results["ens-sm"][0])
    assert not torch.equal(results["ens-l"][0], results["ens-sm"][0])
    for state, kept in zip(strategy.fine_tuned.values(), states):  # evaluation changed nothing
        assert_states_close(state, kept)


def test_task_incremental_masking_acts_after_combining(digits, backbone):
    bm = digits_benchmark(*digits[1:], n_experiences=5, task_labels=True)
    strategy = fine_tune_strategy(backbone, combine="ens-sm")
    train_all(strategy, bm.train_stream)
    assert strategy.fine_tune_plugin.uses_task_mask()
    metrics = strategy.eval(bm.test_stream)
    states = list(strategy.fine_tuned.values())
    gains = []
    for exp in bm.test_stream:
        x, y = tensors(exp)
        classes = sorted(exp.classes_in_this_experience)
        probs = torch.stack([torch.softmax(eval_logits(backbone, s, x), dim=1) for s in states]).mean(0)
        masked = torch.tensor(classes)[probs[:, classes].argmax(1)]
        expected = (masked == y).float().mean().item()
        got = metrics[exp_key("Top1_Acc_Exp", exp)]
        assert got == pytest.approx(expected, abs=1e-6)
        gains.append(got - (probs.argmax(1) == y).float().mean().item())
    assert min(gains) >= -1e-9 and sum(gains) > 0


def test_combine_validation_and_retraining_guard(digits, backbone):
    with pytest.raises(ValueError, match="combine"):
        fine_tune_strategy(backbone, combine="mean")
    strategy = fine_tune_strategy(backbone)
    with pytest.raises(ValueError, match="combine"):
        strategy.combine = "tme"
    bm = digits_benchmark(*digits[1:], n_experiences=5)
    strategy.train(bm.train_stream[0])
    with pytest.raises(KeyError, match="already fine-tuned"):
        strategy.train(bm.train_stream[0])


# ---------------------------------------------------------------- Avalanche built-ins


@pytest.mark.parametrize("task_labels", [False, True])
@pytest.mark.parametrize("name", BUILTIN_METHODS)
def test_builtin_methods_run_end_to_end(digits, backbone, name, task_labels):
    bm = digits_benchmark(*digits[1:], n_experiences=2, task_labels=task_labels)
    torch.manual_seed(0)
    strategy = make_builtin_strategy(name, model=copy.deepcopy(backbone), lr=1e-2, train_mb_size=MB,
                                     train_epochs=1, eval_mb_size=64, evaluator=evaluator())
    if name.startswith("joint"):
        assert isinstance(strategy, JointTraining)
        strategy.train(bm.train_stream)
    else:
        for exp in bm.train_stream:
            strategy.train(exp)
    metrics = strategy.eval(bm.test_stream)
    accs = [v for k, v in metrics.items() if k.startswith("Top1_Acc")]
    assert len(accs) >= 3 and all(math.isfinite(a) and 0.0 <= a <= 1.0 for a in accs)

    masks = [p for p in strategy.plugins if isinstance(p, TaskMaskPlugin)]
    assert len(masks) == 1 and masks[0].uses_task_mask() == task_labels
    plugin = lambda cls: next(p for p in strategy.plugins if isinstance(p, cls))  # noqa: E731
    if name == "er":
        replay = plugin(ReplayPlugin)
        assert (replay.mem_size, replay.batch_size, replay.batch_size_mem) == (300, MB, 32)
        assert len(replay.storage_policy.buffer) == sum(len(e.dataset) for e in bm.train_stream)
    elif name == "lwf":
        assert (plugin(LwFPlugin).lwf.alpha, plugin(LwFPlugin).lwf.temperature) == (1.0, 2.0)
    elif name == "ewc":
        assert (plugin(EWCPlugin).mode, plugin(EWCPlugin).decay_factor) == ("online", 0.9)
    elif name == "der":
        assert isinstance(strategy, DER)
        assert (strategy.mem_size, strategy.batch_size_mem, strategy.alpha, strategy.beta) == (300, 32, 0.1, 0.5)
    elif name == "joint-tangent":
        assert isinstance(strategy.model, TangentModel)
        assert isinstance(strategy._criterion, RescaledSquareLoss) and strategy._criterion.beta == 25.0
        assert isinstance(strategy.optimizer, torch.optim.Adam)
        assert any(v.abs().max() > 0 for v in strategy.model.delta.values())  # δ was trained
    if name != "joint-tangent":
        assert isinstance(strategy.optimizer, torch.optim.SGD)
        assert strategy.optimizer.param_groups[0]["momentum"] == 0.9


def test_unknown_builtin_name_raises(backbone):
    with pytest.raises(ValueError, match="naive, er, lwf"):
        make_builtin_strategy("icarl", model=copy.deepcopy(backbone))


def test_composition_plugins_share_one_public_skeleton():
    """TMC's and the baselines' plugins fill in CompositionPlugin's hooks; the Avalanche
    callbacks (training moments, evaluation swap and restore) live in the base only."""
    from avalanche_tmc import CompositionPlugin, TangentPlugin
    from baselines import IndependentFineTunePlugin

    callbacks = ("before_training_exp", "after_training_exp", "before_eval", "after_eval_forward", "after_eval")
    hooks = ("start_member", "add_member", "members", "load_combination", "save_training_state",
             "load_training_state", "ensembles", "ensembles_softmax", "ensemble_output")
    for plugin in (TangentPlugin, IndependentFineTunePlugin):
        assert issubclass(plugin, CompositionPlugin)
        assert not [c for c in callbacks if c in vars(plugin)]
        assert all(h in vars(plugin) for h in hooks)
    with pytest.raises(NotImplementedError):
        CompositionPlugin().members()


def test_one_decorator_adds_a_baseline_everywhere(monkeypatch):
    """Issue 49: an Avalanche baseline is one ``@baseline`` entry; the library's registry, the
    defaults, ``make_builtin_strategy`` and the benchmark tables (its row, cost and tuning)
    read it, also when it is registered after the tables were."""
    from avalanche.training.supervised import Naive

    from avalanche_tmc.training import registry
    from baselines import builtin
    from benchmarks import methods
    from benchmarks.methods import TrainConfig, catalogue
    from benchmarks.methods import registry as method_registry
    from benchmarks.methods.strategy import build_strategy

    tables = [((builtin,), "_BASELINES"), ((builtin,), "DEFAULTS"), ((registry,), "_STRATEGIES"),
              ((method_registry, catalogue), "_GROUPS"), ((method_registry, catalogue), "_ROWS"),
              ((method_registry,), "_JOINT_ROWS")]
    for modules, name in tables:  # copies, restored afterwards (the catalogue holds the registry's tables too)
        copied = type(getattr(modules[0], name))(getattr(modules[0], name))
        for module in modules:
            monkeypatch.setattr(module, name, copied)

    @builtin.baseline("naive-twice", description="Naive, two epochs", defaults={"epochs": 2}, label="Naive twice",
                      memory="O(1) (twice)", replay="none yet", cost=4, tuning="self")
    def _twice(common, hp, plugins, **_):
        return Naive(plugins=plugins, **dict(common, train_epochs=hp["epochs"]))

    spec = registry.strategy_spec("naive-twice")
    assert spec.family == "non-linear" and spec.description == "Naive, two epochs"
    net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3))
    strategy = registry.create_strategy("naive-twice", net, epochs=5)
    assert isinstance(strategy, Naive) and strategy.train_epochs == 5
    assert any(isinstance(p, TaskMaskPlugin) for p in strategy.plugins)
    assert builtin.make_builtin_strategy("naive-twice", model=net).train_epochs == 2
    assert builtin.DEFAULTS["naive-twice"] == {"epochs": 2} and builtin.BUILTIN_METHODS[-1] == "naive-twice"

    group = methods.group_named("naive-twice")
    assert methods.method_names()[-1] == "naive-twice"
    assert group.rows == (methods.Row("naive-twice", "Naive twice", "O(1) (twice)", replay="none yet"),)
    assert (group.family, group.cost, group.tuning, group.joint, group.task_aware) == ("non-linear", 4, "self",
                                                                                       False, False)
    built = build_strategy(group, TinyResNet(num_classes=3), TrainConfig(num_classes=5, milestones=(1,)),
                           EvaluationPlugin(loggers=[]))
    assert isinstance(built, Naive) and built.train_epochs == 2
    with pytest.raises(ValueError, match="already registered"):
        builtin.baseline("naive-twice", description="again", label="Again", memory="O(1)")(_twice)


def test_the_composition_baselines_are_registered_without_importing_them():
    """``import baselines`` registers soup, ens-l and ens-sm; each builds the composition
    baseline its name says (one name per ``COMBINE_MODES`` entry)."""
    from avalanche_tmc.training.registry import create_strategy, strategy_spec

    for mode in COMBINE_MODES:
        assert strategy_spec(mode).family == "non-linear"
        built = create_strategy(mode, torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(4, 3)),
                                evaluator=evaluator())
        assert isinstance(built, IndependentFineTuneStrategy) and built.combine == mode
