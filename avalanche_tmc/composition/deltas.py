"""Arithmetic on tangent components and their composition (TMC), with exact forgetting.

A component is a :data:`Delta` (name -> tensor). Tangent models
around the same weights form a vector space, so the λ-weighted ensemble of tangent
models *is* the tangent model of the λ-weighted sum of their deltas (paper, Sec. 3.2).

Composition rule used throughout. With component weights ``w_i > 0``::

    δ = S / W,    S = Σ_i w_i δ_i,    W = Σ_i w_i

``w_i = 1`` gives the paper's running mean (``λ_(t,1) = 1/t``, ``λ_(t,2) = (t−1)/t``):
adding task ``t`` maps the composed ``δ_{t−1}`` to ``(w_t δ_t + W_{t−1} δ_{t−1}) / W_t``.
``w_i = n_i`` (training samples of task ``i``) weighs tasks by size.

Forgetting task ``i`` (the paper's Remark 2, renormalised)::

    S ← S − w_i δ_i,   W ← W − w_i,   δ ← S / W

The paper's ``h_T − λ_(i,1) Π_{j>i} λ_(j,2) h̃_i`` subtracts ``(w_i / W) δ_i`` from ``δ``;
that leaves ``((W − w_i)/W)`` times the composition of the remaining tasks. We divide by
the remaining weight so the result equals, to float rounding, composing the remaining
tasks from scratch. It needs only ``δ_i`` and ``w_i``, never the other components.

``S`` and ``W`` are plain tensors that add: components trained in other processes or
machines can be summed into them (an all-reduce, or files) in any order.
"""

import math
from collections import OrderedDict
from typing import Dict, List, Mapping, Optional, Sequence

import torch
from torch import Tensor

from .additive import AdditiveComposition

# A tangent component: parameter name -> the change δ of that parameter.
Delta = Dict[str, Tensor]

__all__ = [
    "Delta", "check_compatible", "non_finite_names", "check_finite", "add_deltas", "subtract_deltas", "scale_delta",
    "zeros_like_delta", "weighted_sum", "compose", "DeltaComposition",
]


def check_compatible(a: Mapping[str, Tensor], b: Mapping[str, Tensor]) -> None:
    """Raise ``ValueError`` unless ``a`` and ``b`` have the same names and shapes."""
    if a.keys() != b.keys():
        only_a = sorted(set(a) - set(b))[:5]
        only_b = sorted(set(b) - set(a))[:5]
        raise ValueError(
            f"Incompatible deltas: names differ (only in first: {only_a}, only in second: {only_b}). "
            "Deltas combine only if they come from TangentModels with the same base network "
            "and linearized parameters."
        )
    wrong = [f"{n}: {tuple(a[n].shape)} vs {tuple(b[n].shape)}" for n in a if a[n].shape != b[n].shape]
    if wrong:
        raise ValueError("Incompatible deltas: shapes differ (" + "; ".join(wrong[:5]) + ").")


def non_finite_names(delta: Mapping[str, Tensor]) -> List[str]:
    """Names of the entries of ``delta`` holding a NaN or an infinity (empty: all finite)."""
    return [n for n, t in delta.items() if not bool(torch.isfinite(t).all())]


def _overflow_of_a_narrow_dtype(delta: Mapping[str, Tensor], bad: Sequence[str]) -> Optional[str]:
    """Why the entries ``bad`` are not finite when it is an overflow of a dtype narrower than
    float32 (float16: largest finite value 65504), not a divergence: infinities only, no NaN."""
    dtypes = {delta[n].dtype for n in bad}
    if not all(d.is_floating_point and torch.finfo(d).max < torch.finfo(torch.float32).max for d in dtypes) or any(
            bool(torch.isnan(delta[n]).any()) for n in bad):
        return None
    names = ", ".join(sorted(str(d).replace("torch.", "") for d in dtypes))
    largest = min(torch.finfo(d).max for d in dtypes)
    return (f"values beyond {names}'s range (its largest finite value is {largest:g}), which is an overflow of "
            f"{names}, not necessarily a divergence. Keep δ and the composition in float32 (a float32 network; "
            "AutocastPlugin runs the forward passes in lower precision and keeps δ in float32), or use smaller "
            "component weights (weighting='mean')")


