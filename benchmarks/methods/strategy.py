"""A registered group's strategy as the runner trains and evaluates it: built with the
run's schedule, fused optimizer kernels and autocast (:func:`build_strategy`), made to
evaluate as one of its rows, and its components evaluated alone."""

from typing import TYPE_CHECKING, Dict, Optional, Sequence

import torch
from torch import nn

from benchmarks.methods.builders import AMP_DTYPES, schedule_milestones, use_fused_kernels
from benchmarks.methods.registry import Forward, MethodGroup, config_for
from benchmarks.methods.train_config import TrainConfig

if TYPE_CHECKING:
    from avalanche.training.templates import SupervisedTemplate

__all__ = ["build_strategy", "watch_divergence", "select_row", "component_forwards", "component_row"]


def build_strategy(group: MethodGroup, top: nn.Module, cfg: TrainConfig, evaluator) -> "SupervisedTemplate":
    """A fresh strategy for ``group`` on a copy of ``top`` (with a new seeded head where it has one)."""
    cfg = config_for(group, cfg)
    common = dict(
        train_mb_size=cfg.batch_size, train_epochs=cfg.epochs, eval_mb_size=cfg.eval_batch_size,
        device=cfg.device, evaluator=evaluator,
    )
    from avalanche.training.plugins import LRSchedulerPlugin

    from avalanche_tmc import AutocastPlugin

    strategy = group.build(top, cfg, common)
    watch_divergence(strategy, group)
    use_fused_kernels(strategy.optimizer)
    milestones = schedule_milestones(cfg)
    if cfg.amp is not None and group.family != "training-free":  # last: fp16 scales the whole loss
        scale = {} if cfg.amp_init_scale is None else {"init_scale": cfg.amp_init_scale}
        strategy.plugins.append(AutocastPlugin(AMP_DTYPES[cfg.amp], **scale))
    if milestones and strategy.optimizer is not None:
        scheduler = torch.optim.lr_scheduler.MultiStepLR(strategy.optimizer, milestones, gamma=0.1)
        strategy.plugins.append(LRSchedulerPlugin(scheduler, reset_scheduler=True, reset_lr=True))
    return strategy


def watch_divergence(strategy: "SupervisedTemplate", group: MethodGroup) -> None:
    """Give a trained strategy that has no divergence guard of its own (Avalanche's SGD
    baselines, the paragons) one that watches without stopping: a loss that ends above twice
    its start, or goes non-finite, is recorded (``loss_rises``) for the runner to say and mark,
    while every row is still trained and written. The tangent strategies keep their own guard,
    which stops a non-finite experience (the library's rule)."""
    from avalanche_tmc import DivergenceGuardPlugin

    if group.family == "training-free" or getattr(strategy, "optimizer", None) is None:
        return
    if not any(isinstance(plugin, DivergenceGuardPlugin) for plugin in strategy.plugins):
        strategy.plugins.insert(0, DivergenceGuardPlugin(stop_on_non_finite=False))


def select_row(strategy: "SupervisedTemplate", group: MethodGroup, row: str) -> None:
    """Make ``strategy`` evaluate as table row ``row`` (no retraining)."""
    if group.select is not None:
        group.select(strategy, row)


def component_forwards(strategy: "SupervisedTemplate", group: MethodGroup) -> Dict[int, Forward]:
    """Experience id -> the logits function of that component alone (composition groups)."""
    return group.components(strategy) if group.components is not None else {}


def component_row(group: MethodGroup, requested: Sequence[str]) -> Optional[str]:
    """The row that component accuracies are reported under (None: no components, or that
    row was not requested)."""
    return group.component_row if group.component_row in requested else None
