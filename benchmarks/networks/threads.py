"""The one intra-op thread count a run's arithmetic is done with, and the cores a run may use.

PyTorch's CPU kernels split their work by the number of threads, and a reduction split
another way rounds another way: the frozen trunk's features of the main job differ in the
last bits between one and two threads, and SGD training turns such a difference into points
of accuracy. Whatever computes a number that a results row depends on (the cached
features, a method group's training and evaluation) runs inside :func:`fixed_threads`, so
that the row is the same whether the runner trains it in its own process, in a forked job
or after another method (docs/results.md, "Reproducibility: what repeats and what varies").
"""

import os

from avalanche_tmc.arithmetic import fixed_threads  # the library's: the runner's rule is its rule

__all__ = ["ARITHMETIC_THREADS", "available_cores", "fixed_threads"]

ARITHMETIC_THREADS = 1
"""Threads of the runner's arithmetic by default: one, the layout every row is reproducible
in; on the offline benchmarks' small kernels a second thread does not pay (processes do)."""


def available_cores() -> int:
    """CPU cores this process may use (its affinity mask; all of them off Linux)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1
