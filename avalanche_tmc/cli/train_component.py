"""``avalanche-tmc train-component``: train experiences of the data, one component file each
(under torchrun, the experiences shared among the processes)."""

import argparse
import os
from dataclasses import dataclass
from typing import List, Optional, Sequence, Union

from .argtypes import (
    BATCH_SIZE,
    BETA,
    EPOCHS,
    LEARNING_RATE,
    MAX_BATCH_SIZE,
    MAX_EPOCHS,
    MAX_EXPERIENCE_ID,
    MAX_PROJECTION_DIM,
    MAX_SEED,
    PROJECTION_DIM,
    SEED,
    TIMEOUT,
    check_device,
    experience_id,
    module_name,
)
from .arguments import (
    add_command,
    factories_of,
    factory_arguments,
    log_settings_of,
    logging_arguments,
    output_arguments,
)
from .exits import EXIT_OK, UsageError
from .loading import Factories
from .logs import LogSettings, evaluator, gather_written, speaks
from .outputs import check_output, check_writable, read_key, shown
from .strategies import Runtime, TangentTraining, methods, strategy_for_method

__all__ = ["NAME", "TrainJob", "register", "run", "train_component"]

NAME = "train-component"
POSITION = 10  # where --help lists it
"""The command's name."""


def register(commands: "argparse._SubParsersAction") -> argparse.ArgumentParser:
    """Add ``train-component`` and its arguments."""
    train = add_command(
        commands, NAME, "train experiences of the data and write one component file each",
        "Train each named experience of the data's training stream on its own, from the pre-trained "
        "network, and write it to DIR/experience-<id>.safetensors (DIR: --out). Run it under 'torchrun "
        "--nproc_per_node=N' to share the experiences among N processes (gloo on CPU, NCCL on GPU); "
        "each process writes the files of the experiences it trained.")
    train.add_argument("--experience", nargs="+", required=True, metavar="ID", type=experience_id,
                       help=f"experience ids (indices of the training stream, 0 to {MAX_EXPERIENCE_ID}) this silo "
                            "trains, or 'all'")
    train.add_argument("--method", choices=methods(), default="tmc",
                       help="tmc: tangent component of every parameter; tmc-fc: of the head only; stats-ridge, "
                            "ranpac, ncm: a training-free head's statistics")
    train.add_argument("--start-at", metavar="MODULE", type=module_name, default=None,
                       help="tmc: linearize the parameters of this module of the model and all after it (e.g. "
                            "layer1 on a ResNet, blocks.6 on EfficientNet-Lite0); those before stay as pre-trained, "
                            "frozen and plain (the library's start_at). A wrong name lists the valid ones")
    train.add_argument("--lr", type=LEARNING_RATE, default=1e-2,
                       help="Adam learning rate (tangent methods). The default, 1e-2, suits the default --model "
                            "(a small digits CNN with a new head: 0.31 accuracy against 0.02 at 1e-4); the "
                            "library's default (avalanche_tmc.DEFAULT_LR) is the paper's 1e-4, which does no harm "
                            "to a trained network of your own, where 1e-2 can wreck it (a LossIncreaseWarning "
                            "then says so). Choose it on a validation split")
    train.add_argument("--epochs", type=EPOCHS, default=5,
                       help="epochs per experience, the strategies' train_epochs (tangent methods; the default 5 "
                            "suits the default --model; in Python train_epochs keeps Avalanche's default, 1; at most "
                            f"{MAX_EPOCHS})")
    train.add_argument("--batch-size", type=BATCH_SIZE, default=32,
                       help=f"training batch size (tangent methods; at most {MAX_BATCH_SIZE})")
    train.add_argument("--beta", type=BETA, default=25.0,
                       help="RSL target: 25 class/task-incremental, 5 data")
    train.add_argument("--weighting", choices=("mean", "samples"), default="mean",
                       help="component weight: 1 each, or the experience's sample count")
    train.add_argument("--projection-dim", type=PROJECTION_DIM, default=2000,
                       help=f"random features of --method ranpac (at most {MAX_PROJECTION_DIM}: its statistics are a "
                            "D x D matrix)")
    train.add_argument("--seed", type=SEED, default=0,
                       help="experience e trains with torch.manual_seed(1000 * seed + e) "
                            "(avalanche_tmc.experience_seed): the same file wherever it runs; 0 to "
                            f"{MAX_SEED}")
    train.add_argument("--timeout", type=TIMEOUT, default=3600.0,
                       help="under torchrun: seconds a process waits for the others before failing (at most a week)")
    output_arguments(train, "DIR", "directory for the component files", "existing component files")
    factory_arguments(train)
    logging_arguments(train, ranks=True)
    return train


