"""The method registry: every table row of the comparison is declared here, once.

A *method group* is one training run and the table rows (methods) evaluated from it:
methods that differ only at evaluation share it. TMC and TME evaluate the same tangent
components (the paper's setup), and Soup, Ens-L and Ens-SM the same per-task non-linear
fine-tunes. A group is declared with :func:`register_method` on the function that builds
its strategy, together with

* its rows (:class:`Row`: name, label, inference/memory cost, replay buffer, parallel),
  in the order of the results table;
* ``select``: how the trained strategy is made to evaluate as one of its rows;
* ``components`` and ``component_row``: how each experience's component is evaluated
  alone, and the row its accuracies are reported under (when that row is requested);
* ``joint``: trained once on the whole stream (a paragon);
* ``family``: whose tuned learning rate and epochs it trains with (:data:`FAMILIES`);
* ``task_aware``: its training reads task labels, so a task-IL column trains it again on
  the task-labelled split instead of evaluating its class-IL training under the mask;
* ``describe``: what the trained strategy chose for itself (printed and written with the
  results), for methods that tune something internally.

The runner (:mod:`benchmarks.run`), the report (:mod:`benchmarks.report`) and the tests
read only this registry; the registered groups are declared in
:mod:`benchmarks.methods.catalogue` (imported with :mod:`benchmarks.methods`). Nothing here
imports Avalanche: the results render from the rows without it. Everything here only *configures* strategies from
``avalanche_tmc`` and ``baselines``; no algorithm lives in the runner. Adding a method is
one :func:`register_method` entry (and its test)::

    @register_method("my-method", Row("my-method", "My method", "O(1)", parallel=True))
    def _my_method(top, cfg, common):
        return MyStrategy(model=with_new_head(top, cfg), lr=cfg.lr, **common)
"""

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Tuple

from avalanche_tmc.training.registry import FAMILIES  # standard library only
from benchmarks.methods.train_config import TrainConfig

if TYPE_CHECKING:
    from avalanche.training.templates import SupervisedTemplate
    from torch import Tensor, nn

__all__ = [
    "Row", "MethodGroup", "register_method", "method_groups", "method_names", "method_row",
    "joint_methods", "method_family", "method_unit", "FAMILIES", "TUNINGS", "representatives", "tangent_units",
    "tuning_unit", "config_for", "UNTUNED_LR_CAPS",
]

# Hyper-parameter families: the library's (avalanche_tmc.training.registry.FAMILIES); groups
# of a family train with the same learning rate and epochs (``TrainConfig.lr_tangent`` /
# ``lr`` and ``epochs``, or the values tuned for the family, see :mod:`benchmarks.tuning.grid`).
# Training-free heads have nothing to tune.

# How a group gets its learning rate and epochs (``register_method(tuning=...)``): "family"
# (its family's chosen values), "represents" (its validation score chooses its family's
# values: the composition groups) or "self" (tuned for itself: the paragons and the replay
# methods, whose data and buffers the composition groups' values need not suit).
TUNINGS = ("family", "represents", "self")


@dataclass(frozen=True)
class Row:
    """One row of the results table: a method as the reader sees it."""

    name: str  # the --methods name and the results.csv ``method`` value
    label: str  # shown in the table and the plots
    cost: str  # the "Inference/Memory" column; "O(1)..." / "O(T)..." compete for bold / italic
    replay: str = "none"  # the "Replay buffer" column
    parallel: bool = False  # the "Parallel tasks" column: per-task parts trainable independently
    shipped: bool = False  # a method of the avalanche_tmc library (not a baseline)


Forward = Callable[["Tensor"], "Tensor"]
Builder = Callable[["nn.Module", TrainConfig, Dict[str, Any]], "SupervisedTemplate"]


@dataclass(frozen=True)
class MethodGroup:
    """One training run and the table rows (methods) evaluated from it."""

    name: str
    rows: Tuple[Row, ...]
    build: Builder  # (trainable top network, config, Avalanche template arguments) -> strategy
    select: Optional[Callable[["SupervisedTemplate", str], None]] = None
    components: Optional[Callable[["SupervisedTemplate"], Dict[int, Forward]]] = None
    component_row: Optional[str] = None
    joint: bool = False  # trained once on the whole stream
    family: str = "non-linear"  # one of FAMILIES
    describe: Optional[Callable[["SupervisedTemplate"], str]] = None
    # its training reads task labels (Avalanche's LwF distils per task; JointTraining's loader
    # balances tasks): a task-IL column trains it on the task-labelled split rather than
    # evaluating its class-IL training under the task mask (benchmarks/protocol/task_il.py)
    task_aware: bool = False
    cost: int = 1  # rough relative cost of its training: the runner starts the costliest first
    tuning: str = "family"  # one of TUNINGS

    @property
    def row_names(self) -> Tuple[str, ...]:
        return tuple(row.name for row in self.rows)


_GROUPS: Dict[str, MethodGroup] = {}  # group name -> group, in table order
_ROWS: Dict[str, Row] = {}  # row name -> row, in table order
_JOINT_ROWS: List[str] = []


