"""What the mixins and plugins of :mod:`avalanche_tmc.training` need from a strategy, typed
(as Avalanche's ``training/templates/strategy_mixin_protocol.py`` types its mixins), so that
code asks ``isinstance(x, Protocol)`` of a declared contract instead of guessing with
``hasattr`` or reading private fields.

* :class:`TrainingStrategy`: the parts of Avalanche's ``SupervisedTemplate`` that a
  training transaction saves and restores;
* :class:`RollbackPart`: a plugin (or any object) whose own state a transaction saves
  before a ``train()`` call and restores when the call fails;
* :class:`RollbackLearner`: a strategy whose learned state (statistics, head) lives in the
  strategy itself rather than in a plugin.
"""

from typing import Any, Iterable, List, Optional, Protocol, runtime_checkable

from torch import nn

__all__ = ["TrainingStrategy", "RollbackPart", "RollbackLearner"]


class TrainingStrategy(Protocol):
    """The parts of an Avalanche ``SupervisedTemplate`` that a training transaction saves and
    restores (:class:`~avalanche_tmc.training.mixins.TrainingTransaction`)."""

    model: nn.Module
    plugins: List[Any]
    experience: Optional[Any]
    is_training: bool
    clock: Any
    optimizer: Any

    def _save_train_state(self) -> Any: ...

    def _load_train_state(self, prev_state: Any) -> None: ...

    def train(self, experiences: Iterable[Any], eval_streams: Optional[Any] = None, **kwargs: Any) -> Any:
        """Avalanche's ``train()``."""
        ...


@runtime_checkable
class RollbackPart(Protocol):
    """State that a ``train()`` call changes and a failed call must put back: a transaction
    calls :meth:`snapshot` before the call and :meth:`restore` with its result on failure.
    Every plugin of the strategy that has both methods takes part (the task-mask and
    tangent plugins of this package do)."""

    def snapshot(self, strategy: Any) -> Any:
        """Everything of this object (and of ``strategy``, as far as this object owns it)
        that a ``train()`` call may change."""
        ...

    def restore(self, strategy: Any, snapshot: Any) -> None:
        """Go back exactly to ``snapshot``."""
        ...


@runtime_checkable
class RollbackLearner(Protocol):
    """A strategy that keeps what it learned itself (the analytic heads: statistics, the
    solved head, the adapted features) and takes part in its own transactions."""

    def snapshot_learner(self) -> Any:
        """What the strategy has learned, for :meth:`restore_learner`."""
        ...

    def restore_learner(self, snapshot: Any) -> None:
        """Go back exactly to a :meth:`snapshot_learner`."""
        ...
