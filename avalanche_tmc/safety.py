"""All-or-nothing ``train()`` for the strategies of this package.

A ``train()`` call either finishes, or leaves the strategy exactly as before the call:
on any exception (a bad label, a diverged loss, ``KeyboardInterrupt``) the learned state
(components / statistics, the model's ``δ`` or head, the task classes, the optimizer
state, the clock) is put back, and an experience id that is already learned is refused
before any training. What is not undone: metrics already sent to the loggers.
"""

import numbers
from collections.abc import Iterable
from typing import Any, Dict, Hashable, List, Optional

__all__ = [
    "check_new_experience_ids", "check_train_epochs", "FailSafeTraining", "replay_plugin_names",
    "distillation_plugin_names", "dependent_plugin_names", "replay_groups", "purge_replay", "check_forget",
    "check_forget_without_replay",
]


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


def check_train_epochs(train_epochs) -> int:
    """Raise ``ValueError`` unless ``train_epochs`` is an integer >= 1: zero epochs train
    nothing, and a component of zero composed with a positive weight dilutes the others."""
    if isinstance(train_epochs, bool) or not isinstance(train_epochs, numbers.Integral) or train_epochs < 1:
        raise ValueError(f"train_epochs must be an integer >= 1, got {train_epochs!r}: with no training step the "
                         "component would be δ = 0 and would only dilute the composition.")
    return int(train_epochs)


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

    def snapshot_state(self) -> Any:
        """Everything a ``train()`` call changes (what was learned, the task classes, the
        optimizer state, the clock), for :meth:`restore_state`: what code that trains the
        strategy on its own terms (e.g. :func:`~avalanche_tmc.distributed.train_parallel`)
        uses to be all or nothing too."""
        return self._snapshot_template(), self._snapshot_learner()

    def restore_state(self, state: Any) -> None:
        """Go back exactly to a :meth:`snapshot_state`."""
        template, learner = state
        self._restore_learner(learner)
        self._restore_template(template)

    def train(self, experiences, eval_streams=None, **kwargs):
        """Avalanche's ``train()``, all or nothing (see :mod:`avalanche_tmc.safety`)."""
        experiences = _as_list(experiences)
        check_new_experience_ids(experiences, self._learned_ids())
        state = self.snapshot_state()
        try:
            return super().train(experiences, eval_streams, **kwargs)
        except BaseException:
            self.restore_state(state)
            raise


def _dependence(plugin) -> Optional[str]:
    """``"replay"``, ``"distillation"`` or None: how a plugin makes a component depend on
    earlier experiences."""
    name = type(plugin).__name__.lower()
    if hasattr(plugin, "storage_policy") or "replay" in name:
        return "replay"
    if "lwf" in name or "distil" in name or hasattr(plugin, "prev_model") or hasattr(plugin, "lwf"):
        return "distillation"
    return None


def replay_plugin_names(strategy) -> List[str]:
    """Names of the strategy's plugins that replay past samples (Avalanche's
    ``ReplayPlugin`` and the like: anything with a ``storage_policy`` or "Replay" in its
    class name)."""
    return [type(p).__name__ for p in getattr(strategy, "plugins", []) if _dependence(p) == "replay"]


def distillation_plugin_names(strategy) -> List[str]:
    """Names of the strategy's plugins that distil from an earlier model (Avalanche's
    ``LwFPlugin`` and the like: "LwF" or "distil" in the class name, or a ``prev_model``)."""
    return [type(p).__name__ for p in getattr(strategy, "plugins", []) if _dependence(p) == "distillation"]


def dependent_plugin_names(strategy) -> List[str]:
    """The replay and distillation plugins: with them a component depends on the
    experiences before it."""
    return replay_plugin_names(strategy) + distillation_plugin_names(strategy)


def replay_groups(strategy) -> Dict[int, int]:
    """``id(plugin) -> buffer group`` that each replay plugin's Avalanche
    ``ExperienceBalancedBuffer`` is about to give the experience being trained (call it
    before the replay plugins' ``after_training_exp``): what :func:`purge_replay` removes
    when that experience is forgotten. Other storage policies are not listed."""
    from avalanche.training.storage_policy import ExperienceBalancedBuffer

    groups = {}
    for plugin in getattr(strategy, "plugins", []):
        policy = getattr(plugin, "storage_policy", None)
        if type(policy) is ExperienceBalancedBuffer:  # Avalanche 0.6: the next group is numbered _num_exps
            groups[id(plugin)] = int(policy._num_exps)
    return groups


def purge_replay(strategy, groups: Dict[int, int]) -> None:
    """Remove from the replay buffers the samples recorded by :func:`replay_groups`."""
    for plugin in getattr(strategy, "plugins", []):
        if id(plugin) in groups:
            plugin.storage_policy.buffer_groups.pop(groups[id(plugin)], None)


def check_forget(exp_id, keys, dependent: Dict[Hashable, List[str]], strategy, groups: Dict[int, int],
                 inexact: bool = False) -> None:
    """Refuse forgetting ``exp_id`` when it would not be exact, unless ``inexact=True``:

    * a component learned after it was trained with a replay or distillation plugin (it
      holds ``exp_id``'s samples, or outputs of a model that knew them);
    * a distillation plugin is attached now (its teacher contains ``exp_id``: the next
      experience would learn it again);
    * ``exp_id`` was trained with a replay plugin whose buffer cannot be purged of its
      samples (``groups``: what :func:`replay_groups` recorded when it was trained).
    """
    if inexact or exp_id not in keys:
        return
    check_forget_without_replay(exp_id, keys, dependent)
    distillation = distillation_plugin_names(strategy)
    if distillation:
        raise ValueError(
            f"Cannot forget experience {exp_id!r} exactly: {distillation} distil from a model that contains it, so "
            "the next experience would learn it again. Pass inexact=True to forget it from the composition "
            "anyway, or train without distillation plugins when you need exact forgetting.")
    replayed = [name for name in dependent.get(exp_id, []) if name in replay_plugin_names(strategy)]
    purgeable = all(id(p) in groups for p in getattr(strategy, "plugins", []) if hasattr(p, "storage_policy"))
    if replayed and not purgeable:
        raise ValueError(
            f"Cannot forget experience {exp_id!r} exactly: {replayed} keep its samples in a buffer that cannot be "
            "purged of them (only Avalanche's ExperienceBalancedBuffer, ReplayPlugin's default, can), so later "
            "experiences would replay them. Pass inexact=True to forget it from the composition anyway.")


def check_forget_without_replay(exp_id, keys, replayed: Dict[Hashable, List[str]]) -> None:
    """Refuse forgetting ``exp_id`` when a component learned after it was trained with a
    replay (or distillation) plugin: that component holds ``exp_id``'s samples, so
    subtracting ``exp_id`` alone would not unlearn them."""
    if exp_id not in keys:
        return
    later = [k for k in keys[keys.index(exp_id) + 1:] if replayed.get(k)]
    if later:
        plugins = sorted({n for k in later for n in replayed[k]})
        undo = ", ".join(f"forget({k!r})" for k in reversed(later))
        raise ValueError(
            f"Cannot forget experience {exp_id!r} exactly: experiences {later} were trained with {plugins}, which "
            f"replays earlier samples (or distils an earlier model), so their components hold experience "
            f"{exp_id!r}'s data too. Forget them first ({undo}, then forget({exp_id!r})), pass inexact=True, or "
            "train without replay plugins when you need exact forgetting."
        )
