"""Run the TMC comparison: ``python -m benchmarks.run --preset offline`` (the main job) or
``python -m benchmarks.run --dataset caltech256 --data-root ~/data --scenario class --tasks 10 ...``.

For each run: load the dataset and an ImageNet backbone, optionally freeze its trunk and
cache the trunk's features (:mod:`benchmarks.prepare`), build the Avalanche benchmark
(class-, task- or data-incremental), and for every seed train every requested method
group once, evaluating each table row after every experience with Avalanche's
``EvaluationPlugin`` and loggers. The (seed, group) pieces are independent and run in
``--jobs`` processes (:mod:`benchmarks.jobs`). Writes ``results.csv`` (one row per seed),
``results.md`` (mean ± std over seeds in the paper's layout, and the verdict of each of the
paper's claims from paired per-seed differences, :mod:`benchmarks.verdicts`) and PNG plots.
"""

import argparse
import contextlib
import hashlib
import io
import json
import os
import shutil
import sys
import tempfile
import time
from dataclasses import replace
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from avalanche.evaluation.metrics import accuracy_metrics, forgetting_metrics
from avalanche.logging import CSVLogger, InteractiveLogger
from avalanche.training.plugins import EvaluationPlugin
from torch.utils.data import DataLoader

from avalanche_tmc import DivergenceError, find_head, loss_metrics
from avalanche_tmc.loggers import LOGGERS, check_loggers, make_loggers
from benchmarks import report
from benchmarks.config import RECIPE_CHOICES, Options, RunConfig, loader_options, progress_key, train_config
from benchmarks.jobs import available_cores, default_jobs, run_tasks, threads_per_job
from benchmarks.loading import decode_once, default_workers
from benchmarks.methods import (
    MethodGroup,
    TrainConfig,
    build_strategy,
    component_forwards,
    component_row,
    config_for,
    groups_for,
    method_groups,
    method_names,
    select_row,
    tuning_unit,
)
from benchmarks.parallel import make_trainer
from benchmarks.prepare import FOLDER_DATASETS, first_experience_batches, load_run_dataset, num_classes, prepare
from benchmarks.presets import PRESETS
from benchmarks.progress import EpochProgressPlugin
from benchmarks.refusals import Refusal, command_line
from benchmarks.scenarios import SCENARIOS, make_scenario, task_test_stream
from benchmarks.task_il import task_masked
from benchmarks.tuning import REPRESENTATIVE, Trial, TuningGrid, edges, tune, validation_split

__all__ = ["RUN_KEYS", "parse_args", "resolve", "resolve_runs", "make_evaluator", "prepare", "head_parameter_counts",
           "run_group", "final_accuracies", "tune_config", "regime_label", "run_one", "check_writable", "main",
           "preflight", "check_backbone"]

RUN_KEYS = ("dataset", "scenario", "tasks", "backbone", "image_size", "freeze_until", "epochs", "milestones",
            "batch_size", "lr_tangent", "lr", "beta", "methods", "data_options", "tune", "linearize_from", "decay",
            "decay_kind", "tme_beta", "schedule", "transforms", "class_order", "shards", "imagenet_weights", "task_il")


def _int_at_least(minimum: int):
    """An argparse type for an integer >= ``minimum`` (0 or 1)."""
    kind = "a positive" if minimum == 1 else "a non-negative"

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected {kind} integer, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
        return value

    return parse


