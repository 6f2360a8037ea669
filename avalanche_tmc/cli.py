"""``avalanche-tmc``: train, compose, forget, inspect and evaluate components as files.

The federated story in five commands (each silo runs its own; nothing but component
files travels)::

    avalanche-tmc train-component --experience 0 --out silo_a/       # silo A, its data
    avalanche-tmc train-component --experience 1 2 --out silo_b/     # silo B, its data
    avalanche-tmc compose silo_a/*.safetensors silo_b/*.safetensors --out composed.safetensors
    avalanche-tmc evaluate composed.safetensors
    avalanche-tmc forget composed.safetensors silo_b/experience-2.safetensors --out rest.safetensors

The network and the data come from two factories named ``module:function`` (an
installed module, or one on ``PYTHONPATH``) or ``path/to/file.py:function`` (a file, loaded
by its path), called with keyword arguments. The working directory is never searched: a
file there named like a package (``sklearn.py``) must not replace that package, so a
factory file in it is named by path (``./my_factories.py:model``). Keyword arguments:
``--model-option KEY=VALUE`` for the model, ``--data-option KEY=VALUE`` for the data, ``--option KEY=VALUE`` for both:

* ``--model`` returns the pre-trained network, its head sized for the classes (every
  silo must get the same weights: load them from a file, seed a new head);
* ``--data`` returns an Avalanche benchmark (``train_stream``, ``test_stream``); an
  experience id is an index into its training stream.

The defaults, ``avalanche_tmc.factories:digits_cnn`` and ``avalanche_tmc.factories:digits``,
are installed with the library and offline (scikit-learn's digits, a small CNN pre-trained
on digits the benchmark leaves out); :mod:`avalanche_tmc.factories` also has Avalanche's
classic benchmarks on local files (e.g. ``--data avalanche_tmc.factories:split_fmnist
--data-option dataset_root=DIR``) and torchvision/timm backbones.

Run ``train-component`` under ``torchrun --nproc_per_node=N`` to share the experiences
among N processes (:func:`~avalanche_tmc.distributed.train_parallel`); each process writes
the files of the experiences it trained.
"""

import argparse
import importlib
import json
import math
import os
import re
import sys
import tempfile
import textwrap
import traceback
from typing import TYPE_CHECKING, Any, Callable, Dict, List, Optional, Sequence, Union

from .loggers import LOGGERS  # standard library only: keeps --help fast

if TYPE_CHECKING:  # for the annotations only: importing them here would slow --help down
    from avalanche.core import SupervisedPlugin
    from avalanche.training.plugins import EvaluationPlugin
    from avalanche.training.templates import SupervisedTemplate
    from torch import nn

    from .files import Component
    from .training.protocols import ComposableLearner

__all__ = [
    "EXIT_OK", "EXIT_ERROR", "EXIT_USAGE", "EXIT_BAD_FILE", "EXIT_INCOMPATIBLE", "EXIT_FACTORY", "EXIT_TRAINING",
    "EXIT_PIPE",
    "FactoryError", "METHODS", "load_factory", "build_parser", "main",
]

EXIT_OK = 0
"""Success."""
EXIT_ERROR = 1
"""An unexpected error (a bug: the traceback is printed; please report it)."""
EXIT_USAGE = 2
"""A bad command line: unknown command or option, a missing argument, a value out of its
range, an experience id the data does not have, an ``--out`` that cannot be written or that
is one of the input files (``compose``, ``forget``: the same file by any path)."""
EXIT_BAD_FILE = 3
"""A file that cannot be used: missing, truncated, not a component file, corrupted or edited."""
EXIT_INCOMPATIBLE = 4
"""Files that do not combine: another base model, head size or linearized set, an
experience twice, the same content under two experience ids, files trained with different
``--weighting`` (``compose`` without ``--mixed-weighting``), forgetting a file that is not
in the composition; or an output file that exists (without ``--overwrite``), also one that
another process created while this one worked: of two writers exactly one succeeds."""
EXIT_FACTORY = 5
"""The model or data factory cannot be imported, fails, or rejects an ``--option``."""
EXIT_TRAINING = 6
"""Training failed: it diverged, or a rank of a parallel (torchrun) run failed; or the
process group could not be set up (an incomplete launcher environment)."""
EXIT_PIPE = 141
"""The output pipe was closed by the reader (``| head``): exits quietly (128 + SIGPIPE)."""

