"""One results file's verdicts under both margin rules, cell by cell: the rule the
pre-registration fixed and the amended one (docs/preregistration.md, Amendment 1)::

    python -m benchmarks.results.margin_rules docs/results/offline-confirm/results.csv \
        --out docs/results/offline-confirm/margin-rules.csv

writes one row per judged cell (:func:`margin_rule_rows`): its difference and Holm interval
(the same under both rules: the rules differ only in the cross-machine margin), and each
rule's margin and verdict; ``python -m benchmarks.report FILE --readme PAGE`` shows it
(:func:`margin_rules_table`): every cell with both verdicts, and the count of each verdict under
each rule. Both are :func:`benchmarks.results.claims.judged_cells`, as the tables are.
"""

import argparse
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from benchmarks.results.claims import NO_VERDICT, VERDICT_ORDER, counts_text, judged_cells
from benchmarks.results.confirmation import HOLM, holm_bound
from benchmarks.results.files import MARGIN_RULES_COLUMNS, Row, read_csv, read_written_csv, run_label
from benchmarks.results.machine_moves import MARGIN_RULES
from benchmarks.results.outputs import write_from_inputs
from benchmarks.results.reading import POINTS, TEXT, Cell

__all__ = ["COLUMNS", "margin_rule_rows", "read_margin_rules", "margin_rules_table", "main"]

COLUMNS = MARGIN_RULES_COLUMNS
RULE_NAMES = {"preregistered": "the pre-registered rule", "pinned": "the amended rule"}


def margin_rule_rows(rows: Sequence[Row]) -> List[Dict[str, object]]:
    """One row per cell ``rows`` judge: the claim, its run and rival, the seeds, the mean
    difference and Holm interval in points, and per rule of :data:`MARGIN_RULES` the
    margin and the verdict."""
    judged = {}
    for rule in MARGIN_RULES:
        cells, family, reason = judged_cells(rows, rule)
        if reason:
            raise ValueError(f"The results give no verdicts ({reason}).")
        judged[rule] = (cells, family)
    out = []
    for key, cell in judged[MARGIN_RULES[0]][0].items():
        own = judged[MARGIN_RULES[0]][0][(cell["repeats"], key[1])] if cell["repeats"] else cell
        dataset, scenario, tasks, regime = key[1]
        row = dict(dataset=dataset, scenario=scenario, tasks=tasks, regime=regime, claim=key[0],
                   rival=cell["rival"] or "", seeds=cell["seeds"], difference=repr(float(cell["difference"])),
                   holm_low=holm_bound(own, "low"), holm_high=holm_bound(own, "high"),
                   repeats=cell["repeats"] or "", family=judged[MARGIN_RULES[0]][1])
        for rule in MARGIN_RULES:
            other = judged[rule][0][key]
            margin_of = judged[rule][0][(other["repeats"], key[1])] if other["repeats"] else other
            row[f"{rule}_margin"] = repr(float(margin_of.get("machine_margin", 0.0)))
            row[f"{rule}_verdict"] = other["verdict"]
        out.append(row)
    return out


MARGIN_RULES_CELLS: Dict[str, Cell] = {
    "dataset": TEXT, "scenario": TEXT, "tasks": Cell(int, 1, 1000), "claim": TEXT, "rival": Cell(str, empty=True),
    "seeds": Cell(int, 2, 1000), "difference": POINTS, "holm_low": HOLM, "holm_high": HOLM,
    "repeats": Cell(str, empty=True), "family": Cell(int, 1, 100000),
    **{f"{rule}_margin": Cell(float, 0.0, 100.0) for rule in MARGIN_RULES},
    **{f"{rule}_verdict": Cell(str, choices=(*VERDICT_ORDER, NO_VERDICT)) for rule in MARGIN_RULES}}
"""What each cell of a margin-rules file holds (differences, intervals and margins in points)."""


def read_margin_rules(path: Path) -> List[Dict[str, str]]:
    """The rows of a file written by :func:`main`, every cell checked."""
    return read_written_csv(path, "margin-rules", COLUMNS, "python -m benchmarks.results.margin_rules",
                            MARGIN_RULES_CELLS, ("dataset", "scenario", "tasks", "regime", "claim"))


def margin_rules_table(rows: Sequence[Dict[str, str]]) -> str:
    """Every cell with its verdict under each rule (bold where they differ), then the count of
    each verdict under each rule."""
    if not rows:
        return "The results judge no claim.\n"
    lines = ["| Run | Claim | difference, Holm interval | pre-registered rule: margin, verdict | amended rule: "
             "margin, verdict |", "| --- | --- | --- | --- | --- |"]
    for r in rows:
        interval = (f"{float(r['difference']):+.1f}"
                    + (f", Holm [{float(r['holm_low']):+.1f}, {float(r['holm_high']):+.1f}]" if r["holm_low"] else
                       ", no Holm interval") + (f" (as \"{r['repeats']}\")" if r["repeats"] else ""))
        changed = r["preregistered_verdict"] != r["pinned_verdict"]
        shown = {rule: f"**{r[f'{rule}_verdict']}**" if changed else r[f"{rule}_verdict"] for rule in MARGIN_RULES}
        verdicts = [f"±{float(r[f'{rule}_margin']):.1f}, {shown[rule]}" for rule in ("preregistered", "pinned")]
        run = run_label((r["dataset"], r["scenario"], int(r["tasks"]), r["regime"]))
        lines.append(f"| {run} | {r['claim']} | {interval} | {verdicts[0]} | {verdicts[1]} |")
    changed = sum(1 for r in rows if r["preregistered_verdict"] != r["pinned_verdict"])
    counts = [f"* under {RULE_NAMES[rule]}: {counts_text(r[f'{rule}_verdict'] for r in rows)};"
              for rule in ("preregistered", "pinned")]
    return (f"The {len(rows)} judged cells (a Holm family of m = {rows[0]['family']}, {rows[0]['seeds']} seeds) under "
            "the pre-registered margin rule (every SGD row bounded by the comparisons of rows computed with each "
            "CPU's own kernels) and the amended one (a row computed with the pinned AVX2 arithmetic bounded by the "
            "comparisons of pinned rows across machines); the difference and Holm interval are the same under both. "
            f"Verdicts that differ in bold ({changed}):\n\n" + "\n".join(lines) + "\n\n" + "\n".join(counts)[:-1]
            + ".\n")


def main(argv: Optional[Sequence[str]] = None) -> Path:
    """Write the margin-rules file of a results file; returns its path."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.results.margin_rules", description=__doc__.split("\n\n")[0])
    p.add_argument("results", type=Path, help="a results.csv whose table gives verdicts")
    p.add_argument("--out", type=Path, required=True)
    args = p.parse_args(argv)
    write_from_inputs(p, args.out, {args.results: "the results file"},
                      lambda: margin_rule_rows(read_csv(args.results)), COLUMNS, "margin-rules",
                      f"no claim of {args.results} is judged")
    print(margin_rules_table(read_margin_rules(args.out)))
    return args.out


if __name__ == "__main__":
    main()