def check_finite(delta: Mapping[str, Tensor], what: str = "delta") -> None:
    """Raise ``ValueError`` if any entry of ``delta`` holds a NaN or an infinity (naming
    the dtype's range when it is an overflow of float16)."""
    bad = non_finite_names(delta)
    overflow = _overflow_of_a_narrow_dtype(delta, bad) if bad else None
    if overflow:
        raise ValueError(f"The {what} is not finite (inf in {bad[:5]}{' ...' if len(bad) > 5 else ''}): {overflow}. "
                         "A non-finite component is never composed: it would spoil every later composition.")
    if bad:
        raise ValueError(
            f"The {what} is not finite (NaN or inf in {bad[:5]}{' ...' if len(bad) > 5 else ''}): "
            "training diverged (lower the learning rate) or the data holds NaN/inf. "
            "A non-finite component is never composed: it would spoil every later composition."
        )


def add_deltas(a: Mapping[str, Tensor], b: Mapping[str, Tensor]) -> Delta:
    """``a + b``."""
    check_compatible(a, b)
    return OrderedDict((n, a[n] + b[n]) for n in a)


def subtract_deltas(a: Mapping[str, Tensor], b: Mapping[str, Tensor]) -> Delta:
    """``a − b``."""
    check_compatible(a, b)
    return OrderedDict((n, a[n] - b[n]) for n in a)


def scale_delta(a: Mapping[str, Tensor], factor: float) -> Delta:
    """``factor · a``."""
    return OrderedDict((n, t * factor) for n, t in a.items())


def zeros_like_delta(a: Mapping[str, Tensor]) -> Delta:
    """A delta of zeros with the names and shapes of ``a`` (the pre-trained model)."""
    return OrderedDict((n, torch.zeros_like(t)) for n, t in a.items())


def weighted_sum(deltas: Sequence[Mapping[str, Tensor]], weights: Sequence[float]) -> Delta:
    """``Σ_i weights[i] · deltas[i]`` (no normalisation)."""
    if len(deltas) == 0:
        raise ValueError("weighted_sum needs at least one delta.")
    if len(deltas) != len(weights):
        raise ValueError(f"Got {len(deltas)} deltas but {len(weights)} weights.")
    for other in deltas[1:]:
        check_compatible(deltas[0], other)
    return OrderedDict(
        (n, sum(float(w) * d[n] for w, d in zip(weights, deltas))) for n in deltas[0]
    )


def compose(deltas: Sequence[Mapping[str, Tensor]], weights: Optional[Sequence[float]] = None) -> Delta:
    """The composed component ``Σ w_i δ_i / Σ w_i`` (default: the plain mean, TMC)."""
    weights = [1.0] * len(deltas) if weights is None else [float(w) for w in weights]
    total = sum(weights)
    if any(not 0 <= w < math.inf for w in weights) or not 0 < total < math.inf:
        raise ValueError(f"Composition weights must be non-negative and finite with a positive finite sum, got "
                         f"{weights}.")
    return weighted_sum(deltas, [w / total for w in weights])


class DeltaComposition(AdditiveComposition):
    """A growing TMC composition: add components one by one, read the composed δ,
    forget any component exactly.

    What it is for: the state a continual learner keeps between experiences. It is the
    :class:`~avalanche_tmc.composition.additive.AdditiveComposition` of the components: ``S = Σ w_i δ_i``
    and ``W = Σ w_i`` (see the module docstring) plus each component's weight and
    checksum. With ``keep_components=True`` it also keeps every ``δ_i`` (O(T) memory) so
    that TME can ensemble them and :meth:`forget` needs nothing else; with ``False``
    memory is O(1) in the number of tasks and :meth:`forget` needs the forgotten ``δ_i``
    handed back (e.g. from its file), bit for bit the one added (its checksum is compared).
    """

    noun = "component"
    argument = "delta"

    def __init__(self, keep_components: bool = True):
        super().__init__(keep_components=keep_components, scaled=True)

    def _check_compatible(self, tensors: Mapping[str, Tensor]) -> None:
        if self._template is not None:
            check_compatible(self._template, tensors)

    def _check_finite(self, tensors: Mapping[str, Tensor], what: str) -> None:
        check_finite(tensors, what)

    def composed(self) -> Delta:
        """The composed ``δ = S / W``; all zeros (the pre-trained model) when empty."""
        return self.mean()

    def composed_with(self, delta: Mapping[str, Tensor], weight: float = 1.0) -> Delta:
        """``(S + w δ) / (W + w)``: the composition if ``delta`` were added, without adding it."""
        if self._template is not None:
            check_compatible(self._template, delta)
        if not self._weights:
            return OrderedDict((n, t.detach().clone()) for n, t in delta.items())
        total = self._total_weight + float(weight)
        return OrderedDict(
            (n, (self._sum[n] + float(weight) * t.detach().to(self._sum[n])) / total) for n, t in delta.items()
        )