EXIT_CODES = """exit codes:
  0  success
  1  unexpected error (a bug; the traceback is printed)
  2  bad command line (unknown option, missing argument, a value out of range, unknown experience
     id, an --out that cannot be written or that is one of the input files)
  3  unusable file (missing, truncated, not an avalanche-tmc file, corrupted or edited)
  4  files that do not combine (other base model, head size or linearized set; an experience
     twice; the same content under two ids; different --weighting without --mixed-weighting;
     forgetting a file that is not in the composition); or an --out that exists, also one created
     by another process meanwhile (without --overwrite)
  5  the model or data factory cannot be imported, fails or rejects an --option
  6  training failed (diverged, or a rank of a torchrun run failed) or the torchrun set-up failed
     (e.g. WORLD_SIZE set without torchrun)
141  the output pipe was closed (e.g. '| head'): nothing more is printed"""

METHODS = ("tmc", "tmc-fc", "ridge", "ranpac", "ncm")
"""``--method``: tangent components (all parameters linearized, or the head only) or the
training-free heads' statistics (ridge, ridge on random ReLU features, nearest class mean)."""

DEFAULT_MODEL = "avalanche_tmc.factories:digits_cnn"
DEFAULT_DATA = "avalanche_tmc.factories:digits"
# ``--logger``: Avalanche's TextLogger (stdout), CSVLogger, TensorboardLogger and WandBLogger
# (offline mode) for the strategy's accuracy and loss metrics (avalanche_tmc.loggers)


class FactoryError(RuntimeError):
    """The model or data factory could not be imported or called."""


class UsageError(ValueError):
    """A command line that parses but cannot be carried out (exit code 2)."""


# ---------------------------------------------------------------------------- argument types (bad values: exit 2)


def _positive(kind: Callable[[str], float], allowed: str) -> Callable[[str], float]:
    """An argparse type: a ``kind`` (int or float) in (0, inf), else a usage error saying so."""
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            value = math.nan
        if not 0 < value < math.inf:
            raise argparse.ArgumentTypeError(f"{allowed}, got {text!r}")
        return value

    parse.__name__ = allowed
    return parse


_POSITIVE_FLOAT = _positive(float, "must be a positive finite number")
_POSITIVE_INT = _positive(int, "must be an integer >= 1")


def _experience_id(text: str) -> Union[int, str]:
    """``--experience``: an integer >= 0 (an index into the training stream) or ``all``."""
    if text == "all":
        return text
    if not re.fullmatch(r"\d+", text):
        raise argparse.ArgumentTypeError(f"an experience id is an integer >= 0 or 'all', got {text!r}")
    return int(text)


def _device(text: str) -> str:
    """``--device``: cpu, cuda, cuda:N, mps, xpu or xpu:N (checked to exist before any work)."""
    if not re.fullmatch(r"cpu|cuda(:\d+)?|mps|xpu(:\d+)?", text):
        raise argparse.ArgumentTypeError(f"must be cpu, cuda, cuda:N, mps, xpu or xpu:N, got {text!r}")
    return text


def _check_device(device: str) -> None:
    import torch

    kind, _, index = device.partition(":")
    backend = getattr(torch, kind, None) if kind != "cpu" else None
    if backend is not None and (not backend.is_available() or (index and int(index) >= backend.device_count())):
        raise UsageError(f"--device {device}: no such device on this machine (use --device cpu).")


# ---------------------------------------------------------------------------- factories


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def parse_options(pairs: Sequence[str], flag: str = "--option") -> Dict[str, Any]:
    """``["n_experiences=5", "dataset_root=/data"]`` -> ``{"n_experiences": 5, "dataset_root":
    "/data"}`` (values read as JSON when they parse, else as strings)."""
    options = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.isidentifier():
            raise UsageError(f"{flag} takes KEY=VALUE with KEY a Python name, got {pair!r}.")
        options[key] = _parse_value(value)
    return options


def load_factory(spec: str) -> Callable[..., Any]:
    """The function named by ``"module:function"`` (an importable module; the working
    directory is not searched) or ``"path/to/file.py:function"`` (that file, loaded by its
    path). Raises :class:`FactoryError` with what went wrong."""
    target, sep, function = spec.rpartition(":")
    if not sep or not target or not function:
        raise FactoryError(f"A factory is named 'module:function' or 'path/to/file.py:function', got {spec!r}.")
    module = _factory_file(target, spec) if _names_a_file(target) else _factory_module(target, function, spec)
    try:
        return getattr(module, function)
    except AttributeError:
        raise FactoryError(f"{target!r} has no function {function!r} (factory {spec!r}).") from None


