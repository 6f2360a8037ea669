"""A confirmatory run against its pilot: per claim and run, the pilot's verdict, the
confirmatory run's, and, for a claim the confirmatory run leaves open, the seeds its own
effect would need (:func:`benchmarks.results.seed_count.seeds_needed`).

``python -m benchmarks.results.confirmation docs/results/offline/results.csv
docs/results/offline-confirm/results.csv --cap 200 --out docs/results/offline-confirm/verdicts.csv``
writes one row per judged cell of the confirmatory run (:func:`confirmation_rows`);
``python -m benchmarks.report FILE --readme PAGE`` shows it (:func:`confirmation_table`): the
cells whose verdict changed, the cells still open with the seeds they would need, and the
count of each verdict before and after. Nothing here is tuned or chosen on the results: both
runs are judged by :func:`benchmarks.results.claims.judged_cells`, as their own tables are.
"""

import argparse
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

from benchmarks.results.claims import (
    DEFAULT_RULE,
    EQUIVALENT,
    FAILS,
    HOLDS,
    NO_VERDICT,
    VERDICT_ORDER,
    counts_text,
    judged_cells,
)
from benchmarks.results.files import (
    CONFIRMATION_COLUMNS,
    Row,
    read_csv,
    read_written_csv,
    run_key,
    run_label,
)
from benchmarks.results.machine_moves import MARGIN_RULES, MachineMoves
from benchmarks.results.outputs import write_from_inputs
from benchmarks.results.reading import POINTS, TEXT, Cell
from benchmarks.results.seed_count import DIFFERENCE, EQUIVALENCE, NEVER, seed_count_rows

__all__ = ["COLUMNS", "DECIDED", "HOLM", "holm_bound", "check_confirms", "confirmation_rows", "read_confirmation",
           "confirmation_table", "main"]

COLUMNS = CONFIRMATION_COLUMNS
DECIDED = (HOLDS, FAILS, EQUIVALENT)
NOT_RUN = "not run"


def confirmation_rows(pilot: Sequence[Row], confirm: Sequence[Row], cap: int,
                      moves: Optional[Sequence[MachineMoves]] = None, rule: str = DEFAULT_RULE
                      ) -> List[Dict[str, object]]:
    """One row per cell the confirmatory run ``confirm`` judges: its difference, Holm interval
    and verdict, the pilot's verdict of the same claim and run ("not run" when the pilot lacks
    it), and for a cell it leaves undecided, the seed count (up to ``cap``) at which its own
    difference and spread would be decided (``moves``: by default the committed machine
    comparisons of the margin ``rule``, the same for both runs)."""
    check_confirms(pilot, confirm)
    cells, family, reason = judged_cells(confirm, rule)
    if reason:
        raise ValueError(f"The confirmatory run gives no verdicts ({reason}).")
    pilot_cells, _, pilot_reason = judged_cells(pilot, rule)
    if pilot_reason:
        raise ValueError(f"The pilot gives no verdicts ({pilot_reason}).")
    needed = {(r["claim"], (r["dataset"], r["scenario"], r["tasks"], r["regime"])): r
              for r in seed_count_rows(confirm, cap, moves, rule=rule)}
    out = []
    for (claim, run), cell in cells.items():
        before = pilot_cells.get((claim, run))
        own = cells[(cell["repeats"], run)] if cell["repeats"] else cell  # a repeat shows its claim's interval
        count = needed.get((cell["repeats"] or claim, run)) if cell["verdict"] not in DECIDED else None
        dataset, scenario, tasks, regime = run
        out.append(dict(
            dataset=dataset, scenario=scenario, tasks=tasks, regime=regime, claim=claim, rival=cell["rival"] or "",
            pilot_seeds=before["seeds"] if before else "", pilot_verdict=before["verdict"] if before else NOT_RUN,
            seeds=cell["seeds"], difference=repr(float(cell['difference'])), holm_low=holm_bound(own, "low"),
            holm_high=holm_bound(own, "high"), verdict=cell["verdict"], repeats=cell["repeats"] or "",
            family=family, cap=cap, seeds_needed=count["seeds_needed"] if count else "",
            decides=count["decides"] if count else ""))
    return out


