"""The strategies the commands train and evaluate with, built by name from the library's
strategy registry (:mod:`avalanche_tmc.training.registry`): ``--method`` is any
registered strategy whose components can be written as files."""

from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Optional, Sequence, Tuple, Union

if TYPE_CHECKING:
    from avalanche.core import SupervisedPlugin
    from avalanche.training.plugins import EvaluationPlugin
    from torch import nn

    from ..training.protocols import ComposableLearner

__all__ = ["methods", "Runtime", "TangentTraining", "tangent_strategy", "statistics_strategy", "statistics_method",
           "check_start_at", "strategy_for_method"]


def methods() -> Tuple[str, ...]:
    """``--method``'s choices: the registered strategies that write component files (tangent
    components with every parameter or the head alone linearized; the training-free heads'
    statistics: ridge, ridge on random ReLU features, nearest class mean)."""
    from ..training.registry import list_strategies

    return list_strategies(component_files=True)


@dataclass(frozen=True)
class Runtime:
    """Where and how a strategy runs: ``--device``, ``--eval-batch-size``, its plugins and
    its evaluator (None: no metrics)."""

    device: str = "cpu"
    eval_batch_size: int = 256
    plugins: Sequence["SupervisedPlugin"] = ()
    evaluator: Optional["EvaluationPlugin"] = None


@dataclass(frozen=True)
class TangentTraining:
    """``train-component``'s settings of a tangent method."""

    lr: float = 1e-2
    beta: float = 25.0
    weighting: str = "mean"
    batch_size: int = 32
    epochs: int = 5


def _runtime_options(runtime: Runtime) -> dict:
    return dict(eval_mb_size=runtime.eval_batch_size, device=runtime.device, plugins=list(runtime.plugins),
                evaluator=runtime.evaluator)


def tangent_strategy(net: "nn.Module", linearize: Union[str, List[str]], runtime: Runtime,
                     training: Optional[TangentTraining] = None, name: str = "tmc",
                     start_at: Optional[str] = None) -> "ComposableLearner":
    """The registry's ``name`` (``tmc``; ``tme`` to evaluate the ensemble) on ``net`` with
    ``linearize`` linearized from module ``start_at`` on (None: from the first parameter);
    ``training`` None: one that only evaluates (the strategy's own training defaults, never
    used)."""
    from ..training.registry import create_strategy

    trains = {} if training is None else dict(
        lr=training.lr, beta=training.beta, weighting=training.weighting, train_mb_size=training.batch_size,
        train_epochs=training.epochs)
    where = {} if start_at is None else dict(start_at=start_at)
    return create_strategy(name, net, linearize=linearize, **where, **_runtime_options(runtime), **trains)


def statistics_strategy(net: "nn.Module", method: str, runtime: Runtime, projection_dim: Optional[int] = None,
                        seed: int = 0) -> "ComposableLearner":
    """The registry's training-free ``method`` (``stats-ridge``, ``ranpac``, ``ncm``) on
    ``net``'s penultimate features, its head sized as ``net``'s (statistics gathered in
    batches of ``--eval-batch-size``)."""
    from ..training.registry import create_strategy

    projection = {} if projection_dim is None else dict(projection_dim=projection_dim)
    return create_strategy(method, net, seed=seed, train_mb_size=runtime.eval_batch_size, **projection,
                           **_runtime_options(runtime))


def statistics_method(head: Optional[str], projection_dim: Optional[int]) -> str:
    """The registered name of the training-free head a component file describes."""
    return "ncm" if head == "ncm" else "ranpac" if projection_dim else "stats-ridge"


def check_start_at(net: "nn.Module", start_at: str) -> None:
    """Raise :class:`~avalanche_tmc.cli.exits.UsageError` listing the valid names when
    ``start_at`` names no module of ``net`` that holds parameters."""
    from ..tangent.model import parameter_modules
    from .exits import UsageError

    names = [n for n, _ in net.named_parameters()]
    if not any(n.startswith(start_at + ".") for n in names):
        raise UsageError(f"--start-at {start_at!r} names no module of the model that holds parameters; valid "
                         f"names: {parameter_modules(names)}.")


def strategy_for_method(net: "nn.Module", method: str, runtime: Runtime, training: TangentTraining,
                        projection_dim: int, seed: int, start_at: Optional[str] = None) -> "ComposableLearner":
    """The strategy that trains ``--method``'s components on ``net`` (a tangent method
    linearized from module ``start_at`` on, when given)."""
    from ..training.registry import strategy_spec

    if start_at is not None:
        check_start_at(net, start_at)
    if strategy_spec(method).family == "tangent":
        return tangent_strategy(net, "head" if method == "tmc-fc" else "all", runtime, training,
                                start_at=start_at)
    return statistics_strategy(net, method, runtime, projection_dim, seed)
