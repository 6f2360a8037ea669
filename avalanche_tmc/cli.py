"""``avalanche-tmc``: train, compose, forget, inspect and evaluate components as files.

The federated story in five commands (each silo runs its own; nothing but component
files travels)::

    avalanche-tmc train-component --experience 0 --out silo_a/       # silo A, its data
    avalanche-tmc train-component --experience 1 2 --out silo_b/     # silo B, its data
    avalanche-tmc compose silo_a/*.safetensors silo_b/*.safetensors --out composed.safetensors
    avalanche-tmc evaluate composed.safetensors
    avalanche-tmc forget composed.safetensors silo_b/experience-2.safetensors --out rest.safetensors

The network and the data come from two factories named ``module:function`` (imported
with the current directory on the path, as ``python -m`` does), called with the
``--option KEY=VALUE`` pairs as keyword arguments:

* ``--model`` returns the pre-trained network, its head sized for the classes (every
  silo must get the same weights: load them from a file, seed a new head);
* ``--data`` returns an Avalanche benchmark (``train_stream``, ``test_stream``); an
  experience id is an index into its training stream.

The defaults, ``benchmarks.factories:model`` and ``benchmarks.factories:data``, are the
project checkout's offline benchmark (scikit-learn's digits, EfficientNet-Lite0 at 32 px
with the trunk frozen; ``--option dataset=... --option tasks=...`` and the rest of
:mod:`benchmarks.factories`): they work from a checkout. The library itself never imports
``benchmarks``.

Run ``train-component`` under ``torchrun --nproc_per_node=N`` to share the experiences
among N processes (:func:`~avalanche_tmc.distributed.train_parallel`); each process writes
the files of the experiences it trained.
"""

import argparse
import importlib
import json
import os
import sys
import textwrap
import traceback
from typing import Any, Callable, Dict, Optional, Sequence

__all__ = [
    "EXIT_OK", "EXIT_ERROR", "EXIT_USAGE", "EXIT_BAD_FILE", "EXIT_INCOMPATIBLE", "EXIT_FACTORY", "EXIT_TRAINING",
    "FactoryError", "METHODS", "load_factory", "build_parser", "main",
]

EXIT_OK = 0
"""Success."""
EXIT_ERROR = 1
"""An unexpected error (a bug: the traceback is printed; please report it)."""
EXIT_USAGE = 2
"""A bad command line: unknown command or option, a missing argument, an experience id the
data does not have, an output file that exists (without ``--overwrite``)."""
EXIT_BAD_FILE = 3
"""A file that cannot be used: missing, truncated, not a component file, corrupted or edited."""
EXIT_INCOMPATIBLE = 4
"""Files that do not combine: another base model, head size or linearized set, an
experience twice, forgetting a file that is not in the composition."""
EXIT_FACTORY = 5
"""The model or data factory cannot be imported, fails, or rejects an ``--option``."""
EXIT_TRAINING = 6
"""Training failed: it diverged, or a rank of a parallel (torchrun) run failed."""

EXIT_CODES = """exit codes:
  0  success
  1  unexpected error (a bug; the traceback is printed)
  2  bad command line (unknown option, missing argument, unknown experience id, output exists)
  3  unusable file (missing, truncated, not an avalanche-tmc file, corrupted or edited)
  4  files that do not combine (other base model, head size or linearized set; an experience
     twice; forgetting a file that is not in the composition)
  5  the model or data factory cannot be imported, fails or rejects an --option
  6  training failed (diverged, or a rank of a torchrun run failed)"""

METHODS = ("tmc", "tmc-fc", "ridge", "ranpac", "ncm")
"""``--method``: tangent components (all parameters linearized, or the head only) or the
training-free heads' statistics (ridge, ridge on random ReLU features, nearest class mean)."""

DEFAULT_MODEL = "benchmarks.factories:model"
DEFAULT_DATA = "benchmarks.factories:data"


class FactoryError(RuntimeError):
    """The model or data factory could not be imported or called."""


class UsageError(ValueError):
    """A command line that parses but cannot be carried out (exit code 2)."""


