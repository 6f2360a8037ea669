"""How many seeds a confirmatory run needs: per claim of a pilot run, the seed count at which
the pilot's effect would be decided, fixed before the confirmatory results exist.

``python -m benchmarks.results.seed_count docs/results/offline/results.csv --cap 40 --out
docs/results/preregistration/seed-count.csv`` writes, for every claim the pilot judges
(:mod:`benchmarks.results.claims`), the pilot's mean paired difference ``d`` and its standard
deviation ``s``, and the smallest seed count ``N`` (up to ``--cap``) at which, if the
confirmatory run showed the same ``d`` and ``s``, the claim would be decided:

* **holds / fails** when ``|d| - t · s / sqrt(N) > margin(N)``,
* **equivalent** when ``|d| + t · s / sqrt(N) + margin(N) < δ``,

with ``t`` Student's quantile at Holm's strictest step, ``1 - α / (2m)`` (``m`` the pilot's
family; a claim at a later step is tested less strictly, so ``N`` is an upper bound), and
``margin(N)`` the claim's two rows' cross-machine margins at ``N`` seeds
(:mod:`benchmarks.results.machine_moves`). ``python -m benchmarks.report FILE --readme
PAGE`` shows it (:func:`seed_count_table`), with the count of claims decided at each ``N``.
"""

import argparse
import math
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from benchmarks.results.claims import CLAIMS, DEFAULT_RULE, MIN_SEEDS, SMALLEST_DIFFERENCE, judged_cells, row_moves
from benchmarks.results.files import (
    SEED_COUNT_COLUMNS,
    ReportFileError,
    Row,
    read_csv,
    read_written_csv,
    run_label,
)
from benchmarks.results.intervals import ALPHA
from benchmarks.results.machine_moves import MachineMoves, machine_margin
from benchmarks.results.outputs import check_not_an_input, one_line, write_tool_rows
from benchmarks.results.reading import POINTS, TEXT, Cell

__all__ = ["COLUMNS", "DIFFERENCE", "EQUIVALENCE", "NEVER", "seeds_needed", "seed_count_rows", "read_seed_counts",
           "seed_count_table", "main"]

COLUMNS = SEED_COUNT_COLUMNS
DIFFERENCE, EQUIVALENCE, NEVER = "holds or fails", "equivalent", "not within the cap"
SHOWN_COUNTS = (5, 10, 15, 20, 30, 40)


def _quantile(level: float, df: int) -> float:
    from scipy.stats import t

    return float(t.ppf(level, df))


def seeds_needed(difference: float, std: float, family: int, margin, cap: int, delta: float = SMALLEST_DIFFERENCE,
                 alpha: float = ALPHA) -> Tuple[Optional[int], str]:
    """``(N, what N decides)``: the smallest ``N`` in ``MIN_SEEDS..cap`` at which a mean
    paired difference ``difference`` with standard deviation ``std`` (points) clears its
    Holm interval at the strictest step of a family of ``family`` claims and ``margin(N)``
    (points) away from 0 (:data:`DIFFERENCE`) or inside ``±delta`` (:data:`EQUIVALENCE`);
    ``(None, NEVER)`` when no ``N`` up to ``cap`` does."""
    if family < 1 or cap < MIN_SEEDS or std < 0 or not math.isfinite(difference + std):
        raise ValueError(f"seeds_needed needs a family >= 1, a cap >= {MIN_SEEDS} and finite numbers; got family "
                         f"{family}, cap {cap}, difference {difference}, std {std}.")
    level = 1 - alpha / (2 * family)
    for n in range(MIN_SEEDS, cap + 1):
        half = _quantile(level, n - 1) * std / math.sqrt(n)
        if abs(difference) - half > margin(n):
            return n, DIFFERENCE
        if abs(difference) + half + margin(n) < delta:
            return n, EQUIVALENCE
    return None, NEVER


def seed_count_rows(rows: Sequence[Row], cap: int, moves: Optional[Sequence[MachineMoves]] = None,
                    delta: float = SMALLEST_DIFFERENCE, rule: str = DEFAULT_RULE) -> List[Dict[str, object]]:
    """One row per claim the pilot ``rows`` judge in their Holm family: its pilot numbers and
    :func:`seeds_needed` (``moves``: by default the committed comparisons that bound each row
    under the margin ``rule``, :func:`~benchmarks.results.claims.row_moves`)."""
    cells, family, reason = judged_cells(rows, rule)
    if reason:
        raise ValueError(f"The pilot gives no verdicts ({reason}): it cannot size a confirmatory run.")
    by_row = row_moves(rows, rule) if moves is None else (lambda method, run: moves)
    out = []
    for (claim, run), cell in cells.items():
        if "level" not in cell:  # counted once under the claim it repeats, or too few seeds
            continue
        paired = cell["paired"]
        better = next(c.better for c in CLAIMS if c.text == claim)

        def margin(n: int, rival=cell["rival"], run=run) -> float:
            return sum(machine_margin(m, n, by_row(m, run)) for m in (better, rival))  # type: ignore[arg-type]

        needed, decides = seeds_needed(100 * paired.mean, 100 * paired.std, family, margin, cap, delta)
        dataset, scenario, tasks, regime = run
        out.append(dict(dataset=dataset, scenario=scenario, tasks=tasks, regime=regime, claim=claim,
                        rival=cell["rival"], pilot_seeds=paired.n, difference=f"{100 * paired.mean:.3f}",
                        paired_std=f"{100 * paired.std:.3f}", pilot_verdict=cell["verdict"], family=family,
                        cap=cap, delta=f"{delta:g}", seeds_needed="" if needed is None else needed, decides=decides))
    return out


