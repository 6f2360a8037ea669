"""Training-free continual heads composed through sufficient statistics, as Avalanche strategies.

``TrainingFreeStrategy`` keeps a network frozen and, for every experience, computes the
statistics of :mod:`avalanche_tmc.composition.statistics` from one pass over its data (no SGD);
the model that holds the head is :class:`~avalanche_tmc.models.training_free.TrainingFreeClassifier`.
The head is re-solved in closed form from the *sum* of the experiences' statistics:

* ``head="ridge"``: ridge regression onto one-hot targets, λ by GCV on the training
  statistics (optionally on a fixed random ReLU projection of the features: with
  ``projection_dim`` it is a RanPAC-style head);
* ``head="ncm"``: cosine similarity to the class means (SimpleCIL style).

Each experience's statistics are independent of the others (train tasks in parallel,
anywhere), memory is fixed whatever the number of tasks, and ``forget(exp_id)`` removes
an experience exactly: the head equals the one solved without that experience.
"""

from collections import OrderedDict
from typing import Any, Callable, Dict, Hashable, List, Optional, Sequence, Union

import torch
from avalanche.core import SupervisedPlugin
from avalanche.training.plugins.evaluation import EvaluationPlugin, default_evaluator
from avalanche.training.templates import SupervisedTemplate
from torch import nn

from ...composition.statistics import HeadStats, StatisticsComposition, add_statistics, head_statistics
from ...models.training_free import TrainingFreeClassifier
from ..devices import check_device
from ..divergence import DivergenceError
from ..exact_forgetting import check_forget, dependent_plugin_names, purge_replay, replay_groups
from ..loaders import UnshardedLoaders
from ..plugins.task_mask import TaskMaskPlugin, experience_task_classes
from ..protocols import ComposableLearner, component_store
from ..rollback import AllOrNothingTraining
from .keywords import ThreePositionalArguments

__all__ = ["refuse_optimizer_arguments", "TrainingFreeStrategy"]


def refuse_optimizer_arguments(strategy: str, train_epochs: Any, optimizer: Any,
                               plugins: Optional[Sequence[Any]]) -> None:
    """Refuse, with what to do instead, the arguments a training-free strategy cannot honour:
    ``train_epochs`` other than 1, an ``optimizer``, and plugins that drive the optimizer."""
    from avalanche.training.plugins import LRSchedulerPlugin

    if train_epochs != 1:
        raise ValueError(f"{strategy} makes exactly one pass per experience (the statistics are exact after one; a "
                         f"second pass would count every sample twice): pass train_epochs=1 or leave it out, "
                         f"got {train_epochs!r}.")
    if optimizer is not None:
        raise ValueError(f"{strategy} has no optimizer (the head is solved in closed form): leave optimizer out.")
    for plugin in plugins or []:
        if isinstance(plugin, LRSchedulerPlugin):
            raise ValueError(f"{strategy} has no optimizer (the head is solved in closed form), so "
                             f"{type(plugin).__name__} has no learning rate to schedule: remove it from plugins.")


