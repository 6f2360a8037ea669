"""The runner's command line: ``python -m benchmarks.run``'s options (:func:`parse_args`,
with the argparse types that refuse a bad value) and the one place they are read
(:func:`resolve`): the runs to do, a preset's with every flag given applied
(:func:`resolve_runs`), and the options of the whole invocation.
"""

import argparse
import difflib
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from avalanche_tmc.cli.argtypes import (  # standard library only
    MAX_BATCH_SIZE,
    MAX_EPOCHS,
    MAX_EXPERIENCE_ID,
    MAX_SEED,
    in_range,
)
from avalanche_tmc.cli.parser import Parser  # standard library only
from avalanche_tmc.loggers import LOGGERS, check_loggers  # standard library only
from benchmarks.protocol.choices import (
    DEFAULT_PROJECTION_DIM,
    MAX_PROJECTION_DIM,
    PLOT_FORMATS,
    RECIPE_CHOICES,
    SCENARIOS,
    plot_formats_argument,
)
from benchmarks.runner.bounds import data_option_problem
from benchmarks.runner.presets import PILOT_SEEDS, PRESETS
from benchmarks.runner.refusals import Refusal

if TYPE_CHECKING:  # torch and Avalanche are imported once the command line is read: --help answers at once
    from benchmarks.runner.config import Options, RunConfig

__all__ = ["RUN_KEYS", "build_parser", "parse_args", "resolve", "resolve_runs", "MAX_SEEDS", "MAX_SEED", "MAX_TASKS",
           "MAX_EPOCHS", "MAX_BATCH_SIZE", "MAX_IMAGE_SIZE", "MAX_PROCESSES", "MAX_THREADS"]

RUN_KEYS = ("dataset", "scenario", "tasks", "backbone", "image_size", "freeze_until", "epochs", "milestones",
            "batch_size", "lr_tangent", "lr", "beta", "methods", "data_options", "tune", "linearize_from", "decay",
            "decay_kind", "tme_beta", "schedule", "transforms", "class_order", "shards", "imagenet_weights", "task_il",
            "projection_dim", "order_by_seed")


MAX_SEEDS = 1000
"""The most seeds of ``--seeds`` (a count, or the length of a list)."""
MAX_TASKS = MAX_EXPERIENCE_ID + 1
"""The most experiences of ``--tasks`` (the library seeds experience ids 0..999 of a run seed)."""
MAX_IMAGE_SIZE = 4096
"""The largest ``--image-size`` (pixels a side: a 4096 px image is 192 MiB in float32 before any batch)."""
MAX_PROCESSES = 256
"""The most ``--jobs``, ``--parallel`` processes and ``--workers``."""
MAX_THREADS = 1024
"""The most ``--threads`` per process (also bounded by the cores with ``--jobs``)."""
# The bounds the runner shares with the command line (avalanche_tmc.cli.argtypes): MAX_SEED (``--seed``,
# ``--seeds``, ``--data-seed``), MAX_EPOCHS (``--epochs`` and the latest of ``--milestones``), MAX_BATCH_SIZE.


def _int_at_least(minimum: int, maximum: int):
    """An argparse type for an integer from ``minimum`` (0 or 1) to ``maximum``."""
    kind = "a positive" if minimum == 1 else "a non-negative"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind} integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        if value > maximum:
            raise argparse.ArgumentTypeError(f"must be in {minimum}..{maximum}, got {value}")
        return value

    return parse


_seed = _int_at_least(0, MAX_SEED)


def _bounded_float(high: float, hint: str):
    """An argparse type for a float in (0, high]."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
        if not 0 < value <= high:  # also refuses nan and inf
            raise argparse.ArgumentTypeError(f"must be in (0, {high:g}] ({hint}), got {text}")
        return value

    return parse


def _milestones(text: str) -> str:
    try:
        epochs = [int(m) for m in text.split(",") if m.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated epochs, e.g. 10,15; got {text!r}") from None
    if any(e < 1 for e in epochs) or epochs != sorted(set(epochs)):
        raise argparse.ArgumentTypeError(f"milestones must be increasing positive epochs, got {text!r}")
    if epochs and epochs[-1] > MAX_EPOCHS:
        raise argparse.ArgumentTypeError(f"milestones must be at most {MAX_EPOCHS} (the most epochs), got {text!r}")
    return text


def _decay(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0 (the authors: 1e-5), got {text}")
    return value


def _seeds(text: str) -> Tuple[int, ...]:
    """``--seeds 3`` (seeds 0, 1, 2) or ``--seeds 0,4,7`` (those seeds)."""
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a count (3) or comma-separated seeds (0,4,7), got {text!r}") \
            from None
    if "," not in text:
        if len(values) != 1 or not 1 <= values[0] <= MAX_SEEDS:
            raise argparse.ArgumentTypeError(f"a seed count must be in 1..{MAX_SEEDS}, got {text!r}")
        return tuple(range(values[0]))
    if len(values) > MAX_SEEDS:
        raise argparse.ArgumentTypeError(f"at most {MAX_SEEDS} seeds, got {len(values)}")
    if not values or len(set(values)) != len(values) or min(values) < 0 or max(values) > MAX_SEED:
        raise argparse.ArgumentTypeError(f"seeds must be distinct integers in 0..{MAX_SEED}, got {text!r}")
    return tuple(values)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Command-line options; those left unset come from the preset. A bad value is refused in
    one line on stderr, exit code 2."""
    p = build_parser()
    args = p.parse_args(argv)
    if args.seed is not None and args.seeds is not None:
        p.error("give --seeds or --seed, not both")
    return args