_positive_int = _int_at_least(1)
_non_negative_int = _int_at_least(0)


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
        if len(values) != 1 or values[0] < 1:
            raise argparse.ArgumentTypeError(f"a seed count must be at least 1, got {text!r}")
        return tuple(range(values[0]))
    if not values or len(set(values)) != len(values) or min(values) < 0:
        raise argparse.ArgumentTypeError(f"seeds must be distinct non-negative integers, got {text!r}")
    return tuple(values)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    """Command-line options; those left unset come from the preset."""
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.run", formatter_class=argparse.RawDescriptionHelpFormatter,
        description="Run the TMC comparison: every method of a preset (or of the run the flags define) over its "
                    "seeds,\nwriting results.csv, results.md (tables and verdicts) and plots under --out.",
        epilog="examples:\n  python -m benchmarks.run --preset offline                      # the main job\n"
               "  python -m benchmarks.run --preset c-caltech256-10 --data-root ~/data  # a paper run (GPU)\n"
               "A refusal (bad option, missing dataset, weights or package) is one line on stderr, exit code 2.")
    p.add_argument("--preset", default=None, help=f"one of: {', '.join(PRESETS)}")
    p.add_argument("--dataset")
    p.add_argument("--data-root", default=None, help="folder holding the dataset (Caltech-256, MIT-67, ...)")
    p.add_argument("--data-option", action="append", default=[], metavar="KEY=VALUE",
                   help="dataset loader option, e.g. train_per_class=100 (repeatable)")
    p.add_argument("--scenario", choices=SCENARIOS)
    p.add_argument("--tasks", type=_positive_int)
    p.add_argument("--task-il", action=argparse.BooleanOptionalAction, default=None,
                   help="class-IL runs: also evaluate every method task-incrementally (under the task mask) after "
                        "the same training, the task-IL column without training again (default: the preset's)")
    p.add_argument("--methods", help=f"comma-separated, from: {','.join(method_names())}")
    p.add_argument("--backbone", help="efficientnet_lite0, a torchvision name (resnet50) or timm:<name>")
    p.add_argument("--weights", default=None, help="local state-dict file with the backbone's ImageNet weights")
    p.add_argument("--image-size", type=_positive_int)
    p.add_argument("--freeze-until", help="first trained module (trunk before it is frozen and cached), or none")
    p.add_argument("--epochs", type=_positive_int)
    p.add_argument("--milestones", type=_milestones, help="comma-separated epochs where lr is multiplied by 0.1")
    p.add_argument("--batch-size", type=_positive_int)
    p.add_argument("--lr-tangent", type=_bounded_float(1.0, "Adam; the paper uses 1e-4 to 1e-2"),
                   help="Adam lr of the tangent methods")
    p.add_argument("--lr", type=_bounded_float(10.0, "SGD; typically 1e-3 to 1e-1"),
                   help="SGD lr of the non-linear methods")
    p.add_argument("--beta", type=_bounded_float(1000.0, "25 class/task-IL, 5 data-IL"),
                   help="RSL beta (25 class/task-IL, 5 data-IL)")
    p.add_argument("--seeds", type=_seeds, default=None, metavar="N|S1,S2,...",
                   help="repeat every method over N seeds (0..N-1) or the listed ones: training randomness only "
                        "(minibatch order, new-head initialisation, random projections); default: the preset's")
    p.add_argument("--seed", type=_non_negative_int, default=None, help="a single seed (same as --seeds SEED,)")
    p.add_argument("--data-seed", type=_non_negative_int, default=0,
                   help="class order (class/task-IL) and random shards (data-IL); the same for every seed")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--jobs", type=_positive_int, default=None,
                   help="train this many (seed, method group) pairs at once, each in its own single-thread "
                        "process (default: one per CPU core on CPU, 1 on an accelerator)")
    p.add_argument("--threads", type=_positive_int, default=None,
                   help="threads per process (default: the cores shared among the jobs)")
    p.add_argument("--deterministic", action="store_true",
                   help="PyTorch's deterministic algorithms and one thread per process: the same numbers "
                        "whatever --jobs (across machines, see the README's reproducibility notes)")
    p.add_argument("--out", default=None, help="output folder (default results/<preset or dataset>)")
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
                        "data (benchmarks/tuning.py; the default grid: 9 trials per unit)")
    p.add_argument("--parallel", type=_positive_int, default=1, metavar="N",
                   help="train the experiences of TMC/TME, TMC-FC and the statistics heads in N processes "
                        "(torch.distributed, gloo); every experience is seeded by the run's seed and its id "
                        "however it is trained, so the numbers are the sequential run's (up to float rounding "
                        "of the composition's sum)")
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
                        help="TME trains its own components with this RSL β (the paper's text: 5); unset, TME "
                             "evaluates TMC's components")
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
    feed.add_argument("--workers", type=_non_negative_int, default=None,
                      help="DataLoader worker processes decoding images (default: one per core but one, up to 8, "
                           "when the images are decoded per batch; 0 for cached features)")
    feed.add_argument("--amp", choices=("bf16", "fp16"), default=None,
                      help="forwards under torch.autocast in this dtype (avalanche_tmc.AutocastPlugin)")
    feed.add_argument("--decoded-cache", action="store_true",
                      help="decode and resize each image file once into a uint8 cache (about 233 KiB an image at "
                           "224 px; ~3x fewer CPU ms per image measured), crops and flips still random")
    feed.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                      help="a line per epoch with images/s and an ETA (default: on when images are decoded per batch)")
    p.add_argument("--restart", action="store_true",
                   help="start --out afresh: retrain method groups an earlier, interrupted run finished and replace "
                        "the folder's results (default: resume; a run whose settings differ from the folder's is "
                        "refused without it)")
    args = p.parse_args(argv)
    if args.seed is not None and args.seeds is not None:
        p.error("give --seeds or --seed, not both")
    return args


def _parse_value(text: str) -> Any:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return {"true": True, "false": False, "none": None}.get(text.lower(), text)


