"""Independent non-linear fine-tuning, combined by weight averaging or output ensembling.

The paper's composition baselines: every experience fine-tunes the *whole* network (not
its tangent model) from the same pre-trained weights, as TMC does with its components,
and evaluation combines the T fine-tuned models in one of three ways:

* ``"soup"``: one model whose state dict is the average of the T state dicts (floating
  tensors averaged, BatchNorm running statistics included; integer buffers such as
  ``num_batches_tracked`` taken from the first model). O(1) inference: the non-linear
  counterpart of TMC.
* ``"ens-l"``: the mean of the T models' logits (Ens-L). O(T) inference.
* ``"ens-sm"``: the log of the mean of the T models' softmax (Ens-SM, the non-linear
  counterpart of TME). Its eval loss is the NLL of the ensemble. O(T) inference.

Training is identical for the three, so ``combine`` can be switched between evaluations
of one trained strategy. With task labels (task-incremental), predictions are restricted
to the classes of each sample's task *after* combining, as
:class:`~avalanche_tmc.TangentPlugin` does for TME.

Use it with a plain ``nn.Module`` that has one fixed head over all classes (the model
passed in already carries the new head); Avalanche's ``MultiTaskModule`` and
``IncrementalClassifier`` are not supported.

The three are registered in the library's strategy registry as ``soup``, ``ens-l`` and
``ens-sm`` by ``baselines/__init__.py``, which imports this module only when one is built.
"""

from collections import OrderedDict
from typing import Callable, Dict, Hashable, List, Mapping, Optional, Sequence, Union

import torch
from avalanche.core import SupervisedPlugin
from avalanche.training.plugins.evaluation import EvaluationPlugin, default_evaluator
from avalanche.training.templates import SupervisedTemplate
from torch import Tensor, nn
from torch.func import functional_call
from torch.optim import Optimizer

from avalanche_tmc.composition.ensemble import log_softmax_ensemble, logit_ensemble
from avalanche_tmc.training.plugins.composition import CompositionPlugin
from avalanche_tmc.training.strategies.keywords import ThreePositionalArguments

__all__ = [
    "COMBINE_MODES", "StateDict", "average_state_dicts", "IndependentFineTunePlugin", "IndependentFineTuneStrategy",
]

COMBINE_MODES = ("soup", "ens-l", "ens-sm")

StateDict = Dict[str, Tensor]


def _detached_state(model: nn.Module) -> StateDict:
    return OrderedDict((k, v.detach().clone()) for k, v in model.state_dict().items())


def average_state_dicts(states: Sequence[Mapping[str, Tensor]]) -> StateDict:
    """The uniform "model soup" of ``states``: floating-point tensors (weights and
    BatchNorm running statistics) averaged; integer tensors (``num_batches_tracked``)
    taken from the first state."""
    if not states:
        raise ValueError("Averaging needs at least one state dict.")
    first = states[0]
    for state in states[1:]:
        if state.keys() != first.keys():
            raise ValueError("The state dicts to average have different keys: they are not the same architecture.")
    return OrderedDict(
        (k, torch.stack([s[k] for s in states]).mean(0) if v.is_floating_point() else v.clone())
        for k, v in first.items()
    )