# ---------------------------------------------------------------------------- factories


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_options(pairs: Sequence[str]) -> Dict[str, Any]:
    """``["tasks=5", "dataset=digits"]`` -> ``{"tasks": 5, "dataset": "digits"}`` (values
    read as JSON when they parse, else as strings)."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier():
            raise UsageError(f"--option takes KEY=VALUE with KEY a Python name, got {pair!r}.")
        options[key] = _parse_value(value)
    return options


def load_factory(spec: str) -> Callable[..., Any]:
    """The function named by ``"module:function"``, imported with the current directory on
    the path. Raises :class:`FactoryError` with what went wrong."""
    module_name, sep, function = spec.partition(":")
    if not sep or not module_name or not function:
        raise FactoryError(f"A factory is named 'module:function', got {spec!r}.")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        hint = (" The default factories live in the project checkout's `benchmarks` package: run from the checkout, "
                "or name your own with --model/--data.") if module_name.startswith("benchmarks") else ""
        raise FactoryError(f"Cannot import {module_name!r} for factory {spec!r}: {error}.{hint}") from None
    try:
        return getattr(module, function)
    except AttributeError:
        raise FactoryError(f"{module_name!r} has no function {function!r} (factory {spec!r}).") from None


def _call_factory(spec: str, options: Dict[str, Any], what: str):
    factory = load_factory(spec)
    try:
        result = factory(**options)
    except Exception as error:  # noqa: BLE001  (any failure of the user's factory is reported as such)
        raise FactoryError(f"The {what} factory {spec} failed with options {options}: "
                           f"{type(error).__name__}: {error}") from error
    return result


def _network(args):
    from torch import nn

    net = _call_factory(args.model, args.options, "model")
    if not isinstance(net, nn.Module):
        raise FactoryError(f"The model factory {args.model} returned a {type(net).__name__}, not an nn.Module.")
    return net


def _benchmark(args):
    bm = _call_factory(args.data, args.options, "data")
    if not hasattr(bm, "train_stream") or not hasattr(bm, "test_stream"):
        raise FactoryError(f"The data factory {args.data} returned a {type(bm).__name__}, not an Avalanche benchmark "
                           "with train_stream and test_stream.")
    return bm


# ---------------------------------------------------------------------------- progress


def _progress_plugin(enabled: bool, position: int = 0):
    """A plugin showing a tqdm bar per training or evaluation experience (on stderr) and
    counting evaluation accuracy per experience."""
    from avalanche.core import SupervisedPlugin
    from tqdm import tqdm

    class Progress(SupervisedPlugin, supports_distributed=True):
        def __init__(self):
            super().__init__()
            self.bar = None
            self.correct: Dict[int, int] = {}
            self.seen: Dict[int, int] = {}

        def _open(self, strategy, desc: str, total: int) -> None:
            self.bar = tqdm(total=total, desc=desc, unit="batch", disable=not enabled, position=position,
                            leave=False, file=sys.stderr)

        def _close(self) -> None:
            if self.bar is not None:
                self.bar.close()
                self.bar = None

        def before_training_epoch(self, strategy, **kwargs):
            exp = strategy.experience.current_experience
            self._open(strategy, f"experience {exp}, epoch {strategy.clock.train_exp_epochs + 1}/"
                                 f"{strategy.train_epochs}", len(strategy.dataloader))

        def after_training_iteration(self, strategy, **kwargs):
            if self.bar is not None:
                self.bar.update(1)

        def after_training_epoch(self, strategy, **kwargs):
            self._close()

        def before_eval_exp(self, strategy, **kwargs):
            self._open(strategy, f"evaluating experience {strategy.experience.current_experience}",
                       len(strategy.dataloader))

        def after_eval_iteration(self, strategy, **kwargs):
            exp = strategy.experience.current_experience
            right = int((strategy.mb_output.argmax(1) == strategy.mb_y).sum())
            self.correct[exp] = self.correct.get(exp, 0) + right
            self.seen[exp] = self.seen.get(exp, 0) + len(strategy.mb_y)
            if self.bar is not None:
                self.bar.update(1)

        def after_eval_exp(self, strategy, **kwargs):
            self._close()

    return Progress()


# ---------------------------------------------------------------------------- strategies


def _head_size(net) -> int:
    from .tangent import find_head

    return int(net.get_submodule(find_head(net)).out_features)


def _tangent_strategy(net, method: str, args, plugins, linearize=None):
    from .strategies import TMCStrategy
    from .tangent import TangentModel

    model = TangentModel(net, linearize=linearize or ("head" if method == "tmc-fc" else "all"))
    return TMCStrategy(model=model, lr=args.lr, beta=args.beta, weighting=args.weighting, train_mb_size=args.batch_size,
                       train_epochs=args.epochs, eval_mb_size=args.eval_batch_size, device=args.device,
                       plugins=plugins, evaluator=None)


def _analytic_model(net, head: str, projection_dim, seed: int = 0):
    from .analytic import AnalyticClassifier, penultimate

    return AnalyticClassifier(penultimate(net), _head_size(net), head=head, projection_dim=projection_dim, seed=seed)


def _analytic_strategy(model, args, plugins):
    from .analytic import AnalyticHeadStrategy

    return AnalyticHeadStrategy(model=model, train_mb_size=args.eval_batch_size, eval_mb_size=args.eval_batch_size,
                                device=args.device, plugins=plugins, evaluator=None)


def _strategy_for_method(net, args, plugins):
    if args.method in ("tmc", "tmc-fc"):
        return _tangent_strategy(net, args.method, args, plugins)
    head = "ncm" if args.method == "ncm" else "ridge"
    projection = args.projection_dim if args.method == "ranpac" else None
    return _analytic_strategy(_analytic_model(net, head, projection, args.seed), args, plugins)


# ---------------------------------------------------------------------------- commands


def _check_output(path: str, overwrite: bool) -> None:
    if os.path.exists(path) and not overwrite:
        raise UsageError(f"{path} exists; pass --overwrite to replace it.")


def cmd_train_component(args) -> int:
    """Train the named experiences and write one component file per experience."""
    from .component_files import save_component, strategy_components
    from .distributed import init_parallel, shutdown_parallel, train_parallel

    rank, world = init_parallel(timeout=args.timeout)
    try:
        bm = _benchmark(args)
        stream = list(bm.train_stream)
        known = [exp.current_experience for exp in stream]
        wanted = known if args.experience == ["all"] else [_parse_value(e) for e in args.experience]
        unknown = [e for e in wanted if e not in known]
        if unknown:
            raise UsageError(f"Experience(s) {unknown} are not in the data's training stream (ids {known}).")
        paths = {e: os.path.join(args.out, f"experience-{e}.safetensors") for e in wanted}
        for path in paths.values():
            _check_output(path, args.overwrite)
        progress = _progress_plugin(not args.quiet, position=rank)
        strategy = _strategy_for_method(_network(args), args, [progress])
        experiences = [stream[known.index(e)] for e in wanted]
        report = train_parallel(strategy, experiences, seed=args.seed, timeout=args.timeout)
        mine = set(report.assignment[rank])
        written = []
        for component in strategy_components(strategy):
            if component.experience in mine:
                component.settings.update(method=args.method, seed=args.seed)
                written.append(save_component(component, paths[component.experience]))
        for path in written:
            print(f"wrote {path}" + (f" (rank {rank})" if world > 1 else ""))
        if rank == 0 and world > 1:
            print(f"{len(wanted)} experiences on {world} processes: " + "; ".join(
                f"rank {r}: {ids}" for r, ids in report.assignment.items()))
    finally:
        shutdown_parallel()
    return EXIT_OK


def _read(paths: Sequence[str], quiet: bool):
    from tqdm import tqdm

    from .component_files import component_paths, load_component

    files = component_paths(paths)
    if not files:
        raise UsageError(f"No .safetensors files in {list(paths)}.")
    return [load_component(p) for p in tqdm(files, desc="reading", unit="file", disable=quiet or len(files) < 2,
                                                   file=sys.stderr)]


def cmd_compose(args) -> int:
    """Compose component (and composition) files into one composition file."""
    from .component_files import compose_components, save_component

    _check_output(args.out, args.overwrite)
    composition = compose_components(_read(args.files, args.quiet))
    save_component(composition, args.out)
    print(f"wrote {args.out}: experiences {composition.experiences}, total weight {composition.weight:g}")
    return EXIT_OK


def cmd_forget(args) -> int:
    """Subtract component files from a composition file."""
    from .component_files import forget_component, load_component, save_component

    _check_output(args.out, args.overwrite)
    composition = load_component(args.composition)
    for component in _read(args.components, args.quiet):
        composition = forget_component(composition, component)
    save_component(composition, args.out)
    print(f"wrote {args.out}: experiences {composition.experiences}, total weight {composition.weight:g}")
    return EXIT_OK


def _summary(info: Dict[str, Any]) -> str:
    base, settings = info["base"], info["settings"]
    what = (f"component of experience {info['experiences'][0]}" if info["kind"] == "component"
            else f"composition of experiences {info['experiences']}")
    classes = "; ".join(f"task {t}: {c}" for t, c in info["classes"].items()) or "unknown"
    lines = [f"{info['file']}: {what}, {info['payload']}, weight {info['weight']:g}",
             f"  classes: {classes}",
             f"  tensors: {info['tensors']} ({info['values']:,} values, {info['bytes']:,} bytes), "
             f"sha256 {info['sha256'][:16]}",
             f"  base: {base.get('architecture')}, weights {str(base.get('weights_sha256'))[:16]}, head size "
             f"{base.get('head_size')}" + (f", {len(base['linearized'])} linearized parameters ({base.get('dtype')})"
                                           if "linearized" in base else f", head {base.get('head')}, projection "
                                                                         f"{base.get('projection_dim')}")]
    if settings:
        lines.append("  settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()))
    return "\n".join(lines)


def cmd_inspect(args) -> int:
    """Print what each file holds."""
    from .component_files import describe

    infos = [describe(c) for c in _read(args.files, True)]
    print(json.dumps(infos, indent=2) if args.json else "\n".join(_summary(i) for i in infos))
    return EXIT_OK


def _evaluation_strategy(composition, net, args, progress):
    """A strategy on the factory's network holding the composition (checked to fit it)."""
    from .component_files import check_same_base, composed_delta, model_reference
    from .plugin import TaskMaskPlugin

    name = f"the network of {args.model} (options {args.options})"
    if composition.payload == "delta":
        names = [n for n, _ in composition.base.get("linearized", [])]
        strategy = _tangent_strategy(net, "tmc", args, [progress], linearize=names)
        check_same_base(model_reference(strategy.model, name), composition)
        strategy.tangent_plugin.install_component(strategy.model, "composition", composed_delta(composition), 1.0,
                                                  composition.classes)
        return strategy
    base = composition.base
    model = _analytic_model(net, base.get("head"), base.get("projection_dim"), base.get("projection_seed", 0))
    check_same_base(model_reference(model, name), composition)
    strategy = _analytic_strategy(model, args, [progress])
    if composition.members:
        model.fit(composition.tensors)
    for plugin in strategy.plugins:
        if isinstance(plugin, TaskMaskPlugin):
            plugin.record_task_classes(composition.classes)
    return strategy