def check_confirms(pilot: Sequence[Row], confirm: Sequence[Row]) -> None:
    """Refuse (``ValueError``) a pair of results that cannot be a pilot and its confirmatory
    run: the same rows twice (one file "confirmed" against itself), seeds in both (the
    confirmation must use seeds the pilot did not), or no run in common (every cell "not run")."""
    if list(pilot) == list(confirm):
        raise ValueError("The pilot's and the confirmatory run's files hold the same rows: a run cannot confirm "
                         "itself; give the confirmatory run's own results.csv, made with other seeds.")
    both = sorted({r["seed"] for r in pilot} & {r["seed"] for r in confirm} - {""}, key=str)
    if both:
        raise ValueError(f"Seed(s) {', '.join(map(str, both))} are in both files: a confirmatory run uses seeds the "
                         "pilot did not (docs/preregistration.md); give the two runs' own results.")
    common = {run_key(r) for r in pilot} & {run_key(r) for r in confirm}
    if not common:
        raise ValueError("The two files have no run in common (dataset, scenario, tasks, regime): nothing to confirm; "
                         "give the pilot of the confirmatory run.")


HOLM = Cell(float, -100.0, 100.0, empty=True)  # a Holm bound in points; empty for a cell judged without Holm


def holm_bound(cell: Mapping[str, object], side: str) -> str:
    """A cell's Holm bound (``side``: ``low`` or ``high``) as an exact double, or empty when the
    cell was not in the Holm family (fewer seeds than a verdict needs, or withheld)."""
    value = cell.get(f"adjusted_{side}")
    return "" if value is None else repr(float(value))  # type: ignore[arg-type]


CONFIRMATION_CELLS: Dict[str, Cell] = {
    "dataset": TEXT, "scenario": TEXT, "tasks": Cell(int, 1, 1000), "claim": TEXT, "rival": Cell(str, empty=True),
    "pilot_seeds": Cell(int, 2, 1000, empty=True),
    "pilot_verdict": Cell(str, choices=(*VERDICT_ORDER, NO_VERDICT, NOT_RUN)),
    "seeds": Cell(int, 2, 1000), "difference": POINTS, "holm_low": HOLM, "holm_high": HOLM,
    "verdict": Cell(str, choices=(*VERDICT_ORDER, NO_VERDICT)), "repeats": Cell(str, empty=True),
    "family": Cell(int, 1, 100000),
    "cap": Cell(int, 3, 1000), "seeds_needed": Cell(int, 3, 1000, empty=True),
    "decides": Cell(str, empty=True, choices=(DIFFERENCE, EQUIVALENCE, NEVER))}
"""What each cell of a confirmation file holds (differences and intervals in points)."""


def read_confirmation(path: Path) -> List[Dict[str, str]]:
    """The rows of a file written by :func:`main`, every cell checked
    (:data:`CONFIRMATION_CELLS`; one row per run and claim)."""
    return read_written_csv(path, "confirmation", COLUMNS, "python -m benchmarks.results.confirmation",
                            CONFIRMATION_CELLS, ("dataset", "scenario", "tasks", "regime", "claim"))


def _run(r: Dict[str, str]) -> str:
    return run_label((r["dataset"], r["scenario"], int(r["tasks"]), r["regime"]))


def _confirmed(r: Dict[str, str]) -> str:
    holm = (f", Holm [{float(r['holm_low']):+.1f}, {float(r['holm_high']):+.1f}]" if r["holm_low"]
            else ", no Holm interval")
    interval = f"{float(r['difference']):+.1f}{holm}"
    return interval + (f" (as \"{r['repeats']}\")" if r["repeats"] else "")


