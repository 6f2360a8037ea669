"""A line per training epoch with images/s and an ETA: what a long run on an accelerator
needs to be watched (and to find a starved input pipeline)."""

import sys
import time
from typing import Any, Optional, TextIO

from avalanche.core import SupervisedPlugin

__all__ = ["EpochProgressPlugin", "format_seconds", "groups_progress"]


def format_seconds(seconds: float) -> str:
    """``3725`` -> ``"1h02m"``, ``125`` -> ``"2m05s"``, ``7`` -> ``"7s"``."""
    seconds = int(round(seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


def groups_progress(done: int, total: int, elapsed: float, restored: int = 0) -> str:
    """The main job's line after a (seed, method group) finishes: ``5/12 method groups done,
    2m05s elapsed, ETA 2m55s``, the remaining time estimated from the groups trained so far
    (their mean time; the costliest run first, so early estimates are on the high side).
    ``restored`` of the ``done`` were kept from an earlier run: they took no time here and
    are left out of the estimate."""
    trained = done - restored
    left = elapsed / trained * max(0, total - done) if trained > 0 else float("nan")
    eta = format_seconds(left) if trained > 0 else "unknown"
    kept = f" ({restored} kept from an earlier run)" if restored else ""
    return f"{done}/{total} method groups done{kept}, {format_seconds(elapsed)} elapsed, ETA {eta}"


class EpochProgressPlugin(SupervisedPlugin):
    """After every training epoch prints ``<label> exp E epoch k/K: N img/s, ETA ...``; the
    ETA is the group's remaining epochs (``total_epochs`` over all its experiences) at the
    mean epoch time so far."""

    def __init__(self, label: str, total_epochs: int, stream: Optional[TextIO] = None) -> None:
        super().__init__()
        self.label = label
        self.total_epochs = total_epochs
        self.stream = stream
        self.epochs_done = 0
        self.seconds = 0.0
        self._start = 0.0
        self._images = 0
        self._experience_epochs = 0

    def before_training_exp(self, strategy: Any, **kwargs: Any) -> None:
        self._experience_epochs = 0

    def before_training_epoch(self, strategy: Any, **kwargs: Any) -> None:
        self._start, self._images = time.perf_counter(), 0

    def after_training_iteration(self, strategy: Any, **kwargs: Any) -> None:
        self._images += len(strategy.mb_y)

    def after_training_epoch(self, strategy: Any, **kwargs: Any) -> None:
        elapsed = time.perf_counter() - self._start
        self.epochs_done += 1
        self._experience_epochs += 1  # not Avalanche's clock: it may count this epoch already or not yet
        self.seconds += elapsed
        left = max(0, self.total_epochs - self.epochs_done) * self.seconds / self.epochs_done
        experience = strategy.experience.current_experience if strategy.experience is not None else "-"
        print(f"  {self.label} exp {experience} epoch {self._experience_epochs}/{strategy.train_epochs}: "
              f"{self._images / max(elapsed, 1e-9):.0f} img/s, epoch {format_seconds(elapsed)}, "
              f"ETA {format_seconds(left)}", file=self.stream or sys.stdout, flush=True)
