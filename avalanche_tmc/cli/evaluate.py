"""``avalanche-tmc evaluate``: the accuracy of a composition on the data's test stream."""

import argparse
import contextlib
import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

from .argtypes import check_device
from .arguments import add_command, factories_of, factory_arguments, files_argument, log_settings_of, logging_arguments
from .exits import EXIT_OK, UsageError
from .loading import Factories, stdout_to_stderr
from .logs import LogSettings, evaluator
from .outputs import read_components, read_key
from .strategies import Runtime, statistics_method, statistics_strategy, tangent_strategy

if TYPE_CHECKING:
    from torch import nn

    from ..files import Component
    from ..training.protocols import ComposableLearner

__all__ = ["NAME", "EVALUATED", "Evaluation", "register", "run", "evaluate_files", "evaluation_strategy"]

NAME = "evaluate"
POSITION = 50  # where --help lists it
"""The command's name."""


def register(commands: "argparse._SubParsersAction") -> argparse.ArgumentParser:
    """Add ``evaluate`` and its arguments."""
    evaluate = add_command(
        commands, NAME, "accuracy of a composition on the test data",
        "Compose the files (one composition file, or component files) onto the model and print the "
        "accuracy on every experience of the data's test stream and overall.")
    files_argument(evaluate, "composition or component files, or directories", json_output=True)
    evaluate.add_argument("--method", choices=EVALUATED, default="tmc",
                          help="tmc: the composition (the weighted sum of the components' deltas; composition or "
                               "component files); tme: the softmax ensemble of the components, each evaluated on "
                               "its own (tangent component files only: a composition file holds only their sum)")
    evaluate.add_argument("--quiet", action="store_true", help="no progress bars")
    factory_arguments(evaluate)
    logging_arguments(evaluate)
    return evaluate


EVALUATED = ("tmc", "tme")
"""``evaluate --method``'s choices: the composition, or the ensemble of the components (TME)."""


@dataclass(frozen=True)
class Evaluation:
    """The accuracy of a composition: per experience of the test stream and overall."""

    experiences: List[int]
    per_experience: List[Dict[str, Any]]
    accuracy: float
    samples: int


def run(args: argparse.Namespace) -> int:
    """``evaluate`` from its parsed arguments."""
    return evaluate_files(args.files, factories_of(args), log_settings_of(args, NAME), device=args.device,
                          eval_batch_size=args.eval_batch_size, as_json=args.json, quiet=args.quiet,
                          key_file=args.key_file, method=args.method)


def evaluation_strategy(composition: "Component", net: "nn.Module", factories: Factories,
                        runtime: Runtime) -> "ComposableLearner":
    """A strategy on the factory's network holding the composition (checked to fit it); it
    only evaluates, so it keeps the strategies' own training defaults."""
    from ..files import install_composition
    from ..files.bases import check_network

    check_network(composition, net, f"the network of {factories.model}")  # before it is linearized
    base = composition.base
    if composition.payload == "delta":
        names = [n for n, _ in base.get("linearized", [])]
        strategy = tangent_strategy(net, names or "all", runtime)
    else:
        strategy = statistics_strategy(net, statistics_method(base.get("head"), base.get("projection_dim")), runtime,
                                       base.get("projection_dim"), base.get("projection_seed", 0))
    install_composition(strategy, composition, f"the network of {factories.model} (options {factories.model_options})")
    return strategy


def _check_ensemble(components: Sequence["Component"]) -> None:
    """``--method tme`` needs the tangent component files themselves (an ensemble evaluates
    each on its own): a composition file or statistics are refused, saying what to give."""
    for component in components:
        if component.payload != "delta":
            raise UsageError(f"--method tme evaluates tangent components; {component.name()} holds a training-free "
                             "head's statistics (evaluate it with --method tmc).")
        if component.kind != "component":
            raise UsageError(f"--method tme evaluates the ensemble of the component files; {component.name()} is a "
                             "composition, which holds only their sum: give the component files it was composed "
                             "from (or use --method tmc).")


def evaluate_files(files: Sequence[str], factories: Factories, logging: LogSettings, device: str = "cpu",
                   eval_batch_size: int = 256, as_json: bool = False, quiet: bool = False,
                   key_file: Optional[str] = None, method: str = "tmc") -> int:
    """Print the accuracy of the composition of the files (``method="tme"``: of the softmax
    ensemble of the component files) on the data's test stream (the device, the files and
    the data are checked before the model factory is called)."""
    from ..files import component_paths, compose_components
    from ..training.plugins.progress import ProgressPlugin

    check_device(device)
    if method not in EVALUATED:
        raise UsageError(f"--method {method}: evaluate takes one of {', '.join(EVALUATED)}.")
    key = read_key(key_file)
    components = read_components(files, quiet, key)
    if method == "tme":
        _check_ensemble(components)
    composition = compose_components(components)
    # with --json, whatever the data, the model or Avalanche print while evaluating goes to stderr
    with stdout_to_stderr() if as_json else contextlib.nullcontext():
        stream = factories.benchmark().test_stream
        progress = ProgressPlugin(not quiet)
        runtime = Runtime(device, eval_batch_size, [progress], evaluator(logging, text_to_stderr=as_json))
        if method == "tme":
            from ..files.bases import check_network

            names = [n for n, _ in composition.base.get("linearized", [])]
            net = factories.network()
            check_network(composition, net, f"the network of {factories.model}")  # before it is linearized
            strategy = tangent_strategy(net, names or "all", runtime, name="tme")
            strategy.load_components(component_paths(files), key=key)
        else:
            strategy = evaluation_strategy(composition, factories.network(), factories, runtime)
        strategy.eval(stream)
    rows = [dict(experience=e, samples=progress.seen[e], accuracy=progress.correct[e] / progress.seen[e])
            for e in sorted(progress.seen)]
    total = sum(r["samples"] for r in rows)
    result = Evaluation(composition.experiences, rows,
                        sum(progress.correct.values()) / total if total else float("nan"), total)
    if as_json:
        print(json.dumps(dict(experiences=result.experiences, per_experience=result.per_experience,
                              accuracy=result.accuracy, samples=result.samples, method=method), indent=2))
    else:
        what = "ensemble (TME)" if method == "tme" else "composition"
        print(f"{what} of experiences {result.experiences} on the test stream:")
        print("experience   samples  accuracy")
        for r in rows:
            print(f"{r['experience']!s:>10}  {r['samples']:>8}  {r['accuracy']:8.4f}")
        print(f"{'all':>10}  {total:>8}  {result.accuracy:8.4f}")
    return EXIT_OK