def confirmation_table(rows: Sequence[Dict[str, str]]) -> str:
    """The count of each verdict before and after, then two tables: the cells whose verdict
    changed, and the cells the confirmatory run leaves open with the seeds each would need."""
    if not rows:
        return "The confirmatory run judges no claim.\n"
    first = rows[0]
    pilot_seeds = sorted({r["pilot_seeds"] for r in rows if r["pilot_seeds"]})
    before = f"the pilot's {' or '.join(pilot_seeds)} seeds"
    after = f"the confirmatory run's {first['seeds']}"
    decided = [sum(1 for r in rows if r[c] in DECIDED) for c in ("pilot_verdict", "verdict")]
    lines = [f"Of {len(rows)} cells (a Holm family of m = {first['family']}), decided (holds, fails or equivalent): "
             f"{decided[0]} at {before}, {decided[1]} at {after}.", "",
             f"* at {before}: {counts_text(r['pilot_verdict'] for r in rows if r['pilot_verdict'] != NOT_RUN)};",
             f"* at {after}: {counts_text(r['verdict'] for r in rows)}.", ""]
    changed = [r for r in rows if r["pilot_verdict"] != r["verdict"]]
    lines += [f"Verdicts that changed ({len(changed)}):", "",
              "| Run | Claim | pilot | confirmatory: difference, Holm interval | confirmatory verdict |",
              "| --- | --- | --- | --- | --- |"]
    lines += [f"| {_run(r)} | {r['claim']} | {r['pilot_verdict']} | {_confirmed(r)} | **{r['verdict']}** |"
              for r in changed]
    still = [r for r in rows if r["verdict"] not in DECIDED]
    if not still:
        return "\n".join(lines + ["", "Cells the confirmatory run leaves open: none."]) + "\n"
    lines += ["", f"Cells the confirmatory run leaves open ({len(still)}), with the seeds at which its own difference "
              f"and spread would be decided (up to {first['cap']}; Holm's strictest step, the rows' machine margins "
              "at that count; benchmarks/results/seed_count.py):", "",
              "| Run | Claim | confirmatory: difference, Holm interval | verdict | seeds needed |",
              "| --- | --- | --- | --- | --- |"]
    for r in still:
        needed = f"{r['seeds_needed']} ({r['decides']})" if r["seeds_needed"] else f"more than {r['cap']}"
        lines.append(f"| {_run(r)} | {r['claim']} | {_confirmed(r)} | {r['verdict']} | {needed} |")
    return "\n".join(lines) + "\n"


def main(argv: Optional[Sequence[str]] = None) -> Path:
    """Write the confirmation file of a pilot's and a confirmatory run's results; returns its path."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.results.confirmation", description=__doc__.split("\n\n")[0])
    p.add_argument("pilot", type=Path, help="the pilot's results.csv")
    p.add_argument("confirm", type=Path, help="the confirmatory run's results.csv")
    p.add_argument("--cap", type=int, default=200, help="the most seeds considered for an open cell (default 200)")
    p.add_argument("--margin-rule", choices=MARGIN_RULES, default=DEFAULT_RULE,
                   help="how the cross-machine margin of a verdict is measured (benchmarks.results.claims): pinned, "
                        "the amended rule (default), or preregistered, the rule fixed before the confirmatory run")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    if not 3 <= args.cap <= 1000:
        p.error(f"--cap must be in 3..1000, got {args.cap}")
    write_from_inputs(p, args.out, {args.pilot: "the pilot's results file",
                                    args.confirm: "the confirmatory run's results file"},
                      lambda: confirmation_rows(read_csv(args.pilot), read_csv(args.confirm), args.cap,
                                                rule=args.margin_rule),
                      COLUMNS, "confirmation", f"no claim of {args.confirm} is judged")
    print(confirmation_table(read_confirmation(args.out)))
    return args.out


if __name__ == "__main__":
    main()