SEED_COUNT_CELLS: Dict[str, Cell] = {
    "dataset": TEXT, "scenario": TEXT, "tasks": Cell(int, 1, 1000), "claim": TEXT, "rival": TEXT,
    "pilot_seeds": Cell(int, 2, 1000), "difference": POINTS, "paired_std": Cell(float, 0.0, 100.0),
    "pilot_verdict": TEXT, "family": Cell(int, 1, 100000), "cap": Cell(int, MIN_SEEDS, 1000),
    "delta": Cell(float, 0.0, 100.0, above=True), "seeds_needed": Cell(int, MIN_SEEDS, 1000, empty=True),
    "decides": Cell(str, choices=(DIFFERENCE, EQUIVALENCE, NEVER))}
"""What each cell of a seed-count file holds (differences and deviations in points)."""


def read_seed_counts(path: Path) -> List[Dict[str, object]]:
    """The rows of a file written by :func:`main`, every cell checked (:data:`SEED_COUNT_CELLS`;
    one row per run and claim), numbers restored."""
    rows = read_written_csv(path, "seed-count", COLUMNS, "python -m benchmarks.results.seed_count",
                            SEED_COUNT_CELLS, ("dataset", "scenario", "tasks", "regime", "claim"))
    return [dict(raw, tasks=int(raw["tasks"]), pilot_seeds=int(raw["pilot_seeds"]), difference=float(raw["difference"]),
                 paired_std=float(raw["paired_std"]), family=int(raw["family"]), cap=int(raw["cap"]),
                 delta=float(raw["delta"]), seeds_needed=int(raw["seeds_needed"]) if raw["seeds_needed"] else None)
            for raw in rows]


def seed_count_table(rows: Sequence[Row]) -> str:
    """The claims (rows) with the pilot's difference, deviation and verdict and the seeds
    needed, then how many claims the pilot's effects would decide at each seed count."""
    lines = ["| Run | Claim | pilot difference | paired std | pilot verdict | seeds needed |",
             "| --- | --- | ---: | ---: | --- | --- |"]
    for r in rows:
        run = run_label((str(r["dataset"]), str(r["scenario"]), int(r["tasks"]), str(r["regime"])))  # type: ignore
        needed = f"{r['seeds_needed']} ({r['decides']})" if r["seeds_needed"] not in (None, "") else \
            f"more than {r['cap']}"
        lines.append(f"| {run} | {r['claim']} | {float(r['difference']):+.1f} | {float(r['paired_std']):.1f} | "  # type: ignore[arg-type]
                     f"{r['pilot_verdict']} | {needed} |")
    if not rows:
        return "No claim of the pilot is in a Holm family.\n"
    first = rows[0]
    counts = [(n, sum(1 for r in rows if r["seeds_needed"] not in (None, "") and int(r["seeds_needed"]) <= n))  # type: ignore[arg-type]
              for n in SHOWN_COUNTS if n <= int(first["cap"])]  # type: ignore[arg-type]
    decided = ", ".join(f"{k} at {n}" for n, k in counts)
    return (f"Per claim of the pilot ({first['pilot_seeds']} seeds, a Holm family of m = {first['family']}), the "
            f"seeds at which its effect would be decided, δ = {float(first['delta']):g} points "  # type: ignore[arg-type]
            f"(benchmarks/results/seed_count.py):\n\n" + "\n".join(lines)
            + f"\n\nClaims of {len(rows)} the pilot's effects would decide: {decided} seeds.\n")


def main(argv: Optional[Sequence[str]] = None) -> Path:
    """Write the seed counts of a pilot's results file; returns its path."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.results.seed_count", description=__doc__.split("\n\n")[0])
    p.add_argument("results", type=Path, help="the pilot's results.csv")
    p.add_argument("--cap", type=int, default=40, help="the most seeds considered (default 40)")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    if not MIN_SEEDS <= args.cap <= 1000:
        p.error(f"--cap must be in {MIN_SEEDS}..1000, got {args.cap}")
    with one_line(p):
        check_not_an_input(args.out, {args.results: "the pilot's results file"})
        try:
            rows = seed_count_rows(read_csv(args.results), args.cap)
        except ValueError as error:
            raise ReportFileError(str(error)) from None
        write_tool_rows(args.out, rows, COLUMNS, "seed-count", f"no claim of {args.results} is in a Holm family")
    print(seed_count_table(rows))
    return args.out


if __name__ == "__main__":
    main()
