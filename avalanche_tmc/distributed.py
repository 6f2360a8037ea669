"""Train the experiences of a stream in parallel on ``torch.distributed``; compose them with
one collective.

TMC's components are independent: experience ``t``'s ``δ_t`` is trained from the
pre-trained point on ``t``'s data alone, and so are the training-free heads' statistics. So the
experiences of a stream can be shared out among the processes of a ``torch.distributed``
job, each process training its share with an ordinary strategy, and the composition is a
collective::

    S = Σ_t w_t δ_t   (all-reduced: each process adds the components it trained)
    W = Σ_t w_t       (summed, in experience order, from the weights every process reports)

after which every process holds the same composed model that a sequential
:class:`~avalanche_tmc.TMCStrategy` gives (to float rounding: the sum is added
up in another order). With ``keep_components=True`` (the default) each component is also
broadcast from the process that trained it, so that every process can ensemble (TME) and
forget as a sequential strategy can. :class:`~avalanche_tmc.TrainingFreeStrategy`
works the same way with its summed statistics. TMC-Seq is refused: each of its components
starts from the composition of the ones before (sequential by definition).

Launch with torchrun (gloo on CPU, NCCL on GPU; several machines through torchrun's usual
rendezvous)::

    torchrun --nproc_per_node=4 my_script.py

    # my_script.py
    from avalanche_tmc.distributed import init_parallel, train_parallel
    rank, world_size = init_parallel()            # the process group torchrun describes
    strategy = TMCStrategy(model=..., ...)        # built the same way on every process
    report = train_parallel(strategy, benchmark.train_stream, seed=0)
    # every process: strategy.composed_delta is the composition of all experiences

Without torchrun (no ``RANK``/``WORLD_SIZE`` in the environment) the same calls train the
experiences one after the other in this process.

Devices: every tensor sent through a collective lives on the communication device (with
NCCL the process's current CUDA device, which :func:`init_parallel` sets from
``LOCAL_RANK``; with gloo the CPU), and what comes back lives on the strategy's ``device``.
With NCCL each process needs a GPU of its own, set as its current device: a process whose
strategy trains on another CUDA device than its current one, or two processes of one
machine on the same GPU, are refused (:class:`ParallelSetupError`) before anything is
exchanged over NCCL.

Seeds: for the parallel run to equal a sequential one, each component must be a function
of its own data and seed. ``seed=s`` calls ``torch.manual_seed(experience_seed(s, id))``
(``1000·s + id``, :mod:`avalanche_tmc.training.seeding`) before each experience, in the
parallel and the sequential case alike (``train_parallel`` on one process *is* that
sequential reference).

Failures never hang the job. A process whose training raises still joins the composition
and reports the error; every process then raises :class:`ParallelTrainingError` naming the
rank and the experience, and every strategy is left as before the call (all or nothing).
A process that hangs, is killed or crashes is caught by a monitored barrier with a timeout
(``timeout`` seconds, counted from when a process finishes its own share): the message
names the ranks that did not arrive and the experiences they were training.

What Avalanche offers and what is used. ``avalanche.distributed.DistributedHelper`` is
used for the rank, the world size, the broadcast of components and the gathering of the
processes' reports (its ``broadcast``/``gather_all`` move tensors to the GPU for NCCL and
gather tensors of different sizes), and its ``check_equal_objects`` checks that every
process built the same stream, base model and settings. Not used:
``DistributedHelper.init_distributed`` (it sets no timeout on collectives, which a failing
run needs, and it requires ``LOCAL_RANK``) and ``wrap_model`` with Avalanche's
``DistributedSampler`` loaders: those make *data-parallel* training of one model (one
experience sharded over the processes, gradients all-reduced at every step), which is not
TMC's parallelism (whole experiences per process, one exchange at the end). The tangent
and training-free strategies therefore never shard an experience's data over the processes
(:class:`~avalanche_tmc.training.loaders.UnshardedLoaders`).

The process group (joining and leaving it, sharing the experiences out, the checks that
keep a failing job from hanging, and the errors) is :mod:`avalanche_tmc.distributed_setup`;
its public names are importable from here too. This module is the training and the exchange.
"""

import json
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Dict, Hashable, Iterable, List, Mapping, Optional, Sequence, Tuple

