"""Means, standard deviations and paired 95% intervals over seeds, and the verdict rule.

A claim "A beats B" is judged from the per-seed differences ``d_s = acc_A(s) - acc_B(s)``
(paired: within a seed both methods saw the same data, class order, head initialisation
and experience seeds). With ``n`` seeds, mean ``d`` and sample standard deviation ``s``,
the 95% interval is ``d ± t(0.975, n-1) · s / sqrt(n)`` (Student's t). The claim
**holds** when the interval lies above 0, **fails** when it lies below 0, and is **not
resolved** otherwise (or with fewer than 2 seeds).

A table judges many claims at once; :func:`holm` corrects for their number (Holm's
step-down procedure at family-wise :data:`ALPHA`) from each claim's two-sided
:func:`p_value` (the same paired t statistic the interval uses), and :func:`interval` gives
the interval at the level a claim's Holm step used (:mod:`benchmarks.results.claims`).

"No real difference" is a verdict of its own, not the absence of one: a difference is
**equivalent** to 0 within a smallest difference of interest ``δ`` when its interval lies
inside ``(-δ, δ)`` (:func:`within`), which at level ``L`` is Schuirmann's two one-sided
tests, each at ``(1 - L) / 2`` (:func:`equivalence_p`: the larger of their p-values).
"""

import math
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

__all__ = ["mean_std", "t_quantile", "PairedDifference", "paired_difference", "verdict", "HOLDS", "FAILS",
           "NOT_RESOLVED", "EQUIVALENT", "ALPHA", "p_value", "interval", "equivalence_p", "within", "HolmStep",
           "holm"]

HOLDS, FAILS, NOT_RESOLVED = "holds", "fails", "not resolved"
EQUIVALENT = "equivalent"  # the difference lies within ±δ (two one-sided tests)
ALPHA = 0.05  # the family-wise error rate of a table's verdicts (Holm)

# t(0.975, df) for df = 1..30 (Student's t, two-sided 95%).
_T975: Dict[int, float] = {
    1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 5: 2.5706, 6: 2.4469, 7: 2.3646, 8: 2.3060, 9: 2.2622,
    10: 2.2281, 11: 2.2010, 12: 2.1788, 13: 2.1604, 14: 2.1448, 15: 2.1314, 16: 2.1199, 17: 2.1098, 18: 2.1009,
    19: 2.0930, 20: 2.0860, 21: 2.0796, 22: 2.0739, 23: 2.0687, 24: 2.0639, 25: 2.0595, 26: 2.0555, 27: 2.0518,
    28: 2.0484, 29: 2.0452, 30: 2.0423,
}


def t_quantile(df: int, level: float = 0.95) -> float:
    """Student's t quantile of a two-sided interval at ``level`` (the ``(1 + level) / 2``
    quantile) with ``df`` degrees of freedom. At 0.95: a table up to 30, then the
    Cornish-Fisher expansion around the normal quantile, within 1e-4; at other levels
    SciPy's ``t.ppf``."""
    if df < 1:
        raise ValueError(f"t needs at least 1 degree of freedom, got {df}.")
    if not 0 < level < 1:
        raise ValueError(f"An interval's level is in (0, 1), got {level}.")
    if level != 0.95:
        from scipy.stats import t  # scikit-learn's dependency, installed with the library

        return float(t.ppf((1 + level) / 2, df))
    if df in _T975:
        return _T975[df]
    z = 1.959964
    return z + (z ** 3 + z) / (4 * df) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * df ** 2)


def mean_std(values: Sequence[float]) -> tuple:
    """``(mean, sample standard deviation)``; the deviation is 0 for one value."""
    if not values:
        raise ValueError("mean_std of no values.")
    n = len(values)
    mean = sum(values) / n
    if n == 1:
        return mean, 0.0
    return mean, math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))


@dataclass(frozen=True)
class PairedDifference:
    """Mean per-seed difference with its 95% half-width (``nan`` with one seed)."""

    mean: float
    std: float
    half_width: float
    n: int

    @property
    def low(self) -> float:
        return self.mean - self.half_width

    @property
    def high(self) -> float:
        return self.mean + self.half_width


def paired_difference(a: Dict[int, float], b: Dict[int, float]) -> Optional[PairedDifference]:
    """The difference ``a - b`` over the seeds both have (None when they share none)."""
    seeds = sorted(set(a) & set(b))
    if not seeds:
        return None
    mean, std = mean_std([a[s] - b[s] for s in seeds])
    n = len(seeds)
    half = t_quantile(n - 1) * std / math.sqrt(n) if n > 1 else math.nan
    return PairedDifference(mean, std, half, n)


def verdict(difference: Optional[PairedDifference]) -> str:
    """:data:`HOLDS` / :data:`FAILS` when the 95% interval excludes 0 on that side, else
    :data:`NOT_RESOLVED` (also with fewer than 2 seeds)."""
    if difference is None or difference.n < 2:
        return NOT_RESOLVED
    if difference.low > 0:
        return HOLDS
    if difference.high < 0:
        return FAILS
    return NOT_RESOLVED