def cmd_evaluate(args) -> int:
    """Accuracy of the composition of the files on the data's test stream."""
    from .component_files import compose_components

    composition = compose_components(_read(args.files, args.quiet))
    progress = _progress_plugin(not args.quiet)
    strategy = _evaluation_strategy(composition, _network(args), args, progress)
    stream = _benchmark(args).test_stream
    strategy.eval(stream)
    rows = [dict(experience=e, samples=progress.seen[e], accuracy=progress.correct[e] / progress.seen[e])
            for e in sorted(progress.seen)]
    total = sum(r["samples"] for r in rows)
    overall = sum(progress.correct.values()) / total if total else float("nan")
    if args.json:
        print(json.dumps(dict(experiences=composition.experiences, per_experience=rows, accuracy=overall,
                              samples=total), indent=2))
    else:
        print(f"composition of experiences {composition.experiences} on the test stream:")
        print("experience   samples  accuracy")
        for r in rows:
            print(f"{r['experience']!s:>10}  {r['samples']:>8}  {r['accuracy']:8.4f}")
        print(f"{'all':>10}  {total:>8}  {overall:8.4f}")
    return EXIT_OK


# ---------------------------------------------------------------------------- parser


class _Formatter(argparse.RawDescriptionHelpFormatter, argparse.ArgumentDefaultsHelpFormatter):
    pass