import torch
import torch.distributed as dist
from avalanche.distributed import DistributedHelper
from torch import Tensor

from .composition.additive import AdditiveComposition
from .distributed_setup import (
    DEFAULT_TIMEOUT,
    ParallelSetupError,
    ParallelTrainingError,
    _check_devices,
    _check_same_setup,
    _check_timeout,
    _control_group,
    _wait_for_all,
    assign_experiences,
    init_parallel,
    lost_ranks,
    shutdown_parallel,
)
from .training.exact_forgetting import dependent_plugin_names
from .training.protocols import ComposableLearner, learner_device
from .training.rollback import check_new_experience_ids
from .training.seeding import seed_experience

# the process group's names (distributed_setup.py) stay importable from here, the module users import
__all__ = [
    "DEFAULT_TIMEOUT", "ParallelTrainingError", "ParallelSetupError", "ParallelReport", "lost_ranks",
    "init_parallel", "shutdown_parallel", "assign_experiences", "train_parallel",
]

_Layout = List[Tuple[str, List[int], str]]  # (name, shape, dtype) of each summed tensor, in order


@dataclass
class ParallelReport:
    """What :func:`train_parallel` did on this process."""

    rank: int
    world_size: int
    assignment: Dict[int, List[Any]]  # rank -> experience ids it trained
    train_seconds: float = 0.0  # this process's own experiences
    wait_seconds: float = 0.0  # at the composition, for the slowest process
    communicate_seconds: float = 0.0  # the all-reduce and the broadcasts
    bytes_reduced: int = 0  # size of the all-reduced sum (what each process sends and receives)
    bytes_broadcast: int = 0  # the components broadcast to every process (0 without keep_components)
    experiences: List[Any] = field(default_factory=list)  # every experience id composed, in order


# ---------------------------------------------------------------------------- learners


def _layout(tensors: Mapping[str, Tensor]) -> _Layout:
    return [(name, list(t.shape), str(t.dtype).replace("torch.", "")) for name, t in tensors.items()]


class _Learner:
    """What :func:`train_parallel` does with a strategy, through the
    :class:`~avalanche_tmc.training.protocols.ComposableLearner` protocol only: its composition set
    aside during the local training (the process's own sum), then the members of every
    process merged into it."""

    def __init__(self, strategy: ComposableLearner):
        if not isinstance(strategy, ComposableLearner):
            raise TypeError(
                f"train_parallel trains TMCStrategy, TMEStrategy or TrainingFreeStrategy (independent components or "
                f"statistics: a ComposableLearner), got {type(strategy).__name__}.")
        strategy.check_independent("train in parallel")
        self.strategy = strategy
        self.payload = strategy.payload
        self.saved: Optional[AdditiveComposition] = None

    def local(self) -> AdditiveComposition:
        """The composition (learned so far; during the local training: this process's)."""
        return self.strategy.learned()

    def device(self) -> torch.device:
        """Where what comes back from the other processes goes: the strategy's device."""
        return learner_device(self.strategy)

    def set_aside(self) -> None:
        self.saved = self.strategy.replace_learned(self.local().empty_like())

    def put_back(self) -> None:
        if self.saved is not None:
            self.strategy.replace_learned(self.saved)
            self.saved = None

    def layout(self) -> Optional[_Layout]:
        """(name, shape, dtype) of the summed tensors, or None when nothing was learned here."""
        return _layout(self.local().summed()) if len(self.local()) else None

    def local_sum(self) -> Optional["OrderedDict[str, Tensor]"]:
        return self.local().summed() if len(self.local()) else None

    def install(self, weights: Mapping[Hashable, float], total: Optional[Mapping[str, Tensor]],
                components: Optional[Mapping[Hashable, Mapping[str, Tensor]]],
                checksums: Optional[Mapping[Hashable, str]], experiences: Sequence[Any]) -> None:
        """Merge every process's members into the composition set aside and put it back."""
        from .training.plugins.task_mask import experience_task_classes

        composition = self.saved
        if total is not None:
            composition.merge(weights, total, components, checksums)
        self.put_back()
        self.strategy.installed({exp.current_experience: {t: sorted(c) for t, c in experience_task_classes(exp).items()}
                                 for exp in experiences})


