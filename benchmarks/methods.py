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
read only this registry. Everything here only *configures* strategies from
``avalanche_tmc`` and ``baselines``; no algorithm lives in the runner. Adding a method is
one :func:`register_method` entry (and its test)::

    @register_method("my-method", Row("my-method", "My method", "O(1)", parallel=True))
    def _my_method(top, cfg, common):
        return MyStrategy(model=with_new_head(top, cfg), lr=cfg.lr, **common)
"""

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from avalanche.training.plugins import LRSchedulerPlugin
from avalanche.training.templates import SupervisedTemplate
from torch import Tensor, nn
from torch.func import functional_call

from avalanche_tmc import (
    Adaptation,
    AutocastPlugin,
    create_strategy,
)
from avalanche_tmc.training.registry import FAMILIES
from baselines import BUILTIN_METHODS  # importing baselines registers Avalanche's strategies
from benchmarks.builders import (
    AMP_DTYPES,
    adaptation_candidates,
    decay_arguments,
    delta_decay_plugin,
    layer_candidates,
    linearize_start,
    other_beta,
    schedule_milestones,
    tangent_base,
    use_fused_kernels,
    with_new_head,
)
from benchmarks.choices import DEFAULT_PROJECTION_DIM

__all__ = [
    "Row", "MethodGroup", "TrainConfig", "register_method", "method_groups", "method_names", "method_row",
    "group_named", "TME_GROUP",
    "joint_methods", "method_family", "method_unit", "groups_for", "build_strategy", "select_row", "component_forwards",
    "component_row", "FAMILIES", "TUNINGS", "representatives", "tangent_units", "tuning_unit",
    "config_for",
]

# Hyper-parameter families: the library's (avalanche_tmc.training.registry.FAMILIES); groups
# of a family train with the same learning rate and epochs (``TrainConfig.lr_tangent`` /
# ``lr`` and ``epochs``, or the values tuned for the family, see :mod:`benchmarks.tuning`).
# Training-free heads have nothing to tune.

# How a group gets its learning rate and epochs (``register_method(tuning=...)``): "family"
# (its family's chosen values), "represents" (its validation score chooses its family's
# values: the composition groups) or "self" (tuned for itself: the paragons and the replay
# methods, whose data and buffers the composition groups' values need not suit).
TUNINGS = ("family", "represents", "self")


@dataclass
class TrainConfig:
    """Hyper-parameters shared by every method of a run (built once per run and seed by
    :func:`benchmarks.config.train_config`)."""

    num_classes: int
    epochs: int = 5
    batch_size: int = 32
    eval_batch_size: int = 256
    lr_tangent: float = 1e-3  # Adam, tangent methods
    lr: float = 0.01  # SGD, non-linear methods
    beta: float = 25.0
    milestones: Sequence[int] = ()  # lr x0.1 at these epochs of every experience
    decay_at: Sequence[float] = ()  # lr x0.1 at these fractions of every experience's epochs (e.g. 0.5, 0.75)
    mem_size: int = 300
    projection_dim: int = DEFAULT_PROJECTION_DIM  # RanPAC-style random ReLU features
    slda_shrinkage: float = 1e-4  # Avalanche's StreamingLDA default
    device: str = "cpu"
    seed: int = 0
    bn_batches: Optional[Sequence[Any]] = None  # tangent base point: BatchNorm re-estimated on these
    tangent_epochs: Optional[int] = None  # epochs of the tangent family (None: ``epochs``)
    # tuning unit (:func:`tuning_unit`) -> (learning rate, epochs) chosen for it; wins over the above
    tuned: Mapping[str, Tuple[float, int]] = field(default_factory=dict)
    head_seed: Optional[int] = None  # the new head's initialisation (None: ``seed``); experiments/variance.py
    linearize_from: Optional[str] = None  # tangent methods linearize from this module on (None: everything)
    decay: float = 0.0  # decay on δ of the tangent methods (avalanche_tmc's ``decay``; 0: none)
    decay_kind: str = "norm"
    tme_beta: Optional[float] = None  # the RSL β of TME's own components (None: TME shares TMC's)
    schedule: str = "step"  # "step": lr x0.1 from each milestone epoch on; "authors": from the epoch after
    amp: Optional[str] = None  # "bf16" / "fp16": forwards under autocast (AutocastPlugin)
    amp_init_scale: Optional[float] = None  # fp16: the GradScaler's first scale (None: AutocastPlugin's)

    def for_family(self, family: str) -> "TrainConfig":
        """This config as a group of ``family`` sees it: the tangent family trains for
        ``tangent_epochs`` when set (learning rates are already per family)."""
        if family == "tangent" and self.tangent_epochs is not None:
            return replace(self, epochs=self.tangent_epochs)
        return self





@dataclass(frozen=True)
class Row:
    """One row of the results table: a method as the reader sees it."""

    name: str  # the --methods name and the results.csv ``method`` value
    label: str  # shown in the table and the plots
    cost: str  # the "Inference/Memory" column; "O(1)..." / "O(T)..." compete for bold / italic
    replay: str = "none"  # the "Replay buffer" column
    parallel: bool = False  # the "Parallel tasks" column: per-task parts trainable independently
    shipped: bool = False  # a method of the avalanche_tmc library (not a baseline)


Forward = Callable[[Tensor], Tensor]
Builder = Callable[[nn.Module, TrainConfig, Dict[str, Any]], SupervisedTemplate]


@dataclass(frozen=True)
class MethodGroup:
    """One training run and the table rows (methods) evaluated from it."""

    name: str
    rows: Tuple[Row, ...]
    build: Builder  # (trainable top network, config, Avalanche template arguments) -> strategy
    select: Optional[Callable[[SupervisedTemplate, str], None]] = None
    components: Optional[Callable[[SupervisedTemplate], Dict[int, Forward]]] = None
    component_row: Optional[str] = None
    joint: bool = False  # trained once on the whole stream
    family: str = "non-linear"  # one of FAMILIES
    describe: Optional[Callable[[SupervisedTemplate], str]] = None
    # its training reads task labels (Avalanche's LwF distils per task; JointTraining's loader
    # balances tasks): a task-IL column trains it on the task-labelled split rather than
    # evaluating its class-IL training under the task mask (benchmarks/task_il.py)
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
    select: Optional[Callable[[SupervisedTemplate, str], None]] = None,
    components: Optional[Callable[[SupervisedTemplate], Dict[int, Forward]]] = None,
    component_row: Optional[str] = None,
    joint: bool = False,
    family: str = "non-linear",
    describe: Optional[Callable[[SupervisedTemplate], str]] = None,
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


def group_named(name: str) -> MethodGroup:
    """The group ``name``: a registered one or :data:`TME_GROUP` (KeyError if neither)."""
    return TME_GROUP if name == TME_GROUP.name else _GROUPS[name]


def method_names() -> Tuple[str, ...]:
    """Every registered row name, in table order."""
    return tuple(_ROWS)


def method_row(name: str) -> Optional[Row]:
    """The registered row ``name`` (None if unknown)."""
    return _ROWS.get(name)


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


def groups_for(methods: Sequence[str], *, own_tme: bool = False) -> List[Tuple[MethodGroup, Tuple[str, ...]]]:
    """The groups needed for ``methods`` and, for each, the requested rows. ``own_tme``:
    TME trains its own components (with ``TrainConfig.tme_beta``) in a group of its own,
    :data:`TME_GROUP`, instead of evaluating TMC's."""
    unknown = [m for m in methods if m not in _ROWS]
    if unknown:
        raise ValueError(f"Unknown method(s) {unknown}; valid: {', '.join(_ROWS)}.")
    chosen = []
    for group in _GROUPS.values():
        rows = tuple(r for r in group.row_names if r in methods)
        if own_tme and group.name == "tangent" and "tme" in rows:
            rows = tuple(r for r in rows if r != "tme")
            chosen.append((TME_GROUP, ("tme",)))
        if rows:
            chosen.append((group, rows))
    return chosen


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


