"""``--logger``: Avalanche's loggers (text, csv, tensorboard, wandb) for the strategies'
accuracy and loss metrics, and which processes of a torchrun job print."""

import os
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Optional, Sequence

from .exits import UsageError

if TYPE_CHECKING:
    from avalanche.training.plugins import EvaluationPlugin

__all__ = ["LogSettings", "speaks", "evaluator", "gather_written"]


@dataclass(frozen=True)
class LogSettings:
    """What a command logs and where: the ``--logger`` names (none: no metrics), ``--log-dir``,
    the command's name (in the log names) and ``--all-ranks``."""

    loggers: Sequence[str] = ()
    log_dir: str = "avalanche-tmc-logs"
    command: str = "avalanche-tmc"
    all_ranks: bool = False


def speaks(settings: LogSettings, rank: int) -> bool:
    """Whether this process prints: rank 0 of a torchrun job, or every rank with --all-ranks."""
    return rank == 0 or settings.all_ranks


def evaluator(settings: LogSettings, rank: int = 0, world: int = 1,
              text_to_stderr: bool = False) -> Optional["EvaluationPlugin"]:
    """Avalanche's ``EvaluationPlugin`` with accuracy and loss metrics (per epoch, experience
    and stream) sent to the ``--logger`` loggers; None (no metrics) without ``--logger``.
    Files go under ``--log-dir`` (``rank-<r>/`` per process of a torchrun job); text goes
    to stdout from the processes that print (:func:`speaks`), to stderr with
    ``text_to_stderr`` (a command whose stdout is JSON); WandB runs offline
    (``WANDB_MODE=offline`` unless set), its files in ``--log-dir/wandb``."""
    names = list(dict.fromkeys(settings.loggers))
    if not names:
        return None
    from ..loggers import MissingLoggerPackage, check_loggers, make_loggers

    try:
        check_loggers(names)
    except MissingLoggerPackage as error:
        raise UsageError(str(error)) from None
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin

    from ..training.metrics import loss_metrics  # named for their loss: RSL_Loss_*, CE_Loss_*

    log_dir = settings.log_dir if world == 1 else os.path.join(settings.log_dir, f"rank-{rank}")
    # appended to: a silo that trains one experience per call keeps every call's rows
    try:
        loggers = make_loggers(names, log_dir, f"{settings.command}-rank{rank}",
                               text_stream=(sys.stderr if text_to_stderr else sys.stdout) if speaks(settings, rank)
                               else None, resume=True)
    except (OSError, ValueError) as error:  # a foreign or unwritable log file: the user's to move
        reason = error.strerror if isinstance(error, OSError) and error.strerror else str(error)
        raise UsageError(f"--log-dir {log_dir} cannot be logged to ({reason}); choose another --log-dir.") from None
    metrics = dict(epoch=True, experience=True, stream=True)
    return EvaluationPlugin(accuracy_metrics(**metrics), loss_metrics(**metrics), loggers=loggers)


def gather_written(written: Optional[List[str]], world: int) -> List[Optional[List[str]]]:
    """Every process's written files, in rank order (one collective; only under torchrun)."""
    if world == 1:
        return [written]
    import torch.distributed as dist

    everyone: List[Optional[List[str]]] = [None] * world
    dist.all_gather_object(everyone, written)
    return everyone
