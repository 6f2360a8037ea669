"""``CompositionPlugin``: the skeleton of the plugins that train one *member* per experience
from a common starting point and evaluate a combination of the members (TMC's tangent
components, the baselines' independent fine-tunes)."""

from collections import defaultdict
from typing import TYPE_CHECKING, Any, Hashable, List, Optional

import torch

from ...composition.ensemble import mask_logits
from .task_mask import TaskMaskPlugin

__all__ = ["CompositionPlugin"]

if TYPE_CHECKING:
    from avalanche.training.templates import SupervisedTemplate


class CompositionPlugin(TaskMaskPlugin, supports_distributed=True):
    """The skeleton shared by the plugins that train one *member* per experience from a
    common starting point and evaluate a combination of the members (TMC's tangent
    components, the baselines' independent fine-tunes).

    It drives Avalanche's callbacks; a subclass fills in the named hooks:

    * :meth:`start_member` (before an experience): load the member's starting point;
      then the optimizer state is reset (``reset_optimizer_state``) and the experience's
      task classes recorded;
    * :meth:`add_member` (after it): store the trained member under the experience id;
      then the optimizer state and gradients are dropped (``reset_optimizer_state``) and
      :meth:`load_combination` puts the combined model in place;
    * :meth:`members`: what the evaluation combines (with :attr:`training_state`, the
      member being trained, during periodic evaluation);
    * :meth:`save_training_state` / :meth:`load_training_state`: set the member being
      trained aside during such an evaluation and put it back afterwards;
    * :meth:`ensembles` / :meth:`ensemble_output`: whether evaluation replaces the model's
      output by an ensemble of the members, and that ensemble's output
      (:meth:`ensembles_softmax`: it is log-probabilities, so the loss becomes NLL).

    :attr:`in_training_exp` is True between the two training callbacks of an experience.
    """

    def __init__(self, task_incremental: Optional[bool] = None, reset_optimizer_state: bool = True):
        super().__init__(task_incremental)
        self.reset_optimizer_state = reset_optimizer_state
        self.in_training_exp = False
        self.training_state: Any = None

    # ------------------------------------------------------------------ hooks
    def start_member(self, strategy: "SupervisedTemplate") -> None:
        """Load the starting point of the member about to be trained."""
        raise NotImplementedError

    def add_member(self, strategy: "SupervisedTemplate", key: Hashable) -> None:
        """Store the member just trained (the model's current state) under ``key``."""
        raise NotImplementedError

    def members(self) -> List[Any]:
        """The members the evaluation combines, the one in training included."""
        raise NotImplementedError

    def load_combination(self, strategy: "SupervisedTemplate") -> None:
        """Load the combination of :meth:`members` into the model (nothing when there are none)."""
        raise NotImplementedError

    def save_training_state(self, strategy: "SupervisedTemplate") -> Any:
        """The state of the member being trained, to evaluate as if training stopped now."""
        raise NotImplementedError

    def load_training_state(self, strategy: "SupervisedTemplate", state: Any) -> None:
        """Put back what :meth:`save_training_state` returned."""
        raise NotImplementedError

    def ensembles(self) -> bool:
        """Whether evaluation replaces the model's output by an ensemble of the members."""
        return False

    def ensembles_softmax(self) -> bool:
        """Whether that ensemble outputs log-probabilities (evaluated with NLL)."""
        return False

    def ensemble_output(self, strategy: "SupervisedTemplate", members: List[Any]) -> torch.Tensor:
        """The ensemble's output for the current minibatch (before task masking)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ training
    def before_training_exp(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """Start a new member from its starting point, with a fresh optimizer state."""
        self.start_member(strategy)
        if self.reset_optimizer_state:
            strategy.optimizer.state = defaultdict(dict)
        super().before_training_exp(strategy, **kwargs)
        self.in_training_exp = True

    def after_training_exp(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """Store the trained member; the model then holds the combination. With
        ``reset_optimizer_state`` the optimizer's state and gradients are dropped (the next
        member starts fresh): neither memory nor a checkpoint holds them between experiences."""
        self.add_member(strategy, strategy.experience.current_experience)
        self.in_training_exp = False
        if self.reset_optimizer_state:
            strategy.optimizer.state = defaultdict(dict)  # Adam's moments: two copies of the trained tensors
            strategy.optimizer.zero_grad(set_to_none=True)  # the last step's gradients: one more
        self.load_combination(strategy)

    # ------------------------------------------------------------------ evaluation
    def before_eval(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """Load the combination (during training: including the member being trained,
        set aside to be put back); a softmax ensemble evaluates its loss as NLL."""
        if self.in_training_exp:
            self.training_state = self.save_training_state(strategy)
        self.load_combination(strategy)
        if self.ensembles_softmax() and self.members():
            self.evaluate_with_nll(strategy)

    def after_eval_forward(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """Ensembles: replace the output by the ensemble's; then (task-IL) restrict it to
        the task's classes."""
        members = self.members() if self.ensembles() else []
        if not members:
            super().after_eval_forward(strategy, **kwargs)
            return
        strategy.mb_output = mask_logits(self.ensemble_output(strategy, members), self.eval_mask(strategy))

    def after_eval(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """Restore the criterion and, during training, the member being trained."""
        self.restore_criterion(strategy)
        if self.training_state is not None:
            self.load_training_state(strategy, self.training_state)
            self.training_state = None
