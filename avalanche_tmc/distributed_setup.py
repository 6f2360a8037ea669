"""The process group of :mod:`avalanche_tmc.distributed`'s parallel training: joining and
leaving it, sharing the experiences out among its ranks, and the checks that keep a failing
job from hanging, with the errors they raise.

* :func:`init_parallel` / :func:`shutdown_parallel`: join the group a launcher such as
  torchrun describes (a timeout on every collective), leave it;
* :func:`assign_experiences`: which rank trains which experiences (the same on every process);
* before anything is exchanged: with NCCL, one GPU per process, set as its current device;
  every process built the same stream, base model and settings;
* at the composition: a monitored barrier with a timeout, whose failure names the ranks that
  did not arrive (:func:`lost_ranks`) and the experiences they were training;
* :class:`ParallelTrainingError` and :class:`ParallelSetupError`, what all of this raises.

:func:`~avalanche_tmc.distributed.train_parallel` uses these; it never imports the other way.
"""

import os
import re
import socket
from datetime import timedelta
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from avalanche.distributed import DistributedHelper

__all__ = [
    "DEFAULT_TIMEOUT", "ParallelTrainingError", "ParallelSetupError", "lost_ranks",
    "init_parallel", "shutdown_parallel", "assign_experiences",
]

DEFAULT_TIMEOUT = 3600.0
"""Seconds a process waits at the composition for the others (after finishing its own share)."""


class ParallelTrainingError(RuntimeError):
    """A parallel run failed: a rank's training raised, or a rank did not reach the
    composition in time. The message names the rank(s) and experience(s); every strategy
    is as before :func:`~avalanche_tmc.distributed.train_parallel`."""


class ParallelSetupError(ParallelTrainingError):
    """The process group cannot be set up: a launcher environment that is incomplete or
    wrong (e.g. ``WORLD_SIZE`` without torchrun), or a rendezvous that fails."""


_LAUNCHER_VARIABLES = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")  # what torchrun sets for every process


def _check_timeout(timeout: float) -> float:
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < float("inf"):
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}.")
    return float(timeout)


def init_parallel(backend: Optional[str] = None, timeout: float = DEFAULT_TIMEOUT) -> Tuple[int, int]:
    """Join the process group that torchrun (or any launcher setting ``RANK``,
    ``WORLD_SIZE``, ``MASTER_ADDR``, ``MASTER_PORT``) describes; returns ``(rank, world_size)``.

    :param backend: ``"gloo"`` (CPU) or ``"nccl"`` (GPU); default NCCL when CUDA is
        available, else gloo. With NCCL the process uses GPU ``LOCAL_RANK``.
    :param timeout: seconds before a collective gives up (a rank that never arrives).

    Already in a process group: returns its rank and size. No launcher environment
    (neither ``RANK`` nor ``WORLD_SIZE``): ``(0, 1)`` and no group
    (:func:`~avalanche_tmc.distributed.train_parallel` then trains sequentially). An
    incomplete or wrong one (``WORLD_SIZE`` without torchrun), or a rendezvous that fails:
    :class:`ParallelSetupError`.
    """
    timeout = _check_timeout(timeout)
    if dist.is_available() and dist.is_initialized():
        return DistributedHelper.rank, DistributedHelper.world_size
    launcher = [name for name in ("RANK", "WORLD_SIZE") if name in os.environ]
    if not launcher:
        return 0, 1
    missing = [name for name in _LAUNCHER_VARIABLES if name not in os.environ]
    if missing:
        raise ParallelSetupError(
            f"The environment sets {launcher} but not {missing}: a torch.distributed launcher sets all of "
            f"{list(_LAUNCHER_VARIABLES)}. Run under torchrun (torchrun --nproc_per_node=N ...), or unset {launcher} "
            "to train in this process alone.")
    try:
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    except ValueError:
        raise ParallelSetupError(f"RANK={os.environ['RANK']!r} and WORLD_SIZE={os.environ['WORLD_SIZE']!r} must be "
                                 "integers.") from None
    if not 0 <= rank < world:
        raise ParallelSetupError(f"RANK={rank} is not a rank of WORLD_SIZE={world} processes.")
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    try:
        if backend == "nccl":
            torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        dist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout))
    except (RuntimeError, ValueError, OSError) as error:
        first = str(error).splitlines()[0] if str(error) else ""
        raise ParallelSetupError(
            f"rank {rank} of {world} could not join the process group at {os.environ['MASTER_ADDR']}:"
            f"{os.environ['MASTER_PORT']} ({type(error).__name__}: {first}). Launch every process with torchrun, "
            "with the same MASTER_ADDR and MASTER_PORT.") from error
    return dist.get_rank(), dist.get_world_size()


def shutdown_parallel() -> None:
    """Leave the process group (if any): call it at the end of a torchrun script."""
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def assign_experiences(sizes: Sequence[int], world_size: int) -> List[List[int]]:
    """Which experiences (indices into ``sizes``) each rank trains: the largest first, each
    to the least loaded rank (ties: the lower rank), so ranks finish close together.
    Deterministic: every process computes the same assignment."""
    if world_size < 1:
        raise ValueError(f"world_size must be at least 1, got {world_size}.")
    loads, shares = [0] * world_size, [[] for _ in range(world_size)]
    for i in sorted(range(len(sizes)), key=lambda i: (-int(sizes[i]), i)):
        rank = min(range(world_size), key=lambda r: (loads[r], r))
        shares[rank].append(i)
        loads[rank] += int(sizes[i])
    return [sorted(share) for share in shares]