def _names_a_file(target: str) -> bool:
    return target.endswith(".py") or "/" in target or os.sep in target


def _factory_module(name: str, function: str, spec: str) -> Any:
    """An installed (or ``PYTHONPATH``) module, imported without the working directory."""
    try:
        return importlib.import_module(name)
    except ImportError as error:
        local = os.path.join(*name.split(".")) + ".py"
        hint = (f" The command line does not import from the working directory (a file there could shadow an "
                f"installed package); name the file instead: {local if os.sep in local else './' + local}:{function}."
                if os.path.isfile(local) else " Name an installed module (e.g. avalanche_tmc.factories:digits) or a "
                "file by its path (./my_factories.py:model).")
        raise FactoryError(f"Cannot import {name!r} for factory {spec!r}: {error}.{hint}") from None


def _factory_file(target: str, spec: str) -> Any:
    """The Python file ``target`` as a module of its own (registered under a private name,
    so that pickling and dataclasses inside it work); its imports see the usual path."""
    import hashlib
    import importlib.util

    path = os.path.abspath(os.path.expanduser(target))
    if not os.path.isfile(path):
        raise FactoryError(f"No factory file {target!r} (factory {spec!r}): give the path of a .py file that defines "
                           "the function.")
    name = "avalanche_tmc_factory_" + hashlib.sha256(path.encode()).hexdigest()[:12]
    if name in sys.modules:
        return sys.modules[name]
    module_spec = importlib.util.spec_from_file_location(name, path)
    if module_spec is None or module_spec.loader is None:
        raise FactoryError(f"Cannot load {target!r} as Python (factory {spec!r}): name a .py file.")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except Exception as error:  # noqa: BLE001  (any failure of the user's file is reported as such)
        del sys.modules[name]
        raise FactoryError(f"Loading the factory file {target!r} failed: {type(error).__name__}: {error}") from error
    return module


def _call_factory(spec: str, options: Dict[str, Any], what: str) -> Any:
    factory = load_factory(spec)
    try:
        result = factory(**options)
    except Exception as error:  # noqa: BLE001  (any failure of the user's factory is reported as such)
        raise FactoryError(f"The {what} factory {spec} failed with options {options}: "
                           f"{type(error).__name__}: {error}") from error
    return result


def _network(args: argparse.Namespace) -> "nn.Module":
    from torch import nn

    net = _call_factory(args.model, args.model_options, "model")
    if not isinstance(net, nn.Module):
        raise FactoryError(f"The model factory {args.model} returned a {type(net).__name__}, not an nn.Module.")
    return net


def _benchmark(args: argparse.Namespace) -> Any:
    bm = _call_factory(args.data, args.data_options, "data")
    if not hasattr(bm, "train_stream") or not hasattr(bm, "test_stream"):
        raise FactoryError(f"The data factory {args.data} returned a {type(bm).__name__}, not an Avalanche benchmark "
                           "with train_stream and test_stream.")
    return bm


# ---------------------------------------------------------------------------- progress


