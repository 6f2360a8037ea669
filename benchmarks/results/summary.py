"""The small table a README shows of a results file (``python -m benchmarks.report FILE
--readme README.md --summary``): final accuracy of a few representative rows (TMC and TME,
the paper's strongest composition baseline, the best replay method, our best training-free
head, Naive, the joint paragon), one column per scenario, and the verdicts' count line. The
whole table, the premise figures and every verdict stay in the page that shows the full block."""

from typing import List, Sequence

from benchmarks.results.claims import verdict_table
from benchmarks.results.files import ALL, COMPOSED, Row, accuracy_spread, list_runs, method_info, run_label, seed_count
from benchmarks.results.tables import _percent  # the cells as the full table writes them

__all__ = ["SUMMARY_METHODS", "summary_block"]

SUMMARY_METHODS = ("tmc", "tme", "soup", "ens-sm", "der", "ranpac-layer", "naive", "joint")
"""The rows of the summary, in this order, where the file has them."""

_SCENARIOS = {"class": "class-IL", "task": "task-IL", "data": "data-IL"}


def summary_block(rows: Sequence[Row]) -> str:
    """The summary table of ``rows`` (mean ± std over seeds, in %), its caption and the count
    of the verdicts (:func:`~benchmarks.results.claims.verdict_table`'s last line)."""
    runs = list_runs(rows)
    seeds = seed_count(rows)
    spread = accuracy_spread(rows)
    present = {str(r["method"]) for r in rows}
    methods = [m for m in SUMMARY_METHODS if m in present]
    header = [f"{_SCENARIOS.get(str(run[1]), str(run[1]))}, {run[0]}" for run in runs]
    lines: List[str] = ["| Method | " + " | ".join(header) + " |", "| --- |" + " ---: |" * len(runs)]
    for method in methods:
        cells = []
        for run in runs:
            cell = spread.get((run, method, COMPOSED, run[2], ALL))
            cells.append("–" if cell is None else _percent(cell, seeds))
        lines.append(f"| {method_info(method)[0]} | " + " | ".join(cells) + " |")
    lines += ["", f"Final accuracy (%) on the whole test stream after the last experience, mean ± std over {seeds} "
              f"seed{'s' if seeds != 1 else ''}; runs: " + "; ".join(run_label(run) for run in runs) + "."]
    counts = [line for line in verdict_table(rows, run_label).splitlines() if line.startswith("Of the table's")]
    return "\n".join(lines + ([""] + counts[-1:] if counts else [])) + "\n"