def p_value(difference: PairedDifference) -> float:
    """The two-sided p-value of the paired t test of "no difference": ``2 · P(T > |t|)``
    with ``t = mean / (std / sqrt(n))`` and ``T`` Student's t with ``n - 1`` degrees of
    freedom (the statistic :func:`paired_difference`'s interval uses). Identical
    differences (std 0) give 0 (1 when they are all 0). Refused with fewer than 2 seeds."""
    if difference.n < 2:
        raise ValueError(f"A p-value needs at least 2 seeds, got {difference.n}.")
    if difference.std == 0:
        return 1.0 if difference.mean == 0 else 0.0
    from scipy.stats import t

    statistic = difference.mean / (difference.std / math.sqrt(difference.n))
    return float(min(1.0, 2 * t.sf(abs(statistic), difference.n - 1)))


def interval(difference: PairedDifference, level: float) -> tuple:
    """``(low, high)``: the paired difference's two-sided t-interval at ``level`` (SciPy's
    t quantile at every level, 0.95 included, so that it excludes 0 exactly when
    :func:`p_value` is below ``1 - level``)."""
    if difference.n < 2:
        raise ValueError(f"An interval needs at least 2 seeds, got {difference.n}.")
    if not 0 < level < 1:
        raise ValueError(f"An interval's level is in (0, 1), got {level}.")
    from scipy.stats import t

    half = float(t.ppf((1 + level) / 2, difference.n - 1)) * difference.std / math.sqrt(difference.n)
    return difference.mean - half, difference.mean + half


def equivalence_p(difference: PairedDifference, delta: float) -> float:
    """The p-value of Schuirmann's two one-sided tests that the mean difference lies
    within ``(-delta, delta)``: the larger of ``P(T >= (mean + delta) / se)`` (against
    "mean <= -delta") and ``P(T <= (mean - delta) / se)`` (against "mean >= delta"), ``se =
    std / sqrt(n)``, ``T`` Student's t with ``n - 1`` degrees of freedom. It is below ``(1 -
    L) / 2`` exactly when :func:`interval` at level ``L`` is :func:`within` ``delta``.
    Identical differences (std 0) give 0 inside the bounds, 1 on or outside them."""
    if difference.n < 2:
        raise ValueError(f"An equivalence test needs at least 2 seeds, got {difference.n}.")
    if not delta > 0:
        raise ValueError(f"The smallest difference of interest must be > 0, got {delta}.")
    if difference.std == 0:
        return 0.0 if abs(difference.mean) < delta else 1.0
    from scipy.stats import t

    se = difference.std / math.sqrt(difference.n)
    above_lower = float(t.sf((difference.mean + delta) / se, difference.n - 1))
    below_upper = float(t.cdf((difference.mean - delta) / se, difference.n - 1))
    return max(above_lower, below_upper)


def within(low: float, high: float, delta: float) -> bool:
    """Whether the interval ``[low, high]`` lies inside ``(-delta, delta)``."""
    return -delta < low and high < delta


@dataclass(frozen=True)
class HolmStep:
    """One hypothesis of :func:`holm`: its ``rank`` (1 = smallest p; tied p-values share
    the rank of the first of them), whether it is ``rejected``, its Holm-adjusted p-value
    and the ``level`` of the interval that matches its step (``1 - alpha / (m - step + 1)``;
    the step is its rank when rejected, else the rank of the first hypothesis not
    rejected)."""

    p: float
    rank: int
    adjusted: float
    rejected: bool
    level: float


def holm(p_values: Sequence[float], alpha: float = ALPHA) -> List[HolmStep]:
    """Holm's step-down procedure over ``p_values`` (one family of ``m`` hypotheses), at
    family-wise error rate ``alpha``; one :class:`HolmStep` per p-value, in their order.

    Sorted ascending, the k-th smallest p-value is rejected iff ``p_(j) <= alpha / (m - j + 1)``
    for every ``j <= k``; its adjusted p-value is ``max over j <= k of min(1, (m - j + 1) · p_(j))``,
    so it is rejected iff its adjusted p-value is at most ``alpha``. Ties: equal p-values
    take the rank of the first of them (the smallest ``k``, the strictest threshold), so
    they share one rank, one adjusted p-value, one level and one decision whatever their
    order (the textbook sequence gives the same decisions and adjusted p-values: a later
    tied one meets a looser threshold and its adjusted p-value is the maximum so far)."""
    m = len(p_values)
    for p in p_values:
        if not 0 <= p <= 1:
            raise ValueError(f"A p-value is in [0, 1], got {p}.")
    order = sorted(range(m), key=lambda i: p_values[i])
    ranks: Dict[int, int] = {}
    adjusted: Dict[int, float] = {}
    running, previous, rank = 0.0, None, 0
    for position, i in enumerate(order, 1):
        p = p_values[i]
        if p != previous:
            rank, previous = position, p
        running = max(running, min(1.0, (m - rank + 1) * p))
        ranks[i], adjusted[i] = rank, running
    first_kept = min((ranks[i] for i in range(m) if adjusted[i] > alpha), default=None)
    steps = []
    for i in range(m):
        rejected = adjusted[i] <= alpha
        step = ranks[i] if rejected or first_kept is None else first_kept
        steps.append(HolmStep(p_values[i], ranks[i], adjusted[i], rejected, 1 - alpha / (m - step + 1)))
    return steps