def config_for(group: MethodGroup, cfg: TrainConfig) -> TrainConfig:
    """The config ``group`` trains with: its tuning unit's chosen learning rate and
    epochs when ``cfg.tuned`` has them, else its family's."""
    chosen = cfg.tuned.get(tuning_unit(group))
    if chosen is None:
        return cfg.for_family(group.family)
    lr, epochs = chosen
    return replace(cfg, epochs=int(epochs), **({"lr_tangent": lr} if _uses_tangent_lr(group) else {"lr": lr}))


def build_strategy(group: MethodGroup, top: nn.Module, cfg: TrainConfig, evaluator) -> SupervisedTemplate:
    """A fresh strategy for ``group`` on a copy of ``top`` (with a new seeded head where it has one)."""
    cfg = config_for(group, cfg)
    common = dict(
        train_mb_size=cfg.batch_size, train_epochs=cfg.epochs, eval_mb_size=cfg.eval_batch_size,
        device=cfg.device, evaluator=evaluator,
    )
    strategy = group.build(top, cfg, common)
    use_fused_kernels(strategy.optimizer)
    milestones = schedule_milestones(cfg)
    if cfg.amp is not None and group.family != "training-free":  # last: fp16 scales the whole loss
        scale = {} if cfg.amp_init_scale is None else {"init_scale": cfg.amp_init_scale}
        strategy.plugins.append(AutocastPlugin(AMP_DTYPES[cfg.amp], **scale))
    if milestones and strategy.optimizer is not None:
        scheduler = torch.optim.lr_scheduler.MultiStepLR(strategy.optimizer, milestones, gamma=0.1)
        strategy.plugins.append(LRSchedulerPlugin(scheduler, reset_scheduler=True, reset_lr=True))
    return strategy


