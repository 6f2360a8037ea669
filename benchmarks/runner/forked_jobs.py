"""Independent pieces of a run (a method group for one seed, a tuning trial) done in
several processes at once.

On the offline benchmarks a training step is a few milliseconds of small kernels, which
a second thread does not speed up (an SGD step of the main job's top: 58 ms on one
thread, 60 ms on two); two single-thread processes do twice the work. Each job is a
forked process with ``threads`` threads (fork: the workers share the parent's prepared
data and network without pickling; with one thread per worker no OpenMP pool crosses the
fork, as for PyTorch's own data-loader workers). Results come back in task order, so
what a run writes does not depend on how many jobs it used; every task seeds itself, and
runs with the same intra-op thread count in this process as in a forked one
(:mod:`benchmarks.networks.threads`), so its arithmetic does not depend on the layout.

A Ctrl-C stops the run at once: the workers ignore SIGINT (a terminal sends it to every
process of the run) and this process, interrupted, terminates them instead of waiting for
the groups they train. A worker's deprecation notices come back with its result and are
shown here, once per run (:func:`benchmarks.runner.notices.show_once`), not once per worker.
"""

import multiprocessing
import pickle
import signal
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Any, Callable, List, Optional, Sequence, Tuple, TypeVar

import torch

from benchmarks.networks.threads import ARITHMETIC_THREADS, available_cores, fixed_threads
from benchmarks.runner.notices import NOTICES

__all__ = ["default_jobs", "threads_per_job", "run_tasks"]

T = TypeVar("T")
R = TypeVar("R")

_WORK: dict = {}  # the function and tasks of the pool being run (inherited by forked workers)


def default_jobs(device: str) -> int:
    """One job per core on CPU; one on an accelerator (its kernels are not this small)."""
    return available_cores() if str(device).startswith("cpu") else 1


def threads_per_job(jobs: int, threads: Optional[int] = None) -> int:
    """``threads`` if given, else one (:data:`~benchmarks.networks.threads.ARITHMETIC_THREADS`),
    whatever ``jobs``: the thread count is part of a row's arithmetic, the jobs are not."""
    return threads if threads is not None else ARITHMETIC_THREADS


def _start_worker(threads: int, deterministic: bool) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl-C is the parent's to handle: it ends the workers
    torch.set_num_threads(threads)
    if deterministic:
        torch.use_deterministic_algorithms(True)


def _do(index: int) -> Tuple[Any, List[Tuple[str, type, str, int]]]:
    """The task's result and the deprecation notices it raised (shown by the parent)."""
    notices: List[Tuple[str, type, str, int]] = []
    show = warnings.showwarning

    def keep(message, category, filename, lineno, file=None, line=None):  # type: ignore[no-untyped-def]
        if not issubclass(category, NOTICES):
            return show(message, category, filename, lineno, file, line)
        try:
            pickle.dumps(category)
        except Exception:  # noqa: BLE001  (a class that cannot travel: shown as its base kind)
            category = next(kind for kind in NOTICES if issubclass(category, kind))
        notices.append((str(message), category, filename, lineno))

    with warnings.catch_warnings():
        warnings.showwarning = keep
        result = _WORK["function"](_WORK["tasks"][index])
    return result, notices


def _stop(pool: ProcessPoolExecutor) -> None:
    """End ``pool``'s workers now (a Ctrl-C): what they were training is lost, what they
    finished is kept (progress files are written whole or not at all)."""
    processes = list((getattr(pool, "_processes", None) or {}).values())
    for process in processes:
        process.terminate()
    for process in processes:
        process.join(timeout=10)
        if process.is_alive():
            process.kill()


def run_tasks(function: Callable[[T], R], tasks: Sequence[T], jobs: int, threads: int = 1,
              deterministic: bool = False, on_done: Optional[Callable[[int], None]] = None) -> List[R]:
    """``[function(task) for task in tasks]``, over ``jobs`` forked processes of ``threads``
    threads each when ``jobs > 1`` and there is more than one task, started in order.
    A task that raises cancels the tasks not started and its error is raised here (the
    running ones finish; after a ``KeyboardInterrupt`` here they are ended at once); a
    worker that dies (killed, out of memory) raises ``RuntimeError`` naming the task,
    instead of waiting for it forever. ``on_done(n)`` is
    called in this process each time a task finishes, ``n`` the tasks finished so far.
    Every task runs with ``threads`` intra-op threads, in this process too."""
    if jobs <= 1 or len(tasks) <= 1:
        results = []
        for task in tasks:
            with fixed_threads(threads):
                results.append(function(task))
            if on_done is not None:
                on_done(len(results))
        return results
    if threads > 1:
        raise ValueError("Forked jobs run one thread each (an OpenMP pool cannot cross fork); "
                         f"got {threads} threads per job: use --threads 1 or --jobs 1.")
    _WORK.update(function=function, tasks=list(tasks))
    context = multiprocessing.get_context("fork")
    pool = ProcessPoolExecutor(min(jobs, len(tasks)), mp_context=context, initializer=_start_worker,
                               initargs=(threads, deterministic))
    interrupted = False
    try:
        futures = [pool.submit(_do, i) for i in range(len(tasks))]
        index = {future: i for i, future in enumerate(futures)}
        for done, future in enumerate(as_completed(futures), 1):
            try:
                _, notices = future.result()
            except BrokenProcessPool as error:
                i = index[future]
                raise RuntimeError(f"A worker process died while running task {i} ({tasks[i]!r}) or another one "
                                   "(killed, or out of memory?); run again with --jobs 1 to see its error, or with "
                                   "fewer jobs if memory is short.") from error
            for message, category, filename, lineno in notices:
                warnings.showwarning(message, category, filename, lineno)  # type: ignore[arg-type]
            if on_done is not None:
                on_done(done)
        return [future.result()[0] for future in futures]
    except KeyboardInterrupt:
        interrupted = True
        _stop(pool)
        raise
    finally:
        pool.shutdown(wait=not interrupted, cancel_futures=True)
        _WORK.clear()