def build_parser() -> argparse.ArgumentParser:
    """The runner's argument parser (standard library only: ``--help`` imports neither torch
    nor Avalanche), whose refusals are one line, as the command line's (with a "did you mean")."""
    p = Parser(
        prog="python -m benchmarks.run", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run the TMC comparison: every method of a preset (or of the run the flags define) over its "
                    "seeds,\nwriting results.csv, results.md (tables and verdicts) and plots under --out.",
        epilog="examples:\n  python -m benchmarks.run --preset offline                      # the main job\n"
               "  python -m benchmarks.run --preset c-caltech256-10 --data-root ~/data  # a paper run (GPU)\n"
               "A refusal (bad option, missing dataset, weights or package) is one line on stderr, exit code 2.")
    p.add_argument("--preset", default=None, help=f"one of: {', '.join(PRESETS)}")
    p.add_argument("--dataset", help="dataset of the run (python -m benchmarks.datasets lists them and what each "
                                      "needs; default: the preset's, offline: mnist_like_30)")
    p.add_argument("--data-root", default=None, help="folder holding the dataset (Caltech-256, MIT-67, ...)")
    p.add_argument("--data-option", action="append", default=[], metavar="KEY=VALUE",
                   help="dataset loader option, e.g. train_per_class=100 (repeatable)")
    p.add_argument("--scenario", choices=SCENARIOS,
                   help="class-, task- or data-incremental (with a multi-run preset: its run of that scenario)")
    p.add_argument("--tasks", type=_int_at_least(1, MAX_TASKS),
                   help="experiences of the run (at most the dataset's classes; data-IL by domain: its domains; at "
                        f"most {MAX_TASKS})")
    p.add_argument("--task-il", action=argparse.BooleanOptionalAction, default=None,
                   help="class-IL runs: also evaluate every method task-incrementally (under the task mask) after "
                        "the same training, the task-IL column without training again (default: the preset's)")
    p.add_argument("--order-by-seed", action=argparse.BooleanOptionalAction, default=None,
                   help="draw the class order (class/task-IL) and shards (data-IL) per seed, with data seed "
                        "--data-seed + seed, so that the seeds' spread includes them (default: the preset's; "
                        "off: one order for every seed)")
    p.add_argument("--methods", help="comma-separated method rows of the tables, e.g. tmc,tme,ewc (an unknown name "
                                      "is refused with the list of valid ones)")
    p.add_argument("--backbone", help="efficientnet_lite0, a torchvision name (resnet50) or timm:<name>")
    p.add_argument("--weights", default=None, help="local state-dict file with the backbone's ImageNet weights")
    p.add_argument("--image-size", type=_int_at_least(1, MAX_IMAGE_SIZE),
                   help=f"side of the square input images in pixels (1..{MAX_IMAGE_SIZE})")
    p.add_argument("--freeze-until", help="first trained module (trunk before it is frozen and cached), or none")
    p.add_argument("--epochs", type=_int_at_least(1, MAX_EPOCHS),
                   help=f"training epochs per experience of every trained method (at most {MAX_EPOCHS})")
    p.add_argument("--milestones", type=_milestones, help="comma-separated epochs where lr is multiplied by 0.1")
    p.add_argument("--batch-size", type=_int_at_least(1, MAX_BATCH_SIZE),
                   help=f"training mini-batch size (at most {MAX_BATCH_SIZE})")
    p.add_argument("--lr-tangent", type=_bounded_float(1.0, "Adam; the paper uses 1e-4 to 1e-2"),
                   help="Adam lr of the tangent methods")
    p.add_argument("--lr", type=_bounded_float(10.0, "SGD; typically 1e-3 to 1e-1"),
                   help="SGD lr of the non-linear methods")
    p.add_argument("--beta", type=_bounded_float(1000.0, "25 class/task-IL, 5 data-IL"),
                   help="RSL beta (25 class/task-IL, 5 data-IL)")
    p.add_argument("--projection-dim", type=_int_at_least(1, MAX_PROJECTION_DIM), metavar="M",
                   help=f"random ReLU features of the RanPAC-style heads (default {DEFAULT_PROJECTION_DIM}; at most "
                        f"{MAX_PROJECTION_DIM}: their statistics take 8·M² bytes)")
    p.add_argument("--seeds", type=_seeds, default=None, metavar="N|S1,S2,...",
                   help="repeat every method over N seeds (0..N-1) or the listed ones: training randomness only "
                        "(minibatch order, new-head initialisation, random projections); default: the preset's; "
                        f"at most {MAX_SEEDS} seeds, each in 0..{MAX_SEED}")
    p.add_argument("--seed", type=_seed, default=None, help=f"a single seed in 0..{MAX_SEED} (same as --seeds SEED,)")
    p.add_argument("--data-seed", type=_seed, default=0,
                   help="class order (class/task-IL) and random shards (data-IL); the same for every seed")
    p.add_argument("--device", default=None, help="torch device: cpu, cuda, cuda:N (default: cuda if available, "
                                                   "else cpu)")
    p.add_argument("--jobs", type=_int_at_least(1, MAX_PROCESSES), default=None,
                   help="train this many (seed, method group) pairs at once, each in its own single-thread "
                        "process (default: one per CPU core on CPU, 1 on an accelerator; at most "
                        f"{MAX_PROCESSES})")
    p.add_argument("--threads", type=_int_at_least(1, MAX_THREADS), default=None,
                   help="intra-op threads of each piece's arithmetic (default 1, whatever --jobs: every row is then "
                        "bit-identical however the run is laid out; more, with --jobs 1 only, round differently, so "
                        f"such rows are kept apart from one-thread rows; at most {MAX_THREADS})")
    p.add_argument("--deterministic", action="store_true",
                   help="PyTorch's deterministic algorithms and one thread per process: the same numbers "
                        "whatever --jobs (across machines, see the README's reproducibility notes)")
    p.add_argument("--out", default=None, help="output folder (default results/<preset or dataset>)")
    p.add_argument("--plot-format", type=plot_formats_argument, default=("png",), metavar="FORMATS",
                   help=f"the plots' formats, comma-separated: {', '.join(PLOT_FORMATS)} (default png, at 300 dpi; "
                        "pdf and svg keep their text editable)")
    p.add_argument("--logger", action="append", choices=LOGGERS, default=None,
                   help="Avalanche loggers of every method's metrics, under <out>/logs (repeatable; default csv): "
                        "text, csv, tensorboard (needs tensorboard), wandb (offline; needs wandb)")
    p.add_argument("--verbose", action="store_true", help="Avalanche's interactive progress logger")
    p.add_argument("--tensorboard", action="store_true", help="same as --logger tensorboard (with the default csv)")
    p.add_argument("--bn-data", choices=("none", "first-experience"), default="none",
                   help="tangent methods: re-estimate the network's BatchNorm statistics on the first "
                        "experience's training inputs before linearizing (one base point for every component)")
    p.add_argument("--tune", action="store_const", const={}, default=None,
                   help="choose learning rate and epochs per tuning unit on a validation split of the training "
                        "data (benchmarks/tuning/grid.py; the default grid: 9 trials per unit)")
    p.add_argument("--parallel", type=_int_at_least(1, MAX_PROCESSES), default=1, metavar="N",
                   help="train the experiences of TMC/TME, TMC-FC and the training-free heads in N processes "
                        "(torch.distributed, gloo); every experience is seeded by the run's seed and its id "
                        "however it is trained, so the numbers are the sequential run's (up to float rounding "
                        f"of the composition's sum); at most {MAX_PROCESSES}")
    recipe = p.add_argument_group(
        "training recipe", "how the paper presets follow the authors' code (docs/paper-benchmarks.md, 'Reproducing "
        "the paper'); every paper preset sets them, the offline presets keep the defaults")
    recipe.add_argument("--linearize-from", metavar="MODULE",
                        help="tangent methods linearize this module and those after it; the stem before it stays "
                             "plain (the authors: layer1 of a ResNet); default: the whole network")
    recipe.add_argument("--decay", type=_decay, help="decay on δ of the tangent methods (the authors: 1e-5, norm)")
    recipe.add_argument("--decay-kind", choices=RECIPE_CHOICES["decay_kind"],
                        help="norm: + decay·sqrt(1e-6 + ‖δ‖²) in the loss (the authors'); squared: Adam's L2 "
                             "weight decay; decoupled: AdamW's")
    recipe.add_argument("--tme-beta", type=_bounded_float(1000.0, "the paper: 5"),
                        help="the RSL β of TME's own components (the paper's text: 5; the main job and the paper "
                             "presets set it); unset, the scenario's β; the row tme-tmc ensembles TMC's components")
    recipe.add_argument("--schedule", choices=RECIPE_CHOICES["schedule"],
                        help="step: lr x0.1 from each milestone epoch on (the paper's text); authors: from the epoch "
                             "after it (their code's lr·0.1^#{m < epoch})")
    recipe.add_argument("--transforms", choices=RECIPE_CHOICES["transforms"],
                        help="image datasets: square (resize to --image-size) or authors (train: resize 256, random "
                             "crop 224, flip; test: resize 256, centre crop 224; scaled to --image-size)")
    recipe.add_argument("--class-order", choices=RECIPE_CHOICES["class_order"],
                        help="class/task-IL: seeded (a permutation by --data-seed) or label (the authors')")
    recipe.add_argument("--shards", choices=RECIPE_CHOICES["shards"],
                        help="data-IL shards: permutation (by --data-seed, cut in blocks) or authors (their fixed "
                             "shuffle, dealt round-robin)")
    recipe.add_argument("--imagenet-weights", choices=RECIPE_CHOICES["imagenet_weights"],
                        help="torchvision backbones: which ImageNet weights, from torch's cache (never downloaded); "
                             "the authors used IMAGENET1K_V1")
    feed = p.add_argument_group("input pipeline", "feeding an accelerator (image datasets trained end to end)")
    feed.add_argument("--workers", type=_int_at_least(0, MAX_PROCESSES), default=None,
                      help="DataLoader worker processes decoding images (default: one per core but one, up to 8, "
                           f"when the images are decoded per batch; 0 for cached features; at most {MAX_PROCESSES})")
    feed.add_argument("--amp", choices=("bf16", "fp16"), default=None,
                      help="forwards under torch.autocast in this dtype (avalanche_tmc.AutocastPlugin)")
    feed.add_argument("--amp-init-scale", type=in_range(float, 1.0, 2.0 ** 24, "a loss scale in [1, 2**24]"),
                      default=None, metavar="SCALE",
                      help="--amp fp16: the GradScaler's first loss scale (default 2**16); lower it when short "
                           "experiences skip every step while the scale calibrates down")
    feed.add_argument("--decoded-cache", action="store_true",
                      help="decode and resize each image file once into a uint8 cache (about 233 KiB an image at "
                           "224 px; ~3x fewer CPU ms per image measured), crops and flips still random")
    feed.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                      help="a line per epoch with images/s and an ETA (default: on when images are decoded per batch)")
    p.add_argument("--restart", action="store_true",
                   help="start --out afresh: retrain the runs and method groups an earlier run finished and replace "
                        "the folder's results (default: resume, keeping finished runs and merging results.csv; a run "
                        "whose settings differ from the folder's is refused without it)")
    return p


