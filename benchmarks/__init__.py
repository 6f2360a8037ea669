"""Benchmark runner for avalanche-tmc. At the root only the commands users type:
``python -m benchmarks.run`` (:mod:`benchmarks.run`) and ``python -m benchmarks.report``
(:mod:`benchmarks.report`); the sub-packages say what they hold (docs/layout.md):
``datasets``, ``networks``, ``protocol``, ``methods``, ``runner``, ``tuning``, ``results`` and
``tools`` (which use the runner and are never used by it)."""

import sys
import warnings

import avalanche_tmc_torchvision_fallback  # noqa: F401  (first: lets torchvision import on a CPU-only torch)


def _help_of_the_runner() -> None:
    """``python -m benchmarks.run --help`` prints the runner's help and exits here, before
    ``benchmarks/run.py`` imports torch and Avalanche (seconds): its parser needs neither."""
    argv = list(getattr(sys, "orig_argv", []))
    if "-m" not in argv:
        return
    at = argv.index("-m")
    if argv[at + 1:at + 2] == ["benchmarks.run"] and {"-h", "--help"} & set(argv[at + 2:]):
        from benchmarks.runner.arguments import build_parser

        build_parser().parse_args(argv[at + 2:])


_help_of_the_runner()

# Known noise of avalanche-lib 0.6.0: an optional QP solver it never uses here, and the
# replay buffer's own deprecation notice printed at every experience.
warnings.filterwarnings("ignore", message="no QP solver found")
warnings.filterwarnings("ignore", category=DeprecationWarning, module="avalanche")

# Avalanche's @deprecated puts simplefilter("once", DeprecationWarning) ahead of every filter
# at each call (and so resets the "once" registry): the filter above never applies and its
# notices print at every call. They, and any deprecation notice, are shown once per run
# instead; forked jobs hand theirs back (benchmarks.runner.forked_jobs).
NOTICES = (DeprecationWarning, PendingDeprecationWarning, FutureWarning)
_SHOWN: set = set()
_show = warnings.showwarning


def show_once(message, category, filename, lineno, file=None, line=None) -> None:  # type: ignore[no-untyped-def]
    """``warnings.showwarning`` that shows a :data:`NOTICES` warning once per message."""
    if issubclass(category, NOTICES):
        key = (category.__name__, str(message))
        if key in _SHOWN:
            return
        _SHOWN.add(key)
    _show(message, category, filename, lineno, file, line)


warnings.showwarning = show_once
