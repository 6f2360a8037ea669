"""Task-incremental evaluation of a strategy trained class-incrementally.

In the task-incremental scenario the classes are split as in the class-incremental one and
the task label is known at test time: every prediction is restricted to the classes of its
sample's task (:class:`avalanche_tmc.TaskMaskPlugin`, the paper's section 4.3: "we can
restrict the model predictions to that of the given task during evaluation"). Most
strategies of the comparison do not read task labels to train — the mask acts at
evaluation only — so their task-IL numbers in a class-IL run come from evaluating the
trained strategies under the mask (:func:`task_masked`), as Mammoth reports Class-IL and
Task-IL from one training, instead of training again (``RunConfig.task_il``; the result
rows say ``trained_in="class"``). The groups whose training does read them
(``MethodGroup.task_aware``: Avalanche's LwF distils per task, ``JointTraining``'s loader
balances tasks) are trained on the task-labelled split. ``tests/benchmarks/test_task_il.py``
checks that every row gives the numbers of a task-IL run trained from scratch, and a
hand-masked evaluation.

The runner does not even evaluate twice: every row's task mask acts on the finished output
(an ensemble's too: TME and Ens-SM average softmaxes over all classes, then mask), so the
task-IL prediction of a sample is the masked argmax of the output its class-IL evaluation
computed. :class:`EvalOutputs` records those outputs and :func:`masked_accuracies` scores
them per task (:func:`task_masked` is the evaluation they reproduce, kept for the check).
"""

import contextlib
from collections import defaultdict
from typing import Any, Dict, Iterator, List, Set, Tuple

import torch
from avalanche.core import SupervisedPlugin

from avalanche_tmc import TaskMaskPlugin, class_mask, mask_logits
from avalanche_tmc.training.plugins.task_mask import experience_task_classes

__all__ = ["stream_task_classes", "task_masked", "EvalOutputs", "masked_accuracies", "Outputs"]

# experience id -> (outputs, targets) of every test sample, in the stream's order
Outputs = Dict[int, Tuple[torch.Tensor, torch.Tensor]]


def stream_task_classes(stream) -> Dict[int, Set[int]]:
    """Task label -> its classes, over every experience of ``stream``."""
    classes: Dict[int, Set[int]] = {}
    for experience in stream:
        for task, task_classes in experience_task_classes(experience).items():
            classes.setdefault(task, set()).update(task_classes)
    return classes


@contextlib.contextmanager
def task_masked(strategy, stream) -> Iterator[None]:
    """Within the block, ``strategy`` evaluates task-incrementally on ``stream`` (a
    task-labelled test stream): each of its :class:`TaskMaskPlugin` masks every sample's
    prediction to the classes of its task, as recorded from ``stream``. What the plugins
    recorded in training (one task, every class, in a class-IL run) is put back after."""
    plugins: List[TaskMaskPlugin] = [p for p in strategy.plugins if isinstance(p, TaskMaskPlugin)]
    if not plugins:
        raise TypeError(f"{type(strategy).__name__} has no TaskMaskPlugin: it cannot be evaluated task-incrementally "
                        "(add avalanche_tmc.TaskMaskPlugin() to its plugins).")
    classes = stream_task_classes(stream)
    saved = [(plugin, plugin.mask_state(), plugin.task_incremental) for plugin in plugins]
    try:
        for plugin, state, _ in saved:
            plugin.load_mask_state(dict(task_classes=classes, train_task_labels=set(classes),
                                        saved_criterion=state["saved_criterion"]))
            plugin.task_incremental = True
        yield
    finally:
        for plugin, state, flag in saved:
            plugin.load_mask_state(dict(state, saved_criterion=plugin.mask_state()["saved_criterion"]))
            plugin.task_incremental = flag


class EvalOutputs(SupervisedPlugin):
    """Keeps the outputs and targets of the last ``strategy.eval`` call, per experience
    (:attr:`outputs`), so that one forward pass over a test stream scores both the
    class-IL and the task-IL rows (:func:`masked_accuracies`)."""

    def __init__(self) -> None:
        super().__init__()
        self._batches: Dict[int, List[Tuple[torch.Tensor, torch.Tensor]]] = defaultdict(list)

    def before_eval(self, strategy: Any, **kwargs: Any) -> None:
        """Forget the previous evaluation."""
        self._batches = defaultdict(list)

    def after_eval_iteration(self, strategy: Any, **kwargs: Any) -> None:
        """Record the minibatch's final output (after every plugin's change) and targets."""
        self._batches[strategy.experience.current_experience].append(
            (strategy.mb_output.detach().cpu(), strategy.mb_y.detach().cpu()))

    @property
    def outputs(self) -> Outputs:
        """Experience id -> (outputs, targets) of the last evaluation."""
        return {k: (torch.cat([o for o, _ in v]), torch.cat([y for _, y in v])) for k, v in self._batches.items()}


def masked_accuracies(outputs: Outputs, stream) -> Dict[str, float]:
    """Accuracy per experience of ``stream`` (and ``"all"``, sample-weighted) of recorded
    ``outputs`` with each prediction restricted to the classes of its experience's task:
    what :func:`task_masked` evaluation gives. ``outputs`` must hold, per experience id, the
    outputs of exactly ``stream``'s samples in order (the class-IL test stream of the same
    split: experience ``t`` has the samples of task ``t``); anything else is refused."""
    accs: Dict[str, float] = {}
    total = correct = 0
    for exp in stream:
        if exp.current_experience not in outputs:
            raise ValueError(f"No recorded outputs for experience {exp.current_experience} of {stream.name}: "
                             "evaluate the class-IL test stream of the same split first.")
        logits, targets = outputs[exp.current_experience]
        if not torch.equal(targets, torch.as_tensor(list(exp.dataset.targets), dtype=targets.dtype)):
            raise ValueError(f"The recorded outputs of experience {exp.current_experience} are not of "
                             f"{stream.name}'s samples (targets differ): the two streams must split the same "
                             "test set with the same class order.")
        labels = torch.full((len(targets),), exp.task_label, dtype=torch.long)
        mask = class_mask(labels, {exp.task_label: exp.classes_in_this_experience}, logits.shape[1])
        right = int((mask_logits(logits, mask).argmax(1) == targets).sum())
        accs[str(exp.current_experience)] = right / len(targets)
        total, correct = total + len(targets), correct + right
    accs["all"] = correct / total
    return accs