def resolve(args: argparse.Namespace) -> Tuple[List[RunConfig], Options]:
    """The runs to do (the preset's, with every flag given on the command line applied)
    and the options for all of them: the one place the command line is read."""
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
    options = Options(data_root=args.data_root, weights=args.weights, data_seed=args.data_seed, device=args.device,
                      out=args.out, verbose=args.verbose, loggers=tuple(loggers), bn_data=args.bn_data,
                      parallel=args.parallel, jobs=jobs, threads=threads_per_job(jobs, threads),
                      restart=args.restart, deterministic=args.deterministic, workers=workers, amp=args.amp,
                      progress=args.progress, decoded_cache=args.decoded_cache)
    return runs, options


def resolve_runs(args: argparse.Namespace) -> List[RunConfig]:
    """The runs to do: the preset's, with every flag given on the command line applied."""
    if args.preset is not None and args.preset not in PRESETS:
        raise Refusal(f"Unknown preset {args.preset!r}; choose from: {', '.join(PRESETS)}")
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
        return [RunConfig.from_dict(_override(run, overrides)) for run in runs]
    except ValueError as error:
        raise Refusal(str(error)) from None


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


def preflight(runs: Sequence[RunConfig], options: Options) -> None:
    """Refuse (:class:`~benchmarks.refusals.Refusal`), before any data is prepared, what
    would fail later: more threads than cores, options that do not go together, unknown
    methods or backbones, a missing package, weights file or folder dataset, a class too
    small for its split."""
    cores = available_cores()
    if options.jobs * options.threads > cores and not options.deterministic:
        raise Refusal(f"--jobs {options.jobs} x --threads {options.threads} = {options.jobs * options.threads} "
                      f"threads on {cores} core(s): lower --jobs or --threads (each job is one process).")
    from benchmarks.datasets.registry import DATASETS

    for run in runs:
        if run.dataset not in DATASETS:
            raise Refusal(f"unknown dataset {run.dataset!r}; valid names: {', '.join(sorted(DATASETS))} "
                          "(python -m benchmarks.datasets says what each needs).")
        try:
            groups_for(list(run.methods))
        except ValueError as error:
            raise Refusal(str(error)) from None
        cached = str(run.freeze_until).lower() not in ("none", "")
        if run.transforms != "square" and cached:
            raise Refusal(f"--transforms {run.transforms} augments images at every epoch, but --freeze-until "
                          f"{run.freeze_until} caches the frozen trunk's features once: use --freeze-until none, or "
                          "--transforms square.")
        if run.transforms != "square" and run.dataset not in FOLDER_DATASETS:
            raise Refusal(f"--transforms {run.transforms} applies to the image-folder datasets "
                          f"({', '.join(FOLDER_DATASETS)}), not to {run.dataset}.")
        if options.decoded_cache and (cached or run.dataset not in FOLDER_DATASETS):
            raise Refusal(f"--decoded-cache caches decoded image files; {run.dataset} with --freeze-until "
                          f"{run.freeze_until} decodes none per batch: drop --decoded-cache.")
        if run.linearize_from and cached:
            raise Refusal(f"--linearize-from {run.linearize_from} with --freeze-until {run.freeze_until}: the trunk "
                          "before --freeze-until is already frozen and cached; give one of them.")
        check_backbone(run, options)
        if run.dataset in FOLDER_DATASETS:  # lists the files only (fast): a missing folder is found here
            load_run_dataset(run, options.data_root)


def check_backbone(run: RunConfig, options: Options) -> None:
    """Refuse an unknown backbone, or one whose package or weights are not on this machine
    (the runner never downloads)."""
    from benchmarks.backbones import efficientnet_lite0_weights_path, find_weights, resolve_backbone

    try:
        source, name = resolve_backbone(run.backbone)
    except ValueError as error:
        raise Refusal(str(error)) from None
    if options.weights is not None:
        if not os.path.isfile(os.path.expanduser(options.weights)):
            raise Refusal(f"--weights {options.weights}: no such file (a state dict saved with "
                          "torch.save(model.state_dict(), path)).")
    elif source == "efficientnet_lite0":
        efficientnet_lite0_weights_path()
    elif source == "torchvision":
        find_weights(name, run.imagenet_weights)
    else:
        raise Refusal(f"timm backbone {name!r}: the runner never downloads weights; save its state dict and pass "
                      "--weights PATH.")