@dataclass(frozen=True)
class TrainJob:
    """What ``train-component`` does: the experiences (ids or ``["all"]``), the output
    directory, the method and its settings."""

    experiences: Sequence[Union[int, str]]
    out: str
    method: str = "tmc"
    training: TangentTraining = TangentTraining()
    projection_dim: int = 2000
    seed: int = 0
    timeout: float = 3600.0
    overwrite: bool = False
    quiet: bool = False
    key_file: Optional[str] = None
    device: str = "cpu"
    eval_batch_size: int = 256
    start_at: Optional[str] = None


def run(args: argparse.Namespace) -> int:
    """``train-component`` from its parsed arguments."""
    job = TrainJob(list(args.experience), args.out, args.method,
                   TangentTraining(args.lr, args.beta, args.weighting, args.batch_size, args.epochs),
                   args.projection_dim, args.seed, args.timeout, args.overwrite, args.quiet, args.key_file,
                   args.device, args.eval_batch_size, args.start_at)
    return train_component(job, factories_of(args), log_settings_of(args, NAME, args.all_ranks))


def _check_job(job: TrainJob) -> None:
    if os.path.exists(job.out) and not os.path.isdir(job.out):
        raise UsageError(f"--out {job.out} is a file; train-component writes experience-<id>.safetensors files into "
                         "a directory.")
    wanted = list(job.experiences)
    if "all" in wanted and len(wanted) > 1:
        raise UsageError("--experience takes 'all' or experience ids, not both.")
    twice = sorted({e for e in wanted if wanted.count(e) > 1})
    if twice:
        raise UsageError(f"--experience names {twice} more than once.")
    if job.start_at is not None and job.method != "tmc":
        raise UsageError(f"--start-at applies to --method tmc (where linearization starts), not to {job.method}: "
                         "drop it.")
    check_writable(job.out, "--out")
    check_device(job.device)


def train_component(job: TrainJob, factories: Factories, logging: LogSettings) -> int:
    """Train the named experiences and write one component file per experience.

    Every argument is checked before anything slow: the options and the device first (torch
    only, before Avalanche's import of several seconds), then the experience ids and outputs
    against the data factory's benchmark, and only then is the model factory called (the
    default one pre-trains a network)."""
    _check_job(job)
    key = read_key(job.key_file)
    from ..distributed import init_parallel, shutdown_parallel, train_parallel  # Avalanche: seconds
    from ..files import save_component, strategy_components
    from ..training.plugins.progress import ProgressPlugin

    rank, world = init_parallel(timeout=job.timeout)
    try:
        stream = list(factories.benchmark().train_stream)
        known = [exp.current_experience for exp in stream]
        wanted = known if list(job.experiences) == ["all"] else list(job.experiences)
        unknown = [e for e in wanted if e not in known]
        if unknown:
            raise UsageError(f"Experience(s) {unknown} are not in the data's training stream (ids {known}).")
        paths = {e: os.path.join(job.out, f"experience-{e}.safetensors") for e in wanted}
        for path in paths.values():
            check_output(path, job.overwrite, new_folder=True)
        progress = ProgressPlugin(not job.quiet and speaks(logging, rank), position=rank if logging.all_ranks else 0)
        runtime = Runtime(job.device, job.eval_batch_size, [progress], evaluator(logging, rank, world))
        strategy = strategy_for_method(factories.network(), job.method, runtime, job.training, job.projection_dim,
                                       job.seed, job.start_at)
        experiences = [stream[known.index(e)] for e in wanted]
        report = train_parallel(strategy, experiences, seed=job.seed, timeout=job.timeout)
        mine = set(report.assignment[rank])
        written: List[str] = []
        failure: Optional[Exception] = None
        try:
            for component in strategy_components(strategy):
                if component.experience in mine:
                    component.settings.update(method=job.method, seed=job.seed)
                    written.append(save_component(component, paths[component.experience], overwrite=job.overwrite,
                                                  key=key))
        except Exception as error:  # noqa: BLE001  (raised below, after the other processes heard of it)
            failure = error
        everyone = gather_written(written if failure is None else None, world)  # no process waits for ever
        if failure is not None:
            raise failure
        # rank 0 lists every process's files; with --all-ranks each process lists its own
        listed = list(enumerate(everyone)) if rank == 0 and not logging.all_ranks else [(rank, written)]
        for r, files in listed if speaks(logging, rank) else []:
            for path in files or []:
                print(f"wrote {shown(path)}" + (f" (rank {r})" if world > 1 else ""))  # control characters escaped
        if rank == 0 and world > 1:
            print(f"{len(wanted)} experiences on {world} processes: " + "; ".join(
                f"rank {r}: {ids}" for r, ids in report.assignment.items()))
    finally:
        shutdown_parallel()
    return EXIT_OK