def select_row(strategy: SupervisedTemplate, group: MethodGroup, row: str) -> None:
    """Make ``strategy`` evaluate as table row ``row`` (no retraining)."""
    if group.select is not None:
        group.select(strategy, row)


def component_forwards(strategy: SupervisedTemplate, group: MethodGroup) -> Dict[int, Forward]:
    """Experience id -> the logits function of that component alone (composition groups)."""
    return group.components(strategy) if group.components is not None else {}


def component_row(group: MethodGroup, requested: Sequence[str]) -> Optional[str]:
    """The row that component accuracies are reported under (None: no components, or that
    row was not requested)."""
    return group.component_row if group.component_row in requested else None


def _tangent(strategy: str, swap_beta: bool = False, own_tme_beta: bool = False) -> Builder:
    """The registry's tangent ``strategy`` on :func:`tangent_base` with the run's settings
    (``tmc-fc`` linearizes the head alone, the others from ``cfg.linearize_from`` on)."""
    def build(top, cfg, common):
        net = tangent_base(top, cfg)
        start_at = None if strategy == "tmc-fc" else linearize_start(cfg.linearize_from, net)
        beta = other_beta(cfg.beta) if swap_beta else cfg.tme_beta if own_tme_beta else cfg.beta
        return create_strategy(strategy, net, start_at=start_at, lr=cfg.lr_tangent, beta=beta, **decay_arguments(cfg),
                               **common)

    return build


def _tangent_mode(strategy, row: str) -> None:
    strategy.tangent_plugin.mode = row


def _tangent_components(strategy) -> Dict[int, Forward]:
    model = strategy.model
    return {k: (lambda x, d=d: model.forward_with(x, d)) for k, d in strategy.components.items()}


def _combine(strategy, row: str) -> None:
    strategy.combine = row


