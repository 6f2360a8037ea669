"""The runner's ``--parallel N``: a method group's experiences trained over N processes.

:func:`make_trainer` returns the function :func:`benchmarks.runner.groups.run_group` calls in place
of ``strategy.train(data)``. For a group whose tasks train independently (TMC/TME,
TMC-FC, and the training-free heads: Stats-Ridge, RanPAC-style, NCM) and ``processes > 1``,
its first call starts ``processes`` worker processes (``torch.multiprocessing``, gloo,
rendezvous on a free local port). Each worker builds the group's strategy as the runner
does and calls :func:`avalanche_tmc.distributed.train_parallel` on the whole training
stream (each experience trained whole by one worker, seeded by
``avalanche_tmc.experience_seed(cfg.seed, experience id)`` as the runner seeds it; the
composition an all-reduce), then writes the
component files of the experiences it trained. Every call then composes the components of
the experiences it is given into the runner's strategy (``strategy.load_components``), so after each stage the strategy
holds the same state as if it had trained those experiences itself, seeded the same way,
and the runner evaluates every row after every task as usual.

Other groups (replay, regularisation, joint training, TMC-Seq, the non-linear
fine-tunes) keep training sequentially: ``make_trainer`` says so once and returns
``strategy.train``.

Threads: each worker gets ``torch.get_num_threads() // processes`` threads (at least 1).
Workers are forked when that is 1 (no OpenMP thread pool to break across ``fork``; data
loader workers do the same) and spawned otherwise.
"""

import json
import os
import shutil
import socket
import tempfile
import time
import weakref
from typing import Any, Callable, Dict, List, Optional

import torch
import torch.multiprocessing as mp

from avalanche_tmc.distributed import (
    DEFAULT_TIMEOUT,
    ParallelTrainingError,
    init_parallel,
    shutdown_parallel,
    train_parallel,
)
from avalanche_tmc.files import save_component, strategy_components
from avalanche_tmc.training.protocols import ComposableLearner
from benchmarks.methods import MethodGroup, TrainConfig, group_named
from benchmarks.methods.strategy import build_strategy

__all__ = ["parallelisable", "make_trainer", "ParallelTrainer"]

Trainer = Callable[[Any, Any], None]


def parallelisable(group: MethodGroup, strategy) -> bool:
    """Whether ``group`` (built as ``strategy``) can train its experiences in parallel:
    independent components or statistics, one experience at a time, no replay."""
    if group.joint or not isinstance(strategy, ComposableLearner):
        return False
    try:
        strategy.check_independent("train in parallel")
    except ValueError:
        return False
    return True


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _worker(rank: int, world: int, port: int, threads: int, group_name: str, bm, top, cfg: TrainConfig,
            out_dir: str, timeout: float) -> None:
    """One process: train its share of the stream, compose with the others, write its files."""
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank), MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=str(port))
    torch.set_num_threads(threads)
    init_parallel(backend="gloo", timeout=timeout)
    try:
        group = group_named(group_name)
        torch.manual_seed(cfg.seed)
        strategy = build_strategy(group, top, cfg, None)
        # experience e of seed s is seeded by avalanche_tmc.experience_seed(s, e), as the runner does
        report = train_parallel(strategy, bm.train_stream, seed=cfg.seed, timeout=timeout)
        mine = set(report.assignment[rank])
        for component in strategy_components(strategy):
            if component.experience in mine:
                save_component(component, os.path.join(out_dir, f"experience-{component.experience}.safetensors"))
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w", encoding="utf-8") as f:
            json.dump(dict(assignment=report.assignment, train_seconds=report.train_seconds,
                           wait_seconds=report.wait_seconds, communicate_seconds=report.communicate_seconds,
                           bytes_reduced=report.bytes_reduced, bytes_broadcast=report.bytes_broadcast), f)
    finally:
        shutdown_parallel()


class ParallelTrainer:
    """``trainer(strategy, data)``: compose the components of ``data`` (an experience or a
    list of them), all trained by ``processes`` workers on the first call.

    :ivar seconds: wall time of the parallel training (process start included).
    :ivar reports: each rank's :class:`~avalanche_tmc.distributed.ParallelReport` fields.
    """

    def __init__(self, group: MethodGroup, bm, top, cfg: TrainConfig, processes: int,
                 timeout: float = DEFAULT_TIMEOUT):
        if processes < 2:
            raise ValueError(f"A parallel trainer needs at least 2 processes, got {processes}.")
        self.group, self.bm, self.top, self.cfg = group, bm, top, cfg
        self.processes, self.timeout = processes, timeout
        self.directory: Optional[str] = None
        self.seconds = 0.0
        self.reports: List[Dict[str, Any]] = []

    def run(self) -> str:
        """Train every experience of the stream over the workers; returns the directory of
        the component files."""
        threads = max(1, torch.get_num_threads() // self.processes)
        directory = tempfile.mkdtemp(prefix=f"parallel-{self.group.name}-")
        start = time.time()
        try:
            mp.start_processes(_worker, nprocs=self.processes, join=True,
                               start_method="fork" if threads == 1 else "spawn",
                               args=(self.processes, _free_port(), threads, self.group.name, self.bm, self.top,
                                     self.cfg, directory, self.timeout))
        except (mp.ProcessRaisedException, mp.ProcessExitedException) as error:
            shutil.rmtree(directory, ignore_errors=True)
            lines = [line for line in str(error).strip().splitlines() if line.strip()]
            raise ParallelTrainingError(f"{self.group.name} on {self.processes} processes failed: {lines[-1]}") \
                from error
        self.seconds = time.time() - start
        weakref.finalize(self, shutil.rmtree, directory, True)
        for rank in range(self.processes):
            with open(os.path.join(directory, f"rank{rank}.json"), encoding="utf-8") as f:
                self.reports.append(json.load(f))
        self.directory = directory
        return directory

    def __call__(self, strategy, data) -> None:
        if self.directory is None:
            self.run()
        experiences = data if isinstance(data, (list, tuple)) else [data]
        strategy.load_components([os.path.join(self.directory, f"experience-{exp.current_experience}.safetensors")
                                  for exp in experiences])

    def close(self) -> None:
        """Remove the component files now (else when the trainer is garbage-collected)."""
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)


def make_trainer(strategy, group: MethodGroup, bm, top, cfg: TrainConfig, processes: int = 1,
                 timeout: float = DEFAULT_TIMEOUT, loader: Optional[Dict[str, Any]] = None) -> Trainer:
    """What :func:`benchmarks.runner.groups.run_group` calls instead of ``strategy.train(data)``:
    a :class:`ParallelTrainer` when ``processes > 1`` and the group is
    :func:`parallelisable`, else ``strategy.train`` with the DataLoader arguments
    ``loader`` (with a note when parallel was asked)."""
    loader = dict(loader or {})
    if processes <= 1:
        return lambda s, data: s.train(data, **loader)
    if not parallelisable(group, strategy):
        print(f"  {group.name}: trained sequentially (--parallel applies to groups whose experiences train "
              "independently: tmc/tme, tmc-fc, stats-ridge, ranpac, ncm)", flush=True)
        return lambda s, data: s.train(data, **loader)
    return ParallelTrainer(group, bm, top, cfg, processes, timeout)
