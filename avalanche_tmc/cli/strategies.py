"""The strategies the commands train and evaluate with: a ``TMCStrategy`` on the factory's
network (tangent methods) or an ``AnalyticHeadStrategy`` (training-free heads)."""

from dataclasses import dataclass
from typing import TYPE_CHECKING, List, Optional, Sequence, Union

if TYPE_CHECKING:
    from avalanche.core import SupervisedPlugin
    from avalanche.training.plugins import EvaluationPlugin
    from torch import nn

    from ..training.protocols import ComposableLearner

__all__ = ["METHODS", "Runtime", "TangentTraining", "tangent_strategy", "analytic_model", "analytic_strategy",
           "strategy_for_method"]

METHODS = ("tmc", "tmc-fc", "ridge", "ranpac", "ncm")
"""``--method``: tangent components (all parameters linearized, or the head only) or the
training-free heads' statistics (ridge, ridge on random ReLU features, nearest class mean)."""


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


def _head_size(net: "nn.Module") -> int:
    from ..tangent import find_head

    return int(net.get_submodule(find_head(net)).out_features)


def tangent_strategy(net: "nn.Module", linearize: Union[str, List[str]], runtime: Runtime,
                     training: Optional[TangentTraining] = None) -> "ComposableLearner":
    """A ``TMCStrategy`` on ``net`` with ``linearize`` linearized; ``training`` None: one that
    only evaluates (the strategy's own training defaults, never used)."""
    from ..tangent import TangentModel
    from ..training.strategies.tangent import TMCStrategy

    model = TangentModel(net, linearize=linearize)
    trains = {} if training is None else dict(
        lr=training.lr, beta=training.beta, weighting=training.weighting, train_mb_size=training.batch_size,
        train_epochs=training.epochs)
    return TMCStrategy(model=model, eval_mb_size=runtime.eval_batch_size, device=runtime.device,
                       plugins=list(runtime.plugins), evaluator=runtime.evaluator, **trains)


def analytic_model(net: "nn.Module", head: str, projection_dim: Optional[int], seed: int = 0) -> "nn.Module":
    """An ``AnalyticClassifier`` on ``net``'s penultimate features, its head sized as ``net``'s."""
    from ..models.analytic import AnalyticClassifier, penultimate

    return AnalyticClassifier(penultimate(net), _head_size(net), head=head, projection_dim=projection_dim, seed=seed)


def analytic_strategy(model: "nn.Module", runtime: Runtime) -> "ComposableLearner":
    """An ``AnalyticHeadStrategy`` (statistics gathered in batches of ``--eval-batch-size``)."""
    from ..training.strategies.analytic import AnalyticHeadStrategy

    return AnalyticHeadStrategy(model=model, train_mb_size=runtime.eval_batch_size,
                                eval_mb_size=runtime.eval_batch_size, device=runtime.device,
                                plugins=list(runtime.plugins), evaluator=runtime.evaluator)


def strategy_for_method(net: "nn.Module", method: str, runtime: Runtime, training: TangentTraining,
                        projection_dim: int, seed: int) -> "ComposableLearner":
    """The strategy that trains ``--method``'s components on ``net``."""
    if method in ("tmc", "tmc-fc"):
        return tangent_strategy(net, "head" if method == "tmc-fc" else "all", runtime, training)
    head = "ncm" if method == "ncm" else "ridge"
    projection = projection_dim if method == "ranpac" else None
    return analytic_strategy(analytic_model(net, head, projection, seed), runtime)
