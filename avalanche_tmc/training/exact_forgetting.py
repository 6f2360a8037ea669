"""Exact forgetting, checked: which plugins make a component depend on earlier experiences
(replay, distillation), the replay-buffer groups an experience filled, and the refusals of a
``forget`` that would not be exact. Used by the tangent plugin and the training-free heads.
"""

from typing import Any, Dict, Hashable, List, Optional, Sequence

__all__ = [
    "replay_plugin_names", "distillation_plugin_names", "dependent_plugin_names", "replay_groups", "purge_replay",
    "check_forget", "check_forget_without_replay",
]


def _dependence(plugin: Any) -> Optional[str]:
    """``"replay"``, ``"distillation"`` or None: how a plugin makes a component depend on
    earlier experiences."""
    name = type(plugin).__name__.lower()
    if hasattr(plugin, "storage_policy") or "replay" in name:
        return "replay"
    if "lwf" in name or "distil" in name or hasattr(plugin, "prev_model") or hasattr(plugin, "lwf"):
        return "distillation"
    return None


def replay_plugin_names(strategy: Any) -> List[str]:
    """Names of the strategy's plugins that replay past samples (Avalanche's
    ``ReplayPlugin`` and the like: anything with a ``storage_policy`` or "Replay" in its
    class name)."""
    return [type(p).__name__ for p in getattr(strategy, "plugins", []) if _dependence(p) == "replay"]


def distillation_plugin_names(strategy: Any) -> List[str]:
    """Names of the strategy's plugins that distil from an earlier model (Avalanche's
    ``LwFPlugin`` and the like: "LwF" or "distil" in the class name, or a ``prev_model``)."""
    return [type(p).__name__ for p in getattr(strategy, "plugins", []) if _dependence(p) == "distillation"]


def dependent_plugin_names(strategy: Any) -> List[str]:
    """The replay and distillation plugins: with them a component depends on the
    experiences before it."""
    return replay_plugin_names(strategy) + distillation_plugin_names(strategy)


def replay_groups(strategy: Any) -> Dict[int, int]:
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


def purge_replay(strategy: Any, groups: Dict[int, int]) -> None:
    """Remove from the replay buffers the samples recorded by :func:`replay_groups`."""
    for plugin in getattr(strategy, "plugins", []):
        if id(plugin) in groups:
            plugin.storage_policy.buffer_groups.pop(groups[id(plugin)], None)


def check_forget(exp_id: Hashable, keys: Sequence[Hashable], dependent: Dict[Hashable, List[str]], strategy: Any,
                 groups: Dict[int, int], inexact: bool = False) -> None:
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


def check_forget_without_replay(exp_id: Hashable, keys: Sequence[Hashable], replayed: Dict[Hashable, List[str]]
                                ) -> None:
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