class IndependentFineTunePlugin(CompositionPlugin):
    """Fine-tunes the full model independently per experience and evaluates the
    combination of the fine-tuned models.

    * ``before_training_exp``: load the pre-trained state dict and reset the optimizer
      state; training then runs as usual (BatchNorm in train mode).
    * ``after_training_exp``: store a copy of the fine-tuned state dict under
      ``experience.current_experience`` and load the soup into the model.
    * evaluation: the soup model, or the ensemble of the stored models (``combine``;
      the ensembles replace the soup's output, computed by the template's own forward).
      Periodic evaluation during training (``eval_every``) evaluates the combination of
      the finished experiences *and* the model being trained, as if training stopped
      there; the model under training is restored afterwards.

    :param combine: ``"soup"``, ``"ens-l"`` or ``"ens-sm"``; can be changed between evaluations.
    :param pretrained_state: the state dict every experience starts from; ``None``
        captures the model's state at the start of the first training experience.
    :param task_incremental: restrict predictions to the classes of each sample's task.
        ``None`` (default) turns it on when training has seen more than one task label.
    :param reset_optimizer_state: start every experience with a fresh optimizer state
        (momentum buffers), as independent training requires.
    """

    def __init__(
        self,
        combine: str = "soup",
        *,
        pretrained_state: Optional[Mapping[str, Tensor]] = None,
        task_incremental: Optional[bool] = None,
        reset_optimizer_state: bool = True,
    ):
        super().__init__(task_incremental, reset_optimizer_state)
        self.combine = combine
        self.pretrained_state: Optional[StateDict] = (
            None if pretrained_state is None
            else OrderedDict((k, v.detach().clone()) for k, v in pretrained_state.items())
        )
        self.fine_tuned: "OrderedDict[Hashable, StateDict]" = OrderedDict()
        self.training_state: Optional[StateDict] = None  # the model being trained, during evaluation

    @property
    def combine(self) -> str:
        """How evaluation combines the fine-tuned models: one of :data:`COMBINE_MODES`."""
        return self._combine

    @combine.setter
    def combine(self, combine: str) -> None:
        if combine not in COMBINE_MODES:
            raise ValueError(f"combine must be one of {COMBINE_MODES}, got {combine!r}.")
        self._combine = combine

    def members(self) -> List[StateDict]:
        """State dicts of every model the evaluation combines."""
        members = list(self.fine_tuned.values())
        if self.training_state is not None:
            members.append(self.training_state)
        return members

    # ------------------------------------------------------------------ training
    def start_member(self, strategy: "SupervisedTemplate") -> None:
        """Restart from the pre-trained weights."""
        if self.pretrained_state is None:
            self.pretrained_state = _detached_state(strategy.model)
        else:
            strategy.model.load_state_dict(self.pretrained_state)

    def add_member(self, strategy: "SupervisedTemplate", key: Hashable) -> None:
        """Store the fine-tuned state dict."""
        if key in self.fine_tuned:
            raise KeyError(
                f"Experience {key} was already fine-tuned; delete it first "
                f"(del strategy.fine_tuned[{key!r}]) to train it again."
            )
        self.fine_tuned[key] = _detached_state(strategy.model)

    # ------------------------------------------------------------------ evaluation
    def load_combination(self, strategy: "SupervisedTemplate") -> None:
        """Load the soup of the members (the soup's forward also serves the ensembles)."""
        members = self.members()
        if members:
            strategy.model.load_state_dict(average_state_dicts(members))

    def save_training_state(self, strategy: "SupervisedTemplate") -> StateDict:
        return _detached_state(strategy.model)

    def load_training_state(self, strategy: "SupervisedTemplate", state: StateDict) -> None:
        strategy.model.load_state_dict(state)

    def ensembles(self) -> bool:
        """Ens-L and Ens-SM replace the soup's output by the members' combined outputs."""
        return self.combine != "soup"

    def ensembles_softmax(self) -> bool:
        """Ens-SM averages softmax outputs (its loss is NLL)."""
        return self.combine == "ens-sm"

    @torch.no_grad()
    def ensemble_output(self, strategy: "SupervisedTemplate", members: List[StateDict]) -> Tensor:
        logits = [functional_call(strategy.model, state, (strategy.mb_x,)) for state in members]
        return logit_ensemble(logits) if self.combine == "ens-l" else log_softmax_ensemble(logits)


class IndependentFineTuneStrategy(ThreePositionalArguments, SupervisedTemplate):
    """Independent full fine-tuning per experience from the pre-trained weights,
    evaluated as a weight average ("soup") or an ensemble ("ens-l", "ens-sm")."""

    def __init__(
        self,
        *,
        model: nn.Module,
        optimizer: Optional[Optimizer] = None,
        criterion: Optional[Callable] = None,
        lr: float = 0.01,
        combine: str = "soup",
        task_incremental: Optional[bool] = None,
        train_mb_size: int = 32,
        train_epochs: int = 1,
        eval_mb_size: Optional[int] = None,
        device: Union[str, torch.device] = "cpu",
        plugins: Optional[List[SupervisedPlugin]] = None,
        evaluator: Union[EvaluationPlugin, Callable[[], EvaluationPlugin]] = default_evaluator,
        eval_every: int = -1,
        **base_kwargs,
    ):
        """
        :param model: the pre-trained network with its new head (one fixed head over
            all classes). Its current weights are the starting point of every experience.
        :param optimizer: defaults to ``SGD(model.parameters(), lr=lr, momentum=0.9)``.
            Its state is reset at every experience.
        :param criterion: defaults to ``CrossEntropyLoss()``.
        :param lr: learning rate of the default optimizer.
        :param combine: ``"soup"``, ``"ens-l"`` or ``"ens-sm"``; switchable later
            through ``strategy.combine``.
        :param task_incremental: mask predictions to the task's classes; ``None`` = auto.
        :param train_mb_size, train_epochs, eval_mb_size, device, plugins, evaluator,
            eval_every, base_kwargs: as in Avalanche's ``Naive``.
        """
        from avalanche_tmc.training.devices import check_device

        check_device(device)  # before Avalanche moves anything there
        if optimizer is None:
            optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)
        if criterion is None:
            criterion = nn.CrossEntropyLoss()
        self.fine_tune_plugin = IndependentFineTunePlugin(
            combine, pretrained_state=model.state_dict(), task_incremental=task_incremental
        )
        super().__init__(
            model=model,
            optimizer=optimizer,
            criterion=criterion,
            train_mb_size=train_mb_size,
            train_epochs=train_epochs,
            eval_mb_size=eval_mb_size,
            device=device,
            plugins=[self.fine_tune_plugin, *(plugins or [])],
            evaluator=evaluator,
            eval_every=eval_every,
            **base_kwargs,
        )

    @property
    def combine(self) -> str:
        """How evaluation combines the fine-tuned models (settable between evaluations)."""
        return self.fine_tune_plugin.combine

    @combine.setter
    def combine(self, combine: str) -> None:
        self.fine_tune_plugin.combine = combine

    @property
    def fine_tuned(self) -> "OrderedDict[Hashable, StateDict]":
        """Experience id -> fine-tuned state dict."""
        return self.fine_tune_plugin.fine_tuned