def _parse_value(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None}.get(text.lower(), text)


def resolve(args: argparse.Namespace) -> Tuple[List["RunConfig"], "Options"]:
    """The runs to do (the preset's, with every flag given on the command line applied)
    and the options for all of them: the one place the command line is read."""
    from benchmarks.datasets.loading import default_workers
    from benchmarks.runner.config import Options
    from benchmarks.runner.forked_jobs import default_jobs, threads_per_job

    if args.device is None:
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    runs = resolve_runs(args)
    jobs = args.jobs or default_jobs(args.device)
    threads = 1 if args.deterministic else args.threads
    loggers = list(args.logger or ["csv"]) + (["tensorboard"] if args.tensorboard else [])
    try:
        loggers = check_loggers(loggers)
    except ValueError as error:
        raise Refusal(str(error)) from None
    decoded_per_batch = any(str(r.freeze_until).lower() in ("none", "") for r in runs)
    workers = args.workers if args.workers is not None else default_workers() if decoded_per_batch else 0
    if args.amp_init_scale is not None and args.amp != "fp16":
        raise Refusal("--amp-init-scale is the float16 loss scale: give it with --amp fp16 (bfloat16 and float32 "
                      "need no loss scaling)")
    options = Options(data_root=args.data_root, weights=args.weights, data_seed=args.data_seed, device=args.device,
                      out=args.out, verbose=args.verbose, loggers=tuple(loggers), bn_data=args.bn_data,
                      parallel=args.parallel, jobs=jobs, threads=threads_per_job(jobs, threads),
                      restart=args.restart, deterministic=args.deterministic, workers=workers, amp=args.amp,
                      amp_init_scale=args.amp_init_scale, progress=args.progress, decoded_cache=args.decoded_cache,
                      plot_formats=tuple(args.plot_format))
    return runs, options


