"""Every setting of ``python -m benchmarks.run``, declared once (standard library only).

One :class:`Setting` entry says a setting's name, type, default, bound (its argparse type),
help, and where it flows: a run's (:class:`~benchmarks.runner.config.RunConfig`) or the
whole invocation's (:class:`~benchmarks.runner.config.Options`); whether the methods train
with it (:class:`~benchmarks.methods.TrainConfig`); whether changing it drops a preset's
tuned values; whether it decides results (the progress files' names and ``settings.json``).
The command line, those three dataclasses, the overrides of a preset and the progress key
are derived from :data:`SETTINGS`: a new setting is one entry here and its use.

A setting added later should keep ``key="unless_default"``: at its default it stays out of
the progress key, so folders written before it existed still resume.
"""

import argparse
import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from avalanche_tmc.cli.argtypes import MAX_BATCH_SIZE, MAX_EPOCHS, MAX_EXPERIENCE_ID, MAX_SEED, in_range
from benchmarks.protocol.choices import (
    DEFAULT_PROJECTION_DIM,
    MAX_PROJECTION_DIM,
    PLOT_FORMATS,
    RECIPE_CHOICES,
    SCENARIOS,
    plot_formats_argument,
)
from benchmarks.protocol.setting_types import MAX_SEEDS, bounded_float, decay, int_at_least, milestones, seeds

__all__ = ["REQUIRED", "Setting", "SETTINGS", "MAX_TASKS", "MAX_IMAGE_SIZE", "MAX_PROCESSES", "MAX_THREADS",
           "SCOPES", "settings_of", "setting_fields", "with_settings", "overriding_names", "untuning_names"]



class _Required:
    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED: Any = _Required()
"""The default of a setting every run must give (a preset always does)."""

MAX_TASKS = MAX_EXPERIENCE_ID + 1
"""The most experiences of ``--tasks`` (the library seeds experience ids 0..999 of a run seed)."""
MAX_IMAGE_SIZE = 4096
"""The largest ``--image-size`` (pixels a side: a 4096 px image is 192 MiB in float32 before any batch)."""
MAX_PROCESSES = 256
"""The most ``--jobs``, ``--parallel`` processes and ``--workers``."""
MAX_THREADS = 1024
"""The most ``--threads`` per process (also bounded by the cores with ``--jobs``)."""


@dataclass(frozen=True)
class Setting:
    """One setting of the runner, declared once.

    ``scope``: ``"run"`` (a field of ``RunConfig``; a preset gives it, a flag overrides it)
    or ``"invocation"`` (a field of ``Options``, the same for every run of one command).
    ``argument``: the argparse keywords of its flag (``type`` is its bound); ``flag``: the
    flag's name (default ``--name-with-dashes``; None: no flag). ``trains``: a field of
    ``TrainConfig`` too, with ``train_default`` where the run has none. ``untunes``: a flag
    changing it drops the preset's tuned values. ``key``: in the progress key ``"always"``,
    ``"unless_default"`` or ``"never"``.
    """

    name: str
    annotation: Any
    help: str = ""
    default: Any = REQUIRED
    default_factory: Optional[Callable[[], Any]] = None
    scope: str = "run"
    group: str = ""  # the parser's argument group ("" the main one, "recipe", "feed")
    flag: Optional[str] = ""
    argument: Mapping[str, Any] = field(default_factory=dict)
    trains: bool = False
    train_default: Any = REQUIRED
    untunes: bool = False
    key: str = "always"

    @property
    def flag_name(self) -> Optional[str]:
        """The command-line flag (None: the setting has none)."""
        return None if self.flag is None else self.flag or "--" + self.name.replace("_", "-")

    def dataclass_field(self, *, train: bool = False) -> Tuple[str, Any, Any]:
        """``(name, annotation, dataclasses.field)`` of this setting in RunConfig / Options
        (or, ``train``, in TrainConfig, where ``train_default`` wins)."""
        default = self.train_default if train and self.train_default is not REQUIRED else self.default
        if self.default_factory is not None:
            return self.name, self.annotation, field(default_factory=self.default_factory)
        return self.name, self.annotation, field() if default is REQUIRED else field(default=default)

    def in_key(self, value: Any) -> bool:
        """Whether ``value`` of this setting belongs in the progress key."""
        return self.key == "always" or (self.key == "unless_default" and value != self.default)


