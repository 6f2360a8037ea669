"""All-or-nothing ``train()``: the one rollback mechanism of every strategy of this package.

A ``train()`` call either finishes, or leaves the strategy exactly as before the call: on
any exception (a bad label, a :class:`~avalanche_tmc.training.divergence.DivergenceError`,
``KeyboardInterrupt``) the learned state (components or statistics, the model's ``δ`` or
head, the adapted features, the task classes, the optimizer state, the clock) is put back,
and an experience id that is already learned is refused before any training. What is not
undone: metrics already sent to the loggers.

One concept does it: a :class:`TrainingTransaction` records, before the call, the
template's training state and the snapshot of every part that owns state (the strategy
itself when it is a :class:`~avalanche_tmc.training.protocols.RollbackLearner`, and each
plugin that is a :class:`~avalanche_tmc.training.protocols.RollbackPart`);
:meth:`TrainingTransaction.rollback` puts it all back. :class:`AllOrNothingTraining` wraps
the template's ``train()`` in one, and code that trains a strategy on its own terms
(:func:`~avalanche_tmc.distributed.train_parallel`) uses the same transaction through
:meth:`AllOrNothingTraining.snapshot_state` / :meth:`~AllOrNothingTraining.restore_state`.
"""

import contextlib
import numbers
from collections.abc import Iterable
from typing import Any, Dict, Hashable, Iterator, List, Optional, Tuple

from .protocols import RollbackLearner, RollbackPart, TrainingStrategy

__all__ = ["TrainingTransaction", "AllOrNothingTraining", "check_new_experience_ids", "check_train_epochs"]


def _as_list(experiences: Any) -> List[Any]:
    if isinstance(experiences, Iterable):
        return list(experiences)
    return [experiences]


def check_new_experience_ids(experiences: Iterable[Any], learned: Any, what: str = "trained and composed") -> None:
    """Raise ``KeyError`` if an experience id is already in ``learned`` or repeats."""
    seen: List[Hashable] = []
    for exp in experiences:
        key = getattr(exp, "current_experience", None)
        if key in learned:
            raise KeyError(
                f"Experience {key} was already {what}; forget it first (strategy.forget({key!r})) to "
                "train it again. Nothing was trained."
            )
        if key in seen:
            raise KeyError(f"Experience {key} appears twice in this train() call. Nothing was trained.")
        seen.append(key)


def check_train_epochs(train_epochs: Any) -> int:
    """Raise ``ValueError`` unless ``train_epochs`` is an integer >= 1: zero epochs train
    nothing, and a component of zero composed with a positive weight dilutes the others."""
    if isinstance(train_epochs, bool) or not isinstance(train_epochs, numbers.Integral) or train_epochs < 1:
        raise ValueError(f"train_epochs must be an integer >= 1, got {train_epochs!r}: with no training step the "
                         "component would be δ = 0 and would only dilute the composition.")
    return int(train_epochs)


def _rollback_parts(strategy: TrainingStrategy) -> List[Any]:
    """The strategy (when it keeps learned state itself) and every plugin that owns state."""
    parts: List[Any] = [strategy] if isinstance(strategy, RollbackLearner) else []
    return parts + [p for p in getattr(strategy, "plugins", []) if isinstance(p, RollbackPart)]


class TrainingTransaction:
    """Everything a ``train()`` call changes in ``strategy``, recorded now;
    :meth:`rollback` puts it back exactly.

    What it records: the template's training state (the experience, the training flags and
    each layer's train/eval mode), the clock, the criterion (TME evaluates with another), and
    the snapshot of every part that owns state (see the module docstring). Use it as
    ``with TrainingTransaction.around(strategy): strategy.train(...)`` to make any template
    all or nothing; the strategies of this package do it for you."""

    def __init__(self, strategy: TrainingStrategy):
        self.strategy = strategy
        clock = getattr(strategy, "clock", None)
        self.template: Dict[str, Any] = dict(
            train_state=strategy._save_train_state(),
            stop_training=getattr(strategy, "_stop_training", False),
            eval_streams=getattr(strategy, "_eval_streams", None),
            criterion=getattr(strategy, "_criterion", None),
            clock=None if clock is None else dict(vars(clock)),
        )
        self.parts: List[Tuple[Any, Any]] = []
        for part in _rollback_parts(strategy):
            if part is strategy:
                self.parts.append((part, part.snapshot_learner()))
            else:
                self.parts.append((part, part.snapshot(strategy)))

    def rollback(self) -> None:
        """Put back what was recorded: each part, then the template's state."""
        strategy, template = self.strategy, self.template
        for part, snapshot in self.parts:
            if part is strategy:
                part.restore_learner(snapshot)
            else:
                part.restore(strategy, snapshot)
        if template["criterion"] is not None:
            strategy._criterion = template["criterion"]
        if template["clock"] is not None:
            vars(strategy.clock).update(template["clock"])
        strategy._load_train_state(template["train_state"])
        strategy._stop_training = template["stop_training"]
        strategy._eval_streams = template["eval_streams"]

    @classmethod
    @contextlib.contextmanager
    def around(cls, strategy: TrainingStrategy) -> Iterator["TrainingTransaction"]:
        """A transaction for the ``with`` block: rolled back when the block raises anything
        (``KeyboardInterrupt`` included), then the exception goes on."""
        transaction = cls(strategy)
        try:
            yield transaction
        except BaseException:
            transaction.rollback()
            raise


class AllOrNothingTraining:
    """Mixin for a ``SupervisedTemplate`` subclass that is a
    :class:`~avalanche_tmc.training.protocols.ComposableLearner`: ``train()`` refuses an
    experience id already learned (before any training) and runs in a
    :class:`TrainingTransaction`."""

    def snapshot_state(self: Any) -> TrainingTransaction:
        """Everything a ``train()`` call changes, for :meth:`restore_state`: what code that
        trains the strategy on its own terms (e.g. :func:`~avalanche_tmc.distributed.train_parallel`)
        uses to be all or nothing too."""
        return TrainingTransaction(self)

    def restore_state(self, state: TrainingTransaction) -> None:
        """Go back exactly to a :meth:`snapshot_state`."""
        state.rollback()

    def train(self: Any, experiences: Any, eval_streams: Optional[Any] = None, **kwargs: Any) -> Any:
        """Avalanche's ``train()``, all or nothing (see :mod:`avalanche_tmc.training.rollback`)."""
        experiences = _as_list(experiences)
        check_new_experience_ids(experiences, self.learned())
        with TrainingTransaction.around(self):
            return super().train(experiences, eval_streams, **kwargs)