def make_evaluator(out_dir: str, verbose: bool = False, loggers: Sequence[str] = ("csv",)) -> EvaluationPlugin:
    """Avalanche's metrics, logged by the ``loggers`` named (:mod:`avalanche_tmc.loggers`:
    files under ``out_dir``) and, with ``verbose``, Avalanche's interactive logger. Losses
    are named for what they are (``avalanche_tmc.loss_metrics``): a tangent method's RSL
    is ``RSL_Loss_Stream``, TME's ``NLL_Loss_Stream``, a baseline's cross-entropy
    ``CE_Loss_Stream``, never one ``Loss_Stream`` column of different losses."""
    chosen = make_loggers(loggers, out_dir, os.path.basename(out_dir), text_stream=sys.stdout)
    if verbose:
        chosen.append(InteractiveLogger())
    return EvaluationPlugin(
        accuracy_metrics(experience=True, stream=True),
        loss_metrics(stream=True),
        forgetting_metrics(experience=True, stream=True),
        loggers=chosen,
    )


def _test_accuracies(metrics: Dict[str, float], test_stream) -> Dict[str, float]:
    """Per test experience and overall (sample-weighted) accuracy from Avalanche's metrics."""
    accs, total, correct = {}, 0, 0.0
    for exp in test_stream:
        key = (f"Top1_Acc_Exp/eval_phase/{test_stream.name}_stream/Task{exp.task_label:03d}/"
               f"Exp{exp.current_experience:03d}")
        accs[str(exp.current_experience)] = float(metrics[key])
        total += len(exp.dataset)
        correct += float(metrics[key]) * len(exp.dataset)
    accs["all"] = correct / total
    return accs


@torch.no_grad()
def _component_accuracies(forward, test_stream, task_masked: bool, batch_size: int,
                          workers: int = 0, device: str = "cpu") -> Dict[str, float]:
    """Accuracy of one component's ``forward`` (on ``device``) per test experience and overall."""
    accs, total, correct = {}, 0, 0
    for exp in test_stream:
        right = n = 0
        allowed = torch.tensor(sorted(exp.classes_in_this_experience))
        for batch in DataLoader(exp.dataset.eval(), batch_size=batch_size, num_workers=workers):
            x, y = batch[0].to(device), batch[1]
            logits = forward(x).cpu()
            pred = allowed[logits[:, allowed].argmax(1)] if task_masked else logits.argmax(1)
            right += int((pred == y).sum())
            n += len(y)
        accs[str(exp.current_experience)] = right / n
        total, correct = total + n, correct + right
    accs["all"] = correct / total
    return accs


def head_parameter_counts(model, num_classes: int) -> Tuple[int, int]:
    """(parameters of the model's current head, parameters of a new ``num_classes`` head)."""
    head = model.get_submodule(find_head(model))
    new = num_classes * (head.in_features + (1 if head.bias is not None else 0))
    return sum(p.numel() for p in head.parameters()), new


def experience_seed(seed: int, experience: int) -> int:
    """The seed of one experience's training in run seed ``seed`` (distinct for every
    pair with fewer than 1000 experiences; seed 0 gives the experience id)."""
    return 1000 * seed + experience