def _fine_tuned_components(strategy) -> Dict[int, Forward]:
    model = strategy.model.eval()
    return {k: (lambda x, s=s: functional_call(model, s, (x,))) for k, s in strategy.fine_tuned.items()}


def _statistics(strategy: str) -> Builder:
    """The registry's training-free ``strategy`` on ``top``'s penultimate features."""
    def build(top, cfg, common):
        one_pass = {k: v for k, v in common.items() if k != "train_epochs"}  # statistics need one pass
        return create_strategy(strategy, top, num_classes=cfg.num_classes, seed=cfg.seed,
                               projection_dim=cfg.projection_dim, **dict(one_pass, train_mb_size=cfg.eval_batch_size))

    return build


def _register_builtin(row: Row, *, tangent: bool = False, joint: bool = False, task_aware: bool = False,
                      cost: int = 1, tuning: str = "family") -> None:
    """Register Avalanche's strategy ``row.name`` (one of ``baselines.BUILTIN_METHODS``, built
    from the strategy registry) as a one-row group; ``tangent``: trained with the tangent
    learning rate."""
    if row.name not in BUILTIN_METHODS:
        raise ValueError(f"{row.name!r} is not one of baselines.BUILTIN_METHODS {BUILTIN_METHODS}.")

    def build(top, cfg, common):
        net = tangent_base(top, cfg) if tangent else with_new_head(top, cfg)
        extra = dict(start_at=linearize_start(cfg.linearize_from, net)) if tangent and cfg.linearize_from else {}
        if tangent and cfg.decay > 0:
            extra["plugins"] = [delta_decay_plugin(cfg)]
        return create_strategy(row.name, net, lr=cfg.lr_tangent if tangent else cfg.lr, mem_size=cfg.mem_size,
                               beta=cfg.beta, **extra, **common)

    register_method(row.name, row, joint=joint, family="tangent" if tangent else "non-linear",
                    task_aware=task_aware or joint, cost=cost, tuning=tuning)(build)


# ------------------------------------------------------------------------ registry

register_method(
    "tangent", Row("tmc", "TMC", "O(1)", parallel=True, shipped=True),
    Row("tme", "TME", "O(T)", parallel=True, shipped=True),
    select=_tangent_mode, components=_tangent_components, component_row="tmc", family="tangent", cost=3,
    tuning="represents",
)(_tangent("tme"))  # trained once, evaluated as TMC or TME by select
# TME with a β of its own (the paper's text: 5 for TME, 25 for TMC in class/task-IL) trains
# its own components: one more tangent training per experience. Not registered (its row is
# the "tangent" group's "tme"): groups_for(..., own_tme=True) puts it in that group's place.
TME_GROUP = MethodGroup("tme", (_GROUPS["tangent"].rows[1],), _tangent("tme", own_tme_beta=True),
                        components=_tangent_components, component_row="tme", family="tangent", cost=3)
register_method("tmc-seq", Row("tmc-seq", "TMC-Seq", "O(1)", shipped=True), family="tangent", cost=3)(
    _tangent("tmc-seq"))
register_method(
    "tmc-fc", Row("tmc-fc", "TMC-FC", "O(1)", parallel=True, shipped=True),
    components=_tangent_components, component_row="tmc-fc", family="tangent",
)(_tangent("tmc-fc"))
# The paper's β claim (a larger β helps class-IL and hurts data-IL), within each seed: TMC
# trained with the other of the paper's two values (5 where the run uses 25, and 25 for 5).
register_method("tmc-alt-beta", Row("tmc-alt-beta", "TMC, the other β", "O(1)", parallel=True),
                family="tangent")(_tangent("tmc", swap_beta=True))


@register_method(
    "independent", Row("soup", "Soup", "O(1)", parallel=True), Row("ens-l", "Ens-L", "O(T)", parallel=True),
    Row("ens-sm", "Ens-SM", "O(T)", parallel=True),
    select=_combine, components=_fine_tuned_components, component_row="soup", cost=4, tuning="represents",
)
def _independent(top, cfg, common):
    return create_strategy("soup", with_new_head(top, cfg), lr=cfg.lr, **common)


