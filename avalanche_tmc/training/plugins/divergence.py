"""``DivergenceGuardPlugin``: stop an experience whose training diverges, as Avalanche's
``EarlyStoppingPlugin`` stops one that no longer improves.

It raises :class:`~avalanche_tmc.training.divergence.DivergenceError` at the first
non-finite loss (before the optimizer step spreads it), at the first optimizer step that
makes a trained tensor non-finite, and at the end of an experience whose trained tensors are
not finite. The strategies of this package then roll back the whole ``train()`` call
(:class:`~avalanche_tmc.training.mixins.TrainingTransaction`), so nothing of the diverged
experience is composed. The tangent strategies add it for you, before their
:class:`~avalanche_tmc.training.plugins.tangent.TangentPlugin`.
"""

from typing import TYPE_CHECKING, Any, List, Optional, Tuple

import torch
from avalanche.core import SupervisedPlugin
from torch import Tensor, nn

from ...tangent import TangentModel
from ..divergence import DivergenceError, non_finite

__all__ = ["DivergenceGuardPlugin", "trained_tensors"]

if TYPE_CHECKING:
    from avalanche.training.templates import SupervisedTemplate


def trained_tensors(model: nn.Module) -> Tuple[str, List[Tuple[str, Tensor]]]:
    """What training changes in ``model`` and what to call it in a message: a
    :class:`~avalanche_tmc.tangent.TangentModel`'s ``δ`` (by linearized parameter name), else
    the parameters that require a gradient."""
    if isinstance(model, TangentModel):
        return "δ", list(zip(model.linearized_names, model.delta_params))
    return "the trained parameters", [(n, p) for n, p in model.named_parameters() if p.requires_grad]


def _experience_id(strategy: "SupervisedTemplate") -> Any:
    experience = getattr(strategy, "experience", None)
    return getattr(experience, "current_experience", None)


def _training_position(strategy: "SupervisedTemplate") -> str:
    """``"iteration i (epoch e)"`` of the current experience, 1-based."""
    clock = getattr(strategy, "clock", None)
    if clock is None:
        return "an unknown iteration"
    return f"iteration {clock.train_exp_iterations + 1} (epoch {clock.train_exp_epochs + 1})"


class DivergenceGuardPlugin(SupervisedPlugin, supports_distributed=True):
    """Raises :class:`~avalanche_tmc.training.divergence.DivergenceError` as soon as an
    experience's training diverges: a non-finite loss, or trained tensors (a tangent model's
    ``δ``, else the parameters that require a gradient) that hold NaN/inf after an optimizer
    step or at the end of the experience. The message names the experience, the iteration,
    what is not finite and the learning rate to lower.

    Put it before the plugin that stores what an experience learned (its
    ``after_training_exp`` check must run first). On a template that is not all or nothing
    itself, wrap ``train()`` in
    :meth:`~avalanche_tmc.training.mixins.TrainingTransaction.around` to be left as before the
    call."""

    def stop(self, strategy: "SupervisedTemplate", what: str) -> None:
        """Raise the :class:`DivergenceError` for ``what`` (e.g. ``"the loss is nan"``)."""
        lr: Optional[float] = None
        optimizer = getattr(strategy, "optimizer", None)
        if optimizer is not None and optimizer.param_groups:
            lr = optimizer.param_groups[0].get("lr")
        raise DivergenceError(
            f"Experience {_experience_id(strategy)}: training diverged at {_training_position(strategy)}: {what}. "
            f"Nothing was composed; the strategy is as before this train() call. Lower the learning rate (lr={lr}) "
            "or check the data for NaN/inf."
        )

    def check_trained_tensors(self, strategy: "SupervisedTemplate") -> None:
        """Stop when a trained tensor of the strategy's model holds NaN/inf."""
        symbol, named = trained_tensors(strategy.model)
        if not named or bool(torch.stack([torch.isfinite(t).all() for _, t in named]).all()):
            return  # one device synchronisation per step when all is well
        self.stop(strategy, f"{symbol} holds NaN/inf in {non_finite(named)[:5]}")

    def before_update(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """Stop on a non-finite loss before the optimizer step spreads it into the model."""
        loss = getattr(strategy, "loss", None)
        if isinstance(loss, torch.Tensor) and not bool(torch.isfinite(loss.detach()).all()):
            self.stop(strategy, f"the loss is {loss.detach().float().sum().item()}")

    def after_update(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """Stop when the optimizer step made a trained tensor non-finite."""
        self.check_trained_tensors(strategy)

    def after_training_exp(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """Stop before a non-finite result is stored (by a plugin after this one)."""
        self.check_trained_tensors(strategy)