def run_group(group: MethodGroup, rows: Sequence[str], bm, top, cfg: TrainConfig, base_row: Dict[str, Any],
              out_dir: str, *, verbose: bool = False, loggers: Sequence[str] = ("csv",),
              components: bool = True, parallel: int = 1, loader: Optional[Dict[str, Any]] = None,
              progress: bool = False, task_stream=None) -> List[Dict[str, Any]]:
    """Train one group over the stream and evaluate each of its rows after every experience
    (and, with ``components``, each component alone at the end); Avalanche's logs go to
    ``out_dir/<group>`` (``verbose``/``loggers``: see :func:`make_evaluator`).
    ``task_stream`` (a class-IL run's :func:`~benchmarks.scenarios.task_test_stream`):
    every evaluation is also made on it under the task mask (:mod:`benchmarks.task_il`),
    giving the task-IL rows (``scenario="task"``, ``trained_in="class"``) of the same training.
    ``parallel > 1``: the experiences of a group whose components train independently are
    shared among that many gloo processes (:mod:`benchmarks.parallel`). ``loader``: the
    DataLoader arguments of every training and evaluation pass (workers);
    ``progress``: a line per epoch with images/s and an ETA."""
    torch.manual_seed(cfg.seed)
    loader = dict(loader or {})
    strategy = build_strategy(group, top, cfg, make_evaluator(os.path.join(out_dir, group.name), verbose, loggers))
    if progress and group.family != "training-free":
        stages_count = 1 if group.joint else len(bm.train_stream)
        strategy.plugins.append(EpochProgressPlugin(f"seed {cfg.seed} {'+'.join(rows)}",
                                                    stages_count * strategy.train_epochs))
    train = make_trainer(strategy, group, bm, top, cfg, processes=parallel, loader=loader)
    results, train_seconds = [], 0.0
    stages = [(len(bm.train_stream), bm.train_stream)] if group.joint else [
        (i + 1, exp) for i, exp in enumerate(bm.train_stream)]
    for after_task, data in stages:
        # Each experience's training is seeded by the run's seed and its id: a component is
        # then a function of its own data and seed, whatever was evaluated before it (a
        # DataLoader draws its base seed from the global generator) and whichever process
        # trains it; seeds do not share experience seeds (1000 * seed + id).
        torch.manual_seed(experience_seed(cfg.seed, 0 if group.joint else data.current_experience))
        start = time.time()
        train(strategy, data)
        train_seconds += time.time() - start
        evaluated = []
        for row in rows:
            select_row(strategy, group, row)
            evaluated += _evaluate(strategy, bm.test_stream, loader, dict(base_row, method=row, after_task=after_task,
                                                                          train_seconds=train_seconds))
            if task_stream is not None:
                with task_masked(strategy, task_stream):
                    evaluated += _evaluate(strategy, task_stream, loader, dict(
                        base_row, scenario="task", trained_in=base_row["scenario"], method=row, after_task=after_task,
                        train_seconds=train_seconds))
        results += evaluated
        print(f"  seed {cfg.seed} {'+'.join(rows):18s} after {after_task}/{len(bm.train_stream)}: "
              + "  ".join(f"{r['method']}{' (task-IL)' if r['scenario'] == 'task' and task_stream else ''} "
                          f"{r['accuracy']:.3f}" for r in evaluated if r["eval_exp"] == "all")
              + f"  (train {train_seconds:.0f}s)", flush=True)
    if group.describe is not None:
        setting = group.describe(strategy)
        print(f"  seed {cfg.seed} {'+'.join(rows):18s} {setting}", flush=True)
        results = [dict(r, setting=setting) for r in results]
    getattr(train, "close", lambda: None)()  # a parallel trainer's component files
    for logger in strategy.evaluator.loggers:  # the CSV files, now (a TextLogger's stream is stdout: left open)
        if isinstance(logger, CSVLogger):
            logger.close()
    components_under = component_row(group, rows) if components else None
    if components_under is not None:
        evaluations = [(bm.test_stream, base_row["scenario"] == "task", base_row)]
        if task_stream is not None:
            evaluations.append((task_stream, True, dict(base_row, scenario="task", trained_in=base_row["scenario"])))
        for k, forward in component_forwards(strategy, group).items():
            for stream, masked, row_base in evaluations:
                accs = _component_accuracies(forward, stream, masked, cfg.eval_batch_size,
                                             loader.get("num_workers", 0), cfg.device)
                results += [dict(row_base, method=components_under, model=f"component-{k}",
                                 after_task=len(bm.train_stream), eval_exp=e, accuracy=a, train_seconds=train_seconds,
                                 eval_seconds=0.0) for e, a in accs.items()]
    return results


def _evaluate(strategy, stream, loader: Dict[str, Any], row: Dict[str, Any]) -> List[Dict[str, Any]]:
    """``strategy`` evaluated on ``stream``: one result row (``row`` + accuracy, seconds)
    per test experience and one for the whole stream."""
    start = time.time()
    accs = _test_accuracies(strategy.eval(stream, **loader), stream)
    seconds = time.time() - start
    return [dict(row, model="composed", eval_exp=k, accuracy=a, eval_seconds=seconds) for k, a in accs.items()]


def _progress_path(progress_dir: str, settings: Dict[str, Any], group: MethodGroup) -> str:
    """Where a finished method group's rows are kept, named by everything that decides
    them (the run's settings, the seed, the group and its rows), so a re-run with other
    settings never picks up a stale result."""
    settings = dict(settings, group=group.name)
    key = hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]
    return os.path.join(progress_dir, f"{group.name}-{key}.json")


def _load_progress(path: str) -> Optional[List[Dict[str, Any]]]:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)["rows"]
    except (OSError, ValueError, KeyError):
        return None  # absent, or unreadable: train the group again


def _save_progress(path: str, rows: List[Dict[str, Any]]) -> None:
    with report.atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"rows": rows}, f)


def final_accuracies(rows: Sequence[Dict[str, Any]], after_task: int) -> Dict[str, float]:
    """Row name -> composed accuracy on the whole evaluation stream after the last experience."""
    return {r["method"]: r["accuracy"] for r in rows
            if r["model"] == "composed" and r["eval_exp"] == "all" and r["after_task"] == after_task}


def _trial_config(cfg: TrainConfig, unit: str, lr: float, epochs: int) -> TrainConfig:
    """``cfg`` with tuning unit ``unit`` trained at ``lr`` for ``epochs``."""
    return replace(cfg, tuned=dict(cfg.tuned, **{unit: (lr, epochs)}))


