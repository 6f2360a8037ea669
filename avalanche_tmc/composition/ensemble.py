"""Output-space combination of several models: softmax/logit ensembles and class masks.

What it is for: TME (average of the softmax of T tangent models), the Ens-L / Ens-SM
baselines, and task-incremental evaluation, which restricts predictions to the classes
of the known task. Torch only.
"""

from typing import Optional, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["class_mask", "mask_logits", "logit_ensemble", "log_softmax_ensemble", "nll_of_log_probs"]


def class_mask(task_labels: Tensor, task_classes: dict, num_classes: int) -> Tensor:
    """Boolean ``(batch, num_classes)`` mask: True where a class belongs to the sample's task.

    :param task_labels: integer task label per sample.
    :param task_classes: task label -> iterable of the global class ids of that task.
    """
    mask = torch.zeros(task_labels.shape[0], num_classes, dtype=torch.bool, device=task_labels.device)
    for task in task_labels.unique().tolist():
        if task not in task_classes:
            raise KeyError(
                f"Task label {task} has no known classes: the model was never told which classes "
                f"belong to it (known tasks: {sorted(task_classes)})."
            )
        rows = (task_labels == task).nonzero(as_tuple=True)[0]
        cols = torch.as_tensor(sorted(task_classes[task]), dtype=torch.long, device=task_labels.device)
        mask[rows.unsqueeze(1), cols.unsqueeze(0)] = True
    return mask


def mask_logits(logits: Tensor, mask: Optional[Tensor]) -> Tensor:
    """Set logits outside ``mask`` to ``-inf`` (argmax and softmax then ignore them)."""
    if mask is None:
        return logits
    return logits.masked_fill(~mask, float("-inf"))


def _normalised(weights: Optional[Sequence[float]], count: int) -> Sequence[float]:
    if count == 0:
        raise ValueError("An ensemble needs at least one member.")
    weights = [1.0] * count if weights is None else [float(w) for w in weights]
    if len(weights) != count:
        raise ValueError(f"Got {count} members but {len(weights)} weights.")
    total = sum(weights)
    if not 0 < total < float("inf") or any(not 0 <= w < float("inf") for w in weights):
        raise ValueError(f"Ensemble weights must be non-negative and finite with a positive finite sum, got {weights}.")
    return [w / total for w in weights]


def logit_ensemble(logits: Sequence[Tensor], weights: Optional[Sequence[float]] = None) -> Tensor:
    """``Σ λ_i logits_i`` with λ normalised to sum to one (Ens-L)."""
    lambdas = _normalised(weights, len(logits))
    return sum(lam * out for lam, out in zip(lambdas, logits))


def log_softmax_ensemble(
    logits: Sequence[Tensor], weights: Optional[Sequence[float]] = None, mask: Optional[Tensor] = None
) -> Tensor:
    """``log Σ λ_i softmax(logits_i)`` (TME, Ens-SM), each member masked first.

    Log-probabilities keep the argmax of the averaged softmax and can be fed to
    ``F.nll_loss``. Masked classes get probability 0 (log-probability ``-inf``).
    """
    lambdas = _normalised(weights, len(logits))
    stacked = torch.stack([torch.log_softmax(mask_logits(out, mask), dim=1) for out in logits])
    log_lambdas = torch.log(torch.tensor(lambdas, dtype=stacked.dtype, device=stacked.device))
    return torch.logsumexp(stacked + log_lambdas.view(-1, 1, 1), dim=0)


def nll_of_log_probs(log_probs: Tensor, targets: Tensor) -> Tensor:
    """Evaluation loss of a softmax ensemble: the NLL of its log-probabilities."""
    return F.nll_loss(log_probs, targets)
