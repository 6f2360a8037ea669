"""What divergence is, for every learner of this package: :class:`DivergenceError` and the
finiteness checks that raise it. Torch only; the Avalanche hooks that call them during a
strategy's training are :class:`~avalanche_tmc.training.plugins.divergence.DivergenceGuardPlugin`
(as Avalanche keeps LwF's math in ``training/regularization.py`` beside its plugin).
"""

from typing import Iterable, List, Tuple

import torch
from torch import Tensor

__all__ = ["DivergenceError", "non_finite"]


class DivergenceError(RuntimeError, FloatingPointError, ValueError):
    """Training produced a non-finite loss, ``δ``, feature or statistic: the experience is
    stopped and nothing is learned from it (a strategy of this package is left as before the
    ``train()`` call). The command line exits with code 6 (``EXIT_TRAINING``).

    Raised by every learner of the package: the tangent strategies, the training-free heads and
    the adaptation of :class:`~avalanche_tmc.AdaptThenComposeStrategy`. It is also a
    ``FloatingPointError`` and a ``ValueError``, the types the adaptation and the training-free
    heads raised before, so that code catching those keeps working (until avalanche-tmc 0.3.0)."""


def non_finite(named: Iterable[Tuple[str, Tensor]]) -> List[str]:
    """The names of the tensors of ``named`` that hold NaN or inf, in order."""
    return [name for name, tensor in named if not bool(torch.isfinite(tensor).all())]