def register_method(
    name: str,
    *rows: Row,
    select: Optional[Callable[["SupervisedTemplate", str], None]] = None,
    components: Optional[Callable[["SupervisedTemplate"], Dict[int, Forward]]] = None,
    component_row: Optional[str] = None,
    joint: bool = False,
    family: str = "non-linear",
    describe: Optional[Callable[["SupervisedTemplate"], str]] = None,
    task_aware: bool = False,
    cost: int = 1,
    tuning: str = "family",
) -> Callable[[Builder], Builder]:
    """Decorator: register the strategy builder of method group ``name`` and its ``rows``,
    with everything the runner needs to know of it (``cost``: its training's rough relative
    cost, for scheduling; ``tuning``: one of :data:`TUNINGS`).

    Groups train, and rows appear in the table, in registration order.
    """
    names = [row.name for row in rows]
    if not rows:
        raise ValueError(f"Method group {name!r} declares no rows.")
    if name in _GROUPS or any(n in _ROWS for n in names) or len(set(names)) != len(names):
        raise ValueError(f"Method group {name!r} or one of its rows {names} is already registered.")
    if len(rows) > 1 and select is None:
        raise ValueError(f"Method group {name!r} has several rows but no select function.")
    if (component_row is None) != (components is None) or (component_row is not None and component_row not in names):
        raise ValueError(f"Method group {name!r}: components and component_row (one of {names}) go together.")
    if family not in FAMILIES:
        raise ValueError(f"Method group {name!r}: family {family!r} is not one of {FAMILIES}.")
    if tuning not in TUNINGS or (tuning != "family" and family == "training-free"):
        raise ValueError(f"Method group {name!r}: tuning {tuning!r} is not one of {TUNINGS} (training-free groups "
                         "have nothing to tune: 'family').")
    if tuning == "represents" and any(g.family == family and g.tuning == "represents" for g in _GROUPS.values()):
        raise ValueError(f"Method group {name!r}: family {family!r} already has a representative group.")

    def decorator(build: Builder) -> Builder:
        _GROUPS[name] = MethodGroup(name, tuple(rows), build, select, components, component_row, joint, family,
                                    describe, task_aware, int(cost), tuning)
        _ROWS.update((row.name, row) for row in rows)
        if joint:
            _JOINT_ROWS.extend(names)
        return build

    return decorator


def method_groups() -> Tuple[MethodGroup, ...]:
    """Every registered group, in registration (training) order."""
    return tuple(_GROUPS.values())


def method_names() -> Tuple[str, ...]:
    """Every registered row name, in table order."""
    return tuple(_ROWS)


def method_row(name: str, buffer: Optional[int] = None) -> Optional[Row]:
    """The registered row ``name`` (None if unknown), a replay method's texts giving ``buffer``
    samples (default: the default buffer, ``baselines.builtin.REPLAY_BUFFER``; the registered
    texts hold ``{buffer}``)."""
    from baselines.builtin import REPLAY_BUFFER

    row = _ROWS.get(name)
    if row is None:
        return None
    size = REPLAY_BUFFER if buffer is None else buffer
    return replace(row, cost=row.cost.format(buffer=size), replay=row.replay.format(buffer=size))


def method_family(name: str) -> Optional[str]:
    """The hyper-parameter family (:data:`FAMILIES`) of row ``name`` (None if unknown)."""
    return next((g.family for g in _GROUPS.values() if name in g.row_names), None)


def method_unit(name: str) -> Optional[str]:
    """The tuning unit (:func:`tuning_unit`) whose learning rate and epochs row ``name``
    trains with (None if unknown)."""
    return next((tuning_unit(g) for g in _GROUPS.values() if name in g.row_names), None)


def joint_methods() -> Tuple[str, ...]:
    """Rows of groups trained once on the whole stream (the paragons)."""
    return tuple(_JOINT_ROWS)


def tuning_unit(group: MethodGroup) -> str:
    """Whose learning rate and epochs ``group`` trains with: its own name for a group tuned
    for itself, else its family."""
    return group.name if group.tuning == "self" else group.family


def representatives() -> Dict[str, str]:
    """Tuning unit -> the group whose validation accuracy chooses its values: each family's
    representative group, then every group tuned for itself (its own unit), in
    registration order."""
    families = {g.family: g.name for g in _GROUPS.values() if g.tuning == "represents"}
    return {**families, **{g.name: g.name for g in _GROUPS.values() if g.tuning == "self"}}


def tangent_units() -> Tuple[str, ...]:
    """The tuning units trained with Adam on tangent parameters (the tangent learning-rate range)."""
    return tuple(unit for unit, name in representatives().items() if _GROUPS[name].family == "tangent")


def _uses_tangent_lr(group: MethodGroup) -> bool:
    return group.family == "tangent"


UNTUNED_LR_CAPS = {"tme": 3e-4}
"""The most an untuned unit's learning rate may be: TME's own components (β = 5) diverged at
the tangent family's untuned 3e-3 (a folder of 300 images: 15% on their own experience), and
its tuning chose 3e-4 in class- and data-IL alike (docs/results/offline-tuning-tme/), where the
tangent unit chose 3e-3 and 3e-4: untuned, TME trains at the tangent rate capped at 3e-4."""


def config_for(group: MethodGroup, cfg: TrainConfig) -> TrainConfig:
    """The config ``group`` trains with: its tuning unit's chosen learning rate and
    epochs when ``cfg.tuned`` has them, else its family's (an untuned rate capped by
    :data:`UNTUNED_LR_CAPS`)."""
    unit = tuning_unit(group)
    chosen = cfg.tuned.get(unit)
    if chosen is None:
        if unit in UNTUNED_LR_CAPS and _uses_tangent_lr(group) and cfg.lr_tangent > UNTUNED_LR_CAPS[unit]:
            cfg = replace(cfg, lr_tangent=UNTUNED_LR_CAPS[unit])
        return cfg.for_family(group.family)
    lr, epochs = chosen
    return replace(cfg, epochs=int(epochs), **({"lr_tangent": lr} if _uses_tangent_lr(group) else {"lr": lr}))