# ---------------------------------------------------------------------------- checks


def _cuda_identity() -> Dict[str, Any]:
    """This process's machine and current CUDA device (its UUID where torch reports one)."""
    index = torch.cuda.current_device()
    uuid = getattr(torch.cuda.get_device_properties(index), "uuid", None)
    return dict(host=socket.gethostname(), current=index, gpu=str(uuid) if uuid is not None else f"cuda:{index}")


def _device_problems(entries: Sequence[Dict[str, Any]]) -> List[str]:
    """What keeps the processes of an NCCL job from exchanging tensors, from each rank's
    ``dict(rank, host, current, gpu, device)`` (its current CUDA device's index and
    identity, its strategy's device): a strategy on another CUDA device than the current
    one (NCCL communicates through the current device), two ranks of one machine on one
    GPU (NCCL refuses it). Empty when there is nothing wrong."""
    problems = []
    for e in entries:
        device = torch.device(e["device"])
        if device.type == "cuda" and device.index is not None and device.index != e["current"]:
            problems.append(f"rank {e['rank']} trains on {device} but its current CUDA device is cuda:{e['current']}")
    shared: Dict[Tuple[str, str], List[int]] = {}
    for e in entries:
        shared.setdefault((e["host"], e["gpu"]), []).append(e["rank"])
    problems += [f"ranks {ranks} share GPU {gpu} on {host}" for (host, gpu), ranks in shared.items() if len(ranks) > 1]
    return problems


def _check_devices(control: Optional["dist.ProcessGroup"], rank: int, world: int, device: torch.device) -> None:
    """With NCCL, every rank's current CUDA device checked (over the gloo group: nothing
    goes through NCCL before it): every rank raises the same :class:`ParallelSetupError`."""
    if dist.get_backend() != "nccl":
        return
    entries: List[Any] = [None] * world
    dist.all_gather_object(entries, dict(rank=rank, device=str(device), **_cuda_identity()), group=control)
    problems = _device_problems(entries)
    if problems:
        raise ParallelSetupError(
            f"NCCL needs one GPU per process, set as its current device: {'; '.join(problems)}. Call "
            "torch.cuda.set_device(int(os.environ['LOCAL_RANK'])) before building the strategy (init_parallel does "
            "it) and build it with device='cuda'. Nothing was trained or exchanged.")


def _describe_shares(assignment: Dict[int, List[Any]]) -> str:
    return ", ".join(f"rank {r}: experiences {ids}" for r, ids in assignment.items())


def _control_group() -> Optional["dist.ProcessGroup"]:
    """The group of the monitored barrier: it needs gloo (the default group with gloo,
    else a gloo group beside NCCL's), made while every process is present."""
    return None if dist.get_backend() == "gloo" else dist.new_group(backend="gloo")


def _wait_for_all(group: Optional["dist.ProcessGroup"], rank: int, assignment: Dict[int, List[Any]],
                  timeout: float) -> None:
    """A monitored barrier with a timeout: rank 0 names the ranks that do not arrive."""
    try:
        dist.monitored_barrier(group=group, timeout=timedelta(seconds=timeout), wait_all_ranks=True)
    except RuntimeError as error:
        text = str(error)
        missing = lost_ranks(text, rank, len(assignment))
        if missing:
            what = "; ".join(f"rank {r} (experiences {assignment.get(r, [])})" for r in missing)
            raise ParallelTrainingError(
                f"{what} did not reach the composition within {timeout:g} s after rank {rank} finished its share: "
                "it hung, was killed or crashed while training. Nothing was composed; this process's strategy is "
                "as before train_parallel().") from error
        raise ParallelTrainingError(
            f"rank {rank} lost the other processes at the composition (within {timeout:g} s): a rank hung, was "
            f"killed or crashed while training ({_describe_shares(assignment)}); rank 0's error names it. Nothing "
            f"was composed. ({type(error).__name__}: {text.splitlines()[0] if text else ''})") from error


def lost_ranks(text: str, rank: int, world: int) -> List[int]:
    """The ranks a failed monitored barrier lost, as far as ``rank`` can tell: those its
    error names (rank 0, the monitor, names the ranks that did not arrive), or in a job of
    two the other one; empty when it cannot tell."""
    found = re.search(r"Ranks? ([\d, ]+) failed to pass monitoredBarrier", text)
    if found:
        return [int(r) for r in re.findall(r"\d+", found.group(1))]
    named = sorted({int(r) for r in re.findall(r"\b[Rr]ank (\d+)", text)} - {rank})
    if named:
        return named
    return [1 - rank] if world == 2 else []


def _check_same_setup(setup: Dict[str, Any], rank: int) -> None:
    try:
        DistributedHelper.check_equal_objects(setup)
    except ValueError as error:
        raise ParallelTrainingError(
            f"rank {rank}: the processes did not build the same stream, base model and settings ({error}). Every "
            "process must build the same strategy (same pre-trained weights, head seed, linearized parameters) "
            "and the same benchmark, and pass the same seed.") from error