def _run(name: str, annotation: Any, help: str = "", **kw: Any) -> Setting:
    return Setting(name, annotation, help, **kw)


def _invocation(name: str, annotation: Any, help: str = "", **kw: Any) -> Setting:
    return Setting(name, annotation, help, scope="invocation", key=kw.pop("key", "never"), **kw)


_RECIPE = "recipe"
_FEED = "feed"

SETTINGS: Tuple[Setting, ...] = (
    # --- what a run trains, on what, and how often (a run's: RunConfig; the invocation's: Options) ---
    _run("dataset", str, "dataset of the run (python -m benchmarks.datasets lists them and what each needs; default: "
         "the preset's, offline: mnist_like_30)", untunes=True),
    _invocation("data_root", Optional[str], "folder holding the dataset (Caltech-256, MIT-67, ...)", default=None,
                key="always"),
    _run("data_options", Mapping[str, Any], "dataset loader option, e.g. train_per_class=100 (repeatable)",
         default_factory=dict, flag="--data-option", untunes=True,
         argument=dict(action="append", default=[], metavar="KEY=VALUE")),
    _run("scenario", str, "class-, task- or data-incremental (with a multi-run preset: its run of that scenario)",
         argument=dict(choices=SCENARIOS)),
    _run("tasks", int, "experiences of the run (at most the dataset's classes; data-IL by domain: its domains; at "
         f"most {MAX_TASKS})", argument=dict(type=int_at_least(1, MAX_TASKS))),
    _run("task_il", bool, "class-IL runs: also evaluate every method task-incrementally (under the task mask) after "
         "the same training, the task-IL column without training again (default: the preset's)", default=False,
         argument=dict(action=argparse.BooleanOptionalAction)),
    _run("order_by_seed", bool, "draw the class order (class/task-IL) and shards (data-IL) per seed, with data seed "
         "--data-seed + seed, so that the seeds' spread includes them (default: the preset's; off: one order for "
         "every seed)", default=False, argument=dict(action=argparse.BooleanOptionalAction), key="unless_default"),
    _run("methods", Tuple[str, ...], "comma-separated method rows of the tables, e.g. tmc,tme,ewc (an unknown name "
         "is refused with the list of valid ones)"),
    _run("backbone", str, "efficientnet_lite0, a torchvision name (resnet50) or timm:<name>", untunes=True),
    _invocation("weights", Optional[str], "local state-dict file with the backbone's ImageNet weights", default=None,
                key="always"),
    _run("image_size", int, f"side of the square input images in pixels (1..{MAX_IMAGE_SIZE})",
         argument=dict(type=int_at_least(1, MAX_IMAGE_SIZE)), untunes=True),
    _run("freeze_until", str, "first trained module (trunk before it is frozen and cached), or none", untunes=True),
    _run("epochs", int, f"training epochs per experience of every trained method (at most {MAX_EPOCHS})",
         argument=dict(type=int_at_least(1, MAX_EPOCHS)), trains=True, train_default=5, untunes=True),
    _run("milestones", Tuple[int, ...], "comma-separated epochs where lr is multiplied by 0.1", default=(),
         argument=dict(type=milestones), trains=True, untunes=True),
    _run("decay_at", Tuple[float, ...], "lr x0.1 at these fractions of every experience's epochs (e.g. 0.5, 0.75)",
         default=(), flag=None, trains=True),
    _run("batch_size", int, f"training mini-batch size (at most {MAX_BATCH_SIZE})",
         argument=dict(type=int_at_least(1, MAX_BATCH_SIZE)), trains=True, train_default=32, untunes=True),
    _run("lr_tangent", float, "Adam lr of the tangent methods",
         argument=dict(type=bounded_float(1.0, "Adam; the paper uses 1e-4 to 1e-2")), trains=True,
         train_default=1e-3, untunes=True),
    _run("lr", float, "SGD lr of the non-linear methods",
         argument=dict(type=bounded_float(10.0, "SGD; typically 1e-3 to 1e-1")), trains=True, train_default=0.01,
         untunes=True),
    _run("beta", float, "RSL beta (25 class/task-IL, 5 data-IL)",
         argument=dict(type=bounded_float(1000.0, "25 class/task-IL, 5 data-IL")), trains=True, train_default=25.0,
         untunes=True),
    _run("projection_dim", int, f"random ReLU features of the RanPAC-style heads (default {DEFAULT_PROJECTION_DIM}; "
         f"at most {MAX_PROJECTION_DIM}: their statistics take 8·M² bytes)", default=DEFAULT_PROJECTION_DIM,
         argument=dict(type=int_at_least(1, MAX_PROJECTION_DIM), metavar="M"), trains=True, key="unless_default"),
    _run("seeds", Tuple[int, ...], "repeat every method over N seeds (0..N-1, N under 50), the listed ones or a "
         "range A-B: training "
         "randomness only (minibatch order, new-head initialisation, random projections); default: the preset's; "
         f"at most {MAX_SEEDS} seeds, each in 0..{MAX_SEED}", default=(0,), key="never",
         argument=dict(type=seeds, metavar="N|S1,S2,...|A-B")),
    _invocation("data_seed", int, "class order (class/task-IL) and random shards (data-IL); the same for every seed",
                default=0, argument=dict(type=int_at_least(0, MAX_SEED)), key="always"),
    _invocation("device", str, "torch device: cpu, cuda, cuda:N (default: cuda if available, else cpu)",
                default="cpu", argument=dict(default=None), trains=True),
    _invocation("jobs", int, "train this many (seed, method group) pairs at once, each in its own single-thread "
                "process (default: one per CPU core on CPU, 1 on an accelerator; at most "
                f"{MAX_PROCESSES})", default=1, argument=dict(type=int_at_least(1, MAX_PROCESSES), default=None)),
    _invocation("threads", Optional[int], "intra-op threads of each piece's arithmetic (default 1, whatever --jobs: "
                "every row is then bit-identical however the run is laid out; more, with --jobs 1 only, round "
                "differently, so such rows are kept apart from one-thread rows; at most "
                f"{MAX_THREADS})", default=None, argument=dict(type=int_at_least(1, MAX_THREADS))),
    _invocation("deterministic", bool, "PyTorch's deterministic algorithms and one thread per process: the same "
                "numbers whatever --jobs (across machines: docs/results.md, 'Reproducibility')", default=False,
                argument=dict(action="store_true"), key="always"),
    _invocation("native_arithmetic", bool, "compute with this CPU's own instruction set (AVX-512 where it has it) "
                "instead of the pinned AVX2 every row is computed with by default (avalanche_tmc.arithmetic): faster "
                "on some CPUs, but SGD rows then differ from another CPU's, so they are kept apart from pinned rows "
                "(their progress key names the arithmetic)", default=False, argument=dict(action="store_true")),
    _invocation("out", Optional[str], "output folder (default results/<preset or dataset>)", default=None),
    _invocation("plot_formats", Tuple[str, ...], f"the plots' formats, comma-separated: {', '.join(PLOT_FORMATS)} "
                "(default png, at 300 dpi; pdf and svg keep their text editable)", default=("png",),
                flag="--plot-format", argument=dict(type=plot_formats_argument, metavar="FORMATS")),
    _invocation("loggers", Tuple[str, ...], "Avalanche loggers of every method's metrics (avalanche_tmc.loggers)",
                default=("csv",), flag=None),
    _invocation("verbose", bool, "Avalanche's interactive progress logger", default=False,
                argument=dict(action="store_true")),
    _invocation("bn_data", str, "tangent methods: re-estimate the network's BatchNorm statistics on the first "
                "experience's training inputs before linearizing (one base point for every component)",
                default="none", argument=dict(choices=("none", "first-experience")), key="always"),
    _run("tune", Optional[Mapping[str, Any]], "choose learning rate and epochs per tuning unit on a validation split "
         "of the training data (benchmarks/tuning/grid.py; the default grid: 9 trials per unit)", default=None,
         argument=dict(action="store_const", const={})),
    _invocation("parallel", int, "train the experiences of TMC/TME, TMC-FC and the training-free heads in N "
                "processes (torch.distributed, gloo); every experience is seeded by the run's seed and its id "
                "however it is trained, so the numbers are the sequential run's (up to float rounding of the "
                f"composition's sum); at most {MAX_PROCESSES}", default=1,
                argument=dict(type=int_at_least(1, MAX_PROCESSES), metavar="N"), key="always"),
    # --- set by presets and the tuning only ---
    _run("tangent_epochs", Optional[int], "epochs of the tangent family (None: ``epochs``)", default=None, flag=None,
         trains=True),
    _run("tuned", Mapping[str, Tuple[float, int]], "tuning unit -> (learning rate, epochs) chosen for it",
         default_factory=dict, flag=None, trains=True),
    _run("tuned_by", Optional[str], "where the tuned values were chosen", default=None, flag=None),
    # --- the training recipe (the paper presets follow the authors' code) ---
    _run("linearize_from", Optional[str], "tangent methods linearize this module and those after it; the stem "
         "before it stays plain (the authors: layer1 of a ResNet); default: the whole network", default=None,
         group=_RECIPE, argument=dict(metavar="MODULE"), trains=True),
    _run("decay", float, "decay on δ of the tangent methods (the authors: 1e-5, norm)", default=0.0, group=_RECIPE,
         argument=dict(type=decay), trains=True),
    _run("decay_kind", str, "norm: + decay·sqrt(1e-6 + ‖δ‖²) in the loss (the authors'); squared: Adam's L2 weight "
         "decay; decoupled: AdamW's", default="norm", group=_RECIPE,
         argument=dict(choices=RECIPE_CHOICES["decay_kind"]), trains=True),
    _run("tme_beta", Optional[float], "the RSL β of TME's own components (the paper's text: 5; the main job and the "
         "paper presets set it); unset, the scenario's β; the row tme-tmc ensembles TMC's components", default=None,
         group=_RECIPE, argument=dict(type=bounded_float(1000.0, "the paper: 5")), trains=True),
    _run("schedule", str, "step: lr x0.1 from each milestone epoch on (the paper's text); authors: from the epoch "
         "after it (their code's lr·0.1^#{m < epoch})", default="step", group=_RECIPE,
         argument=dict(choices=RECIPE_CHOICES["schedule"]), trains=True),
    _run("transforms", str, "image datasets: square (resize to --image-size) or authors (train: resize 256, random "
         "crop 224, flip; test: resize 256, centre crop 224; scaled to --image-size)", default="square",
         group=_RECIPE, argument=dict(choices=RECIPE_CHOICES["transforms"])),
    _run("class_order", str, "class/task-IL: seeded (a permutation by --data-seed) or label (the authors')",
         default="seeded", group=_RECIPE, argument=dict(choices=RECIPE_CHOICES["class_order"])),
    _run("shards", str, "data-IL shards: permutation (by --data-seed, cut in blocks) or authors (their fixed "
         "shuffle, dealt round-robin)", default="permutation", group=_RECIPE,
         argument=dict(choices=RECIPE_CHOICES["shards"])),
    _run("imagenet_weights", str, "torchvision backbones: which ImageNet weights, from torch's cache (never "
         "downloaded); the authors used IMAGENET1K_V1", default="DEFAULT", group=_RECIPE,
         argument=dict(choices=RECIPE_CHOICES["imagenet_weights"])),
    # --- the input pipeline ---
    _invocation("workers", int, "DataLoader worker processes decoding images (default: one per core but one, up to "
                "8, when the images are decoded per batch; 0 for cached features; at most "
                f"{MAX_PROCESSES})", default=0, group=_FEED,
                argument=dict(type=int_at_least(0, MAX_PROCESSES), default=None)),
    _invocation("amp", Optional[str], "forwards under torch.autocast in this dtype (avalanche_tmc.AutocastPlugin)",
                default=None, group=_FEED, argument=dict(choices=("bf16", "fp16")), trains=True, key="always"),
    _invocation("amp_init_scale", Optional[float], "--amp fp16: the GradScaler's first loss scale (default 2**16); "
                "lower it when short experiences skip every step while the scale calibrates down", default=None,
                group=_FEED, argument=dict(type=in_range(float, 1.0, 2.0 ** 24, "a loss scale in [1, 2**24]"),
                                           metavar="SCALE"), trains=True, key="unless_default"),
    _invocation("decoded_cache", bool, "decode and resize each image file once into a uint8 cache (about 233 KiB an "
                "image at 224 px; ~3x fewer CPU ms per image measured), crops and flips still random", default=False,
                group=_FEED, argument=dict(action="store_true")),
    _invocation("progress", Optional[bool], "a line per epoch with images/s and an ETA (default: on when images are "
                "decoded per batch)", default=None, group=_FEED, argument=dict(action=argparse.BooleanOptionalAction)),
    # --- the output folder ---
    _invocation("restart", bool, "start --out afresh: retrain the runs and method groups an earlier run finished "
                "and replace the folder's results (default: resume, keeping finished runs and merging results.csv; "
                "a run whose settings differ from the folder's is refused without it)", default=False,
                argument=dict(action="store_true")),
)
"""Every setting of the runner, in the order of ``--help``."""


