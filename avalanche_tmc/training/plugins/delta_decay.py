"""``DeltaDecayPlugin``: the authors' decay on ``δ`` (a penalty on the norm of every
linearized ``δ`` tensor together, added to the training loss), and the names and checks of
the tangent strategies' three decay kinds (:data:`DECAY_KINDS`)."""

import math
import numbers
from typing import TYPE_CHECKING, Any, Iterable

import torch
from avalanche.core import SupervisedPlugin

from ...tangent import TangentModel

__all__ = ["DeltaDecayPlugin", "DECAY_KINDS", "NORM_DECAY_EPSILON", "check_decay", "delta_norm_penalty"]

if TYPE_CHECKING:
    from avalanche.training.templates import SupervisedTemplate

DECAY_KINDS = ("norm", "squared", "decoupled")
"""The decays on ``δ`` the tangent strategies offer (``decay_kind``):

* ``"norm"``: ``decay · sqrt(ε + Σ δ²)`` added to the loss (:class:`DeltaDecayPlugin`; the
  authors' ``l2_penalty``, with ``wd = 1e-5`` in their configuration), the sum over every
  linearized ``δ`` tensor together;
* ``"squared"``: the usual L2 decay ``decay/2 · Σ δ²``, i.e. ``decay · δ`` added to the
  gradient: ``torch.optim.Adam(weight_decay=decay)``;
* ``"decoupled"``: AdamW's decay, ``δ ← δ(1 − lr·decay)`` at each step besides Adam's
  update: ``torch.optim.AdamW(weight_decay=decay)``."""

NORM_DECAY_EPSILON = 1e-6
"""``ε`` of the ``"norm"`` penalty ``sqrt(ε + Σ δ²)`` (the authors' value): it keeps the
penalty's gradient finite at ``δ = 0``, where every TMC component starts."""


def check_decay(decay: Any, decay_kind: Any = "norm") -> float:
    """``decay`` as a float, after checking it is a finite number ``≥ 0`` and that
    ``decay_kind`` is one of :data:`DECAY_KINDS`; ``ValueError`` saying what is allowed otherwise."""
    if isinstance(decay, bool) or not isinstance(decay, numbers.Real) or not 0 <= decay < math.inf:
        raise ValueError(f"decay must be a finite number >= 0 (0 turns it off; the authors' norm penalty: 1e-5), "
                         f"got {decay!r}.")
    if not isinstance(decay_kind, str) or decay_kind not in DECAY_KINDS:
        raise ValueError(f"decay_kind must be one of {DECAY_KINDS} ('norm': decay * ||δ|| added to the loss, "
                         f"the authors'; 'squared': Adam's weight_decay; 'decoupled': AdamW's), got {decay_kind!r}.")
    return float(decay)


def delta_norm_penalty(deltas: Iterable[torch.Tensor], epsilon: float = NORM_DECAY_EPSILON) -> torch.Tensor:
    """``sqrt(epsilon + Σ_tensors Σ δ²)``: the norm of every tensor of ``deltas`` together
    (not a sum of per-tensor norms, not its square), differentiable, with a finite gradient
    ``δ / sqrt(epsilon + ‖δ‖²)`` at ``δ = 0``."""
    total = sum((d.pow(2).sum() for d in deltas), epsilon)
    if not isinstance(total, torch.Tensor):
        raise ValueError("delta_norm_penalty needs at least one δ tensor.")
    return total.sqrt()


class DeltaDecayPlugin(SupervisedPlugin, supports_distributed=True):
    """Adds ``decay · sqrt(ε + Σ δ²)`` (:func:`delta_norm_penalty`, ``ε`` =
    :data:`NORM_DECAY_EPSILON`) to ``strategy.loss`` in ``before_backward``: the decay on
    ``δ`` of the authors' code (``l2_penalty``, weighted by ``wd = 1e-5``), which pulls the
    linearized ``δ`` of a :class:`~avalanche_tmc.tangent.TangentModel` toward the
    pre-trained point (``δ = 0``; for TMC-Seq too, not toward the composition it starts from).

    What it is for: the ``decay_kind="norm"`` of :class:`~avalanche_tmc.TMCStrategy`,
    :class:`~avalanche_tmc.TMEStrategy` and :class:`~avalanche_tmc.TMCSeqStrategy`, which
    put it before the user's plugins; with any other strategy on a ``TangentModel``, put it
    in the plugins list yourself. The gradient of ``δ`` gains ``decay · δ / sqrt(ε + ‖δ‖²)``
    (every tensor scaled by the same factor: a pull of length at most ``decay``, whatever
    ``‖δ‖``, unlike the squared decay's ``decay · δ``).

    ``strategy.loss`` (and so the loss metric and the divergence check) includes the term.
    With ``AutocastPlugin(torch.float16)`` this plugin must come before it in the plugins
    list, so that the term is scaled with the loss (the autocast plugin refuses the other
    order, as for any plugin that adds to the loss in ``before_backward``).

    :param decay: the weight of the penalty, a finite number ``≥ 0`` (0: nothing is added).
    """

    def __init__(self, decay: float):
        super().__init__()
        self.decay = check_decay(decay, "norm")

    @staticmethod
    def tangent_model(strategy: "SupervisedTemplate") -> TangentModel:
        """The strategy's model (unwrapped from ``DistributedDataParallel``), checked to be a ``TangentModel``."""
        model = strategy.model
        model = getattr(model, "module", model) if isinstance(model, torch.nn.parallel.DistributedDataParallel) \
            else model
        if not isinstance(model, TangentModel):
            raise TypeError(f"DeltaDecayPlugin decays the δ of a TangentModel, but the strategy's model is a "
                            f"{type(model).__name__}. Wrap the network: TangentModel(net, num_classes=...), or use "
                            "the optimizer's weight_decay for a plain network.")
        return model

    def penalty(self, strategy: "SupervisedTemplate") -> torch.Tensor:
        """``decay · sqrt(ε + Σ δ²)`` for the strategy's current ``δ`` (with its graph)."""
        return self.decay * delta_norm_penalty(self.tangent_model(strategy).delta_parameters())

    def before_training(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """Check, before any step, that the strategy's model is a ``TangentModel``."""
        self.tangent_model(strategy)

    def before_backward(self, strategy: "SupervisedTemplate", **kwargs: Any) -> None:
        """Add the penalty to ``strategy.loss`` (nothing when ``decay`` is 0)."""
        if self.decay:
            penalty = self.penalty(strategy)
            strategy.loss = strategy.loss + penalty.to(strategy.loss.dtype)
