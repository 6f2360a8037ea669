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
