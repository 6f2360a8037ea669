"""What the mixins and plugins of :mod:`avalanche_tmc.training` need from a strategy, typed
(as Avalanche's ``training/templates/strategy_mixin_protocol.py`` types its mixins), so that
code asks ``isinstance(x, Protocol)`` of a declared contract instead of guessing with
``hasattr`` or reading private fields.

* :class:`TrainingStrategy`: the parts of Avalanche's ``SupervisedTemplate`` that a
  training transaction saves and restores;
* :class:`RollbackPart`: a plugin (or any object) whose own state a transaction saves
  before a ``train()`` call and restores when the call fails;
* :class:`RollbackLearner`: a strategy whose learned state (statistics, head) lives in the
  strategy itself rather than in a plugin;
* :class:`ComposableLearner`: what a strategy whose knowledge is an
  :class:`~avalanche_tmc.composition.additive.AdditiveComposition` offers to code outside it
  (parallel training, component and learned-state files): the small protocol through which
  persistence and distribution act on a strategy, so that strategies know nothing of them;
* :class:`ComponentStore`: where a strategy's ``component_dir`` and ``load_components``
  hand their work (by default the component files of :mod:`avalanche_tmc.files`, named in
  :data:`DEFAULT_COMPONENT_STORE` and imported on first use).
"""

import importlib
from typing import Any, Dict, Hashable, Iterable, List, Mapping, Optional, Protocol, runtime_checkable

import torch
from torch import nn

from ..composition.additive import AdditiveComposition

__all__ = [
    "TrainingStrategy", "RollbackPart", "RollbackLearner", "ComposableLearner", "learner_device", "ComponentStore",
    "register_component_store", "component_store", "DEFAULT_COMPONENT_STORE",
]


class TrainingStrategy(Protocol):
    """The parts of an Avalanche ``SupervisedTemplate`` that a training transaction saves and
    restores (:class:`~avalanche_tmc.training.rollback.TrainingTransaction`)."""

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
    """A strategy that keeps what it learned itself (the training-free heads: statistics, the
    solved head, the adapted features) and takes part in its own transactions."""

    def snapshot_learner(self) -> Any:
        """What the strategy has learned, for :meth:`restore_learner`."""
        ...

    def restore_learner(self, snapshot: Any) -> None:
        """Go back exactly to a :meth:`snapshot_learner`."""
        ...


def learner_device(strategy: Any) -> torch.device:
    """Where a strategy's learned tensors live, and where tensors brought in from elsewhere
    (another process, a file) are put: its ``device`` (an Avalanche strategy's), else the CPU."""
    return torch.device(getattr(strategy, "device", None) or "cpu")


class ComposableLearner:
    """What a strategy whose knowledge is an :class:`AdditiveComposition` offers to code
    outside it (parallel training, component files, checkpoints), so that no caller
    inspects strategy types or private fields. The tangent strategies and
    :class:`~avalanche_tmc.TrainingFreeStrategy` implement it.

    * :attr:`payload`: ``"delta"`` or ``"statistics"``;
    * :meth:`learned`: the composition (read it; change it through the methods below);
    * :meth:`replace_learned`: put another composition in its place, returning the old one;
    * :meth:`check_independent`: raise unless components are independent (TMC-Seq is not);
    * :meth:`learned_settings`: what must agree between processes that compose together;
    * :meth:`installed`: after members were merged in, put the model in line and record
      each experience's classes (``classes``: key -> task label -> classes);
    * :meth:`learned_classes`, :meth:`component_settings`: what component files record;
    * :meth:`base_network`: the fixed pre-trained network (what checkpoints are checked against).
    """

    payload = ""

    def learned(self) -> AdditiveComposition:
        raise NotImplementedError

    def replace_learned(self, composition: AdditiveComposition) -> AdditiveComposition:
        raise NotImplementedError

    def check_independent(self, what: str) -> None:
        """Raise ``ValueError`` when components are not independent (``what``: the use)."""

    def learned_settings(self) -> Dict[str, Any]:
        raise NotImplementedError

    def installed(self, classes: Mapping[Hashable, Mapping[int, Iterable[int]]]) -> None:
        raise NotImplementedError

    def learned_classes(self) -> Dict[Hashable, Dict[int, List[int]]]:
        """Key -> task label -> classes of every member (what component files record)."""
        raise NotImplementedError

    def component_settings(self) -> Dict[str, Any]:
        """How the members were made, recorded in component files (mode, head, ...)."""
        raise NotImplementedError

    def base_network(self) -> "torch.nn.Module":
        """The fixed pre-trained network the members belong to (what a checkpoint of the
        strategy must share with the strategy it is loaded into)."""
        raise NotImplementedError


@runtime_checkable
class ComponentStore(Protocol):
    """Where a strategy's components are written and read back: what a strategy's
    ``component_dir`` and ``load_components`` hand their work to, so that strategies know
    nothing of files. :mod:`avalanche_tmc.files` provides the default one (component files,
    :data:`DEFAULT_COMPONENT_STORE`); :func:`register_component_store` replaces it."""

    def write_component(self, strategy: Any, key: Hashable, tensors: Mapping[str, torch.Tensor], weight: float,
                        classes: Optional[Mapping[int, Iterable[int]]], path: str, *, overwrite: bool) -> None:
        """Write one component of ``strategy`` (experience ``key``) to ``path``."""
        ...

    def read_components(self, strategy: Any, paths: Any, learned: Any, *, key: Any = None) -> List[Any]:
        """The components of ``paths``, each checked against ``strategy``'s model and
        ``learned`` (what it already holds), ordered by experience: objects with
        ``experience``, ``tensors``, ``weight`` and ``classes``."""
        ...


_STORES: List[ComponentStore] = []
DEFAULT_COMPONENT_STORE = ("avalanche_tmc.files.learners", "ComponentFiles")
"""The store used when none is registered: the component files of :mod:`avalanche_tmc.files`,
named here and imported on a strategy's first write or read (so that strategies import
nothing of files, and importing either package registers nothing)."""


def register_component_store(store: ComponentStore) -> None:
    """Make ``store`` the one strategies write their components to and read them from
    (instead of :data:`DEFAULT_COMPONENT_STORE`)."""
    if not isinstance(store, ComponentStore):
        raise TypeError(f"{store!r} does not implement ComponentStore (write_component, read_components).")
    _STORES[:] = [store]


def component_store() -> ComponentStore:
    """The registered :class:`ComponentStore`, else the component files of
    :data:`DEFAULT_COMPONENT_STORE` (registered on this first use)."""
    if not _STORES:
        module, name = DEFAULT_COMPONENT_STORE
        register_component_store(getattr(importlib.import_module(module), name)())
    return _STORES[0]
