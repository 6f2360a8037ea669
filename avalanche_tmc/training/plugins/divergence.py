"""``DivergenceGuardPlugin``: stop an experience whose training diverges, as Avalanche's
``EarlyStoppingPlugin`` stops one that no longer improves.

It raises :class:`~avalanche_tmc.training.divergence.DivergenceError` at the first
non-finite loss (before the optimizer step spreads it), at the first optimizer step that
makes a trained tensor non-finite, and at the end of an experience whose trained tensors are
not finite. The strategies of this package then roll back the whole ``train()`` call
(:class:`~avalanche_tmc.training.rollback.TrainingTransaction`), so nothing of the diverged
experience is composed. The tangent strategies add it for you, before their
:class:`~avalanche_tmc.training.plugins.tangent.TangentPlugin`.

A loss that stays finite but climbs (a learning rate too large for the network) is not an
error: the plugin warns about it, once, with a :class:`LossIncreaseWarning`.
"""

import math
import warnings
from typing import TYPE_CHECKING, Any, List, Optional, Tuple

import torch
from avalanche.core import SupervisedPlugin
from torch import Tensor, nn

from ...tangent import TangentModel
from ..divergence import DivergenceError, all_finite, non_finite

__all__ = ["DivergenceGuardPlugin", "LossIncreaseWarning", "LOSS_INCREASE_FACTOR", "trained_tensors"]

LOSS_INCREASE_FACTOR = 2.0
"""The default ``loss_increase_factor`` of :class:`DivergenceGuardPlugin`: an experience whose
last epoch's mean training loss is more than this many times its first iteration's loss gets
a :class:`LossIncreaseWarning`. Measured on digits (5 class-incremental experiences, 2 epochs,
Adam): training that works ends at 0.15-0.95 times its first loss (a trained ResNet-18 and
small CNNs, learning rates 1e-4 to 1e-3, kept or new heads); a trained ResNet-18 or a
128-wide CNN at lr 1e-2 ends at 2.1-6.7 times it, with accuracy falling from 0.76-0.99 to
0.25-0.29. Milder cases can stay under it: the same CNN trained half as long ended at 1.6-2.1
times (accuracy 0.35), and warned at its fourth experience only. A lower factor catches more
and risks warning on noisy first batches; none replaces a validation split."""


