"""``TaskMaskPlugin``: task-incremental evaluation for any strategy (each sample's
prediction restricted to the classes of its task), and the helpers that tell the task
labels and classes of an Avalanche experience or minibatch.

Task labels come from Avalanche: ``task_incremental_benchmark(bm)`` gives experience ``i``
task ``i``; ``with_task_labels(bm)`` only exposes labels the data already has (Avalanche 0.6
raises ``AttributeError: ... 'targets_task_labels'`` in that call for data without them, and
cannot decorate ``nc_benchmark``'s experiences, whose ``task_label`` is read-only: use
``nc_benchmark(..., task_labels=True)`` as it is). Experiences holding several tasks work:
each sample is masked by its own task label."""

from collections import defaultdict
from typing import TYPE_CHECKING, Any, Dict, Optional, Set

import torch
from avalanche.core import SupervisedPlugin

from ...composition.ensemble import class_mask, mask_logits, nll_of_log_probs

__all__ = ["experience_task_classes", "batch_task_labels", "TaskMaskPlugin"]

if TYPE_CHECKING:
    from avalanche.training.templates import SupervisedTemplate


def _labels(values: Any) -> torch.Tensor:
    """A sequence of integer labels (list, tensor, Avalanche ``DataAttribute``) as a tensor."""
    values = getattr(values, "data", values)
    if isinstance(values, torch.Tensor):
        return values.reshape(-1).long()
    return torch.as_tensor([int(v) for v in values], dtype=torch.long)


def _single_task_label(experience: Any) -> Optional[int]:
    """The experience's one task label; 0 when it carries none; None when it has several."""
    try:
        task = getattr(experience, "task_label", None)
    except (ValueError, AssertionError):  # a multi-task experience refuses ``task_label``
        return None
    if task is not None:
        return int(task)
    labels = getattr(experience, "task_labels", None)
    if labels is not None:
        return int(labels[0]) if len(labels) == 1 else None
    return 0


def experience_task_classes(experience: Any) -> Dict[int, Set[int]]:
    """Task label -> the classes of that task in ``experience``.

    Works with every Avalanche 0.6 benchmark generator: it uses the experience's
    ``classes_in_this_experience`` when it has it (``nc_benchmark``, ``ni_benchmark``,
    ``class_incremental_benchmark``) and otherwise the dataset's ``targets`` (and
    ``targets_task_labels``) (``new_instances_benchmark``, ``benchmark_from_datasets``,
    ``task_incremental_benchmark``, ``with_task_labels``). Experiences without task
    labels are task 0.
    """
    task = _single_task_label(experience)
    classes = getattr(experience, "classes_in_this_experience", None)
    if classes is not None and task is not None:
        return {task: {int(c) for c in classes}}
    dataset = experience.dataset
    targets = getattr(dataset, "targets", None)
    if targets is None:
        raise TypeError(
            f"Cannot tell the classes of experience {getattr(experience, 'current_experience', '?')}: it has no "
            "`classes_in_this_experience` and its dataset no `targets`. Build the benchmark from classification "
            "datasets (avalanche.benchmarks.utils.as_classification_dataset, or a dataset with a `targets` list)."
        )
    targets = _labels(targets)
    task_targets = getattr(dataset, "targets_task_labels", None)
    tasks = _labels(task_targets) if task_targets is not None else torch.full_like(targets, 0 if task is None else task)
    result: Dict[int, Set[int]] = {}
    for t in tasks.unique().tolist():
        result[int(t)] = set(targets[tasks == t].unique().tolist())
    return result


def batch_task_labels(strategy: "SupervisedTemplate") -> torch.Tensor:
    """Task label of every sample of the current minibatch: the batch's own (third
    element) when the dataset has task labels, else the experience's (0 if none)."""
    mbatch = strategy.mbatch
    if mbatch is not None and len(mbatch) >= 3:
        return strategy.mb_task_id
    task = _single_task_label(strategy.experience) if strategy.experience is not None else 0
    return torch.full((len(strategy.mb_x),), 0 if task is None else task, dtype=torch.long,
                      device=strategy.mb_x.device)


