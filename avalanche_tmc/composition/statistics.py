"""Composition through sufficient statistics: a linear head solved in closed form from
the *sum* of every task's statistics.

For features ``φ(x) ∈ R^D`` (penultimate features of a frozen network, optionally after
a fixed random projection) and targets ``y = β·onehot`` (C classes), a task contributes

    G = Σ φ φᵀ  (D×D),   B = Σ φ yᵀ  (D×C),   S = Σ y yᵀ  (C×C),   n = #samples,
    class_sum = Σ_{x in class c} φ(x)  (C×D),   class_count (C)

and the ridge head ``W = (G + λ I)⁻¹ B`` of the *union* of the tasks' data is a function
of the summed statistics only. So, like TMC's deltas, statistics are plain tensors that

* are computed by each task alone (parallel, federated, on other machines),
* compose by addition in any order (an all-reduce, or files) into fixed-size memory
  (D×D + D×C + C×C, whatever the number of tasks),
* forget a task exactly by subtraction.

Unlike averaging per-task heads (what head-only TMC converges to), the summed solution
is the head trained on all data at once: the cross-task terms in ``G`` are kept.

Ridge λ is chosen by generalised cross-validation (GCV) on the training statistics —
never on test data: with the eigen-decomposition ``G = U diag(s) Uᵀ``,

    RSS(λ) = tr(S) − 2 tr(Wᵀ B) + tr(Wᵀ G W),   df(λ) = Σ s_i / (s_i + λ),
    GCV(λ) = RSS(λ) / (n (1 − df(λ)/n)²)

evaluated on a log-spaced grid of ``λ = ρ · tr(G)/D``, excluding λ whose effective degrees
of freedom exceed 90% of the samples (near interpolation GCV is 0/0). Torch only.
"""

from collections import OrderedDict
from typing import Dict, Hashable, Optional, Sequence, Tuple

import torch
from torch import Tensor, nn

from .additive import AdditiveComposition

__all__ = [
    "HeadStats", "STAT_KEYS", "DEFAULT_RIDGE_GRID", "head_statistics", "add_statistics", "check_finite_statistics",
    "gcv_ridge_lambda", "ridge_head", "class_means", "StatisticsComposition", "RandomReLUFeatures",
]

HeadStats = Dict[str, Tensor]
"""``{"gram", "cross", "target_gram", "count", "class_sum", "class_count"}``: plain tensors."""

STAT_KEYS = ("gram", "cross", "target_gram", "count", "class_sum", "class_count")
DEFAULT_RIDGE_GRID = tuple(10.0 ** k for k in range(-6, 3))


def head_statistics(features: Tensor, targets: Tensor, num_classes: int, beta: float = 1.0,
                    dtype: torch.dtype = torch.float64) -> HeadStats:
    """The statistics of one batch (or task) of ``features`` (N×D) and integer ``targets``."""
    if features.dim() != 2 or targets.dim() != 1 or len(features) != len(targets):
        raise ValueError(f"Expected features (N, D) and targets (N,), got {tuple(features.shape)} and "
                         f"{tuple(targets.shape)}.")
    if len(targets) and (int(targets.min()) < 0 or int(targets.max()) >= num_classes):
        raise ValueError(f"Targets must lie in [0, {num_classes}), got [{int(targets.min())}, {int(targets.max())}].")
    phi = features.detach().to(dtype)
    one_hot = torch.nn.functional.one_hot(targets.long(), num_classes).to(dtype)
    y = beta * one_hot
    return OrderedDict(
        gram=phi.T @ phi,
        cross=phi.T @ y,
        target_gram=y.T @ y,
        count=torch.tensor(float(len(phi)), dtype=dtype, device=phi.device),
        class_sum=one_hot.T @ phi,
        class_count=one_hot.sum(0),
    )


def add_statistics(a: HeadStats, b: HeadStats, sign: float = 1.0) -> HeadStats:
    """``a + sign·b`` (checked for matching keys and shapes)."""
    for key in STAT_KEYS:
        if a[key].shape != b[key].shape:
            raise ValueError(f"Incompatible statistics: {key} has shape {tuple(a[key].shape)} vs "
                             f"{tuple(b[key].shape)} (different feature size or number of classes?).")
    return OrderedDict((k, a[k] + sign * b[k].to(a[k])) for k in STAT_KEYS)


def check_finite_statistics(stats: HeadStats, what: str = "statistics") -> None:
    """Raise ``ValueError`` if any of ``stats`` holds a NaN or an infinity."""
    bad = [k for k in STAT_KEYS if k in stats and not bool(torch.isfinite(stats[k]).all())]
    if bad:
        raise ValueError(f"The {what} are not finite (NaN or inf in {bad}): the features hold NaN/inf "
                         "(check the data and the feature network). Non-finite statistics are never composed: "
                         "they would spoil the head of every later experience.")


def _ridge_solution(gram: Tensor, cross: Tensor, lam: float) -> Tensor:
    eye = torch.eye(gram.shape[0], dtype=gram.dtype, device=gram.device)
    return torch.linalg.solve(gram + lam * eye, cross)


def _eigh(gram: Tensor, scale: float) -> Tuple[Tensor, Tensor]:
    """Eigen-decomposition of a PSD Gram matrix. With fewer samples than features it has
    many repeated zero eigenvalues, on which LAPACK can fail to converge: a jitter of
    1e-9·tr(G)/D on the diagonal (removed from the eigenvalues again) fixes that."""
    try:
        evals, evecs = torch.linalg.eigh(gram)
    except torch.linalg.LinAlgError:
        jitter = 1e-9 * max(scale, 1e-30)
        evals, evecs = torch.linalg.eigh(gram + jitter * torch.eye(gram.shape[0], dtype=gram.dtype, device=gram.device))
        evals = evals - jitter
    return evals.clamp(min=0), evecs


