"""Loss metrics whose names say which loss they are.

What it is for: the tangent strategies optimize the Rescaled Square Loss, and TME evaluates
the negative log-likelihood of its softmax ensemble (a square loss on log-probabilities
means nothing). Avalanche's ``loss_metrics`` log both as ``Loss_Epoch``/``Loss_Exp``/
``Loss_Stream``, so a TMC run (RSL, about 60 on digits) and a TME run (NLL, about 2.3)
look comparable when they are not. :func:`loss_metrics` is Avalanche's function with each
name prefixed by the loss the strategy used for the values: ``RSL_Loss_Epoch/train_phase/...``,
``NLL_Loss_Stream/eval_phase/...``; :func:`loss_name` says which (the criterion's
``loss_name`` attribute, else its class or function name).

The tangent strategies' default evaluator (:func:`default_tangent_evaluator`) uses them; pass
``evaluator=EvaluationPlugin(accuracy_metrics(...), loss_metrics(...), loggers=...)`` with this
module's :func:`loss_metrics` (also ``from avalanche_tmc import loss_metrics``) to keep them with
your own loggers: Avalanche's own ``loss_metrics`` logs a tangent strategy's RSL as plain
``Loss_Epoch``/``Loss_Stream``, beside other strategies' cross-entropy. Avalanche's ``CSVLogger`` fills its loss
columns from the fixed names only: use :class:`CSVLogger` from here with named losses.
"""

import re
from typing import Any, Dict, List

from avalanche.evaluation.metric_results import MetricValue
from avalanche.evaluation.metrics import (
    EpochLoss,
    ExperienceLoss,
    MinibatchLoss,
    RunningEpochLoss,
    StreamLoss,
    accuracy_metrics,
)
from avalanche.evaluation.metrics import loss_metrics as avalanche_loss_metrics
from avalanche.logging import CSVLogger as AvalancheCSVLogger
from avalanche.training.plugins.evaluation import EvaluationPlugin, default_loggers

__all__ = ["LOSS_NAMES", "loss_name", "loss_metrics", "default_tangent_evaluator", "CSVLogger"]

LOSS_NAMES: Dict[str, str] = {"RescaledSquareLoss": "RSL", "nll_of_log_probs": "NLL", "CrossEntropyLoss": "CE",
                              "MSELoss": "MSE", "NLLLoss": "NLL"}
"""Short names of known criteria (class or function name -> name in the metric)."""


def loss_name(criterion: Any) -> str:
    """The short name of a criterion: its ``loss_name`` attribute, else :data:`LOSS_NAMES` of
    its class or function name, else that name itself."""
    explicit = getattr(criterion, "loss_name", None)
    if isinstance(explicit, str) and explicit:
        return explicit
    name = getattr(criterion, "__name__", None) or type(criterion).__name__
    return LOSS_NAMES.get(name, name)


def _named_class(cls: type) -> type:
    """``cls`` (an Avalanche loss metric) whose name starts with the loss it last averaged."""
    def update(self, strategy):
        self.loss_name = loss_name(getattr(strategy, "_criterion", None))
        cls.update(self, strategy)

    def __str__(self):
        return f"{getattr(self, 'loss_name', 'Loss')}_{cls.__str__(self)}"

    return type(f"Named{cls.__name__}", (cls,), {"update": update, "__str__": __str__, "__module__": __name__,
                                                 "__doc__": f"Avalanche's {cls.__name__}, named for its loss."})


# One named class per Avalanche loss metric, defined here by name so that checkpoints (dill)
# pickle them by reference.
_NAMED: Dict[type, type] = {cls: _named_class(cls) for cls in (MinibatchLoss, EpochLoss, RunningEpochLoss,
                                                                ExperienceLoss, StreamLoss)}
globals().update({named.__name__: named for named in _NAMED.values()})


