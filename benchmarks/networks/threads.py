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
from contextlib import contextmanager
from typing import Iterator

import torch

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


@contextmanager
def fixed_threads(threads: int = ARITHMETIC_THREADS) -> Iterator[None]:
    """Run the block with ``threads`` intra-op threads, then restore the process's count."""
    if threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}.")
    before = torch.get_num_threads()
    if before != threads:
        torch.set_num_threads(threads)
    try:
        yield
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)
