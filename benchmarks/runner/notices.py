"""What the runner's commands do with warnings, installed by the command itself
(:func:`install`, from ``python -m benchmarks.run``'s entry point), never on import.

Known noise of avalanche-lib 0.6.0 is silenced: an optional QP solver it never uses here,
and the replay buffer's deprecation notice printed at every experience. Avalanche's
``@deprecated`` puts ``simplefilter("once", DeprecationWarning)`` ahead of every filter at
each call (and so resets the "once" registry): a filter never applies and its notices print
at every call. They, and any deprecation notice, are shown once per run instead
(:func:`show_once`); forked jobs hand theirs back (:mod:`benchmarks.runner.forked_jobs`)."""

import warnings
from typing import Set, Tuple

__all__ = ["NOTICES", "show_once", "install"]

NOTICES = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)
"""The warnings shown once per run."""
_SHOWN: Set[Tuple[str, str]] = set()
_show = warnings.showwarning


def show_once(message, category, filename, lineno, file=None, line=None) -> None:  # type: ignore[no-untyped-def]
    """``warnings.showwarning`` that shows a :data:`NOTICES` warning once per message."""
    if issubclass(category, NOTICES):
        key = (category.__name__, str(message))
        if key in _SHOWN:
            return
        _SHOWN.add(key)
    _show(message, category, filename, lineno, file, line)


def install() -> None:
    """The runner's warning policy for this process: the known noise silenced, notices once."""
    warnings.filterwarnings("ignore", message="no QP solver found")
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="avalanche")
    warnings.showwarning = show_once
