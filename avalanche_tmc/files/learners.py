"""Component files meet models and strategies: components made from a
:class:`~avalanche_tmc.tangent.TangentModel`'s ``δ`` or a training-free head's statistics, every
component a strategy holds, and files put back into a strategy.

Strategies are reached through the :class:`~avalanche_tmc.training.protocols.ComposableLearner`
protocol only (its payload, its learned composition, its classes and settings), never
through their types or private fields.
"""

from collections import OrderedDict
from dataclasses import replace
from typing import Any, Collection, Dict, List, Mapping, Optional, Sequence, Union

import torch
from torch import Tensor

from ..composition.additive import AdditiveComposition
from ..composition.statistics import STAT_KEYS
from ..tangent import TangentModel
from ..training.protocols import ComposableLearner, learner_device
from .arithmetic import _check_distinct, _merge_members, _numbers_of, compose_components
from .bases import check_same_base, model_reference, statistics_base, tangent_base
from .component import Component, IncompatibleComponentsError, _component
from .storage import load_components, save_component

__all__ = [
    "tangent_component", "statistics_component", "strategy_settings", "strategy_components", "components_for",
    "install_composition", "ComponentFiles",
]


def tangent_component(model: TangentModel, delta: Mapping[str, Tensor], experience: int, *, weight: float = 1.0,
                      classes: Optional[Mapping] = None, settings: Optional[Mapping] = None) -> Component:
    """A tangent component of ``model``: ``delta`` (checked to fit the model, in its dtype), its weight,
    experience id, classes (task label -> classes) and training settings."""
    model.check_delta(delta)
    dtypes = {name: p.dtype for name, p in zip(model.linearized_names, model.delta_params)}
    ordered = OrderedDict((name, delta[name].to(dtypes[name])) for name in model.linearized_names)  # the model's δ
    return _component("delta", ordered, weight, tangent_base(model), experience, classes, settings)


def statistics_component(model: torch.nn.Module, stats: Mapping[str, Tensor], experience: int, *,
                         classes: Optional[Mapping] = None, settings: Optional[Mapping] = None) -> Component:
    """One experience's head statistics for an :class:`~avalanche_tmc.TrainingFreeClassifier`
    (weight: its sample count)."""
    missing = [k for k in STAT_KEYS if k not in stats]
    if missing:
        raise ValueError(f"Statistics lack {missing}; use head_statistics() to make them.")
    ordered = OrderedDict((k, stats[k]) for k in STAT_KEYS)
    return _component("statistics", ordered, float(stats["count"]), statistics_base(model), experience, classes,
                      settings)


def _optimizer_settings(strategy: Any) -> Dict[str, Any]:
    """Epochs, batch size, optimizer and learning rate, and the loss's alpha and beta, where the strategy has them."""
    optimizer = getattr(strategy, "optimizer", None)
    out = dict(train_epochs=getattr(strategy, "train_epochs", None), train_mb_size=getattr(strategy, "train_mb_size",
                                                                                           None))
    if optimizer is not None and optimizer.param_groups:
        out.update(optimizer=type(optimizer).__name__, lr=optimizer.param_groups[0].get("lr"))
    criterion = getattr(strategy, "_criterion", None)
    for name in ("alpha", "beta"):
        if hasattr(criterion, name):
            out[name] = float(getattr(criterion, name))
    return out


def strategy_settings(strategy: ComposableLearner) -> Dict[str, Any]:
    """The training settings recorded with a strategy's components."""
    return dict(strategy=type(strategy).__name__, **_optimizer_settings(strategy), **strategy.component_settings())


def strategy_components(strategy: ComposableLearner) -> List[Component]:
    """Every component a strategy holds, in the order learned: a TMC/TME strategy's
    ``δ_t`` (kept components) or an :class:`~avalanche_tmc.TrainingFreeStrategy`'s
    statistics (any :class:`~avalanche_tmc.training.protocols.ComposableLearner`)."""
    strategy.check_independent("save its components as files (they cannot be composed or forgotten on their own)")
    settings = strategy_settings(strategy)
    learned, classes = strategy.learned(), strategy.learned_classes()
    if strategy.payload == "delta":
        weights = learned.weights
        return [tangent_component(strategy.model, delta, key, weight=weights[key], classes=classes.get(key),
                                  settings=settings) for key, delta in learned.components.items()]
    return [statistics_component(strategy.model, stats, key, classes=classes.get(key), settings=settings)
            for key, stats in learned.components.items()]