def _factory_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model and data (the same on every silo)")
    group.add_argument("--model", default=DEFAULT_MODEL, metavar="MODULE:FUNCTION",
                       help="factory returning the pre-trained network, its head sized for the classes")
    group.add_argument("--data", default=DEFAULT_DATA, metavar="MODULE:FUNCTION",
                       help="factory returning an Avalanche benchmark (train_stream, test_stream)")
    group.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                       help="keyword argument for both factories (repeat it); VALUE is read as JSON if it parses, "
                            "e.g. --option dataset=digits --option tasks=5")
    group.add_argument("--device", default="cpu", help="torch device")
    group.add_argument("--eval-batch-size", type=int, default=256, help="batch size of evaluation and statistics")


def _output_arguments(parser: argparse.ArgumentParser, metavar: str, written: str, replaced: str) -> None:
    parser.add_argument("--out", required=True, metavar=metavar, help=written)
    parser.add_argument("--overwrite", action="store_true", help=f"replace {replaced}")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def _files_argument(parser: argparse.ArgumentParser, what: str, json_output: bool = False) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help=what)
    if json_output:
        parser.add_argument("--json", action="store_true", help="print JSON")


def _command(commands, name: str, run, summary: str, description: str) -> argparse.ArgumentParser:
    """A subcommand with its one-line ``summary``, wrapped ``description``, the exit codes
    below its options, and ``run`` as what it does."""
    parser = commands.add_parser(name, formatter_class=_Formatter, epilog=EXIT_CODES, help=summary,
                                 description=textwrap.fill(description, 88))
    parser.set_defaults(run=run)
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The ``avalanche-tmc`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="avalanche-tmc", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=textwrap.fill(
                    "Train tangent components (or head statistics) one experience at a time, in separate places, "
                    "and compose, forget, inspect and evaluate them as safetensors files. The network and the data "
                    "come from --model and --data factories ('module:function', called with the --option pairs); "
                    "the defaults are this checkout's offline benchmark (scikit-learn's digits, EfficientNet-Lite0 "
                    "at 32 px, 5 class-incremental experiences; run from the checkout).", 88),
        epilog="example (two silos and a composer):\n"
               "  avalanche-tmc train-component --experience 0 --out silo_a/\n"
               "  avalanche-tmc train-component --experience 1 2 --out silo_b/\n"
               "  avalanche-tmc compose silo_a silo_b --out composed.safetensors\n"
               "  avalanche-tmc evaluate composed.safetensors\n"
               "  avalanche-tmc forget composed.safetensors silo_b/experience-2.safetensors --out rest.safetensors\n"
               "\n'avalanche-tmc COMMAND --help' describes each command.\n\n" + EXIT_CODES)
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    train = _command(
        commands, "train-component", cmd_train_component,
        "train experiences of the data and write one component file each",
        "Train each named experience of the data's training stream on its own, from the pre-trained "
        "network, and write it to DIR/experience-<id>.safetensors (DIR: --out). Run it under 'torchrun "
        "--nproc_per_node=N' to share the experiences among N processes (gloo on CPU, NCCL on GPU); "
        "each process writes the files of the experiences it trained.")
    train.add_argument("--experience", nargs="+", required=True, metavar="ID",
                       help="experience ids (indices of the training stream) this silo trains, or 'all'")
    train.add_argument("--method", choices=METHODS, default="tmc",
                       help="tmc: tangent component of every parameter; tmc-fc: of the head only; ridge, ranpac, "
                            "ncm: a training-free head's statistics")
    train.add_argument("--lr", type=float, default=1e-2, help="Adam learning rate (tangent methods)")
    train.add_argument("--epochs", type=int, default=5, help="epochs per experience (tangent methods)")
    train.add_argument("--batch-size", type=int, default=32, help="training batch size (tangent methods)")
    train.add_argument("--beta", type=float, default=25.0, help="RSL target: 25 class/task-incremental, 5 data")
    train.add_argument("--weighting", choices=("mean", "samples"), default="mean",
                       help="component weight: 1 each, or the experience's sample count")
    train.add_argument("--projection-dim", type=int, default=2000, help="random features of --method ranpac")
    train.add_argument("--seed", type=int, default=0,
                       help="experience e trains with torch.manual_seed(seed + e): the same file wherever it runs")
    train.add_argument("--timeout", type=float, default=3600.0,
                       help="under torchrun: seconds a process waits for the others before failing")
    _output_arguments(train, "DIR", "directory for the component files", "existing component files")
    _factory_arguments(train)

    compose = _command(
        commands, "compose", cmd_compose, "compose files into a composition file",
        "Sum component files (and composition files) into one composition file: S = sum of w_t delta_t "
        "and W = sum of w_t (statistics: their sum). Every file must come from the same base model; an "
        "experience may appear once.")
    _files_argument(compose, "component or composition files, or directories")
    _output_arguments(compose, "FILE", "the composition file to write", "--out if it exists")

    forget = _command(
        commands, "forget", cmd_forget, "remove components from a composition file",
        "Subtract component files from a composition file, exactly: the result equals composing the "
        "remaining components. Each file must be the very file that was composed.")
    forget.add_argument("composition", metavar="COMPOSITION", help="the composition file")
    forget.add_argument("components", nargs="+", metavar="FILE", help="component files to forget")
    _output_arguments(forget, "FILE", "the new composition file", "--out if it exists")

    inspect = _command(
        commands, "inspect", cmd_inspect, "list what files hold",
        "Print each file's kind, experiences and classes, weight, size, training settings and base "
        "model (reading never executes anything in a file).")
    _files_argument(inspect, "files or directories", json_output=True)

    evaluate = _command(
        commands, "evaluate", cmd_evaluate, "accuracy of a composition on the test data",
        "Compose the files (one composition file, or component files) onto the model and print the "
        "accuracy on every experience of the data's test stream and overall.")
    _files_argument(evaluate, "composition or component files, or directories", json_output=True)
    evaluate.add_argument("--quiet", action="store_true", help="no progress bars")
    _factory_arguments(evaluate)
    evaluate.set_defaults(lr=1e-3, beta=25.0, weighting="mean", batch_size=32, epochs=1)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; returns the exit code (see :data:`EXIT_CODES`)."""
    import warnings

    from .component_files import ComponentFileError, IncompatibleComponentsError
    from .distributed import ParallelTrainingError
    from .plugin import DivergenceError

    warnings.filterwarnings("ignore", message="no QP solver found")
    warnings.filterwarnings("ignore", message="No loggers specified")
    parser = build_parser()
    args = parser.parse_args(argv)
    failures = ((UsageError, EXIT_USAGE), (ComponentFileError, EXIT_BAD_FILE),
                (IncompatibleComponentsError, EXIT_INCOMPATIBLE), (FactoryError, EXIT_FACTORY),
                ((DivergenceError, ParallelTrainingError), EXIT_TRAINING))
    try:
        if hasattr(args, "option"):
            args.options = parse_options(args.option)
        return args.run(args)
    except KeyboardInterrupt:
        print("avalanche-tmc: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # noqa: BLE001  (mapped to documented exit codes)
        for kinds, code in failures:
            if isinstance(error, kinds):
                print(f"avalanche-tmc {args.command}: error: {error}", file=sys.stderr)
                return code
        traceback.print_exc()
        print(f"avalanche-tmc {args.command}: unexpected error (exit {EXIT_ERROR}); please report it with the "
              "traceback above.", file=sys.stderr)
        return EXIT_ERROR


def entry_point() -> None:
    """The ``avalanche-tmc`` console script."""
    sys.exit(main())


if __name__ == "__main__":
    entry_point()
