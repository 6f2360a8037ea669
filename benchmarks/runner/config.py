"""The runner's configuration, typed: one :class:`RunConfig` per run and one :class:`Options`
for the whole invocation, built once from the preset and the command line by
:func:`benchmarks.runner.arguments.resolve`; nothing below ``main`` reads argparse state.

:func:`train_config` is the one place a :class:`~benchmarks.methods.TrainConfig` (what a
strategy trains with) is made from them.
"""

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, Mapping, Optional, Sequence, Tuple

from benchmarks.methods import TrainConfig
from benchmarks.networks.threads import ARITHMETIC_THREADS
from benchmarks.protocol.choices import DEFAULT_PROJECTION_DIM, MAX_PROJECTION_DIM, RECIPE_CHOICES

__all__ = ["DEFAULT_PROJECTION_DIM", "MAX_PROJECTION_DIM", "RECIPE_CHOICES", "RunConfig", "Options", "train_config",
           "progress_key", "loader_options"]



@dataclass(frozen=True)
class RunConfig:
    """One run: a dataset and scenario, the network and how much of it is trained, the
    methods, their training settings and the seeds they are repeated over.

    ``seeds`` vary the training randomness only (minibatch order, new-head
    initialisation, random projections); the class order and the data split come from
    :attr:`Options.data_seed`. ``tuned`` maps a tuning unit
    (:func:`benchmarks.methods.tuning_unit`) to its chosen ``(learning rate, epochs)``;
    ``tuned_by`` says where those values were chosen. ``tune``: when not None, choose
    them now on a validation split (:mod:`benchmarks.tuning.grid`; the dict overrides the
    default grid).
    """

    dataset: str
    scenario: str
    tasks: int
    backbone: str
    image_size: int
    freeze_until: str
    epochs: int
    batch_size: int
    lr_tangent: float
    lr: float
    beta: float
    methods: Tuple[str, ...]
    milestones: Tuple[int, ...] = ()
    decay_at: Tuple[float, ...] = ()
    data_options: Mapping[str, Any] = field(default_factory=dict)
    tune: Optional[Mapping[str, Any]] = None
    tangent_epochs: Optional[int] = None
    tuned: Mapping[str, Tuple[float, int]] = field(default_factory=dict)
    tuned_by: Optional[str] = None
    seeds: Tuple[int, ...] = (0,)
    # The training recipe (defaults: the offline main job's; ``AUTHORS`` in
    # benchmarks/runner/presets.py: the paper authors' code). See docs/paper-benchmarks.md.
    linearize_from: Optional[str] = None  # tangent methods: first linearized module (None: all)
    decay: float = 0.0  # decay on δ (tangent methods), avalanche_tmc's ``decay``
    decay_kind: str = "norm"  # "norm" (the authors'), "squared" or "decoupled"
    tme_beta: Optional[float] = None  # the β of TME's own components (None: the scenario's)
    schedule: str = "step"  # "step": lr x0.1 from each milestone epoch on; "authors": after it
    transforms: str = "square"  # image datasets: "square" (resize) or "authors" (crop + flip)
    class_order: str = "seeded"  # "seeded" (by the data seed) or "label" (the authors')
    shards: str = "permutation"  # data-IL: "permutation" (by the data seed) or "authors"
    imagenet_weights: str = "DEFAULT"  # torchvision weights of the backbone: DEFAULT or IMAGENET1K_V1
    # RanPAC-style heads (ranpac, ranpac-layer, adapt, ...): random ReLU features M; their
    # statistics are M×M (8·M² bytes in float64), so it is bounded by MAX_PROJECTION_DIM
    projection_dim: int = DEFAULT_PROJECTION_DIM
    # class-IL runs: every method also evaluated task-incrementally (the same training under
    # the task mask, benchmarks/protocol/task_il.py): the task-IL rows without a second training
    task_il: bool = False
    # the class order (class/task-IL) and shards (data-IL) drawn per seed, with data seed
    # ``--data-seed + seed``, so that the seeds' spread includes them (False: one for every seed)
    order_by_seed: bool = False

    def __post_init__(self):
        if not self.seeds or len(set(self.seeds)) != len(self.seeds):
            raise ValueError(f"A run needs distinct seeds, got {self.seeds}.")
        if not self.methods:
            raise ValueError("A run needs at least one method.")
        for name, allowed in RECIPE_CHOICES.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {getattr(self, name)!r}.")
        if not 0 <= self.decay < float("inf"):
            raise ValueError(f"decay must be a finite number >= 0, got {self.decay!r}.")
        if self.task_il and self.scenario != "class":
            raise ValueError(f"task_il evaluates a class-IL run's training under the task mask; this run is "
                             f"{self.scenario}-incremental (use --scenario class, or drop --task-il).")
        if not 1 <= self.projection_dim <= MAX_PROJECTION_DIM:
            raise ValueError(f"projection_dim must be in [1, {MAX_PROJECTION_DIM}] (its statistics take "
                             f"8·M² bytes), got {self.projection_dim!r}.")
        if self.tme_beta is not None and not 0 < self.tme_beta <= 1000:
            raise ValueError(f"tme_beta must be in (0, 1000], got {self.tme_beta!r}.")
        if self.tune is not None:  # while the preset is read, not once the data is prepared
            from benchmarks.tuning.grid import TuningGrid

            try:
                TuningGrid.from_dict(self.tune)
            except (TypeError, ValueError) as error:
                raise ValueError(f"tune: {error}") from None

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "RunConfig":
        """A run from a preset's dict (``methods`` as a comma-separated string or a list)."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"Unknown run settings {unknown}; known: {', '.join(sorted(known))}.")
        values = dict(values)
        methods = values.get("methods", ())
        if isinstance(methods, str):
            methods = [m.strip() for m in methods.split(",") if m.strip()]
        values["methods"] = tuple(methods)
        for key in ("milestones", "decay_at", "seeds"):
            if key in values:
                values[key] = tuple(values[key])
        if "tuned" in values:
            values["tuned"] = {unit: (float(lr), int(epochs)) for unit, (lr, epochs) in values["tuned"].items()}
        return cls(**values)

    def replace(self, **changes: Any) -> "RunConfig":
        """A copy with ``changes``."""
        return dataclasses.replace(self, **changes)

    @property
    def label(self) -> str:
        """``"<scenario>-<dataset>-<tasks>-<freeze_until>"``: the run's log folder name."""
        return f"{self.scenario}-{self.dataset}-{self.tasks}-{self.freeze_until}"


