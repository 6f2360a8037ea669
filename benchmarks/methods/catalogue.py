"""The registered method groups, in the order of the results table: one
:func:`~benchmarks.methods.registry.register_method` entry per group (and its test).
Imported with :mod:`benchmarks.methods`; Avalanche's baselines are one group each, made
from their ``@baseline`` entries in ``baselines/builtin.py`` (which imports neither torch nor
Avalanche). Avalanche and the rest of ``baselines`` are imported only when a strategy is
built, so that the rows read without them."""

from typing import TYPE_CHECKING, Callable, Dict, List, Sequence, Tuple

from torch import nn
from torch.func import functional_call

from avalanche_tmc.training.registry import create_strategy  # standard library only
from baselines.builtin import Baseline, on_baseline  # neither torch nor Avalanche; registers every baseline's strategy
from benchmarks.methods.builders import (
    adaptation_candidates,
    decay_arguments,
    delta_decay_plugin,
    layer_candidates,
    linearize_start,
    other_beta,
    tangent_base,
    with_new_head,
)
from benchmarks.methods.registry import (
    _GROUPS,
    _ROWS,
    Builder,
    Forward,
    MethodGroup,
    Row,
    register_method,
)
from benchmarks.methods.train_config import TrainConfig

if TYPE_CHECKING:
    from avalanche_tmc import Adaptation

__all__ = ["group_named", "groups_for"]


def _tangent(strategy: str, swap_beta: bool = False, own_tme_beta: bool = False) -> Builder:
    """The registry's tangent ``strategy`` on :func:`tangent_base` with the run's settings
    (``tmc-fc`` linearizes the head alone, the others from ``cfg.linearize_from`` on)."""
    def build(top, cfg, common):
        net = tangent_base(top, cfg)
        start_at = None if strategy == "tmc-fc" else linearize_start(cfg.linearize_from, net)
        beta = (other_beta(cfg.beta) if swap_beta else cfg.tme_beta if own_tme_beta and cfg.tme_beta is not None
                else cfg.beta)
        return create_strategy(strategy, net, start_at=start_at, lr=cfg.lr_tangent, beta=beta, **decay_arguments(cfg),
                               **common)

    return build


def _tangent_mode(strategy, row: str) -> None:
    strategy.tangent_plugin.mode = "tme" if row == "tme-tmc" else row


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


def _register_baseline(baseline: Baseline) -> None:
    """Register Avalanche's baseline ``baseline`` (a ``@baseline`` entry of
    ``baselines/builtin.py``, built from the strategy registry) as a one-row group, with the
    row, cost and tuning its entry declares; a tangent one trains with the tangent learning rate."""
    name, tangent = baseline.name, baseline.tangent

    def build(top, cfg, common):
        net = tangent_base(top, cfg) if tangent else with_new_head(top, cfg)
        extra = dict(start_at=linearize_start(cfg.linearize_from, net)) if tangent and cfg.linearize_from else {}
        if tangent and cfg.decay > 0:
            extra["plugins"] = [delta_decay_plugin(cfg)]
        return create_strategy(name, net, lr=cfg.lr_tangent if tangent else cfg.lr, mem_size=cfg.mem_size,
                               beta=cfg.beta, **extra, **common)

    row = Row(name, baseline.label, baseline.memory, replay=baseline.replay)
    register_method(name, row, joint=baseline.joint, family="tangent" if tangent else "non-linear",
                    task_aware=baseline.task_aware or baseline.joint, cost=baseline.cost, tuning=baseline.tuning)(build)


# ------------------------------------------------------------------------ registry

register_method(
    "tangent", Row("tmc", "TMC", "O(1)", parallel=True, shipped=True),
    Row("tme-tmc", "TME of TMC's components", "O(T)", parallel=True),
    select=_tangent_mode, components=_tangent_components, component_row="tmc", family="tangent", cost=3,
    tuning="represents",
)(_tangent("tme"))  # trained once, evaluated as TMC or as the ensemble of its components by select
# TME as the paper trains it: components of its own, with its own β (the paper's text: 5 in
# every scenario, where TMC has 25 in class/task-IL: ``tme_beta``; None: the scenario's β),
# one more tangent training per experience, and a learning rate and epochs tuned for them.
register_method(
    "tme", Row("tme", "TME", "O(T)", parallel=True, shipped=True),
    select=_tangent_mode, components=_tangent_components, component_row="tme", family="tangent", cost=3,
    tuning="self",
)(_tangent("tme", own_tme_beta=True))


def group_named(name: str) -> MethodGroup:
    """The registered group ``name`` (KeyError if none)."""
    return _GROUPS[name]


def groups_for(methods: Sequence[str]) -> List[Tuple[MethodGroup, Tuple[str, ...]]]:
    """The groups needed for ``methods`` and, for each, the requested rows."""
    unknown = [m for m in methods if m not in _ROWS]
    if unknown:
        raise ValueError(f"Unknown method(s) {unknown}; valid: {', '.join(_ROWS)}.")
    chosen = []
    for group in _GROUPS.values():
        rows = tuple(r for r in group.row_names if r in methods)
        if rows:
            chosen.append((group, rows))
    return chosen


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


def _first_session(candidates: Callable[[nn.Module, TrainConfig], List["Adaptation"]]) -> Builder:
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


# Avalanche's baselines close the table, in their registration order (and any registered later).
on_baseline(_register_baseline)
