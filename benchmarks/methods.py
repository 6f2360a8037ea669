"""Which strategy produces which row of the comparison table.

Methods that differ only at evaluation share one training run (a *group*): TMC and TME
evaluate the same tangent components (the paper's setup), and Soup, Ens-L and Ens-SM the
same per-task non-linear fine-tunes. Everything here only *configures* strategies from
``avalanche_tmc`` and ``baselines``; no algorithm lives in the runner.
"""

import copy
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch
from avalanche.training.plugins import LRSchedulerPlugin
from avalanche.training.supervised import StreamingLDA
from avalanche.training.templates import SupervisedTemplate
from torch import Tensor, nn
from torch.func import functional_call

from avalanche_tmc import TangentModel, TaskMaskPlugin, TMCSeqStrategy, TMEStrategy, TMCStrategy, find_head
from avalanche_tmc import replace_head
from avalanche_tmc.analytic import AnalyticClassifier, AnalyticHeadStrategy, penultimate
from baselines import IndependentFineTuneStrategy, make_builtin_strategy


@dataclass(frozen=True)
class MethodGroup:
    """One training run and the table rows (methods) evaluated from it."""

    name: str
    rows: Tuple[str, ...]
    joint: bool = False  # trained once on the whole stream


GROUPS: Tuple[MethodGroup, ...] = (
    MethodGroup("tangent", ("tmc", "tme")),
    MethodGroup("tmc-seq", ("tmc-seq",)),
    MethodGroup("tmc-fc", ("tmc-fc",)),
    MethodGroup("independent", ("soup", "ens-l", "ens-sm")),
    MethodGroup("stats-ridge", ("stats-ridge",)),
    MethodGroup("ranpac", ("ranpac",)),
    MethodGroup("ncm", ("ncm",)),
    MethodGroup("slda", ("slda",)),
    MethodGroup("naive", ("naive",)),
    MethodGroup("er", ("er",)),
    MethodGroup("lwf", ("lwf",)),
    MethodGroup("ewc", ("ewc",)),
    MethodGroup("der", ("der",)),
    MethodGroup("joint", ("joint",), joint=True),
    MethodGroup("joint-tangent", ("joint-tangent",), joint=True),
)
ANALYTIC = {"stats-ridge": ("ridge", False), "ranpac": ("ridge", True), "ncm": ("ncm", False)}
ALL_METHODS: Tuple[str, ...] = tuple(row for group in GROUPS for row in group.rows)


@dataclass
class TrainConfig:
    """Hyper-parameters shared by every method of a run."""

    num_classes: int
    epochs: int = 5
    batch_size: int = 32
    eval_batch_size: int = 256
    lr_tangent: float = 1e-3  # Adam, tangent methods
    lr: float = 0.01  # SGD, non-linear methods
    beta: float = 25.0
    milestones: Sequence[int] = ()  # lr x0.1 at these epochs of every experience
    mem_size: int = 300
    projection_dim: int = 2000  # RanPAC-style random ReLU features
    slda_shrinkage: float = 1e-4  # Avalanche's StreamingLDA default
    device: str = "cpu"
    seed: int = 0


def groups_for(methods: Sequence[str]) -> List[Tuple[MethodGroup, Tuple[str, ...]]]:
    """The groups needed for ``methods`` and, for each, the requested rows."""
    unknown = [m for m in methods if m not in ALL_METHODS]
    if unknown:
        raise ValueError(f"Unknown method(s) {unknown}; valid: {', '.join(ALL_METHODS)}.")
    chosen = []
    for group in GROUPS:
        rows = tuple(r for r in group.rows if r in methods)
        if rows:
            chosen.append((group, rows))
    return chosen


def _with_head(top: nn.Module, cfg: TrainConfig) -> nn.Module:
    return replace_head(copy.deepcopy(top), cfg.num_classes, seed=cfg.seed)


def build_strategy(group: MethodGroup, top: nn.Module, cfg: TrainConfig, evaluator) -> SupervisedTemplate:
    """A fresh strategy for ``group`` on a copy of ``top`` with a new seeded head."""
    common = dict(
        train_mb_size=cfg.batch_size, train_epochs=cfg.epochs, eval_mb_size=cfg.eval_batch_size,
        device=cfg.device, evaluator=evaluator,
    )
    tangent = {"tangent": TMEStrategy, "tmc-seq": TMCSeqStrategy, "tmc-fc": TMCStrategy}
    if group.name in tangent:
        model = TangentModel(_with_head(top, cfg), linearize="head" if group.name == "tmc-fc" else "all")
        strategy = tangent[group.name](model=model, lr=cfg.lr_tangent, beta=cfg.beta, **common)
    elif group.name == "independent":
        strategy = IndependentFineTuneStrategy(model=_with_head(top, cfg), lr=cfg.lr, **common)
    elif group.name in ANALYTIC:
        head, projection = ANALYTIC[group.name]
        model = AnalyticClassifier(penultimate(top), cfg.num_classes, head=head, seed=cfg.seed,
                                   projection_dim=cfg.projection_dim if projection else None)
        one_pass = {k: v for k, v in common.items() if k != "train_epochs"}  # statistics need one pass
        strategy = AnalyticHeadStrategy(model=model, **dict(one_pass, train_mb_size=cfg.eval_batch_size))
    elif group.name == "slda":
        feature_size = top.get_submodule(find_head(top)).in_features
        strategy = StreamingLDA(
            slda_model=penultimate(top), criterion=nn.CrossEntropyLoss(), input_size=feature_size,
            num_classes=cfg.num_classes, shrinkage_param=cfg.slda_shrinkage, plugins=[TaskMaskPlugin()],
            **dict(common, train_epochs=1),
        )
    else:
        strategy = make_builtin_strategy(
            group.name, model=_with_head(top, cfg), lr=cfg.lr_tangent if group.name == "joint-tangent" else cfg.lr,
            mem_size=cfg.mem_size, beta=cfg.beta, **common,
        )
    if cfg.milestones and strategy.optimizer is not None:
        scheduler = torch.optim.lr_scheduler.MultiStepLR(strategy.optimizer, list(cfg.milestones), gamma=0.1)
        strategy.plugins.append(LRSchedulerPlugin(scheduler, reset_scheduler=True, reset_lr=True))
    return strategy


def select_row(strategy: SupervisedTemplate, group: MethodGroup, row: str) -> None:
    """Make ``strategy`` evaluate as table row ``row`` (no retraining)."""
    if group.name == "tangent":
        strategy.tangent_plugin.mode = row
    elif group.name == "independent":
        strategy.combine = row


def component_forwards(strategy: SupervisedTemplate, group: MethodGroup) -> Dict[int, Callable[[Tensor], Tensor]]:
    """Experience id -> the logits function of that component alone (composition groups)."""
    if group.name in ("tangent", "tmc-fc"):
        model = strategy.model
        return {k: (lambda x, d=d: model.forward_with(x, d)) for k, d in strategy.components.items()}
    if group.name == "independent":
        model = strategy.model.eval()
        return {k: (lambda x, s=s: functional_call(model, s, (x,))) for k, s in strategy.fine_tuned.items()}
    return {}


def component_rows(group: MethodGroup, requested: Sequence[str]) -> Optional[str]:
    """The row name that component accuracies are reported under (None: no components)."""
    for row in ("tmc", "tmc-fc", "soup"):
        if row in group.rows and row in requested:
            return row
    return None