def tune_config(run: RunConfig, options: Options, train, top, cfg: TrainConfig, units: Sequence[str], *,
                progress_dir: str) -> Tuple[TrainConfig, List[Trial], Dict[str, Trial]]:
    """``cfg`` with each tuning unit's learning rate and epochs chosen on a validation split
    of ``train`` (:mod:`benchmarks.tuning`), and every trial. Each trial is kept under
    ``progress_dir`` so an interrupted tuning resumes; trials run in ``options.jobs``
    processes."""
    grid = TuningGrid.from_dict(run.tune or {})
    fit, val = validation_split(train, grid.val_fraction, seed=options.data_seed)
    bm = make_scenario(run.scenario, fit, val, run.tasks, seed=options.data_seed, class_order=run.class_order,
                       shards=run.shards)
    print(f"  tuning on a validation split: {len(fit)} train / {len(val)} validation samples (from the training "
          f"set), {len(grid.trials('tangent'))} trials per unit ({', '.join(units)}), "
          + (f"lr x0.1 at {', '.join(f'{f:g}' for f in grid.decay_at)} of the epochs" if grid.decay_at else
             "no learning-rate decay"), flush=True)
    groups = {g.name: g for g in method_groups()}
    trial_cfg = replace(cfg, decay_at=grid.decay_at,
                        bn_batches=first_experience_batches(bm, cfg.batch_size) if options.bn_data != "none" else None)
    key = progress_key(run, options, cfg.seed)

    def run_trial(trial: Tuple[str, float, int]) -> Dict[str, float]:
        unit, lr, epochs = trial
        group = groups[REPRESENTATIVE[unit]]
        path = _progress_path(progress_dir, dict(key, trial=[unit, lr, epochs], decay_at=grid.decay_at), group)
        rows = None if options.restart else _load_progress(path)
        if rows is None:
            try:
                with contextlib.redirect_stdout(io.StringIO()):  # the trial's per-experience lines
                    rows = run_group(group, group.row_names, bm, top, _trial_config(trial_cfg, unit, lr, epochs),
                                     dict(scenario=run.scenario), os.path.join(progress_dir, "tuning-logs"),
                                     components=False)
            except DivergenceError as error:  # a learning rate too high for this unit: scored 0
                print(f"    {unit:13s} lr {lr:g}, {epochs} epochs: diverged ({error})", flush=True)
                rows = [dict(method=m, model="composed", eval_exp="all", after_task=run.tasks, accuracy=0.0)
                        for m in group.row_names]
            _save_progress(path, rows)
        accs = final_accuracies(rows, run.tasks)
        print(f"    {unit:13s} lr {lr:g}, {epochs} epochs: validation "
              + "  ".join(f"{m} {a:.3f}" for m, a in accs.items()), flush=True)
        return accs

    chosen, trials = tune(units, grid, run_trial, lambda keys: _in_order(keys, run_trial, options))
    tuned = dict(cfg.tuned, **{u: (t.lr, t.epochs) for u, t in chosen.items()})
    cfg = replace(cfg, decay_at=grid.decay_at, tuned=tuned)
    print("  chosen: " + "; ".join(
        f"{u} lr {t.lr:g}, {t.epochs} epochs (validation {t.score:.3f}"
        + (f"; on the edge of the grid: {', '.join(edges(t, grid))}" if edges(t, grid) else "") + ")"
        for u, t in chosen.items()), flush=True)
    return cfg, trials, chosen


def _cost(trial: Tuple[str, float, int]) -> float:
    """A rough relative cost of a tuning trial, to start the longest first."""
    unit, _, epochs = trial
    return epochs * (2.0 if unit in ("der", "er") else 1.0)


def _in_order(trials: List[Tuple[str, float, int]], function, options: Options) -> List[Dict[str, float]]:
    """``function`` of every trial over ``options.jobs`` processes, the longest first, the
    results in the order of ``trials``."""
    order = sorted(range(len(trials)), key=lambda i: -_cost(trials[i]))
    results = run_tasks(function, [trials[i] for i in order], options.jobs, options.threads, options.deterministic)
    by_index = dict(zip(order, results))
    return [by_index[i] for i in range(len(trials))]


def _hyper_parameters(group: MethodGroup, cfg: TrainConfig) -> Dict[str, Any]:
    """The learning rate and epochs ``group`` trained with (results columns)."""
    if group.family == "training-free":
        return dict(lr="", epochs=1)
    used = config_for(group, cfg)
    return dict(lr=used.lr_tangent if group.family == "tangent" else used.lr, epochs=used.epochs)


def regime_label(freeze_until: Any) -> str:
    """How much of the network a run trains, as the results name it."""
    return "whole network" if str(freeze_until).lower() in ("none", "") else f"from {freeze_until}"