class TaskMaskPlugin(SupervisedPlugin, supports_distributed=True):
    """Task-incremental evaluation for any strategy: each sample's prediction is
    restricted to the classes of its task (the task label is known at test time).

    What it is for: a fair task-IL comparison of models with one fixed head over all
    classes (TMC and the baselines alike). It records which classes each task label
    has (from training and evaluation experiences) and sets the other logits to
    ``-inf`` after every evaluation forward.

    :param task_incremental: ``True``/``False`` forces masking on/off; ``None``
        (default) masks when training has seen more than one task label.
    """

    def __init__(self, task_incremental: Optional[bool] = None):
        super().__init__()
        self.task_incremental = task_incremental
        self.task_classes: Dict[int, Set[int]] = defaultdict(set)
        self._train_task_labels: Set[int] = set()
        self._saved_criterion = None

    def evaluate_with_nll(self, strategy: "SupervisedTemplate") -> None:
        """For a softmax ensemble's log-probabilities: evaluate the loss as NLL until
        :meth:`restore_criterion` (a square loss on log-probabilities means nothing)."""
        self._saved_criterion = strategy._criterion
        strategy._criterion = nll_of_log_probs

    def restore_criterion(self, strategy: "SupervisedTemplate") -> None:
        """Put back the criterion replaced by :meth:`evaluate_with_nll` (if it was)."""
        if self._saved_criterion is not None:
            strategy._criterion = self._saved_criterion
            self._saved_criterion = None

    def mask_state(self) -> Dict[str, Any]:
        """The recorded task labels and classes (and a replaced criterion), for :meth:`load_mask_state`."""
        return dict(task_classes={k: set(v) for k, v in self.task_classes.items()},
                    train_task_labels=set(self._train_task_labels), saved_criterion=self._saved_criterion)

    def load_mask_state(self, state: Dict[str, Any]) -> None:
        """Go back exactly to a :meth:`mask_state`."""
        self.task_classes = defaultdict(set, {k: set(v) for k, v in state["task_classes"].items()})
        self._train_task_labels = set(state["train_task_labels"])
        self._saved_criterion = state["saved_criterion"]

    def snapshot(self, strategy: "SupervisedTemplate") -> Dict[str, Any]:
        """The task-mask state a ``train()`` call changes (a training transaction's part)."""
        return self.mask_state()

    def restore(self, strategy: "SupervisedTemplate", snapshot: Dict[str, Any]) -> None:
        """Go back exactly to a :meth:`snapshot`."""
        self.load_mask_state(snapshot)

    def _record_classes(self, experience: Any) -> Set[int]:
        """Record the classes of each task of ``experience``; returns its task labels."""
        per_task = experience_task_classes(experience)
        for task, classes in per_task.items():
            self.task_classes[task].update(classes)
        return set(per_task)

    def record_training_experience(self, experience: Any) -> None:
        """Remember the task labels and classes of a training experience (done for you
        before each one; call it for experiences trained without that callback, e.g. all
        but the first of ``JointTraining``)."""
        self._train_task_labels.update(self._record_classes(experience))

    def record_task_classes(self, classes: Dict[int, Any]) -> None:
        """Record trained task labels and their classes known without an experience (a
        component trained elsewhere: its file says which)."""
        for task, task_classes in classes.items():
            self.task_classes[int(task)].update(int(c) for c in task_classes)
            self._train_task_labels.add(int(task))

    def uses_task_mask(self) -> bool:
        """Whether evaluation restricts predictions to the task's classes."""
        if self.task_incremental is not None:
            return self.task_incremental
        return len(self._train_task_labels) > 1

    def eval_mask(self, strategy: "SupervisedTemplate") -> Optional[torch.Tensor]:
        """(batch, classes) mask of the allowed classes of the current minibatch, or None."""
        if not self.uses_task_mask():
            return None
        output = strategy.mb_output
        return class_mask(batch_task_labels(strategy).to(output.device), self.task_classes, output.shape[1])

    def before_training_exp(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """Remember the experience's task label and classes."""
        self.record_training_experience(strategy.experience)

    def before_eval_exp(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """Learn the class set of the evaluated task (task identity is given at test time)."""
        self._record_classes(strategy.experience)

    def after_eval_forward(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """Mask the logits outside the sample's task."""
        mask = self.eval_mask(strategy)
        if mask is not None:
            strategy.mb_output = mask_logits(strategy.mb_output, mask)