def resolve_runs(args: argparse.Namespace) -> List["RunConfig"]:
    """The runs to do: the preset's, with every flag given on the command line applied."""
    from benchmarks.runner.config import RunConfig

    if args.preset is not None and args.preset not in PRESETS:
        close = difflib.get_close_matches(args.preset, PRESETS, n=1, cutoff=0.6)
        hint = f"did you mean {close[0]!r}? " if close else ""
        raise Refusal(f"Unknown preset {args.preset!r}; {hint}choose from: {', '.join(PRESETS)}")
    runs = [dict(r) for r in PRESETS[args.preset]] if args.preset else [dict(PRESETS["offline"][0])]
    overrides = {k: getattr(args, k) for k in RUN_KEYS if getattr(args, k, None) is not None}
    if isinstance(overrides.get("milestones"), str):
        overrides["milestones"] = tuple(int(m) for m in overrides["milestones"].split(",") if m)
    if args.data_option:
        options = {}
        for item in args.data_option:
            key, sep, value = item.partition("=")
            if not sep:
                raise Refusal(f"--data-option takes KEY=VALUE, got {item!r}")
            options[key] = _parse_value(value)
            problem = data_option_problem(key, options[key])
            if problem:
                raise Refusal(f"--data-option {key}={options[key]}: {problem} (docs/benchmarks.md).")
        overrides["data_options"] = options
    if getattr(args, "seeds", None) is not None:
        overrides["seeds"] = args.seeds
    elif getattr(args, "seed", None) is not None:
        overrides["seeds"] = (args.seed,)
    if len(runs) > 1 and "scenario" in overrides and len({r["scenario"] for r in runs}) > 1:
        # --scenario picks the preset's run(s) of that scenario
        scenario = overrides.pop("scenario")
        runs = [r for r in runs if r["scenario"] == scenario]
        if not runs:
            raise Refusal(f"Preset {args.preset!r} has no run of scenario {args.scenario!r}.")
    defining = sorted(k for k in ("dataset", "scenario", "tasks", "data_options") if k in overrides)
    if len(runs) > 1 and defining:
        raise Refusal(f"Preset {args.preset!r} has {len(runs)} runs; {defining} would make them all the same run. "
                         "Drop --preset (or use a single-run preset) to define one run on the command line.")
    if args.dataset and args.dataset != runs[0]["dataset"] and "data_options" not in overrides:
        overrides["data_options"] = {}
    try:
        resolved = [RunConfig.from_dict(_override(run, overrides)) for run in runs]
    except ValueError as error:
        raise Refusal(str(error)) from None
    pilot = set(PILOT_SEEDS.get(args.preset, ()))
    reused = sorted(pilot & {seed for run in resolved for seed in run.seeds})
    if reused:
        raise Refusal(f"--preset {args.preset} is a confirmatory run: seed(s) {', '.join(map(str, reused))} are its "
                      f"pilot's ({', '.join(map(str, sorted(pilot)))}, make demo), whose results sized it; run the "
                      "seeds fixed before its results (docs/preregistration.md), or others the pilot did not use.")
    return resolved


# Flags after which a run's fixed, tuned values no longer describe it.
_UNTUNES = ("epochs", "lr", "lr_tangent", "freeze_until", "dataset", "data_options", "image_size", "backbone",
            "batch_size", "beta", "milestones")


def _override(run: Dict[str, Any], overrides: Dict[str, Any]) -> Dict[str, Any]:
    """``run`` with command-line ``overrides``: ``--epochs`` sets every family's epochs, and
    a run's tuned values and ``tuned_by`` note are dropped once a flag changes what was tuned."""
    run = dict(run, **overrides)
    if overrides.get("scenario", "class") != "class" and "task_il" not in overrides:
        run["task_il"] = False  # the preset's class-IL run evaluates task-IL too; another scenario cannot
    if "epochs" in overrides:
        run.pop("tangent_epochs", None)
    if any(k in overrides for k in _UNTUNES):
        run.pop("tuned_by", None)
        run.pop("tuned", None)
    return run
