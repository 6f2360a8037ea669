"""``TaskMaskPlugin`` and the task labels and classes it reads: every Avalanche 0.6 benchmark
generator works with the tangent plugin and the training-free head, and the recorded classes are
the ones in the data."""

import pytest
import torch
from torch.utils.data import TensorDataset

from avalanche_tmc import TrainingFreeClassifier, TrainingFreeStrategy, penultimate
from tests.helpers import NUM_CLASSES, TinyResNet, quiet_evaluator, tensor_dataset, tmc


def training_free(**kwargs) -> TrainingFreeStrategy:
    torch.manual_seed(0)
    model = TrainingFreeClassifier(penultimate(TinyResNet(num_classes=3)), NUM_CLASSES)
    return TrainingFreeStrategy(model=model, ridge_lambda=1.0, train_mb_size=8, evaluator=quiet_evaluator(),
                                **kwargs)


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
        # issue 31, item 6: with_task_labels over the other ways of giving the data its task labels
        "with_task_labels(task_incremental_benchmark(class_incremental_benchmark))": (
            lambda: B.with_task_labels(B.task_incremental_benchmark(B.class_incremental_benchmark(
                {"train": _cls(train), "test": _cls(test)}, num_experiences=2))), True),
        "with_task_labels(validation split)": (lambda: B.with_task_labels(B.benchmark_with_validation_stream(
            B.task_incremental_benchmark(B.class_incremental_benchmark(
                {"train": _cls(train), "test": _cls(test)}, num_experiences=2)), validation_size=0.25)), True),
        "with_task_labels(one experience, two tasks)": (lambda: B.with_task_labels(B.benchmark_from_datasets(
            train=[_with_task(tr0, 0).concat(_with_task(tr1, 1))],
            test=[_with_task(te0, 0), _with_task(te1, 1)])), True),
        "data_incremental_benchmark": (lambda: B.data_incremental_benchmark(B.nc_benchmark(
            train, test, n_experiences=2, task_labels=False, seed=0), experience_size=8), False),
        "tensors_benchmark": (lambda: B.tensors_benchmark(
            [(tr0.tensors[0], tr0.tensors[1]), (tr1.tensors[0], tr1.tensors[1])],
            [(te0.tensors[0], te0.tensors[1]), (te1.tensors[0], te1.tensors[1])], task_labels=[0, 1]), True),
        "dataset_benchmark": (lambda: B.dataset_benchmark([tr0, tr1], [te0, te1]), False),
    }


GENERATORS = list(_generators())


def _expected_task_classes(experience):
    """Task label -> the classes of its samples, read sample by sample (task 0 without task labels)."""
    dataset = experience.dataset
    tasks = [int(t) for t in getattr(dataset, "targets_task_labels", [0] * len(dataset))]
    found = {}
    for i, task in enumerate(tasks):
        found.setdefault(task, set()).add(int(dataset[i][1]))
    return found


@pytest.mark.parametrize("name", GENERATORS)
@pytest.mark.parametrize("learner", ["tmc", "training_free"])
def test_every_benchmark_generator_works(name, learner, device):
    make, task_il = _generators()[name]
    bm = make()
    strategy = tmc(device=device) if learner == "tmc" else training_free(device=device)
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
        for task, classes in _expected_task_classes(exp).items():
            assert classes <= plugin.task_classes[task]


def test_task_labels_without_a_task_column_live_on_the_batchs_device():
    """(Checked on the ``meta`` device: a CPU tensor would not be.)"""
    from types import SimpleNamespace

    from avalanche_tmc.training.plugins.task_mask import batch_task_labels

    x = torch.zeros(5, 3, device="meta")
    strategy = SimpleNamespace(mbatch=[x, torch.zeros(5, device="meta")], experience=None, mb_x=x)
    labels = batch_task_labels(strategy)
    assert labels.device.type == "meta" and labels.shape == (5,) and labels.dtype == torch.long


WITH_TASK_LABELS = [name for name in GENERATORS if name.startswith("with_task_labels")]


def _tme(device):
    from avalanche_tmc import TangentModel, TMEStrategy

    torch.manual_seed(0)
    return TMEStrategy(model=TangentModel(TinyResNet(num_classes=3), num_classes=NUM_CLASSES), lr=1e-2,
                       train_mb_size=8, train_epochs=1, evaluator=quiet_evaluator(), device=device)


def _naive_with_mask(device):
    from avalanche.training import Naive

    from avalanche_tmc import TaskMaskPlugin

    torch.manual_seed(0)
    net = TinyResNet(num_classes=NUM_CLASSES)
    return Naive(model=net, optimizer=torch.optim.SGD(net.parameters(), lr=0.01), train_mb_size=8,
                 evaluator=quiet_evaluator(), plugins=[TaskMaskPlugin()], device=device)


@pytest.mark.parametrize("name", WITH_TASK_LABELS)
@pytest.mark.parametrize("learner", ["tme", "naive+TaskMaskPlugin"])
def test_with_task_labels_masks_each_sample_to_its_tasks_classes(name, learner, device):
    """Issue 31, item 6: Avalanche's ``with_task_labels`` benchmarks under TME (softmax ensemble, NLL
    evaluation) and any strategy with ``TaskMaskPlugin``: the classes recorded per task are the data's,
    and every evaluated prediction is one of its task's classes."""
    make, task_il = _generators()[name]
    bm = make()
    strategy = _tme(device) if learner == "tme" else _naive_with_mask(device)
    plugin = strategy.tangent_plugin if learner == "tme" else strategy.plugins[0]
    for exp in bm.train_stream:
        strategy.train(exp)
    predictions = []
    original = plugin.after_eval_forward

    def record(strategy, **kwargs):
        original(strategy, **kwargs)
        predictions.append((strategy.mb_output.argmax(1).cpu(), strategy.mb_task_id.cpu()))

    plugin.after_eval_forward = record
    strategy.eval(bm.test_stream)
    assert plugin.uses_task_mask() == task_il
    data = {}
    for exp in bm.test_stream:
        for i in range(len(exp.dataset)):
            _, y, t = exp.dataset[i][:3]
            data.setdefault(int(t), set()).add(int(y))
    assert {t: plugin.task_classes[t] for t in data} == data
    assert predictions and all(int(p) in data[int(t)] for ps, ts in predictions for p, t in zip(ps, ts))


def test_with_task_labels_over_unlabelled_data_fails_in_avalanche_itself():
    """Issue 31, item 6, as reported: ``with_task_labels`` over data without task labels raises
    ``AttributeError: ... 'targets_task_labels'`` in the call itself, before any strategy or plugin
    exists (Avalanche 0.6: "The dataset must already have task labels"); over ``nc_benchmark``'s
    experiences it cannot set their read-only ``task_label``. ``task_incremental_benchmark`` gives
    the task labels (experience i: task i), and then ``with_task_labels`` works (the tests above)."""
    import avalanche.benchmarks as B

    train, test = tensor_dataset(24), tensor_dataset(16, seed=1)
    with pytest.raises(AttributeError, match="targets_task_labels"):
        B.with_task_labels(B.class_incremental_benchmark({"train": _cls(train), "test": _cls(test)},
                                                         num_experiences=2))
    with pytest.raises(AttributeError, match="task_label"):
        B.with_task_labels(B.nc_benchmark(train, test, n_experiences=2, task_labels=True, seed=0))
    labelled = B.task_incremental_benchmark(B.class_incremental_benchmark({"train": _cls(train), "test": _cls(test)},
                                                                          num_experiences=2))
    assert [e.task_label for e in B.with_task_labels(labelled).train_stream] == [0, 1]
