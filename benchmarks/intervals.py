"""Means, standard deviations and paired 95% intervals over seeds, and the verdict rule.

A claim "A beats B" is judged from the per-seed differences ``d_s = acc_A(s) - acc_B(s)``
(paired: within a seed both methods saw the same data, class order, head initialisation
and experience seeds). With ``n`` seeds, mean ``d`` and sample standard deviation ``s``,
the 95% interval is ``d ± t(0.975, n-1) · s / sqrt(n)`` (Student's t). The claim
**holds** when the interval lies above 0, **fails** when it lies below 0, and is **not
resolved** otherwise (or with fewer than 2 seeds).
"""

import math
from dataclasses import dataclass
from typing import Dict, Optional, Sequence

__all__ = ["mean_std", "t_quantile", "PairedDifference", "paired_difference", "verdict", "HOLDS", "FAILS",
           "NOT_RESOLVED"]

HOLDS, FAILS, NOT_RESOLVED = "holds", "fails", "not resolved"

# t(0.975, df) for df = 1..30 (Student's t, two-sided 95%).
_T975: Dict[int, float] = {
    1: 12.7062, 2: 4.3027, 3: 3.1824, 4: 2.7764, 5: 2.5706, 6: 2.4469, 7: 2.3646, 8: 2.3060, 9: 2.2622,
    10: 2.2281, 11: 2.2010, 12: 2.1788, 13: 2.1604, 14: 2.1448, 15: 2.1314, 16: 2.1199, 17: 2.1098, 18: 2.1009,
    19: 2.0930, 20: 2.0860, 21: 2.0796, 22: 2.0739, 23: 2.0687, 24: 2.0639, 25: 2.0595, 26: 2.0555, 27: 2.0518,
    28: 2.0484, 29: 2.0452, 30: 2.0423,
}


def t_quantile(df: int) -> float:
    """Student's t quantile at 0.975 with ``df`` degrees of freedom (a table up to 30, then
    the Cornish-Fisher expansion around the normal quantile, within 1e-4)."""
    if df < 1:
        raise ValueError(f"t needs at least 1 degree of freedom, got {df}.")
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