def components_for(paths: Union[str, Sequence[str]], model: torch.nn.Module, learned: Collection[Any] = (),
                   name: str = "this strategy's model", *, key: Union[None, bytes, str] = None) -> List[Component]:
    """The component files of ``paths`` (a directory: its ``.safetensors``), ordered by
    experience, each checked before any is used: a component (not a composition), of
    ``model``'s base, an experience not in ``learned``, not twice, no content twice (among
    the files and, when ``learned`` is the strategy's composition, its members: the rule of
    :func:`~avalanche_tmc.files.arithmetic.compose_components`), and a sum with ``learned``
    that stays finite: all files are installed, or none.

    :raises IncompatibleComponentsError: naming the file and what does not fit.
    """
    components = load_components(paths, key=key)
    reference = model_reference(model, name)
    for component in components:
        if component.kind != "component":
            raise IncompatibleComponentsError(
                f"{component.name()} is a composition: a strategy is built from component files (one per "
                "experience); load a composition into a model with its δ (avalanche_tmc.files.composed_delta).")
        check_same_base(reference, component)
        if component.experience in learned:
            raise IncompatibleComponentsError(f"Experience {component.experience} ({component.name()}) is already "
                                              "learned by this strategy; forget it first.")
    if isinstance(learned, AdditiveComposition):
        checksums = learned.checksums
        _check_distinct(components, checksums)
        _check_sum(learned, checksums, components)
    else:
        _check_distinct(components)
    return components


def _check_sum(learned: AdditiveComposition, checksums: Mapping[Any, str], components: Sequence[Component]) -> None:
    """Add ``components`` to a copy of ``learned``'s sum, with the arithmetic installing them
    uses: a sum or total weight that overflows is refused before anything is installed."""
    trial = learned.empty_like(keep_components=False)
    if len(learned):
        trial.merge(learned.weights, learned.summed(), checksums=checksums)
    for component in components:
        with _numbers_of(component):
            trial.add(component.experience, component.tensors, component.weight)


def install_composition(strategy: ComposableLearner, composition: Component,
                        name: str = "the strategy's model") -> None:
    """Put a composition (or component) file into ``strategy`` (a fresh
    :class:`~avalanche_tmc.training.protocols.ComposableLearner` on the same base, checked first: ``name``
    is how messages call its model): its members, by their sum, as if learned there (kept
    only as the sum), their classes recorded; the model then evaluates the composition."""
    check_same_base(model_reference(strategy.model, name), composition)
    if strategy.payload != composition.payload:
        raise IncompatibleComponentsError(f"{composition.name()} holds {composition.payload}, the strategy learns "
                                          f"{strategy.payload}.")
    if composition.kind == "component":
        composition = compose_components([composition])
    device = learner_device(strategy)  # the file's tensors go where the strategy learns
    composition = replace(composition, tensors=OrderedDict((n, t.to(device)) for n, t in composition.tensors.items()))
    learned = strategy.learned().empty_like(keep_components=False)
    if composition.members:
        with _numbers_of(composition):
            _merge_members(learned, composition)
    strategy.replace_learned(learned)
    strategy.installed({m["experience"]: {int(t): c for t, c in m["classes"].items()} for m in composition.members})


class ComponentFiles:
    """The :class:`~avalanche_tmc.training.protocols.ComponentStore` of component files: what
    a strategy's ``component_dir`` writes (one ``experience-<id>.safetensors`` per
    component, with its base, classes and training settings) and its ``load_components``
    reads (:func:`components_for`): the store strategies use unless another is registered
    (``avalanche_tmc.training.protocols.DEFAULT_COMPONENT_STORE``)."""

    def write_component(self, strategy: ComposableLearner, key: Any, tensors: Mapping[str, Tensor], weight: float,
                        classes: Optional[Mapping], path: str, *, overwrite: bool) -> None:
        """Write one tangent component of ``strategy`` to ``path`` (exclusively unless ``overwrite``)."""
        component = tangent_component(strategy.model, tensors, key, weight=weight, classes=classes,
                                      settings=strategy_settings(strategy))
        save_component(component, path, overwrite=overwrite)

    def read_components(self, strategy: ComposableLearner, paths: Union[str, Sequence[str]],
                        learned: Collection[Any] = (), *, key: Union[None, bytes, str] = None) -> List[Component]:
        """:func:`components_for` the strategy's model."""
        return components_for(paths, strategy.model, learned, key=key)

