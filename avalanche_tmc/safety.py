"""All-or-nothing ``train()`` for the strategies of this package.

A ``train()`` call either finishes, or leaves the strategy exactly as before the call:
on any exception (a bad label, a diverged loss, ``KeyboardInterrupt``) the learned state
(components / statistics, the model's ``δ`` or head, the task classes, the optimizer
state, the clock) is put back, and an experience id that is already learned is refused
before any training. What is not undone: metrics already sent to the loggers.
"""

from collections.abc import Iterable
from typing import Any, Dict, Hashable, List

__all__ = ["check_new_experience_ids", "FailSafeTraining", "replay_plugin_names", "check_forget_without_replay"]


def _as_list(experiences) -> List[Any]:
    if isinstance(experiences, Iterable):
        return list(experiences)
    return [experiences]


def check_new_experience_ids(experiences, learned, what: str = "trained and composed") -> None:
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


class FailSafeTraining:
    """Mixin for a ``SupervisedTemplate`` subclass: subclasses implement
    :meth:`_learned_ids`, :meth:`_snapshot_learner` and :meth:`_restore_learner`."""

    def _learned_ids(self):
        raise NotImplementedError

    def _snapshot_learner(self) -> Any:
        raise NotImplementedError

    def _restore_learner(self, snapshot: Any) -> None:
        raise NotImplementedError

    def _snapshot_template(self) -> Dict[str, Any]:
        return dict(
            train_state=self._save_train_state(),
            stop_training=getattr(self, "_stop_training", False),
            eval_streams=getattr(self, "_eval_streams", None),
        )

    def _restore_template(self, state: Dict[str, Any]) -> None:
        self._load_train_state(state["train_state"])
        self._stop_training = state["stop_training"]
        self._eval_streams = state["eval_streams"]

    def train(self, experiences, eval_streams=None, **kwargs):
        """Avalanche's ``train()``, all or nothing (see :mod:`avalanche_tmc.safety`)."""
        experiences = _as_list(experiences)
        check_new_experience_ids(experiences, self._learned_ids())
        template = self._snapshot_template()
        learner = self._snapshot_learner()
        try:
            return super().train(experiences, eval_streams, **kwargs)
        except BaseException:
            self._restore_learner(learner)
            self._restore_template(template)
            raise


def replay_plugin_names(strategy) -> List[str]:
    """Names of the strategy's plugins that replay past samples (Avalanche's
    ``ReplayPlugin`` and the like: anything with a ``storage_policy`` or "Replay" in its
    class name)."""
    names = []
    for plugin in getattr(strategy, "plugins", []):
        if hasattr(plugin, "storage_policy") or "replay" in type(plugin).__name__.lower():
            names.append(type(plugin).__name__)
    return names


def check_forget_without_replay(exp_id, keys, replayed: Dict[Hashable, List[str]]) -> None:
    """Refuse forgetting ``exp_id`` when a component learned after it was trained with a
    replay plugin: that component holds ``exp_id``'s samples, so subtracting ``exp_id``
    alone would not unlearn them."""
    if exp_id not in keys:
        return
    later = [k for k in keys[keys.index(exp_id) + 1:] if replayed.get(k)]
    if later:
        plugins = sorted({n for k in later for n in replayed[k]})
        undo = ", ".join(f"forget({k!r})" for k in reversed(later))
        raise ValueError(
            f"Cannot forget experience {exp_id!r} exactly: experiences {later} were trained with {plugins}, which "
            f"replays earlier samples, so their components hold experience {exp_id!r}'s data too. Forget them "
            f"first ({undo}, then forget({exp_id!r})), or train without replay plugins when you need exact "
            "forgetting."
        )