# Rough relative cost of a method group's training, to start the longest first (jobs).
_GROUP_COST = {"der": 6, "er": 5, "ewc": 5, "lwf": 5, "independent": 4, "adapt": 4, "joint": 3, "joint-tangent": 3,
               "tangent": 3, "tme": 3, "tmc-seq": 3, "naive": 2, "tmc-fc": 1}


def run_one(run: RunConfig, options: Options, out_dir: str) -> Tuple[List[Dict[str, Any]], List[Dict]]:
    """All method groups of one (dataset, scenario, tasks, regime) run over its seeds: its
    result rows (one per seed) and, when the run is tuned, its tuning trials."""
    groups = groups_for(list(run.methods), own_tme=run.tme_beta is not None)
    train, test, top = prepare(run, data_root=options.data_root, weights=options.weights)
    if options.decoded_cache:  # before the scenario wraps them (preflight: image folders only)
        train, test = (decode_once(d, num_workers=options.workers) for d in (train, test))
    bm = make_scenario(run.scenario, train, test, run.tasks, seed=options.data_seed, class_order=run.class_order,
                       shards=run.shards)
    task_stream = task_test_stream(train, test, run.tasks, seed=options.data_seed,
                                   class_order=run.class_order) if run.task_il else None
    # groups whose training reads task labels (LwF, joint training) train the task-IL column themselves
    task_run = run.replace(scenario="task", task_il=False) if run.task_il else None
    task_bm = make_scenario("task", train, test, run.tasks, seed=options.data_seed, class_order=run.class_order) \
        if any(group.task_aware for group, _ in groups) and task_run is not None else None
    cached = str(run.freeze_until).lower() not in ("none", "")
    loader = {} if cached else loader_options(options)  # cached features are tensors: no decoding to share
    show_progress = options.progress if options.progress is not None else not cached
    classes = num_classes(train)
    bn_batches = first_experience_batches(bm, run.batch_size) if options.bn_data != "none" else None
    cfg = train_config(run, options, num_classes=classes, seed=run.seeds[0], bn_batches=bn_batches)
    old_head, new_head = head_parameter_counts(top, classes)
    trained = sum(p.numel() for p in top.parameters()) - old_head + new_head
    print(f"[{run.dataset}] {run.scenario}-incremental, {run.tasks} experiences, {classes} classes, "
          f"{trained / 1e6:.2f} M trained parameters, "
          + ("learning rate and epochs per tuning unit tuned below" if run.tune is not None else
             f"{cfg.epochs} epochs/experience, Adam lr {cfg.lr_tangent} (tangent), SGD lr {cfg.lr} (non-linear)"
             + (f", tuned: {_tuned_text(run.tuned)}" if run.tuned else ""))
          + f", batch {cfg.batch_size}, RSL beta {cfg.beta}"
          + (f" (TME: its own components, beta {run.tme_beta})" if run.tme_beta is not None else "")
          + (f", linearized from {run.linearize_from}" if run.linearize_from else "")
          + (f", decay on delta {run.decay:g} ({run.decay_kind})" if run.decay else "")
          + (f", {run.transforms} transforms" if run.transforms != "square" else "")
          + (f", {options.workers} loader workers" if loader else "")
          + (f", autocast {options.amp}" if options.amp else "")
          + (", tangent BatchNorm statistics from the first experience" if cfg.bn_batches is not None else "")
          + (", also evaluated task-incrementally (the same training under the task mask)" if run.task_il else "")
          + f"; seeds {', '.join(map(str, run.seeds))}; {options.jobs} job(s) x {options.threads} thread(s)",
          flush=True)
    progress_dir = os.path.join(out_dir, "progress")
    trials: List[Trial] = []
    chosen: Dict[str, Trial] = {}
    if run.tune is not None:  # on the first seed's training randomness
        units = sorted({tuning_unit(g) for g, _ in groups} & set(REPRESENTATIVE), key=list(REPRESENTATIVE).index)
        cfg, trials, chosen = tune_config(run, options, train, top, cfg, units, progress_dir=progress_dir)
    base_row = dict(dataset=run.dataset, scenario=run.scenario, tasks=run.tasks, backbone=run.backbone,
                    regime=regime_label(run.freeze_until), trained_params=trained,
                    tuned="yes" if trials else (run.tuned_by or "no"))
    pieces = [(seed, group, rows, run) for seed in run.seeds for group, rows in groups]
    if task_bm is not None:
        pieces += [(seed, group, rows, task_run) for seed in run.seeds for group, rows in groups if group.task_aware]
    order = {(seed, group.name, piece_run.scenario): i for i, (seed, group, _, piece_run) in enumerate(pieces)}
    tasks = sorted(pieces, key=lambda t: -_GROUP_COST.get(t[1].name, 1))

    def do(task) -> List[Dict[str, Any]]:
        seed, group, rows, piece_run = task
        seed_cfg = replace(cfg, seed=seed)
        progress = _progress_path(progress_dir, progress_key(piece_run, options, seed), group)
        done = None if options.restart else _load_progress(progress)
        if done is not None:
            print(f"  seed {seed} {'+'.join(rows):18s} finished by an earlier run: kept from {progress} "
                  "(--restart to retrain)", flush=True)
            return done
        own_task_run = piece_run.scenario == "task" and task_bm is not None  # (a copy in a job's process)
        group_rows = run_group(group, rows, task_bm if own_task_run else bm, top, seed_cfg,
                               dict(base_row, scenario=piece_run.scenario, seed=seed,
                                    **_hyper_parameters(group, seed_cfg)),
                               os.path.join(out_dir, "logs", piece_run.label, f"seed{seed}"), verbose=options.verbose,
                               loggers=options.loggers, parallel=options.parallel, loader=loader,
                               progress=show_progress,
                               task_stream=None if own_task_run or group.task_aware else task_stream)
        _save_progress(progress, group_rows)  # a kill after this point does not lose the group
        return group_rows

    done = run_tasks(do, tasks, options.jobs, options.threads, options.deterministic)
    results = [row for _, rows in sorted(zip(tasks, done), key=lambda td: order[(td[0][0], td[0][1].name,
                                                                                  td[0][3].scenario)])
               for row in rows]
    grid = TuningGrid.from_dict(run.tune or {}) if trials else None
    trial_rows = [dict(dataset=run.dataset, scenario=run.scenario, tasks=run.tasks, regime=base_row["regime"],
                       family=t.family, lr=t.lr, epochs=t.epochs, validation_accuracy=t.score,
                       chosen="yes" if chosen.get(t.family) is t else "no",
                       edge=", ".join(edges(t, grid)) if chosen.get(t.family) is t else "",
                       rows=" ".join(f"{m}={a:.4f}" for m, a in t.accuracies.items())) for t in trials]
    return results, trial_rows


