"""The runner's command line: ``python -m benchmarks.run``'s options (:func:`parse_args`,
with the argparse types that refuse a bad value) and the one place they are read
(:func:`resolve`): the runs to do, a preset's with every flag given applied
(:func:`resolve_runs`), and the options of the whole invocation.
"""

import argparse
import difflib
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence, Tuple

from avalanche_tmc.cli.argtypes import MAX_BATCH_SIZE, MAX_EPOCHS, MAX_SEED  # standard library only
from avalanche_tmc.cli.parser import Parser  # standard library only
from avalanche_tmc.loggers import LOGGERS, check_loggers  # standard library only
from benchmarks.protocol.setting_types import MAX_SEEDS, int_at_least
from benchmarks.protocol.settings import (
    MAX_IMAGE_SIZE,
    MAX_PROCESSES,
    MAX_TASKS,
    MAX_THREADS,
    SETTINGS,
    Setting,
    overriding_names,
    settings_of,
    untuning_names,
)
from benchmarks.runner.bounds import data_option_problem
from benchmarks.runner.presets import PILOT_SEEDS, PRESETS
from benchmarks.runner.refusals import Refusal

if TYPE_CHECKING:  # torch and Avalanche are imported once the command line is read: --help answers at once
    from benchmarks.runner.config import Options, RunConfig

__all__ = ["RUN_KEYS", "build_parser", "parse_args", "resolve", "resolve_runs", "MAX_SEEDS", "MAX_SEED", "MAX_TASKS",
           "MAX_EPOCHS", "MAX_BATCH_SIZE", "MAX_IMAGE_SIZE", "MAX_PROCESSES", "MAX_THREADS"]

RUN_KEYS: Tuple[str, ...] = overriding_names()
"""The run settings a flag of the same name overrides in every run of a preset (derived
from :data:`benchmarks.protocol.settings.SETTINGS`)."""
# The bounds the runner shares with the command line (avalanche_tmc.cli.argtypes): MAX_SEED (``--seed``,
# ``--seeds``, ``--data-seed``), MAX_EPOCHS (``--epochs`` and the latest of ``--milestones``), MAX_BATCH_SIZE.


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
    p = Parser(  # no abbreviations: "--resta" was --restart, and the Ctrl-C line's resume command restarted again
        prog="python -m benchmarks.run", formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False,
        description="Run the TMC comparison: every method of a preset (or of the run the flags define) over its "
                    "seeds,\nwriting results.csv, results.md (tables and verdicts) and plots under --out.",
        epilog="examples:\n  python -m benchmarks.run --preset offline                      # the main job\n"
               "  python -m benchmarks.run --preset c-caltech256-10 --data-root ~/data  # a paper run (GPU)\n"
               "A refusal (bad option, missing dataset, weights or package) is one line on stderr, exit code 2.")
    p.add_argument("--preset", default=None, help=f"one of: {', '.join(PRESETS)}")
    groups = {"": p,
              "recipe": p.add_argument_group(
                  "training recipe", "how the paper presets follow the authors' code (docs/paper-benchmarks.md, "
                  "'Reproducing the paper'); every paper preset sets them, the offline presets keep the defaults"),
              "feed": p.add_argument_group("input pipeline",
                                           "feeding an accelerator (image datasets trained end to end)")}
    for setting in SETTINGS:
        if setting.flag_name is not None:
            _add_flag(groups[setting.group], setting)
        if setting.name == "seeds":
            p.add_argument("--seed", type=int_at_least(0, MAX_SEED), default=None,
                           help=f"a single seed in 0..{MAX_SEED} (same as --seeds SEED,)")
        elif setting.name == "lr":
            p.add_argument("--unit", action="append", default=None, metavar="UNIT=LR:EPOCHS",
                           help="one tuning unit's own learning rate and epochs, e.g. tme=3e-4:40 (repeatable; the "
                                "units: tangent, non-linear, tme, er, der, joint, joint-tangent); it keeps the "
                                "preset's values of the other units")
        elif setting.name == "plot_formats":  # the two flags of Options.loggers
            p.add_argument("--logger", action="append", choices=LOGGERS, default=None,
                           help="Avalanche loggers of every method's metrics, under <out>/logs (repeatable; default "
                                "csv): text, csv, tensorboard (needs tensorboard), wandb (offline; needs wandb)")
        elif setting.name == "verbose":
            p.add_argument("--tensorboard", action="store_true",
                           help="same as --logger tensorboard (with the default csv)")
    return p