def gcv_ridge_lambda(stats: HeadStats, grid: Sequence[float] = DEFAULT_RIDGE_GRID,
                     max_df_fraction: float = 0.9) -> Tuple[float, Dict[float, float]]:
    """The λ of ``grid`` (relative to ``tr(G)/D``) minimising GCV on the training statistics.

    Candidates whose effective degrees of freedom exceed ``max_df_fraction`` of the
    sample count are excluded (score ``inf``): there the fit interpolates and GCV is
    numerically meaningless. Returns (absolute λ, {absolute λ: GCV score}).
    """
    gram, cross, n = stats["gram"], stats["cross"], float(stats["count"])
    if n <= 0:
        raise ValueError("Cannot choose a ridge penalty from empty statistics.")
    scale = float(torch.trace(gram)) / gram.shape[0]
    evals, evecs = _eigh(gram, scale)
    rotated = evecs.T @ cross  # Uᵀ B
    scores = {}
    for rho in grid:
        lam = rho * scale
        coef = rotated / (evals + lam).unsqueeze(1)  # Uᵀ W
        rss = torch.trace(stats["target_gram"]) - 2 * (coef * rotated).sum() + (coef ** 2 * evals.unsqueeze(1)).sum()
        df = float((evals / (evals + lam)).sum())
        scores[lam] = max(float(rss), 0.0) / (n * max(1e-12, 1.0 - df / n) ** 2)
        if df > max_df_fraction * n:
            # Near interpolation (more features than samples, tiny λ) RSS -> 0 and df -> n:
            # GCV is 0/0 there and rounding makes spurious minima. Such λ are not chosen.
            scores[lam] = float("inf")
    best = min(scores, key=scores.get)
    if scores[best] == float("inf"):
        best = max(scores)  # every candidate interpolates: take the strongest penalty
    return best, scores


def ridge_head(stats: HeadStats, lam: Optional[float] = None) -> Tuple[Tensor, float]:
    """The ridge head ``W`` (D×C) from (summed) statistics; λ by GCV unless given."""
    if lam is None:
        lam, _ = gcv_ridge_lambda(stats)
    return _ridge_solution(stats["gram"], stats["cross"], lam), lam


def class_means(stats: HeadStats) -> Tensor:
    """Per-class mean feature (C×D); zero rows for classes never seen."""
    return stats["class_sum"] / stats["class_count"].clamp(min=1).unsqueeze(1)


class StatisticsComposition(AdditiveComposition):
    """Per-task head statistics composed by summation, with exact forgetting.

    What it is for: the training-free counterpart of :class:`~avalanche_tmc.composition.deltas.DeltaComposition`:
    the same :class:`~avalanche_tmc.composition.additive.AdditiveComposition`, unscaled (statistics
    are already sums over samples; a task's weight is its sample count). It keeps the
    running sum (fixed size) and, with ``keep_components=True``, each task's statistics
    so :meth:`forget` needs nothing else.
    """

    noun = "statistics"
    argument = "statistics"

    def __init__(self, keep_components: bool = True):
        super().__init__(keep_components=keep_components, scaled=False)

    def _checked(self, key: Hashable, stats) -> HeadStats:
        missing = [k for k in STAT_KEYS if k not in stats]
        if missing:
            raise ValueError(f"Statistics for {key!r} lack {missing}; use head_statistics() to make them.")
        return OrderedDict((k, stats[k].detach()) for k in STAT_KEYS)

    def _check_compatible(self, stats) -> None:
        if self._template is not None:
            add_statistics(self._template, stats)  # raises naming the statistic whose shape differs

    def _check_finite(self, stats, what: str) -> None:
        check_finite_statistics(stats, what)

    def _differs_message(self, key: Hashable, names) -> str:
        return (f"The statistics given to forget {key!r} differ from the ones kept under that key; "
                f"call forget({key!r}) without statistics: the kept ones are used.")

    def add(self, key: Hashable, stats: HeadStats, weight: Optional[float] = None) -> None:
        """Add a task's statistics under ``key`` (weight: their sample count)."""
        if key in self._weights:
            raise KeyError(f"Statistics for {key!r} are already in the composition; forget them first.")
        if weight is None:
            if "count" not in stats:
                self._checked(key, stats)  # raises naming what is missing
            weight = float(stats["count"])
            if weight <= 0:
                raise ValueError(f"The statistics of {key!r} hold no sample (count {weight:g}): an experience "
                                 "without data adds nothing. Nothing was added.")
        super().add(key, stats, weight)

    def summed(self) -> HeadStats:
        """The statistics of all tasks in the composition (what the head is solved from)."""
        if self._sum is None:
            raise RuntimeError("The composition is empty.")
        return OrderedDict(self._sum)


class RandomReLUFeatures(nn.Module):
    """A fixed, seeded random projection ``relu(φ P)`` (D -> M), as in RanPAC: the ridge
    head on these features is a better classifier than on φ, and remains exactly
    composable because ``P`` is the same for every task (same seed)."""

    def __init__(self, in_features: int, out_features: int = 2000, seed: int = 0):
        super().__init__()
        gen = torch.Generator().manual_seed(seed)
        self.register_buffer("projection", torch.randn(in_features, out_features, generator=gen))

    def forward(self, features: Tensor) -> Tensor:
        return torch.relu(features @ self.projection.to(features.dtype))
