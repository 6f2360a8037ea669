"""How far a row's mean over n seeds may move on another machine, from measurements.

Another CPU runs other kernels and rounds otherwise; SGD training amplifies that, so an
SGD-trained row's final accuracy moves from one machine to another seed by seed, while the
tangent and training-free rows were the same (to one test image) on every pair of machines
compared. ``docs/results/machines/`` keeps each comparison of the same run on two machines
(or two kernels) as a spread CSV (:mod:`benchmarks.tools.spread`): per row, the mean on
each machine and the standard deviation of the per-seed moves.

The model, per comparison (:class:`MachineMoves`): a row's move on seed ``s`` is ``b_row +
e_s``, with ``e_s`` independent, of standard deviation ``σ`` (pooled over the comparison's
SGD rows), and ``b_row`` a systematic shift of that row, of root mean square ``B``,
estimated by the method of moments (the rows' mean moves vary more than ``σ / sqrt(k)``
over ``k`` seeds only by ``B``). The mean over ``n`` seeds then moves by
``b_row + mean(e)``, whose 95% bound is ``1.96 · sqrt(B² + σ² / n)`` (:meth:`MachineMoves.margin`):
a mean over 20 seeds moves less than one over 5, down to ``1.96 · B``. A verdict must
survive every pair of machines measured: the margin is the largest over the comparisons
(:func:`machine_margin`).
"""

import math
from dataclasses import dataclass
from pathlib import Path
from typing import List, Optional, Sequence

from benchmarks.methods import method_family

__all__ = ["MACHINE_FILES", "UNPINNED_FILES", "PINNED_FILES", "MARGIN_RULES", "Z95", "MachineMoves",
           "measured_moves", "moves_of", "machine_margin", "bias_p_value", "STABLE_FAMILIES"]

MACHINE_FILES = ("spread.csv", "kernels.csv", "second-machine.csv")  # docs/results/machines/ (spread CSVs)
"""Comparisons of rows computed with each CPU's own kernels (before the arithmetic was pinned):
what another instruction set, another layout or other kernels do to an SGD row. The margin of
the pre-registered rule, and of any row computed natively (its ``arithmetic`` column)."""
UNPINNED_FILES = MACHINE_FILES + ("unpinned-avx512-spread.csv",)
"""The comparisons that bound a natively computed row under the amended rule: the
pre-registered ones and the clean one of issue 58 (this code, one layout, an AVX-512 CPU's own
kernels against the pinned AVX2 arithmetic at the same seeds)."""
PINNED_FILES = ("pinned-confirm-spread.csv", "pinned-pilot-spread.csv")
"""Comparisons of rows computed with the pinned AVX2 arithmetic on different machines (an AVX2
CPU's committed runs re-run pinned on an AVX-512 CPU): the margin of the amended rule."""
MARGIN_RULES = ("pinned", "preregistered")
"""How a verdict's cross-machine margin is measured: ``pinned`` (the amendment of issue 58,
docs/preregistration.md): rows of the pinned arithmetic by :data:`PINNED_FILES`, rows computed
natively by :data:`UNPINNED_FILES`; ``preregistered``: every row by :data:`MACHINE_FILES`."""
Z95 = 1.959964  # two-sided 95% normal quantile
STABLE_FAMILIES = ("tangent", "training-free")  # rows measured the same on every pair of machines


@dataclass(frozen=True)
class MachineMoves:
    """The measured moves of SGD rows between two machines, in points: ``seed_sd`` (σ, one
    seed's move about its row's shift), ``bias`` (B, the root mean square of a row's
    systematic shift), from ``rows`` rows over ``moves`` per-seed moves; ``name``: the
    comparison's file; ``bias_p``: how likely rows' mean moves this far from 0 are with no
    systematic shift (:func:`bias_p_value`; None when every move is 0)."""

    name: str = ""
    seed_sd: float = 0.0
    bias: float = 0.0
    rows: int = 0
    moves: int = 0
    bias_p: Optional[float] = None

    def margin(self, method: str, seeds: int) -> float:
        """Points by which ``method``'s mean over ``seeds`` seeds may move on another machine
        (95%): 0 for the tangent and training-free rows, else ``1.96 · sqrt(B² + σ² / seeds)``."""
        if method_family(method) in STABLE_FAMILIES:
            return 0.0
        return Z95 * math.sqrt(self.bias ** 2 + self.seed_sd ** 2 / max(seeds, 1))


def moves_of(rows: Sequence[dict], name: str = "") -> MachineMoves:
    """:class:`MachineMoves` of spread rows (``mean_a``, ``mean_b``, ``seeds``,
    ``seed_difference_std``, fractions); tangent and training-free rows left out. σ² pools
    the rows' per-seed variances by their degrees of freedom; ``B² = max(0, mean over rows
    of (D² − σ² / k))``, ``D`` a row's mean move over its ``k`` seeds."""
    sgd = [r for r in rows if method_family(str(r["method"])) not in STABLE_FAMILIES]
    counts = [len(str(r["seeds"]).split()) for r in sgd]
    freedom = sum(k - 1 for k in counts)
    if not sgd or freedom == 0:
        return MachineMoves(name)
    variance = sum((k - 1) * (100 * float(r["seed_difference_std"])) ** 2 for r, k in zip(sgd, counts)) / freedom
    shifts = [(100 * (float(r["mean_b"]) - float(r["mean_a"]))) ** 2 - variance / k for r, k in zip(sgd, counts)]
    means = [100 * (float(r["mean_b"]) - float(r["mean_a"])) for r in sgd]
    return MachineMoves(name, math.sqrt(variance), math.sqrt(max(0.0, sum(shifts) / len(shifts))), len(sgd),
                        sum(counts), bias_p_value(means, counts, variance))


def bias_p_value(means: Sequence[float], counts: Sequence[int], variance: float) -> Optional[float]:
    """Whether B is distinguishable from 0: with no systematic shift, a row's mean move ``D``
    over its ``k`` seeds has variance ``σ²/k``, so ``Σ k·D²/σ²`` is about χ² with one degree of
    freedom per row; its upper tail (Wilson–Hilferty's normal approximation), or None when
    every move is 0 (σ = 0: nothing moved)."""
    if variance <= 0:
        return None
    statistic, freedom = sum(k * d * d for d, k in zip(means, counts)) / variance, len(means)
    z = ((statistic / freedom) ** (1 / 3) - (1 - 2 / (9 * freedom))) / math.sqrt(2 / (9 * freedom))
    return 0.5 * math.erfc(z / math.sqrt(2))


def measured_moves(folder: Optional[Path] = None, files: Sequence[str] = MACHINE_FILES) -> List[MachineMoves]:
    """:class:`MachineMoves` of each committed comparison (``files``, by default
    :data:`MACHINE_FILES`, in ``docs/results/machines/`` that exist)."""
    from benchmarks.results.spread import read_spread_csv

    folder = folder or Path(__file__).resolve().parents[2] / "docs" / "results" / "machines"
    return [moves_of(read_spread_csv(folder / name), name) for name in files if (folder / name).is_file()]


def machine_margin(method: str, seeds: int, moves: Sequence[MachineMoves]) -> float:
    """Points by which ``method``'s mean over ``seeds`` seeds may move on another machine:
    the largest :meth:`MachineMoves.margin` over the comparisons (0 with none)."""
    return max((m.margin(method, seeds) for m in moves), default=0.0)