# ---------------------------------------------------------------------------- collectives


def _flatten(tensors: Mapping[str, Tensor], layout: _Layout, dtype: torch.dtype) -> Tensor:
    return torch.cat([tensors[name].detach().reshape(-1).to(dtype) for name, _, _ in layout])


def _unflatten(flat: Tensor, layout: _Layout, device: torch.device) -> "OrderedDict[str, Tensor]":
    out, offset = OrderedDict(), 0
    for name, shape, dtype in layout:
        numel = 1
        for s in shape:
            numel *= s
        out[name] = flat[offset:offset + numel].reshape(shape).to(device=device, dtype=getattr(torch, dtype)).clone()
        offset += numel
    return out


def _comm_device() -> torch.device:
    """Where the tensors of a collective live: the current CUDA device with NCCL (it takes
    CUDA tensors only), the CPU otherwise."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _gather_json(obj: Dict[str, Any]) -> List[Dict[str, Any]]:
    payload = torch.tensor(list(json.dumps(obj, default=str).encode()), dtype=torch.uint8, device=_comm_device())
    gathered = DistributedHelper.gather_all(payload)
    return [json.loads(bytes(t.to("cpu").tolist()).decode()) for t in gathered]


# ---------------------------------------------------------------------------- train_parallel


def train_parallel(strategy: ComposableLearner, experiences: Iterable[Any], *, seed: Optional[int] = None,
                   timeout: float = DEFAULT_TIMEOUT, **train_kwargs: Any) -> ParallelReport:
    """Train ``experiences`` across the processes of the current ``torch.distributed`` job
    and compose them on every process (see the module docstring).

    Call it on every process, with a strategy and a stream built the same way everywhere.

    :param strategy: a :class:`~avalanche_tmc.TMCStrategy`,
        :class:`~avalanche_tmc.TMEStrategy` or
        :class:`~avalanche_tmc.TrainingFreeStrategy` (TMC-Seq is refused, and so
        are replay plugins: their components are not independent).
    :param experiences: the training experiences (a stream or a list); each is trained
        whole by one process (:func:`assign_experiences`).
    :param seed: the run seed: each experience's training is seeded by
        :func:`~avalanche_tmc.experience_seed` (``1000·seed + experience id``), so a
        component depends on its own data and seed only (``None``: no seeding).
    :param timeout: seconds a process waits at the composition for the others.
    :param train_kwargs: passed to ``strategy.train`` (e.g. ``num_workers``).
    :returns: a :class:`ParallelReport`. Without a process group (or with one process)
        the experiences are trained here, one after the other, with the same seeding.
    :raises ParallelTrainingError: a rank failed or did not arrive (with one process, the
        training's own exception is raised). The strategy is then as before the call.
    """
    timeout = _check_timeout(timeout)
    experiences = list(experiences)
    learner = _Learner(strategy)
    dependent = dependent_plugin_names(strategy)
    if dependent:
        raise ValueError(f"train_parallel refuses replay and distillation plugins ({dependent}): a component trained "
                         "with them holds earlier experiences' samples or outputs, so experiences are no longer "
                         "independent.")
    check_new_experience_ids(experiences, learner.local())
    distributed = dist.is_available() and dist.is_initialized()
    rank, world = (DistributedHelper.rank, DistributedHelper.world_size) if distributed else (0, 1)
    ids = [exp.current_experience for exp in experiences]
    shares = assign_experiences([len(exp.dataset) for exp in experiences], world)
    assignment = {r: [ids[i] for i in share] for r, share in enumerate(shares)}
    report = ParallelReport(rank=rank, world_size=world, assignment=assignment, experiences=ids)
    control = None
    if world > 1:
        control = _control_group()
        _check_devices(control, rank, world, learner.device())
        _check_same_setup(dict(experiences=ids, sizes=[len(exp.dataset) for exp in experiences], seed=seed,
                               payload=learner.payload, settings=strategy.learned_settings()), rank)
    before = strategy.snapshot_state()
    learner.set_aside()
    try:
        failure = failed_with = None
        start = time.perf_counter()
        for i in shares[rank]:
            try:
                if seed is not None:
                    seed_experience(seed, ids[i])
                strategy.train(experiences[i], **train_kwargs)
            except Exception as error:  # reported to every rank below
                if world == 1:
                    raise
                failure = dict(experience=ids[i], error=f"{type(error).__name__}: {error}"[:2000])
                failed_with = error
                break
        report.train_seconds = time.perf_counter() - start
        merged = _compose(learner, ids, shares, control, assignment, (failure, failed_with), report, timeout)
        learner.install(*merged, experiences=experiences)
    except BaseException:
        learner.put_back()
        strategy.restore_state(before)
        raise
    return report


_Merged = Tuple[Dict[Hashable, float], Optional["OrderedDict[str, Tensor]"],
                Optional[Dict[Hashable, "OrderedDict[str, Tensor]"]], Optional[Dict[Hashable, str]]]


def _compose(learner: _Learner, ids: List[Any], shares: List[List[int]], control: Optional["dist.ProcessGroup"],
             assignment: Dict[int, List[Any]], failure: Tuple[Optional[Dict[str, Any]], Optional[BaseException]],
             report: ParallelReport, timeout: float) -> _Merged:
    """Exchange the ranks' reports, then all-reduce the sum and broadcast the components:
    ``(weights, total, components, checksums)`` of every experience, ``total`` None when
    nothing was trained anywhere (an empty stream)."""
    rank, world = report.rank, report.world_size
    failure, local_error = failure
    local = learner.local()
    status = dict(rank=rank, failure=failure, weights=[[k, w] for k, w in local.weights.items()],
                  checksums=[[k, c] for k, c in local.checksums.items()], layout=learner.layout())
    start = time.perf_counter()
    if world > 1:
        _wait_for_all(control, rank, assignment, timeout)
        statuses = _gather_json(status)
    else:
        statuses = [status]
    report.wait_seconds = time.perf_counter() - start
    failed = [s for s in statuses if s["failure"]]
    if failed:
        raise ParallelTrainingError("; ".join(
            f"rank {s['rank']} failed on experience {s['failure']['experience']} ({s['failure']['error']})"
            for s in failed) + ". Nothing was composed: every process's strategy is as before train_parallel().") \
            from local_error
    layouts = [s["layout"] for s in statuses if s["layout"] is not None]
    if not layouts:
        return {}, None, None, None  # nothing was trained anywhere (an empty stream)
    layout = [tuple(entry) for entry in layouts[0]]
    for s in statuses:
        if s["layout"] is not None and [tuple(e) for e in s["layout"]] != layout:
            raise ParallelTrainingError(
                f"rank {s['rank']}'s components have other names, shapes or types than rank "
                f"{statuses[0]['rank']}'s: the processes did not build the same model.")
    weights, checksums = {}, {}
    for s in statuses:
        weights.update((key, w) for key, w in s["weights"])
        checksums.update((key, c) for key, c in s["checksums"])
    order = list(ids)
    weights = OrderedDict((key, weights[key]) for key in order)
    dtypes = {dtype for _, _, dtype in layout}
    dtype = getattr(torch, dtypes.pop()) if len(dtypes) == 1 else torch.float64
    local_sum = learner.local_sum()
    device = learner.device()  # where the results go
    comm = _comm_device() if world > 1 else device  # where the collectives' tensors live
    numel = sum(int(torch.Size(shape).numel()) for _, shape, _ in layout)
    flat = _flatten(local_sum, layout, dtype).to(comm) if local_sum is not None else torch.zeros(
        numel, dtype=dtype, device=comm)
    start = time.perf_counter()
    if world > 1:
        dist.all_reduce(flat)
    total = _unflatten(flat, layout, device)
    report.bytes_reduced = flat.numel() * flat.element_size()
    components = None
    if local.keep_components:
        components = {}
        owner = {ids[i]: r for r, share in enumerate(shares) for i in share}
        for key in order:
            if owner[key] == rank:
                tensor = _flatten(local.components[key], layout, dtype).to(comm)
            else:
                tensor = torch.empty(numel, dtype=dtype, device=comm)
            if world > 1:
                tensor = DistributedHelper.broadcast(tensor, src=owner[key])
                report.bytes_broadcast += tensor.numel() * tensor.element_size()
            components[key] = _unflatten(tensor, layout, device)
    report.communicate_seconds = time.perf_counter() - start
    return weights, total, components, checksums