def loss_metrics(*, minibatch: bool = False, epoch: bool = False, epoch_running: bool = False,
                 experience: bool = False, stream: bool = False) -> List[Any]:
    """Avalanche's ``loss_metrics`` (same arguments) whose names start with the loss the
    values are of (:func:`loss_name` of the strategy's criterion at the time), e.g.
    ``RSL_Loss_Epoch`` while a tangent strategy trains and ``NLL_Loss_Exp`` when TME evaluates."""
    metrics = avalanche_loss_metrics(minibatch=minibatch, epoch=epoch, epoch_running=epoch_running,
                                     experience=experience, stream=stream)
    for metric in metrics:
        metric.__class__ = _NAMED[type(metric)]
    return metrics


def default_tangent_evaluator() -> EvaluationPlugin:
    """Avalanche's ``default_evaluator`` (accuracy and loss per epoch, experience and stream,
    Avalanche's default loggers) with the loss metrics of :func:`loss_metrics`."""
    return EvaluationPlugin(accuracy_metrics(minibatch=False, epoch=True, experience=True, stream=True),
                            loss_metrics(minibatch=False, epoch=True, experience=True, stream=True),
                            loggers=default_loggers)


_NAMED_LOSS = re.compile(r"^[^_/]+_((?:Running)?Loss_(?:MB|Epoch|Exp|Stream))")


def _avalanche_names(metric_values: List[MetricValue]) -> List[MetricValue]:
    """The values with named losses (``RSL_Loss_Epoch/...``) under Avalanche's names again."""
    out = []
    for value in metric_values:
        match = _NAMED_LOSS.match(value.name)
        out.append(MetricValue(value.origin, value.name[match.start(1):], value.value, value.x_plot)
                   if match else value)
    return out


class CSVLogger(AvalancheCSVLogger):
    """Avalanche's ``CSVLogger`` (its files, columns and rows) with two differences: its loss
    columns are filled from named losses too (it reads them by Avalanche's fixed names,
    ``Loss_Epoch`` and ``Loss_Exp``), and a column whose metric the evaluator did not compute
    is left empty instead of written as 0 (Avalanche writes 0 for a training accuracy no
    metric measured, a validation accuracy with no validation stream, or the forgetting of an
    experience not trained yet, which read as measured zeros)."""

    def __init__(self, log_folder: Any = None):
        super().__init__(log_folder)
        self.val_acc, self.val_loss = None, None

    def _val_to_str(self, m_val: Any) -> str:
        return "" if m_val is None else super()._val_to_str(m_val)

    def after_training_epoch(self, strategy: Any, metric_values: List[MetricValue], **kwargs: Any) -> None:
        """Avalanche's row of the epoch, the named losses in its loss column, empty cells for
        what was not measured."""
        train_acc = train_loss = None
        for value in _avalanche_names(metric_values):
            if "train_stream" in value.name and value.name.startswith("Top1_Acc_Epoch"):
                train_acc = value.value
            elif "train_stream" in value.name and value.name.startswith("Loss_Epoch"):
                train_loss = value.value
        self.print_train_metrics(self.training_exp_id, strategy.clock.train_exp_epochs, train_acc, self.val_acc,
                                 train_loss, self.val_loss)

    def after_eval_exp(self, strategy: Any, metric_values: List[MetricValue], **kwargs: Any) -> None:
        """Avalanche's row of the evaluated experience, the named losses in its loss column,
        empty cells for what was not measured."""
        acc = loss = forgetting = None
        for value in _avalanche_names(metric_values):
            if value.name.startswith("Top1_Acc_Exp"):
                acc = value.value
            elif value.name.startswith("Loss_Exp"):
                loss = value.value
            elif value.name.startswith("ExperienceForgetting"):
                forgetting = value.value
        if self.in_train_phase:  # validation within training
            self.val_acc, self.val_loss = (acc, loss) if acc is not None or loss is not None else (
                self.val_acc, self.val_loss)
        else:
            self.print_eval_metrics(strategy.experience.current_experience, self.training_exp_id, acc, loss,
                                    forgetting)
