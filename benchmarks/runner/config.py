"""The runner's configuration, typed: one :class:`RunConfig` per run and one :class:`Options`
for the whole invocation, built once from the preset and the command line by
:func:`benchmarks.runner.arguments.resolve`; nothing below ``main`` reads argparse state.

:func:`train_config` is the one place a :class:`~benchmarks.methods.TrainConfig` (what a
strategy trains with) is made from them.
"""

import copy
import dataclasses
from typing import Any, Dict, Mapping, Optional, Sequence

from baselines.builtin import REPLAY_BUFFER
from benchmarks.methods import TrainConfig
from benchmarks.networks.arithmetic import arithmetic_key
from benchmarks.networks.threads import ARITHMETIC_THREADS
from benchmarks.protocol.choices import DEFAULT_PROJECTION_DIM, MAX_PROJECTION_DIM, RECIPE_CHOICES
from benchmarks.protocol.settings import settings_of, with_settings

__all__ = ["DEFAULT_PROJECTION_DIM", "MAX_PROJECTION_DIM", "RECIPE_CHOICES", "RunConfig", "Options", "train_config",
           "regime_label", "progress_key", "replay_buffer_size", "loader_options"]


@with_settings("run", frozen=True)
class RunConfig:
    """One run: a dataset and scenario, the network and how much of it is trained, the
    methods, their training settings and the seeds they are repeated over. Its fields are
    the run settings of :data:`benchmarks.protocol.settings.SETTINGS` (what each is for is
    said there, and in ``python -m benchmarks.run --help``).

    ``seeds`` vary the training randomness only (minibatch order, new-head
    initialisation, random projections); the class order and the data split come from
    :attr:`Options.data_seed`. ``tuned`` maps a tuning unit
    (:func:`benchmarks.methods.tuning_unit`) to its chosen ``(learning rate, epochs)``;
    ``tuned_by`` says where those values were chosen. ``tune``: when not None, choose
    them now on a validation split (:mod:`benchmarks.tuning.grid`; the dict overrides the
    default grid).
    """

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


@with_settings("invocation", frozen=True)
class Options:
    """What applies to every run of one invocation of the runner: the invocation settings
    of :data:`benchmarks.protocol.settings.SETTINGS`."""


def train_config(run: RunConfig, options: Options, *, num_classes: int, seed: int,
                 bn_batches: Optional[Sequence[Any]] = None, train_size: Optional[int] = None) -> TrainConfig:
    """What every method of ``run`` trains with for ``seed``: the settings of ``run`` and
    ``options`` the methods train with (``trains`` in their declaration); with
    ``train_size``, the replay buffer sized to the data (:func:`replay_buffer_size`)."""
    values = {s.name: getattr(run if s.scope == "run" else options, s.name) for s in settings_of("train")}
    values["tuned"] = dict(values["tuned"])
    cfg = TrainConfig(num_classes=num_classes, seed=seed, bn_batches=bn_batches, **values)
    if train_size is not None:
        cfg = dataclasses.replace(cfg, mem_size=replay_buffer_size(train_size, num_classes, cfg.mem_size))
    return cfg


def loader_options(options: Options) -> Dict[str, Any]:
    """The DataLoader arguments Avalanche's ``train``/``eval`` take, for ``options.workers``
    (none for 0: Avalanche's defaults)."""
    from benchmarks.datasets.loading import dataloader_kwargs

    return dataloader_kwargs(num_workers=options.workers, device=options.device) if options.workers > 0 else {}


DEFAULT_BUFFER = REPLAY_BUFFER
"""ER's and DER's replay buffer (samples) while it is at most :data:`MAX_BUFFER_SHARE` of the
training set (the main job: 17% of its class-IL training set)."""
MAX_BUFFER_SHARE = 0.2
BUFFER_PER_CLASS = 20


def replay_buffer_size(train_size: int, classes: int, default: int = DEFAULT_BUFFER) -> int:
    """The replay buffer a run's ER and DER keep: ``default`` while it is at most a fifth of
    the ``train_size`` training samples; on less data, the field's fixed number per class
    (:data:`BUFFER_PER_CLASS`, iCaRL's 2,000 for 100 classes), still at most a fifth of the
    training set (at least 1): a buffer that holds the whole training set replays every past
    sample, joint training in disguise (a 300-image folder kept 300)."""
    cap = max(1, int(MAX_BUFFER_SHARE * train_size))
    return default if default <= cap else max(1, min(BUFFER_PER_CLASS * classes, cap))


def progress_key(run: RunConfig, options: Options, seed: int, mem_size: int = DEFAULT_BUFFER) -> Dict[str, Any]:
    """Everything that decides a (run, seed)'s results, for the names of its progress files
    (a re-run with other settings never picks up a stale result): the settings whose
    declaration keeps them in the key (some only away from their default, so that the
    folders of earlier versions still match), the thread count, the CPU arithmetic this
    process computes with and the replay buffer, each only where it is not the default (one
    thread, pinned AVX2, 300 samples)."""
    key = {s.name: copy.deepcopy(getattr(run, s.name)) for s in settings_of("run") if s.in_key(getattr(run, s.name))}
    key["seed"] = seed
    key.update({s.name: getattr(options, s.name) for s in settings_of("invocation")
                if s.in_key(getattr(options, s.name))})
    if (options.threads or ARITHMETIC_THREADS) != ARITHMETIC_THREADS:  # other rounding: never mixed with one thread's
        key["threads"] = options.threads
    arithmetic = arithmetic_key()  # another instruction set than the pinned AVX2: other rows, never mixed
    if arithmetic is not None:
        key["arithmetic"] = arithmetic
    if mem_size != DEFAULT_BUFFER:  # a buffer sized to small data (replay_buffer_size): other rows
        key["mem_size"] = mem_size
    if run.dataset == "folder" and options.data_root is not None:  # your own images: their content decides the rows
        from benchmarks.datasets.own_folder import folder_digest

        key["folder"] = folder_digest(options.data_root)
    return key


def regime_label(freeze_until: Any) -> str:
    """How much of the network a run trains, as the results name it."""
    return "whole network" if str(freeze_until).lower() in ("none", "") else f"from {freeze_until}"