def _progress_plugin(enabled: bool, position: int = 0) -> "SupervisedPlugin":
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

        def _open(self, strategy: "SupervisedTemplate", desc: str, total: int) -> None:
            self.bar = tqdm(total=total, desc=desc, unit="batch", disable=not enabled, position=position,
                            leave=False, file=sys.stderr)

        def _close(self) -> None:
            if self.bar is not None:
                self.bar.close()
                self.bar = None

        def before_training_epoch(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
            exp = strategy.experience.current_experience
            self._open(strategy, f"experience {exp}, epoch {strategy.clock.train_exp_epochs + 1}/"
                                 f"{strategy.train_epochs}", len(strategy.dataloader))

        def after_training_iteration(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
            if self.bar is not None:
                self.bar.update(1)

        def after_training_epoch(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
            self._close()

        def before_eval_exp(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
            self._open(strategy, f"evaluating experience {strategy.experience.current_experience}",
                       len(strategy.dataloader))

        def after_eval_iteration(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
            exp = strategy.experience.current_experience
            right = int((strategy.mb_output.argmax(1) == strategy.mb_y).sum())
            self.correct[exp] = self.correct.get(exp, 0) + right
            self.seen[exp] = self.seen.get(exp, 0) + len(strategy.mb_y)
            if self.bar is not None:
                self.bar.update(1)

        def after_eval_exp(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
            self._close()

    return Progress()


# ---------------------------------------------------------------------------- logging


def _speaks(args: argparse.Namespace, rank: int) -> bool:
    """Whether this process prints: rank 0 of a torchrun job, or every rank with --all-ranks."""
    return rank == 0 or bool(getattr(args, "all_ranks", False))


def _evaluator(args: argparse.Namespace, rank: int = 0, world: int = 1) -> Optional["EvaluationPlugin"]:
    """Avalanche's ``EvaluationPlugin`` with accuracy and loss metrics (per epoch, experience
    and stream) sent to the ``--logger`` loggers; None (no metrics) without ``--logger``.
    Files go under ``--log-dir`` (``rank-<r>/`` per process of a torchrun job); text goes
    to stdout from the processes that print (:func:`_speaks`); WandB runs offline
    (``WANDB_MODE=offline`` unless set), its files in ``--log-dir/wandb``."""
    names = list(dict.fromkeys(getattr(args, "logger", None) or []))
    if not names:
        return None
    from .loggers import MissingLoggerPackage, check_loggers, make_loggers

    try:
        check_loggers(names)
    except MissingLoggerPackage as error:
        raise UsageError(str(error)) from None
    from avalanche.evaluation.metrics import accuracy_metrics
    from avalanche.training.plugins import EvaluationPlugin

    from .training.metrics import loss_metrics  # named for their loss: RSL_Loss_*, CE_Loss_*

    log_dir = args.log_dir if world == 1 else os.path.join(args.log_dir, f"rank-{rank}")
    # appended to: a silo that trains one experience per call keeps every call's rows
    loggers = make_loggers(names, log_dir, f"{args.command}-rank{rank}",
                           text_stream=sys.stdout if _speaks(args, rank) else None, resume=True)
    metrics = dict(epoch=True, experience=True, stream=True)
    return EvaluationPlugin(accuracy_metrics(**metrics), loss_metrics(**metrics), loggers=loggers)


def _gather_written(written: Optional[List[str]], world: int) -> List[Optional[List[str]]]:
    """Every process's written files, in rank order (one collective; only under torchrun)."""
    if world == 1:
        return [written]
    import torch.distributed as dist

    everyone = [None] * world
    dist.all_gather_object(everyone, written)
    return everyone


# ---------------------------------------------------------------------------- strategies


def _head_size(net: "nn.Module") -> int:
    from .tangent import find_head

    return int(net.get_submodule(find_head(net)).out_features)


def _tangent_strategy(net: "nn.Module", method: str, args: argparse.Namespace, plugins: List["SupervisedPlugin"],
                      linearize: Union[None, str, List[str]] = None) -> "ComposableLearner":
    from .tangent import TangentModel
    from .training.strategies.tangent import TMCStrategy

    model = TangentModel(net, linearize=linearize or ("head" if method == "tmc-fc" else "all"))
    return TMCStrategy(model=model, lr=args.lr, beta=args.beta, weighting=args.weighting, train_mb_size=args.batch_size,
                       train_epochs=args.epochs, eval_mb_size=args.eval_batch_size, device=args.device,
                       plugins=plugins, evaluator=getattr(args, "evaluator", None))


def _analytic_model(net: "nn.Module", head: str, projection_dim: Optional[int], seed: int = 0) -> "nn.Module":
    from .models.analytic import AnalyticClassifier, penultimate

    return AnalyticClassifier(penultimate(net), _head_size(net), head=head, projection_dim=projection_dim, seed=seed)


def _analytic_strategy(model: "nn.Module", args: argparse.Namespace,
                       plugins: List["SupervisedPlugin"]) -> "ComposableLearner":
    from .training.strategies.analytic import AnalyticHeadStrategy

    return AnalyticHeadStrategy(model=model, train_mb_size=args.eval_batch_size, eval_mb_size=args.eval_batch_size,
                                device=args.device, plugins=plugins, evaluator=getattr(args, "evaluator", None))


def _strategy_for_method(net: "nn.Module", args: argparse.Namespace,
                         plugins: List["SupervisedPlugin"]) -> "ComposableLearner":
    if args.method in ("tmc", "tmc-fc"):
        return _tangent_strategy(net, args.method, args, plugins)
    head = "ncm" if args.method == "ncm" else "ridge"
    projection = args.projection_dim if args.method == "ranpac" else None
    return _analytic_strategy(_analytic_model(net, head, projection, args.seed), args, plugins)


# ---------------------------------------------------------------------------- commands


def _shown(path: Any) -> str:
    """A file name as errors print it, control characters escaped (the component files' one helper)."""
    from .files.component import _shown as shown

    return shown(path)


def _check_writable(directory: str, what: str) -> None:
    """Create ``directory`` if needed and write a file there: an unusable output is found
    before any training, not after."""
    try:
        os.makedirs(directory, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as error:
        raise UsageError(f"{what} {_shown(directory)} cannot be written ({_shown(error.strerror or error)}).") \
            from None


def _check_output(path: str, overwrite: bool) -> None:
    if os.path.isdir(path):
        raise UsageError(f"{_shown(path)} is a directory; --out names the file to write.")
    if os.path.lexists(path) and not overwrite:
        from .files import ComponentExistsError

        raise ComponentExistsError(f"{_shown(path)} exists; pass --overwrite to replace it.")
    _check_writable(os.path.dirname(os.path.abspath(path)), "the directory of --out")


def _check_not_an_input(out: str, inputs: Sequence[str]) -> None:
    """Refuse an ``--out`` that is one of the input files (the same file by another path, a
    symlink or a hard link included): with ``--overwrite`` it would replace an input, maybe
    the only copy of a component, by the result."""
    if not os.path.exists(out):
        return  # not an input: every input exists
    for path in inputs:
        try:
            same = os.path.samefile(out, path)
        except OSError:
            same = os.path.realpath(out) == os.path.realpath(path)
        if same:
            raise UsageError(f"--out {_shown(out)} is the input file {_shown(path)}: writing the result there would "
                             "replace an input (perhaps the only copy of a component). Write it to another file.")


def _key(args: argparse.Namespace) -> Optional[bytes]:
    """The key of ``--key-file`` (None: the library then reads ``$AVALANCHE_TMC_KEY_FILE``)."""
    from .files import read_key_file

    return read_key_file(args.key_file) if getattr(args, "key_file", None) else None


def cmd_train_component(args: argparse.Namespace) -> int:
    """Train the named experiences and write one component file per experience.

    Every argument is checked before anything slow: the options and the device first (torch
    only, before Avalanche's import of several seconds), then the experience ids and outputs
    against the data factory's benchmark, and only then is the model factory called (the
    default one pre-trains a network)."""
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise UsageError(f"--out {args.out} is a file; train-component writes experience-<id>.safetensors files into "
                         "a directory.")
    if "all" in args.experience and len(args.experience) > 1:
        raise UsageError("--experience takes 'all' or experience ids, not both.")
    twice = sorted({e for e in args.experience if args.experience.count(e) > 1})
    if twice:
        raise UsageError(f"--experience names {twice} more than once.")
    _check_writable(args.out, "--out")
    _check_device(args.device)
    key = _key(args)
    from .distributed import init_parallel, shutdown_parallel, train_parallel  # Avalanche: seconds
    from .files import save_component, strategy_components

    rank, world = init_parallel(timeout=args.timeout)
    try:
        bm = _benchmark(args)
        stream = list(bm.train_stream)
        known = [exp.current_experience for exp in stream]
        wanted = known if args.experience == ["all"] else list(args.experience)
        unknown = [e for e in wanted if e not in known]
        if unknown:
            raise UsageError(f"Experience(s) {unknown} are not in the data's training stream (ids {known}).")
        paths = {e: os.path.join(args.out, f"experience-{e}.safetensors") for e in wanted}
        for path in paths.values():
            _check_output(path, args.overwrite)
        progress = _progress_plugin(not args.quiet and _speaks(args, rank), position=rank if args.all_ranks else 0)
        args.evaluator = _evaluator(args, rank, world)
        strategy = _strategy_for_method(_network(args), args, [progress])
        experiences = [stream[known.index(e)] for e in wanted]
        report = train_parallel(strategy, experiences, seed=args.seed, timeout=args.timeout)
        mine = set(report.assignment[rank])
        written, failure = [], None
        try:
            for component in strategy_components(strategy):
                if component.experience in mine:
                    component.settings.update(method=args.method, seed=args.seed)
                    written.append(save_component(component, paths[component.experience], overwrite=args.overwrite,
                                                  key=key))
        except Exception as error:  # noqa: BLE001  (raised below, after the other processes heard of it)
            failure = error
        everyone = _gather_written(written if failure is None else None, world)  # no process waits for ever
        if failure is not None:
            raise failure
        # rank 0 lists every process's files; with --all-ranks each process lists its own
        shown = list(enumerate(everyone)) if rank == 0 and not args.all_ranks else [(rank, written)]
        for r, files in shown if _speaks(args, rank) else []:
            for path in files or []:
                print(f"wrote {path}" + (f" (rank {r})" if world > 1 else ""))
        if rank == 0 and world > 1:
            print(f"{len(wanted)} experiences on {world} processes: " + "; ".join(
                f"rank {r}: {ids}" for r, ids in report.assignment.items()))
    finally:
        shutdown_parallel()
    return EXIT_OK


def _read(paths: Sequence[str], quiet: bool, key: Optional[bytes] = None) -> List["Component"]:
    from tqdm import tqdm

    from .files import component_paths, load_component

    files = component_paths(paths)
    if not files:
        raise UsageError(f"No .safetensors files in {[_shown(p) for p in paths]}.")
    return [load_component(p, key=key) for p in tqdm(files, desc="reading", unit="file",
                                                      disable=quiet or len(files) < 2, file=sys.stderr)]


def cmd_compose(args: argparse.Namespace) -> int:
    """Compose component (and composition) files into one composition file."""
    from .files import component_paths, compose_components, save_component

    _check_output(args.out, args.overwrite)
    _check_not_an_input(args.out, component_paths(args.files))
    key = _key(args)
    composition = compose_components(_read(args.files, args.quiet, key), mixed_weighting=args.mixed_weighting)
    save_component(composition, args.out, overwrite=args.overwrite, key=key)
    print(f"wrote {_shown(args.out)}: experiences {composition.experiences}, total weight {composition.weight:g}")
    return EXIT_OK


def cmd_forget(args: argparse.Namespace) -> int:
    """Subtract component files from a composition file."""
    from .files import component_paths, forget_component, load_component, save_component

    _check_output(args.out, args.overwrite)
    _check_not_an_input(args.out, [args.composition, *component_paths(args.components)])
    key = _key(args)
    composition = load_component(args.composition, key=key)
    for component in _read(args.components, args.quiet, key):
        composition = forget_component(composition, component)
    save_component(composition, args.out, overwrite=args.overwrite, key=key)
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
    lines.append("  signature: " + dict(verified="verified with the key", absent="absent").get(
        info["signature"], "present, not verified (no key given: --key-file checks it)"))
    return "\n".join(lines)


def cmd_inspect(args: argparse.Namespace) -> int:
    """Print what each file holds."""
    from .files import describe

    infos = [describe(c) for c in _read(args.files, True, _key(args))]
    print(json.dumps(infos, indent=2) if args.json else "\n".join(_summary(i) for i in infos))
    return EXIT_OK


def _evaluation_strategy(composition: "Component", net: "nn.Module", args: argparse.Namespace,
                         progress: "SupervisedPlugin") -> "ComposableLearner":
    """A strategy on the factory's network holding the composition (checked to fit it)."""
    from .files import install_composition

    base = composition.base
    if composition.payload == "delta":
        names = [n for n, _ in base.get("linearized", [])]
        strategy = _tangent_strategy(net, "tmc", args, [progress], linearize=names)
    else:
        model = _analytic_model(net, base.get("head"), base.get("projection_dim"), base.get("projection_seed", 0))
        strategy = _analytic_strategy(model, args, [progress])
    install_composition(strategy, composition, f"the network of {args.model} (options {args.model_options})")
    return strategy


def cmd_evaluate(args: argparse.Namespace) -> int:
    """Accuracy of the composition of the files on the data's test stream (the device, the
    files and the data are checked before the model factory is called)."""
    from .files import compose_components

    _check_device(args.device)
    composition = compose_components(_read(args.files, args.quiet, _key(args)))
    stream = _benchmark(args).test_stream
    progress = _progress_plugin(not args.quiet)
    args.evaluator = _evaluator(args)
    strategy = _evaluation_strategy(composition, _network(args), args, progress)
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
                       help="factory returning the pre-trained network, its head sized for the classes: an installed "
                            "module's function or path/to/file.py:function (the working directory is not searched)")
    group.add_argument("--data", default=DEFAULT_DATA, metavar="MODULE:FUNCTION",
                       help="factory returning an Avalanche benchmark (train_stream, test_stream): module:function "
                            "or path/to/file.py:function")
    group.add_argument("--model-option", action="append", default=[], metavar="KEY=VALUE",
                       help="keyword argument of the model factory (repeat it); VALUE is read as JSON if it parses, "
                            "e.g. --model-option num_classes=10")
    group.add_argument("--data-option", action="append", default=[], metavar="KEY=VALUE",
                       help="keyword argument of the data factory (repeat it), e.g. --data-option n_experiences=5 "
                            "--data-option dataset_root=/usr/share/datasets/fashion-mnist")
    group.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                       help="keyword argument of both factories (e.g. a seed both take)")
    group.add_argument("--device", default="cpu", type=_device, help="torch device: cpu, cuda, cuda:N, mps, xpu")
    group.add_argument("--eval-batch-size", type=_POSITIVE_INT, default=256,
                       help="batch size of evaluation and statistics")


def _output_arguments(parser: argparse.ArgumentParser, metavar: str, written: str, replaced: str) -> None:
    parser.add_argument("--out", required=True, metavar=metavar, help=written)
    parser.add_argument("--overwrite", action="store_true", help=f"replace {replaced}")
    parser.add_argument("--quiet", action="store_true", help="no progress bars")


def _logging_arguments(parser: argparse.ArgumentParser, ranks: bool = False) -> None:
    group = parser.add_argument_group("logging")
    group.add_argument("--logger", action="append", choices=LOGGERS, default=[],
                       help="log accuracy and loss with Avalanche's logger (repeat it for several): text (stdout), "
                            "csv, tensorboard (needs tensorboard), wandb (offline; needs wandb)")
    group.add_argument("--log-dir", default="avalanche-tmc-logs", metavar="DIR",
                       help="directory of the csv, tensorboard and wandb logs (rank-<r>/ per torchrun process); "
                            "the csv files are appended to, so calls into one directory keep each other's rows")
    if ranks:
        group.add_argument("--all-ranks", action="store_true",
                           help="under torchrun, every process prints (its files, progress, text log); by default "
                                "only rank 0 does")


def _files_argument(parser: argparse.ArgumentParser, what: str, json_output: bool = False) -> None:
    parser.add_argument("files", nargs="+", metavar="FILE", help=what)
    if json_output:
        parser.add_argument("--json", action="store_true", help="print JSON")


def _command(commands: "argparse._SubParsersAction", name: str, run: Callable[[argparse.Namespace], int], summary: str,
             description: str) -> argparse.ArgumentParser:
    """A subcommand with its one-line ``summary``, wrapped ``description``, the exit codes
    below its options, and ``run`` as what it does."""
    parser = commands.add_parser(name, formatter_class=_Formatter, epilog=EXIT_CODES, help=summary,
                                 description=textwrap.fill(description, 88))
    parser.set_defaults(run=run)
    parser.add_argument("--key-file", metavar="FILE", default=None,
                        help="shared key (at least 16 bytes) of the federation: files written are signed with it "
                             "(HMAC-SHA256), files read must be signed with it; default: the file named by "
                             "$AVALANCHE_TMC_KEY_FILE, else no signatures")
    return parser


def build_parser() -> argparse.ArgumentParser:
    """The ``avalanche-tmc`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="avalanche-tmc", formatter_class=argparse.RawDescriptionHelpFormatter,
        description=textwrap.fill(
                    "Train tangent components (or head statistics) one experience at a time, in separate places, "
                    "and compose, forget, inspect and evaluate them as safetensors files. The network and the data "
                    "come from --model and --data factories ('module:function', called with the --model-option "
                    "and --data-option pairs); the defaults are installed and offline: scikit-learn's digits in 5 "
                    "class-incremental experiences and a small CNN pre-trained on other digits "
                    "(avalanche_tmc.factories:digits_cnn and :digits). avalanche_tmc.factories also has Avalanche's "
                    "classic benchmarks on local files (split_mnist, split_fmnist, split_cifar10, split_cifar100) "
                    "and torchvision/timm backbones.", 88),
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
    train.add_argument("--experience", nargs="+", required=True, metavar="ID", type=_experience_id,
                       help="experience ids (indices of the training stream) this silo trains, or 'all'")
    train.add_argument("--method", choices=METHODS, default="tmc",
                       help="tmc: tangent component of every parameter; tmc-fc: of the head only; ridge, ranpac, "
                            "ncm: a training-free head's statistics")
    train.add_argument("--lr", type=_POSITIVE_FLOAT, default=1e-2,
                       help="Adam learning rate (tangent methods). The default, 1e-2, suits the default --model "
                            "(a small digits CNN with a new head: 0.31 accuracy against 0.02 at 1e-4); the "
                            "library's default (avalanche_tmc.DEFAULT_LR) is the paper's 1e-4, which does no harm "
                            "to a trained network of your own, where 1e-2 can wreck it (a LossIncreaseWarning "
                            "then says so). Choose it on a validation split")
    train.add_argument("--epochs", type=_POSITIVE_INT, default=5,
                       help="epochs per experience, the strategies' train_epochs (tangent methods; the default 5 "
                            "suits the default --model; in Python train_epochs keeps Avalanche's default, 1)")
    train.add_argument("--batch-size", type=_POSITIVE_INT, default=32, help="training batch size (tangent methods)")
    train.add_argument("--beta", type=_POSITIVE_FLOAT, default=25.0,
                       help="RSL target: 25 class/task-incremental, 5 data")
    train.add_argument("--weighting", choices=("mean", "samples"), default="mean",
                       help="component weight: 1 each, or the experience's sample count")
    train.add_argument("--projection-dim", type=_POSITIVE_INT, default=2000, help="random features of --method ranpac")
    train.add_argument("--seed", type=int, default=0,
                       help="experience e trains with torch.manual_seed(seed + e): the same file wherever it runs")
    train.add_argument("--timeout", type=_POSITIVE_FLOAT, default=3600.0,
                       help="under torchrun: seconds a process waits for the others before failing")
    _output_arguments(train, "DIR", "directory for the component files", "existing component files")
    _factory_arguments(train)
    _logging_arguments(train, ranks=True)

    compose = _command(
        commands, "compose", cmd_compose, "compose files into a composition file",
        "Sum component files (and composition files) into one composition file: S = sum of w_t delta_t "
        "and W = sum of w_t (statistics: their sum). Every file must come from the same base model; an "
        "experience may appear once.")
    _files_argument(compose, "component or composition files, or directories")
    _output_arguments(compose, "FILE", "the composition file to write", "--out if it exists")
    compose.add_argument("--mixed-weighting", action="store_true",
                         help="compose files trained with different --weighting (mean: weight 1 each; samples: "
                              "sample counts) anyway; refused by default (exit 4): their weights are not on one scale")

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
    _logging_arguments(evaluate)
    evaluate.set_defaults(lr=1e-3, beta=25.0, weighting="mean", batch_size=32, epochs=1)
    return parser


def _training_errors() -> tuple:
    """``DivergenceError`` (raised by every learner whose training diverges: tangent, analytic
    head, adaptation) and ``ParallelTrainingError``, from their modules if a command imported
    them (an error of a module never imported cannot occur, and importing them would cost
    compose, forget and inspect Avalanche's start-up of several seconds)."""
    return tuple(getattr(sys.modules[module], name) for module, name in (
        ("avalanche_tmc.training.divergence", "DivergenceError"),
        ("avalanche_tmc.distributed", "ParallelTrainingError")) if module in sys.modules)


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command line; returns the exit code (see :data:`EXIT_CODES`)."""
    import warnings

    # (Avalanche's qpsolvers warning is filtered by avalanche_tmc/__init__.py, precisely)
    warnings.filterwarnings("ignore", message="No loggers specified", category=UserWarning, module="avalanche")
    parser = build_parser()
    args = parser.parse_args(argv)  # before the heavy imports: --help and usage errors answer at once

    from .files import ComponentExistsError, ComponentFileError, IncompatibleComponentsError

    failures = ((UsageError, EXIT_USAGE), (ComponentFileError, EXIT_BAD_FILE),
                ((IncompatibleComponentsError, ComponentExistsError), EXIT_INCOMPATIBLE), (FactoryError, EXIT_FACTORY),
                (_training_errors, EXIT_TRAINING))
    try:
        if hasattr(args, "option"):
            both = parse_options(args.option)
            args.model_options = {**both, **parse_options(args.model_option, "--model-option")}
            args.data_options = {**both, **parse_options(args.data_option, "--data-option")}
        code = args.run(args)
        sys.stdout.flush()  # a closed pipe is found here, not in the interpreter's shutdown
        return code
    except KeyboardInterrupt:
        print("avalanche-tmc: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # the reader closed the pipe (| head): stop printing, quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_PIPE
    except Exception as error:  # noqa: BLE001  (mapped to documented exit codes)
        for kinds, code in failures:
            if isinstance(error, kinds() if callable(kinds) and not isinstance(kinds, type) else kinds):
                print(f"avalanche-tmc {args.command}: error: {error}", file=sys.stderr)
                return code
        traceback.print_exc()
        print(f"avalanche-tmc {args.command}: unexpected error (exit {EXIT_ERROR}); please report it with the "
              "traceback above.", file=sys.stderr)
        return EXIT_ERROR


def entry_point() -> None:
    """The ``avalanche-tmc`` console script (and ``python -m avalanche_tmc``)."""
    from ._safe_path import drop_working_directory

    drop_working_directory()
    sys.exit(main())


if __name__ == "__main__":
    entry_point()
