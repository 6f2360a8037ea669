"""Avalanche loggers chosen by name, for the command line and the benchmark runner.

``make_loggers(["text", "csv"], log_dir)`` gives Avalanche's ``TextLogger`` (stdout), the
``CSVLogger`` of :mod:`avalanche_tmc.metrics` (which also reads the named losses),
``TensorboardLogger`` and ``WandBLogger`` (offline unless ``WANDB_MODE`` says otherwise),
each writing under ``log_dir``. A logger whose package is not installed is refused with
the command that installs it, before anything is trained.
"""

import importlib.util
import os
import uuid
from typing import IO, TYPE_CHECKING, Any, List, Optional, Sequence

if TYPE_CHECKING:  # for the annotations only: the command line imports this module for --help
    from avalanche.logging import BaseLogger, WandBLogger

__all__ = ["LOGGERS", "MissingLoggerPackage", "check_loggers", "make_loggers"]

LOGGERS = ("text", "csv", "tensorboard", "wandb")
_PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb"}


class MissingLoggerPackage(ValueError):
    """A requested logger needs a package that is not installed (the message says which)."""


def check_loggers(names: Sequence[str]) -> List[str]:
    """The distinct logger ``names`` in order, after checking each is known and its package
    installed (:class:`MissingLoggerPackage` / ``ValueError`` otherwise)."""
    names = list(dict.fromkeys(names))
    unknown = [n for n in names if n not in LOGGERS]
    if unknown:
        raise ValueError(f"Unknown logger(s) {unknown}; choose from {', '.join(LOGGERS)}.")
    for name in names:
        package = _PACKAGES.get(name)
        if package is not None and importlib.util.find_spec(package) is None:
            raise MissingLoggerPackage(f"--logger {name} needs the {package} package, which is not installed: "
                                       f"pip install {package}")
    return names


def make_loggers(names: Sequence[str], log_dir: str, run_name: str = "avalanche-tmc",
                 text_stream: Optional[IO[str]] = None) -> List["BaseLogger"]:
    """Avalanche loggers for ``names`` (see :data:`LOGGERS`): text to ``text_stream``
    (stdout; ``None`` there drops the text logger, e.g. on a rank that does not print),
    files under ``log_dir`` (``csv/``, ``tensorboard/``, ``wandb/``)."""
    loggers = []
    for name in check_loggers(names):
        if name == "text":
            if text_stream is not None:
                from avalanche.logging import TextLogger

                loggers.append(TextLogger(text_stream))
        elif name == "csv":
            from .training.metrics import CSVLogger  # Avalanche's, reading the named losses

            loggers.append(CSVLogger(log_folder=os.path.join(log_dir, "csv")))
        elif name == "tensorboard":
            from avalanche.logging import TensorboardLogger

            loggers.append(TensorboardLogger(tb_log_dir=os.path.join(log_dir, "tensorboard")))
        else:
            os.environ.setdefault("WANDB_MODE", "offline")
            os.makedirs(log_dir, exist_ok=True)
            loggers.append(_wandb_logger(log_dir, run_name))
    return loggers


def _wandb_logger(log_dir: str, run_name: str) -> "WandBLogger":
    """Avalanche's ``WandBLogger`` for scalar metrics, working with recent wandb: Avalanche
    0.6 calls ``wandb.util.generate_id`` and ``wandb.viz``, which wandb 0.31 no longer has
    (the run id is given here; scalars are logged directly)."""
    from avalanche.logging import WandBLogger

    class ScalarWandBLogger(WandBLogger):
        def log_single_metric(self, name: str, value: Any, x_plot: int) -> None:
            self.step = x_plot
            if isinstance(value, (int, float)):
                self.wandb.log({name: value}, step=self.step)

    return ScalarWandBLogger(project_name="avalanche-tmc", run_name=run_name, dir=log_dir, save_code=False,
                             params={"id": uuid.uuid4().hex[:8]})