@dataclass(frozen=True)
class Options:
    """What applies to every run of one invocation of the runner."""

    data_root: Optional[str] = None  # folder holding a folder dataset (Caltech-256, ...)
    weights: Optional[str] = None  # local state-dict file of the backbone's ImageNet weights
    data_seed: int = 0  # class order (class/task-IL) and random shards (data-IL)
    device: str = "cpu"
    out: Optional[str] = None
    verbose: bool = False
    loggers: Tuple[str, ...] = ("csv",)  # avalanche_tmc.loggers.LOGGERS
    bn_data: str = "none"
    parallel: int = 1  # gloo processes per method group (benchmarks.runner.gloo_training)
    jobs: int = 1  # (seed, method group) pairs trained at once, each in its own process
    threads: Optional[int] = None  # intra-op threads of every piece (None: one, benchmarks.networks.threads)
    restart: bool = False
    deterministic: bool = False
    workers: int = 0  # DataLoader worker processes for image datasets (0: the main process)
    amp: Optional[str] = None  # "bf16" or "fp16": forwards under torch.autocast (AutocastPlugin)
    amp_init_scale: Optional[float] = None  # fp16: the GradScaler's first scale (None: AutocastPlugin's)
    progress: Optional[bool] = None  # a line per epoch with images/s and an ETA (None: for image runs)
    decoded_cache: bool = False  # image folders: decode and resize each file once (datasets.loading.decode_once)
    plot_formats: Tuple[str, ...] = ("png",)  # the report's plots (benchmarks.protocol.choices.PLOT_FORMATS)


def train_config(run: RunConfig, options: Options, *, num_classes: int, seed: int,
                 bn_batches: Optional[Sequence[Any]] = None) -> TrainConfig:
    """What every method of ``run`` trains with for ``seed``."""
    return TrainConfig(num_classes=num_classes, epochs=run.epochs, batch_size=run.batch_size,
                       lr_tangent=run.lr_tangent, lr=run.lr, beta=run.beta, milestones=run.milestones,
                       decay_at=run.decay_at, device=options.device, seed=seed, tangent_epochs=run.tangent_epochs,
                       tuned=dict(run.tuned), bn_batches=bn_batches, linearize_from=run.linearize_from,
                       decay=run.decay, decay_kind=run.decay_kind, tme_beta=run.tme_beta, schedule=run.schedule,
                       amp=options.amp, amp_init_scale=options.amp_init_scale, projection_dim=run.projection_dim)


def loader_options(options: Options) -> Dict[str, Any]:
    """The DataLoader arguments Avalanche's ``train``/``eval`` take, for ``options.workers``
    (none for 0: Avalanche's defaults)."""
    from benchmarks.datasets.loading import dataloader_kwargs

    return dataloader_kwargs(num_workers=options.workers, device=options.device) if options.workers > 0 else {}


def progress_key(run: RunConfig, options: Options, seed: int) -> Dict[str, Any]:
    """Everything that decides a (run, seed)'s results, for the names of its progress files
    (a re-run with other settings never picks up a stale result)."""
    key = {k: v for k, v in dataclasses.asdict(run).items() if k != "seeds"}
    if key["projection_dim"] == DEFAULT_PROJECTION_DIM:
        del key["projection_dim"]  # so the folders and progress files of earlier versions still match
    if not key["order_by_seed"]:
        del key["order_by_seed"]  # likewise
    key.update(seed=seed, data_seed=options.data_seed, weights=options.weights, data_root=options.data_root,
               bn_data=options.bn_data, parallel=options.parallel, deterministic=options.deterministic,
               amp=options.amp)
    if options.amp_init_scale is not None:  # absent when unset: earlier folders' progress files still match
        key["amp_init_scale"] = options.amp_init_scale
    if (options.threads or ARITHMETIC_THREADS) != ARITHMETIC_THREADS:  # other rounding: never mixed with one thread's
        key["threads"] = options.threads
    return key