SCOPES = ("run", "invocation", "train")
"""What a dataclass of settings holds: a run's (RunConfig), the invocation's (Options), or
what the methods train with (TrainConfig: the settings of either scope with ``trains``)."""


def settings_of(scope: str) -> List[Setting]:
    """The settings of ``scope`` (one of :data:`SCOPES`), in declaration order."""
    if scope not in SCOPES:
        raise ValueError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")
    return [s for s in SETTINGS if (s.trains if scope == "train" else s.scope == scope)]


def setting_fields(scope: str) -> List[Tuple[str, Any, Any]]:
    """The dataclass fields ``(name, annotation, field)`` of ``scope``'s settings, those
    without a default first."""
    fields = [s.dataclass_field(train=scope == "train") for s in settings_of(scope)]
    missing = dataclasses.MISSING
    required = [f for f in fields if f[2].default is missing and f[2].default_factory is missing]
    return required + [f for f in fields if f not in required]


def with_settings(scope: str, *, frozen: bool = False) -> Callable[[type], type]:
    """A class decorator making ``cls`` a dataclass whose fields are ``scope``'s settings
    (:func:`setting_fields`) and its own annotated fields: the class body holds the methods
    and the fields only it has, :data:`SETTINGS` the rest. Fields without a default come
    first (the class's own, then the settings'), then the settings', then the class's own."""

    def wrap(cls: type) -> type:
        own = [(name, annotation, cls.__dict__.get(name, REQUIRED))
               for name, annotation in inspect.get_annotations(cls).items()]
        annotations: Dict[str, Any] = {name: annotation for name, annotation, default in own if default is REQUIRED}
        for name, annotation, spec in setting_fields(scope):
            if name in annotations or name in cls.__dict__:
                raise TypeError(f"{cls.__name__}.{name} is a declared setting: remove it from the class body")
            annotations[name] = annotation
            setattr(cls, name, spec)
        annotations.update((name, annotation) for name, annotation, default in own if default is not REQUIRED)
        cls.__annotations__ = annotations
        return dataclass(frozen=frozen)(cls)

    return wrap


def overriding_names() -> Tuple[str, ...]:
    """The run settings a flag of the same name overrides in a preset's runs."""
    return tuple(s.name for s in settings_of("run") if s.flag_name is not None and s.name not in _OWN_HANDLING)


def untuning_names() -> Tuple[str, ...]:
    """The run settings after whose change a run's fixed, tuned values no longer describe it."""
    return tuple(s.name for s in settings_of("run") if s.untunes)


# run settings whose flags resolve_runs reads itself (``--data-option KEY=VALUE``, ``--seeds`` / ``--seed``)
_OWN_HANDLING = ("data_options", "seeds")