# Training-free heads keep additive sufficient statistics (class means, scatter / Gram
# matrices), so per-task parts can be computed in parallel and summed.
@register_method("slda", Row("slda", "SLDA", "O(1) (D×D)", parallel=True), family="training-free")
def _slda(top, cfg, common):
    return create_strategy("slda", top, num_classes=cfg.num_classes, shrinkage_param=cfg.slda_shrinkage,
                           **dict(common, train_epochs=1))


_TRAINING_FREE = dict(family="training-free")
_OURS = dict(parallel=True, shipped=True)
register_method("ncm", Row("ncm", "NCM", "O(1) (C×D)", **_OURS), **_TRAINING_FREE)(
    _statistics("ncm"))
register_method("ranpac", Row("ranpac", "RanPAC-style (RP+ridge)", "O(1) (M×M)", **_OURS), **_TRAINING_FREE)(
    _statistics("ranpac"))
register_method("stats-ridge", Row("stats-ridge", "Stats-Ridge", "O(1) (D×D)", **_OURS), **_TRAINING_FREE)(
    _statistics("stats-ridge"))


def _describe_adaptation(strategy) -> str:
    scores = dict(strategy.adaptation_scores)
    chosen = strategy.adaptation_choice
    if not scores:  # a single candidate: nothing was chosen
        return f"adapted on experience {strategy.adapted_on}: {chosen.describe()} (the only candidate)"
    unadapted = next((s for c, s in scores.items() if c.how == "none" and c.layer is None), float("nan"))
    return (f"adapted on experience {strategy.adapted_on}: {chosen.describe()} (validation {scores[chosen]:.3f}, "
            f"best of {len(scores)} candidates; pre-trained features at the head's input: {unadapted:.3f})")


def _first_session(candidates: Callable[[nn.Module, TrainConfig], List[Adaptation]]) -> Builder:
    def build(top, cfg, common):
        net = with_new_head(top, cfg)
        one_pass = {k: v for k, v in common.items() if k != "train_epochs"}  # statistics need one pass
        return create_strategy("adapt-then-compose", net, num_classes=cfg.num_classes,
                               adaptation=candidates(net, cfg), head="ridge", projection_dim=cfg.projection_dim,
                               seed=cfg.seed, **dict(one_pass, train_mb_size=cfg.eval_batch_size))

    return build


register_method("ranpac-layer", Row("ranpac-layer", "RanPAC-style, layer chosen on exp. 0", "O(1) (M×M)", **_OURS),
                family="training-free", describe=_describe_adaptation)(_first_session(layer_candidates))
register_method("adapt", Row("adapt-ridge", "Adapt+RanPAC (first-session adaptation)", "O(1) (M×M)", **_OURS),
                family="training-free", describe=_describe_adaptation, cost=4)(_first_session(adaptation_candidates))


_BUFFER_COST = "O(1) + buffer 300"
_PARAGON = "all data at once (paragon)"
_register_builtin(Row("naive", "Naive", "O(1)"), cost=2)
_register_builtin(Row("er", "ER", _BUFFER_COST, replay="300 samples"), cost=5, tuning="self")
_register_builtin(Row("lwf", "LwF", "O(1)"), task_aware=True, cost=5)
_register_builtin(Row("ewc", "EWC", "O(1), 2x params"), cost=5)
_register_builtin(Row("der", "DER", _BUFFER_COST, replay="300 samples + logits"), cost=6, tuning="self")
_register_builtin(Row("joint", "Joint", "O(1)", replay=_PARAGON), joint=True, cost=3, tuning="self")
_register_builtin(Row("joint-tangent", "Joint-Tangent", "O(1)", replay=_PARAGON), tangent=True, joint=True, cost=3,
                  tuning="self")
