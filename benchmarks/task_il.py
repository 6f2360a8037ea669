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
"""

import contextlib
from typing import Dict, Iterator, List, Set

from avalanche_tmc import TaskMaskPlugin
from avalanche_tmc.training.plugins.task_mask import experience_task_classes

__all__ = ["stream_task_classes", "task_masked"]


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