class TrainingFreeStrategy(ThreePositionalArguments, ComposableLearner, AllOrNothingTraining, UnshardedLoaders,
                           SupervisedTemplate):
    """A training-free continual learner: statistics per experience, summed, head in closed form.

    Keyword-only like Avalanche's ``Naive``; ``train_epochs`` is always 1 (one pass gives
    the exact statistics). ``components`` maps experience id -> its statistics and
    ``forget(exp_id)`` removes one exactly. ``train()`` is all or nothing: an experience
    id already learned is refused before the pass, and on any exception (a
    :class:`~avalanche_tmc.training.divergence.DivergenceError` for non-finite features
    included) the statistics, the head and the task classes are as before the call
    (:class:`~avalanche_tmc.training.rollback.TrainingTransaction`).

    Plugin callbacks: nothing is back-propagated and there is no optimizer, so the
    ``before_backward``, ``after_backward``, ``before_update`` and ``after_update`` callbacks
    never fire (a plugin that acts there, e.g. one clipping gradients or counting optimizer
    steps, does nothing here); ``make_optimizer`` does nothing. Every other training callback
    fires as in Avalanche's SGD loop: ``before/after_training``, ``before/after_training_exp``,
    ``before/after_training_epoch`` (one epoch), ``before/after_training_iteration`` and
    ``before/after_forward`` around the feature pass, with ``loss`` set for the metrics.
    """

    def __init__(
        self,
        *,
        model: TrainingFreeClassifier,
        criterion: Callable = nn.CrossEntropyLoss(),
        ridge_lambda: Optional[float] = None,
        keep_components: bool = True,
        task_incremental: Optional[bool] = None,
        train_mb_size: int = 256,
        train_epochs: int = 1,
        eval_mb_size: Optional[int] = None,
        device: Union[str, torch.device] = "cpu",
        plugins: Optional[List[SupervisedPlugin]] = None,
        evaluator: Union[EvaluationPlugin, Callable[[], EvaluationPlugin]] = default_evaluator,
        eval_every: int = -1,
        optimizer: None = None,
        **base_kwargs: Any,
    ):
        """
        :param model: an :class:`TrainingFreeClassifier`.
        :param ridge_lambda: fixed ridge penalty; ``None`` chooses it by GCV on the
            (summed) training statistics after every experience.
        :param keep_components: keep each experience's statistics (for ``forget``).
        :param task_incremental: mask predictions to the task's classes; ``None`` = auto.
        :param train_epochs: 1, the only value (accepted so Avalanche's usual arguments work).
        :param optimizer: None, the only value: there is no optimizer, so plugins that drive
            one (``LRSchedulerPlugin``) are refused with a ``ValueError``.
        """
        if not isinstance(model, TrainingFreeClassifier):
            raise TypeError(f"TrainingFreeStrategy needs a TrainingFreeClassifier, got {type(model).__name__}.")
        refuse_optimizer_arguments(type(self).__name__, train_epochs, optimizer, plugins)
        check_device(device)  # before Avalanche moves anything there
        self.ridge_lambda = ridge_lambda
        self.statistics = StatisticsComposition(keep_components=keep_components)
        self._pending: Optional[HeadStats] = None
        self._replayed: Dict[Hashable, List[str]] = {}  # experience id -> replay/distillation plugins when learned
        self._replay_groups: Dict[Hashable, Dict[int, int]] = {}  # experience id -> its replay buffer groups
        self.component_classes: Dict[Hashable, Dict[int, List[int]]] = {}  # experience id -> task label -> classes
        super().__init__(
            model=model, optimizer=None, criterion=criterion, train_mb_size=train_mb_size, train_epochs=1,
            eval_mb_size=eval_mb_size, device=device, plugins=[TaskMaskPlugin(task_incremental), *(plugins or [])],
            evaluator=evaluator, eval_every=eval_every, **base_kwargs,
        )

    def snapshot_learner(self) -> Dict[str, Any]:
        """What the strategy has learned (statistics, the solved head, the replay and class
        records), for :meth:`restore_learner`: its part of a training transaction (the task
        masks and the clock are the transaction's own parts)."""
        model, stats = self.model, self.statistics
        return dict(
            statistics=stats.snapshot(),
            weight=model.weight, means=model.means, ridge_lambda=model.ridge_lambda, projection=model.projection,
            pending=self._pending, replayed=dict(self._replayed), replay_groups=dict(self._replay_groups),
            component_classes=dict(self.component_classes),
        )

    def restore_learner(self, snap: Dict[str, Any]) -> None:
        """Go back exactly to a :meth:`snapshot_learner`."""
        model, stats = self.model, self.statistics
        stats.restore(snap["statistics"])
        model.weight, model.means = snap["weight"], snap["means"]
        model.ridge_lambda, model.projection = snap["ridge_lambda"], snap["projection"]
        self._pending = snap["pending"]
        self._replayed = dict(snap["replayed"])
        self._replay_groups = dict(snap["replay_groups"])
        self.component_classes = dict(snap["component_classes"])

    def make_optimizer(self, **kwargs: Any) -> None:
        """No optimizer: the head is solved in closed form."""

    def training_epoch(self, **kwargs: Any) -> None:
        """One pass over the experience, accumulating its statistics, as Avalanche's SGD
        epoch does it: it stops when a plugin calls ``stop_training()`` (the statistics then
        hold the batches seen so far), fires the forward callbacks around the feature pass
        (``mb_x`` may be changed in ``before_forward``), and sets ``loss`` to the criterion of
        the current head's scores for the metrics (nothing is back-propagated)."""
        for self.mbatch in self.dataloader:
            if self._stop_training:
                break
            self._unpack_minibatch()
            self._before_training_iteration(**kwargs)
            self.loss = self._make_empty_loss()
            self._before_forward(**kwargs)
            phi = self.model.embed(self.mb_x)
            self.mb_output = self.model.scores(phi)
            self._after_forward(**kwargs)
            if not bool(torch.isfinite(phi).all()):
                raise DivergenceError(
                    f"Experience {self.experience.current_experience}: the features of training iteration "
                    f"{self.clock.train_exp_iterations + 1} hold NaN/inf (check the data and the feature "
                    "network). Nothing was added: non-finite statistics would spoil the head.")
            stats = head_statistics(phi, self.mb_y, self.model.num_classes)
            self._pending = stats if self._pending is None else add_statistics(self._pending, stats)
            with torch.no_grad():
                self.loss += self.criterion()
            self._after_training_iteration(**kwargs)

    def _before_training_exp(self, **kwargs: Any) -> None:
        self._pending = None
        super()._before_training_exp(**kwargs)

    def _after_training_exp(self, **kwargs: Any) -> None:
        key = self.experience.current_experience
        if key in self.statistics:
            raise KeyError(f"Experience {key} was already learned; forget it first to learn it again.")
        if self._pending is not None:
            self.statistics.add(key, self._pending)
            self._replayed[key] = dependent_plugin_names(self)
            self._replay_groups[key] = replay_groups(self)
            self.component_classes[key] = {t: sorted(c) for t, c in experience_task_classes(self.experience).items()}
            self.model.fit(self.statistics.summed(), self.ridge_lambda)
        self._pending = None
        super()._after_training_exp(**kwargs)

    @property
    def components(self) -> "OrderedDict[Hashable, HeadStats]":
        """Experience id -> that experience's statistics."""
        return self.statistics.components

    def install_component(self, key: Hashable, stats: HeadStats, classes: Optional[Dict[int, List[int]]] = None
                          ) -> None:
        """Add an experience's statistics computed elsewhere (another process, a file) as if
        learned here (``classes``: task label -> classes, for the task mask), and re-solve
        the head."""
        if key in self.statistics:
            raise KeyError(f"Experience {key} was already learned; forget it first.")
        self.statistics.add(key, stats)
        self.installed({key: classes or {}})

    # ------------------------------------------------------------------ ComposableLearner
    payload = "statistics"

    def learned(self) -> StatisticsComposition:
        """The composition of the statistics learned so far."""
        return self.statistics

    def replace_learned(self, composition: StatisticsComposition) -> StatisticsComposition:
        """Put ``composition`` in place of the learned one (returned)."""
        old, self.statistics = self.statistics, composition
        return old

    def learned_settings(self) -> Dict[str, object]:
        """What must agree between processes that compose statistics together: the head, the
        projection and the feature network."""
        from ...composition.additive import tensors_sha256

        model = self.model
        return dict(head=model.head, projection_dim=model.projection_dim, seed=model.seed,
                    num_classes=model.num_classes, features=tensors_sha256(model.features.state_dict()))

    def installed(self, classes: Dict[Hashable, Dict[int, List[int]]]) -> None:
        """Statistics were merged in from elsewhere: record their classes, re-solve the head."""
        for key, task_classes in classes.items():
            self._replayed[key], self._replay_groups[key] = [], {}
            self.component_classes[key] = {int(t): sorted(int(x) for x in c) for t, c in task_classes.items()}
            for plugin in self.plugins:
                if isinstance(plugin, TaskMaskPlugin):
                    plugin.record_task_classes(self.component_classes[key])
        if len(self.statistics):
            self.model.fit(self.statistics.summed(), self.ridge_lambda)

    def learned_classes(self) -> Dict[Hashable, Dict[int, List[int]]]:
        """Experience id -> task label -> classes of every experience learned."""
        return dict(self.component_classes)

    def component_settings(self) -> Dict[str, object]:
        """How the statistics are used, recorded in component files (head, ridge λ)."""
        return dict(head=self.model.head, ridge_lambda=self.ridge_lambda)

    def base_network(self) -> nn.Module:
        """The pre-trained network the statistics belong to: the frozen features."""
        return self.model.features

    def load_components(self, paths: Union[str, Sequence[str]], *, key: Union[None, bytes, str] = None
                        ) -> List[Hashable]:
        """Add the statistics files of ``paths`` (a directory: its ``.safetensors``), each
        checked against this model (feature network, head type, projection, classes)
        before any is added, and signed with ``key`` if one is given (or in
        ``$AVALANCHE_TMC_KEY_FILE``); returns their experience ids."""
        components = component_store().read_components(self, paths, self.statistics, key=key)
        for component in components:
            stats = OrderedDict((n, t.to(self.device)) for n, t in component.tensors.items())  # read on the CPU
            self.install_component(component.experience, stats, component.classes)
        return [c.experience for c in components]

    def forget(self, exp_id: Hashable, stats: Optional[HeadStats] = None, *, inexact: bool = False) -> None:
        """Remove an experience exactly and re-solve the head. Refused, unless ``inexact=True``,
        when it would not be exact (see :func:`~avalanche_tmc.training.exact_forgetting.check_forget`); its
        samples are purged from ``ReplayPlugin``'s buffer."""
        check_forget(exp_id, self.statistics.keys, self._replayed, self, self._replay_groups.get(exp_id, {}), inexact)
        self.statistics.forget(exp_id, stats)
        purge_replay(self, self._replay_groups.pop(exp_id, {}))
        self._replayed.pop(exp_id, None)
        self.component_classes.pop(exp_id, None)
        if len(self.statistics):
            self.model.fit(self.statistics.summed(), self.ridge_lambda)
        else:
            empty = torch.zeros(0, device=self.model.weight.device)
            self.model.weight, self.model.means = empty, empty.clone()