class LossIncreaseWarning(UserWarning):
    """An experience's training loss ended far above where it started (see
    :class:`DivergenceGuardPlugin`): the learning rate is most likely too large for the network.
    Lower ``lr`` ("Choosing the learning rate" in docs/usage.md). Silence it with
    ``warnings.filterwarnings("ignore", category=LossIncreaseWarning)``."""

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
    :meth:`~avalanche_tmc.training.rollback.TrainingTransaction.around` to be left as before the
    call.

    It also warns, as Avalanche's plugins do (``warnings.warn``, once per plugin, so once per
    strategy), when a finite loss climbs: at the end of an experience whose mean training loss
    over its last epoch is more than ``loss_increase_factor`` times the loss of its first
    iteration, it gives a :class:`LossIncreaseWarning` naming the experience, the two losses
    and the learning rate to lower. The rule: the first iteration's loss is the only one
    measured before any optimizer step, i.e. the loss of the starting point (the pre-trained
    network, or TMC-Seq's previous composition) on one batch; the last epoch's mean is where
    training ended, averaged over the whole pass. Training that learns ends below its start
    (0.15-0.95 times it, measured; :data:`LOSS_INCREASE_FACTOR`), so twice the start is
    far beyond batch-to-batch noise yet below what a too-large learning rate gives (2.1-6.7 times,
    and 8-50 times on single iterations). The losses are summed on the loss's device and
    read once per experience (no synchronisation per step). The experience is kept: only a
    non-finite loss or tensor stops training.

    The warning names the learning rate as set for the experience and, when a schedule cut it
    since, as it was at the end, and advises a tenth of the rate as set: the schedule's last
    rate is not the one to lower. ``label`` (e.g. ``"tme, seed 2"``, set by a runner that trains
    several methods at once) heads every message, so that a warning says which training it is
    about.

    ``stop_on_non_finite=False`` watches instead of stopping, for a harness that compares
    strategies and must finish every row (Avalanche's SGD baselines in a benchmark runner): an
    experience whose loss or trained tensors went non-finite is recorded in :attr:`loss_rises`
    (its last loss ``inf``) and warned about (once per plugin) with the learning rate to lower,
    and training goes on.

    :param loss_increase_factor: the ratio that warns, a finite number ``> 1``; None turns the
        warning off.
    :param label: what trains, said first in every message (None: nothing).
    :param stop_on_non_finite: raise :class:`~avalanche_tmc.training.divergence.DivergenceError`
        (the default) or only record and warn."""

    def __init__(self, loss_increase_factor: Optional[float] = LOSS_INCREASE_FACTOR, label: Optional[str] = None,
                 *, stop_on_non_finite: bool = True):
        super().__init__()
        self.label = label
        self.stop_on_non_finite = bool(stop_on_non_finite)
        self._non_finite_recorded = False
        self._set_lr: Optional[float] = None
        self.loss_rises: List[Tuple[Any, float, float, Optional[float]]] = []
        """Every experience whose loss ended above the factor: (experience id, first loss,
        last epoch's mean, learning rate as set), warned about or not (the warning is once)."""
        if loss_increase_factor is not None and (
                isinstance(loss_increase_factor, bool) or not isinstance(loss_increase_factor, (int, float))
                or not 1 < loss_increase_factor < math.inf):
            raise ValueError(f"loss_increase_factor must be a finite number > 1 (the default: {LOSS_INCREASE_FACTOR}) "
                             f"or None (no warning), got {loss_increase_factor!r}.")
        self.loss_increase_factor = loss_increase_factor
        self.warned = False  # a LossIncreaseWarning was given (once per plugin)
        self._first_loss: Optional[Tensor] = None
        self._epoch_sum: Optional[Tensor] = None
        self._epoch_iterations = 0
        self._last_epoch: Optional[Tuple[Tensor, int]] = None

    def _learning_rate(self, strategy: "SupervisedTemplate") -> Optional[float]:
        optimizer = getattr(strategy, "optimizer", None)
        if optimizer is not None and optimizer.param_groups:
            return optimizer.param_groups[0].get("lr")
        return None

    def _who(self, strategy: "SupervisedTemplate") -> str:
        """``"tme, seed 2, experience 3"`` (with a label) or ``"Experience 3"``."""
        where = f"experience {_experience_id(strategy)}"
        return f"{self.label}, {where}" if self.label else where[0].upper() + where[1:]

    def _rates(self, strategy: "SupervisedTemplate") -> str:
        """``"lr=0.003 as set for the experience, 3e-05 after the schedule's cuts"``."""
        now = self._learning_rate(strategy)
        set_lr = self._set_lr if self._set_lr is not None else now
        text = f"lr={set_lr:g} as set for the experience" if isinstance(set_lr, float) else f"lr={set_lr}"
        if isinstance(now, float) and isinstance(set_lr, float) and now != set_lr:
            text += f", {now:g} after the schedule's cuts"
        return text

    def stop(self, strategy: "SupervisedTemplate", what: str) -> None:
        """Raise the :class:`DivergenceError` for ``what`` (e.g. ``"the loss is nan"``); when
        watching (``stop_on_non_finite=False``), record the experience once and warn instead."""
        if not self.stop_on_non_finite:
            if not self._non_finite_recorded:
                self._non_finite_recorded = True
                first = self._first_loss.item() if self._first_loss is not None else math.nan
                set_lr = self._set_lr if self._set_lr is not None else self._learning_rate(strategy)
                self.loss_rises.append((_experience_id(strategy), first, math.inf, set_lr))
                if self.warned:
                    return
                self.warned = True
                warnings.warn(LossIncreaseWarning(
                    f"{self._who(strategy)}: training diverged at {_training_position(strategy)}: {what}. "
                    f"Training goes on (stop_on_non_finite=False); lower the learning rate "
                    f"({self._rates(strategy)})."), stacklevel=2)
            return
        raise DivergenceError(
            f"{self._who(strategy)}: training diverged at {_training_position(strategy)}: {what}. "
            f"Nothing was composed; the strategy is as before this train() call. Lower the learning rate "
            f"({self._rates(strategy)}) or check the data for NaN/inf."
        )

    def check_trained_tensors(self, strategy: "SupervisedTemplate") -> None:
        """Stop when a trained tensor of the strategy's model holds NaN/inf."""
        symbol, named = trained_tensors(strategy.model)
        if all_finite(t for _, t in named):
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

    def before_training_exp(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """Start the experience's loss record and note its learning rate as set."""
        self._first_loss, self._epoch_sum, self._epoch_iterations, self._last_epoch = None, None, 0, None
        self._set_lr = self._learning_rate(strategy)
        self._non_finite_recorded = False

    def before_training_epoch(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """Start the epoch's loss sum (the previous epoch's is kept if this one has no iteration)."""
        if self._epoch_iterations:
            self._last_epoch = (self._epoch_sum, self._epoch_iterations)
        self._epoch_sum, self._epoch_iterations = None, 0

    def after_training_iteration(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """Record the iteration's loss (on its device: nothing is read here)."""
        loss = getattr(strategy, "loss", None)
        if self.loss_increase_factor is None or not isinstance(loss, torch.Tensor):
            return
        value = loss.detach().float().sum()
        if self._first_loss is None:
            self._first_loss = value
        self._epoch_sum = value if self._epoch_sum is None else self._epoch_sum + value
        self._epoch_iterations += 1

    def check_loss_increase(self, strategy: "SupervisedTemplate") -> None:
        """Record the experience in :attr:`loss_rises` and give the :class:`LossIncreaseWarning`
        (once per plugin) if its last epoch ended above ``loss_increase_factor`` times its first
        iteration's loss."""
        if self.loss_increase_factor is None or self._first_loss is None or self._non_finite_recorded:
            return
        last = (self._epoch_sum, self._epoch_iterations) if self._epoch_iterations else self._last_epoch
        if last is None:
            return
        first, mean = self._first_loss.item(), last[0].item() / last[1]
        if not (first > 0 and mean > self.loss_increase_factor * first):
            return
        set_lr = self._set_lr if self._set_lr is not None else self._learning_rate(strategy)
        self.loss_rises.append((_experience_id(strategy), first, mean, set_lr))
        if self.warned:
            return
        self.warned = True
        advice = f"lower it, e.g. to {set_lr / 10:g}" if isinstance(set_lr, float) else "lower it"
        warnings.warn(LossIncreaseWarning(
            f"{self._who(strategy)}: the training loss ended far above where it started: "
            f"{mean:.4g} (mean of the last epoch) against {first:.4g} (the first iteration, before any "
            f"optimizer step), {mean / first:.1f} times. The learning rate ({self._rates(strategy)}) is most "
            f"likely too large for this network: {advice}, as 'Choosing the learning rate' in docs/usage.md "
            "says. This warning is given once per strategy."), stacklevel=2)

    def after_training_exp(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """Stop before a non-finite result is stored (by a plugin after this one); warn if
        the loss climbed (:meth:`check_loss_increase`)."""
        self.check_trained_tensors(strategy)
        self.check_loss_increase(strategy)