def _add_flag(parser: Any, setting: Setting) -> None:
    """``setting``'s flag: its declared argparse keywords, its value under its own name; a
    run setting's flag defaults to None (the preset's value), an invocation's to its default."""
    keywords = dict(setting.argument)
    keywords.setdefault("default", None if setting.scope == "run" else setting.default)
    parser.add_argument(setting.flag_name, dest=setting.name, help=setting.help, **keywords)


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
    values = {s.name: getattr(args, s.name) for s in settings_of("invocation") if s.flag_name is not None}
    values.update(device=args.device, loggers=tuple(loggers), jobs=jobs, threads=threads_per_job(jobs, threads),
                  workers=workers, plot_formats=tuple(args.plot_formats))
    options = Options(**values)
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
    if getattr(args, "data_options", None):
        options = {}
        for item in args.data_options:
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
    units = _units(getattr(args, "unit", None) or [])
    try:
        resolved = [RunConfig.from_dict(_with_units(_override(run, overrides), units)) for run in runs]
    except ValueError as error:
        raise Refusal(str(error)) from None
    from benchmarks.methods import groups_for  # (here: --help imports no torch)

    for run in resolved:
        try:
            trains_nothing = all(group.family == "training-free" for group, _ in groups_for(list(run.methods)))
        except ValueError:  # an unknown method: the preflight names the valid ones
            trains_nothing = False
        if run.tune is not None and trains_nothing:
            raise Refusal(f"--tune chooses learning rates and epochs, but {', '.join(run.methods)} train nothing "
                          "(training-free heads): drop --tune, or add a trained method.")
    pilot = set(PILOT_SEEDS.get(args.preset, ()))
    reused = sorted(pilot & {seed for run in resolved for seed in run.seeds})
    if reused:
        raise Refusal(f"--preset {args.preset} is a confirmatory run: seed(s) {', '.join(map(str, reused))} are its "
                      f"pilot's ({', '.join(map(str, sorted(pilot)))}, make demo), whose results sized it; run the "
                      "seeds fixed before its results (docs/preregistration.md), or others the pilot did not use.")
    data_seed = getattr(args, "data_seed", None) or 0
    pilot_orders = sorted(pilot & {data_seed + (seed if run.order_by_seed else 0) for run in resolved
                                   for seed in run.seeds})  # the pilot drew seed s's class order with data seed s
    if pilot and pilot_orders:
        raise Refusal(f"--preset {args.preset} is a confirmatory run: its seeds would draw the class orders or shards "
                      f"of data seed(s) {', '.join(map(str, pilot_orders))}, the pilot's "
                      f"({', '.join(map(str, sorted(pilot)))}), whose results sized it; keep the preset's --data-seed "
                      "and --order-by-seed.")
    return resolved


_UNTUNES = untuning_names()  # settings after whose change a run's fixed, tuned values no longer describe it


def _units(items: List[str]) -> Dict[str, Tuple[float, int]]:
    """``--unit UNIT=LR:EPOCHS`` items as ``{unit: (lr, epochs)}``; a refusal names what is wrong."""
    from benchmarks.methods import representatives

    known, units = representatives(), {}
    for item in items:
        unit, _, values = item.partition("=")
        lr, _, epochs = values.partition(":")
        if unit not in known:
            raise Refusal(f"--unit {item}: {unit!r} is not a tuning unit; the units: {', '.join(known)}")
        try:
            units[unit] = (float(lr), int(epochs))
        except ValueError:
            raise Refusal(f"--unit {item}: expected UNIT=LR:EPOCHS, e.g. tme=3e-4:40") from None
        if not 0 < units[unit][0] <= 10 or not 1 <= units[unit][1] <= MAX_EPOCHS:
            raise Refusal(f"--unit {item}: the learning rate must be in (0, 10] and the epochs in 1..{MAX_EPOCHS}")
    return units


def _with_units(run: Dict[str, Any], units: Dict[str, Tuple[float, int]]) -> Dict[str, Any]:
    """``run`` with ``--unit``'s values over its tuned ones, its note saying which were set here."""
    if not units:
        return run
    note = ", ".join(f"{unit} {lr:g} / {epochs}" for unit, (lr, epochs) in units.items())
    tuned_by = run.get("tuned_by")
    return dict(run, tuned=dict(run.get("tuned", {}), **units),
                tuned_by=f"{tuned_by}; {note} by --unit" if tuned_by else f"{note} by --unit")


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