def _tuned_text(tuned) -> str:
    return ", ".join(f"{unit} {lr:g} / {epochs} epochs" for unit, (lr, epochs) in tuned.items())


def check_writable(out_dir: str) -> None:
    """Refuse, before any training, an output folder that cannot be created or written."""
    try:
        os.makedirs(out_dir, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out_dir, prefix=".write-check-"):
            pass
    except OSError as error:
        raise Refusal(f"The output folder {out_dir!r} is not writable ({error.strerror or error}); "
                         "choose another with --out.") from None


def main(argv: Optional[Sequence[str]] = None) -> List[Dict[str, Any]]:
    """Run every run of the preset / command line and write the report."""
    args = parse_args(argv)
    runs, options = resolve(args)
    preflight(runs, options)
    out_dir = options.out or os.path.join("results", args.preset or runs[0].dataset)
    check_writable(out_dir)
    if options.deterministic:
        torch.use_deterministic_algorithms(True)
        torch.set_num_threads(1)
    elif options.jobs <= 1 and options.threads:
        torch.set_num_threads(options.threads)
    start = time.time()
    rows: List[Dict[str, Any]] = []
    trials: List[Dict[str, Any]] = []
    from benchmarks import outdir  # the folder's lock, settings and status

    with outdir.claim(out_dir, runs, options) as folder:  # one invocation at a time, its settings only
        for name, run in zip(folder.planned, runs):
            run_rows, run_trials = run_one(run, options, out_dir)
            rows, trials = rows + run_rows, trials + run_trials
            folder.finished(name)
            # keep what is done if a later run fails; results.md and status.json name the runs still missing
            report.write_report(rows, out_dir, missing=folder.missing)
            if trials:
                report.write_tuning_csv(trials, os.path.join(out_dir, "tuning.csv"))
        paths = report.write_report(rows, out_dir)
        folder.complete()
        # The run is complete: its results are in results.csv. Progress files only serve to
        # resume an interrupted run; kept, they would hand a later re-run (after a code
        # change, say) stale results for the same settings.
        shutil.rmtree(os.path.join(out_dir, "progress"), ignore_errors=True)
    print("\n" + report.markdown_table(rows))
    print(f"\nTotal time {time.time() - start:.0f}s, {options.jobs} job(s) x {options.threads} thread(s) "
          f"({options.device}). Written: {', '.join(str(p) for p in paths.values())}")
    return rows


if __name__ == "__main__":
    sys.exit(command_line(main, "python -m benchmarks.run"))
