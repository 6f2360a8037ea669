"""The Rescaled Square Loss (Hui & Belkin 2020) that TMC trains its components with."""

import math
import numbers

import torch
import torch.nn.functional as F
from torch import Tensor, nn

__all__ = ["RescaledSquareLoss"]


class RescaledSquareLoss(nn.Module):
    """``(1/K)(α([f(x)]_y − β)² + Σ_{i≠y} [f(x)]_i²)``, averaged over the batch.

    What it is for: training tangent components whose logits are on a common scale, so
    that their weighted sum (TMC) behaves like a softmax ensemble: the true class is
    pushed to ``β``, every other logit to 0. Use ``β = 25`` for class/task-incremental
    and ``β = 5`` for data-incremental runs (the paper's values). With ``α = β = 1`` it
    is ``F.mse_loss(logits, one_hot(y))``.

    Called as ``loss(logits, targets)`` with integer targets, like ``CrossEntropyLoss``.
    Logits set to ``-inf`` (classes masked out, e.g. by task-incremental evaluation)
    are left out of the sum and of ``K``: the loss is then the RSL over the allowed
    classes. Any other non-finite logit (NaN, ``+inf``: a diverged model) makes the loss
    non-finite, so divergence is never hidden as a small loss. Logits in a 16-bit dtype
    (under ``torch.autocast``) are upcast: the loss is computed and returned in float32.
    """

    def __init__(self, alpha: float = 1.0, beta: float = 25.0):
        super().__init__()
        for name, value in (("alpha", alpha), ("beta", beta)):
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0 < value < math.inf:
                raise ValueError(
                    f"RescaledSquareLoss needs {name} > 0 and finite, got {value!r} (the paper: alpha = 1; "
                    "beta = 25 for class/task-incremental, 5 for data-incremental)."
                )
        self.alpha = float(alpha)
        self.beta = float(beta)

    def forward(self, logits: Tensor, targets: Tensor) -> Tensor:
        if logits.dim() != 2:
            raise ValueError(f"RescaledSquareLoss expects logits of shape (batch, classes), got {tuple(logits.shape)}.")
        if targets.dim() != 1 or targets.shape[0] != logits.shape[0]:
            raise ValueError(
                f"RescaledSquareLoss expects integer targets of shape ({logits.shape[0]},), got {tuple(targets.shape)}."
            )
        if targets.dtype == torch.bool or targets.is_floating_point() or targets.is_complex():
            raise TypeError(
                f"RescaledSquareLoss needs integer class indices as targets (like CrossEntropyLoss), got "
                f"{targets.dtype}; convert labels with .long() (soft or one-hot targets are not supported)."
            )
        if logits.is_floating_point() and torch.finfo(logits.dtype).bits < 32:
            # bfloat16/float16 logits (torch.autocast): square and sum in float32; in
            # bfloat16 (8 significant bits) a target of 25 and its residuals round by up to 0.4%
            logits = logits.float()
        num_classes = logits.shape[1]
        if targets.numel() and (int(targets.min()) < 0 or int(targets.max()) >= num_classes):
            raise ValueError(
                f"Targets must be class indices in [0, {num_classes}), got values in "
                f"[{int(targets.min())}, {int(targets.max())}]: the model has fewer outputs than the data has classes."
            )
        one_hot = F.one_hot(targets.long(), num_classes).to(logits.dtype)
        allowed = ~torch.isneginf(logits)
        safe_logits = torch.where(allowed, logits, torch.zeros_like(logits))
        weight = (1.0 + (self.alpha - 1.0) * one_hot) * allowed
        per_sample = (weight * (safe_logits - self.beta * one_hot) ** 2).sum(dim=1)
        return (per_sample / allowed.sum(dim=1).clamp(min=1)).mean()

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}, beta={self.beta}"
