"""Which committed machine comparisons bound a results row's cross-machine margin: the margin
rule (:data:`~benchmarks.results.machine_moves.MARGIN_RULES`), as
:func:`benchmarks.results.claims.judged_cells` applies it. ``pinned`` (the default, the
amendment of issue 58, docs/preregistration.md) bounds a row computed with the pinned AVX2
arithmetic (its ``arithmetic`` column ``avx2``) by the comparisons of pinned rows across
machines, and any other row (computed with a CPU's own kernels, or in a file written before
the column) by the comparisons of such rows; ``preregistered`` bounds every row by the
comparisons fixed before the confirmatory run."""

from typing import Sequence

from benchmarks.results.files import PINNED_ARITHMETIC, Row, RunKey, run_key
from benchmarks.results.machine_moves import (
    MACHINE_FILES,
    MARGIN_RULES,
    PINNED_FILES,
    UNPINNED_FILES,
    MachineMoves,
    measured_moves,
)

__all__ = ["DEFAULT_RULE", "MARGIN_TEXT", "row_moves"]

DEFAULT_RULE = "pinned"  # the margin rule of every table (MARGIN_RULES; docs/preregistration.md, the amendment)


def row_moves(rows: Sequence[Row], rule: str = DEFAULT_RULE):
    """``moves(method, run)``: the committed machine comparisons that bound that row of
    ``rows`` under the margin ``rule`` (see the module): for the ``pinned`` rule, those of
    pinned rows when every row of the method in that run says it was computed with the
    pinned arithmetic, else those of rows computed with a CPU's own kernels."""
    if rule not in MARGIN_RULES:
        raise ValueError(f"rule must be one of {', '.join(MARGIN_RULES)}, got {rule!r}")
    native_moves = measured_moves(files=UNPINNED_FILES if rule == "pinned" else MACHINE_FILES)
    # no comparison of pinned rows committed: nothing measured says they stay, so they keep the other margin
    pinned_moves = (measured_moves(files=PINNED_FILES) if rule == "pinned" else []) or native_moves
    native = {(str(r["method"]), run_key(r)) for r in rows if r.get("arithmetic") != PINNED_ARITHMETIC}

    def moves(method: str, run: RunKey) -> Sequence[MachineMoves]:
        return native_moves if (method, run) in native else pinned_moves

    return moves


MARGIN_TEXT = {  # what a verdict table says of its margin, per rule
    "pinned": "the 95% bound 1.96·sqrt(B² + σ²/n) at the table's n seeds of the moves measured in "
              "docs/results/machines/ (σ one seed's move, B a row's systematic shift, the largest over the pairs of "
              "machines measured; benchmarks/results/machine_moves.py): for a row computed with the pinned AVX2 "
              "arithmetic (its arithmetic column), the comparisons of pinned rows across machines (bit for bit the "
              "same so far: 0.0); for a row computed with a CPU's own kernels, the comparisons of such rows; 0 for "
              "tangent and training-free rows, measured the same to 0.0 (the margin rule amended after the "
              "confirmatory run, docs/preregistration.md)",
    "preregistered": "0 for tangent and training-free rows, measured the same to 0.0; else the 95% bound "
                     "1.96·sqrt(B² + σ²/n) at the table's n seeds of the moves measured in docs/results/machines/, "
                     "σ one seed's move, B a row's systematic shift, the largest over the pairs of machines measured "
                     "(benchmarks/results/machine_moves.py)",
}
