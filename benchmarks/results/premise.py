"""The paper's premise, measured in every run: does the tangent model train about as well
as the network, and is fine-tuning beyond the head worth it?

Three figures per run, each a paired per-seed difference of final accuracy with its 95%
interval (:func:`benchmarks.results.intervals.paired_difference`):

* **tangent gap** = Joint − Joint-Tangent: what the first-order expansion costs the
  paragon (the paper: −1.0 to 2.4 points, Table 1);
* **composition loss** = Joint-Tangent − TMC: what composing separately trained tangent
  models costs against training them on all the data;
* **fine-tuning gain** = Joint − TMC-FC: what training beyond the head buys (TMC-FC
  composes heads alone).

A run *meets the premise* (:func:`premise_status`) when the gap's interval lies within
:data:`MAX_GAP` points and the gain's interval above :data:`MIN_GAIN`; when only the means
do, it is "not resolved"; otherwise "not met". Fewer than 2 seeds give no interval and
never "met".

``python -m benchmarks.results.premise FOLDER [FOLDER ...] --csv MAP.csv`` renders the map of
several results folders (one regime study each): the figures, the status and the training
seconds per seed of every run, kept as a CSV that ``python -m benchmarks.report`` renders
into a page's generated block.
"""

from __future__ import annotations

import argparse
import math
from dataclasses import replace
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from benchmarks.results.claims import RunKey, final_by_seed
from benchmarks.results.files import (
    MAP_COLUMNS,
    SCENARIO_PREFIX,
    read_csv,
    read_written_csv,
    row_seed,
    run_key,
    run_label,
    write_rows_csv,
)
from benchmarks.results.intervals import PairedDifference, mean_std, paired_difference
from benchmarks.results.outputs import check_not_an_input, nothing_to_write, one_line, writing
from benchmarks.results.reading import PERCENT, POINTS, TEXT, Cell, ReportFileError, unsafe_cell

__all__ = ["FIGURES", "MAX_GAP", "MIN_GAIN", "MET", "NOT_MET", "UNRESOLVED", "premise_figures", "premise_status",
           "premise_table", "premise_section", "MAP_COLUMNS", "map_rows", "map_table", "write_map_csv", "read_map_csv",
           "main"]

MAX_GAP = 3.0  # points: the tangent paragon within this of joint fine-tuning (the paper: 2.4 at worst)
MIN_GAIN = 5.0  # points: fine-tuning beyond the head must pay at least this much
MET, NOT_MET, UNRESOLVED = "met", "not met", "not resolved"

# name -> (better row, worse row)
FIGURES: Dict[str, Tuple[str, str]] = {
    "tangent gap": ("joint", "joint-tangent"),
    "composition loss": ("joint-tangent", "tmc"),
    "fine-tuning gain": ("joint", "tmc-fc"),
}
_ROWS = ("joint", "joint-tangent", "tmc", "tmc-fc")
_LABELS = {"joint": "Joint", "joint-tangent": "Joint-Tangent", "tmc": "TMC", "tmc-fc": "TMC-FC"}


def premise_figures(rows: Sequence[Mapping[str, object]]) -> Dict[RunKey, Dict[str, PairedDifference]]:
    """``run -> {figure: paired difference in accuracy (fractions)}`` for every run that has
    both rows of at least one figure."""
    finals = final_by_seed(rows)
    runs = sorted({run for run, _ in finals})
    figures: Dict[RunKey, Dict[str, PairedDifference]] = {}
    for run in runs:
        found = {}
        for name, (a, b) in FIGURES.items():
            difference = paired_difference(finals.get((run, a), {}), finals.get((run, b), {}))
            if difference is not None:
                found[name] = difference
        if found:
            figures[run] = found
    return figures


def premise_status(figures: Mapping[str, PairedDifference]) -> str:
    """:data:`MET` when the tangent gap's 95% interval lies below :data:`MAX_GAP` points and
    the fine-tuning gain's above :data:`MIN_GAIN`; :data:`UNRESOLVED` when only their means
    do (or an interval is missing); else :data:`NOT_MET`."""
    gap, gain = figures.get("tangent gap"), figures.get("fine-tuning gain")
    if gap is None or gain is None:
        return UNRESOLVED
    if 100 * gap.mean > MAX_GAP or 100 * gain.mean < MIN_GAIN:
        return NOT_MET
    if gap.n >= 2 and gain.n >= 2 and 100 * gap.high <= MAX_GAP and 100 * gain.low >= MIN_GAIN:
        return MET
    return UNRESOLVED


def _points(d: Optional[PairedDifference]) -> str:
    if d is None:
        return "–"
    if d.n < 2 or math.isnan(d.half_width):
        return f"{100 * d.mean:+.1f}"
    return f"{100 * d.mean:+.1f} [{100 * d.low:+.1f}, {100 * d.high:+.1f}]"


def _mean(values: Mapping[int, float]) -> str:
    if not values:
        return "–"
    mean, std = mean_std(list(values.values()))
    return f"{100 * mean:.1f} ± {100 * std:.1f}" if len(values) > 1 else f"{100 * mean:.1f}"


def _seconds(rows: Sequence[Mapping[str, object]]) -> Dict[RunKey, float]:
    """``run -> training seconds per seed`` summed over its rows (one value per method and seed)."""
    seen: Dict[Tuple[RunKey, str, int], float] = {}
    for r in rows:
        final = r.get("model") == "composed" and str(r.get("eval_exp")) == "all"
        if final and r.get("train_seconds") not in ("", None):
            seen[(run_key(r), str(r["method"]), row_seed(r))] = float(r["train_seconds"])  # type: ignore[arg-type]
    totals: Dict[RunKey, float] = {}
    seeds: Dict[RunKey, set] = {}
    for (run, _, seed), seconds in seen.items():
        totals[run] = totals.get(run, 0.0) + seconds
        seeds.setdefault(run, set()).add(seed)
    return {run: total / len(seeds[run]) for run, total in totals.items()}


def premise_table(rows: Sequence[Mapping[str, object]], label=None, prefix: Sequence[Tuple[str, str]] = ()) -> str:
    """The premise figures of every run of ``rows`` as a Markdown table (empty when no run
    has the rows of any figure): the four rows' means ± std over seeds, each figure with its
    95% interval (points) and the status. ``prefix``: leading (header, cell) columns."""
    label = label or run_label
    figures = premise_figures(rows)
    if not figures:
        return ""
    finals = final_by_seed(rows)
    head = [h for h, _ in prefix] + ["Run"] + [_LABELS[r] for r in _ROWS] + list(FIGURES) + ["premise"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for run, found in figures.items():
        cells = [c for _, c in prefix] + [label(run)] + [_mean(finals.get((run, r), {})) for r in _ROWS]
        cells += [_points(found.get(name)) for name in FIGURES] + [premise_status(found)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def premise_section(rows: Sequence[Mapping[str, object]]) -> str:
    """``premise_table`` with its heading and what its columns mean (empty without figures)."""
    table = premise_table(rows)
    if not table:
        return ""
    return ("### The premise: tangent gap, composition loss, fine-tuning gain\n\n" + table + "\n"
            f"Final accuracy (%), mean ± std over seeds; each figure a paired per-seed difference in points with "
            f"its 95% interval: tangent gap = Joint − Joint-Tangent, composition loss = Joint-Tangent − TMC, "
            f"fine-tuning gain = Joint − TMC-FC. The premise is met when the gap's interval lies within "
            f"{MAX_GAP:g} points and the gain's above {MIN_GAIN:g} (the paper: gaps of −1.0 to 2.4); "
            "not resolved when only the means do.\n")


_FIGURE_COLUMNS = {"tangent gap": "gap", "composition loss": "loss", "fine-tuning gain": "gain"}


def map_rows(folders: Sequence[Path]) -> List[Dict[str, object]]:
    """One row per run of each folder's results.csv that has a premise figure: the folder's
    name as ``input`` (e.g. ``32px``), the four rows' mean accuracies (%), each figure with
    its 95% interval (points), the status and the training seconds per seed."""
    out: List[Dict[str, object]] = []
    for folder in folders:
        rows = read_csv(folder / "results.csv")
        finals = final_by_seed(rows)
        seconds = _seconds(rows)
        for run, found in premise_figures(rows).items():
            row: Dict[str, object] = dict(input=folder.name, dataset=run[0], scenario=run[1], tasks=run[2],
                                          regime=run[3], premise=premise_status(found),
                                          seconds_per_seed=round(seconds.get(run, 0.0), 1))
            seeds = set()
            for method in _ROWS:
                values = finals.get((run, method), {})
                seeds |= set(values)
                row[method.replace("-", "_")] = round(100 * sum(values.values()) / len(values), 2) if values else ""
            row["seeds"] = len(seeds)
            for name, column in _FIGURE_COLUMNS.items():
                d = found.get(name)
                row[column] = round(100 * d.mean, 2) if d else ""
                ok = d is not None and d.n >= 2 and not math.isnan(d.half_width)
                row[f"{column}_low"] = round(100 * d.low, 2) if ok else ""  # type: ignore[union-attr]
                row[f"{column}_high"] = round(100 * d.high, 2) if ok else ""  # type: ignore[union-attr]
            out.append(row)
    return out


def map_table(rows: Sequence[Mapping[str, object]]) -> str:
    """The premise map (:func:`map_rows`, or a map CSV read back) as a Markdown table."""
    def figure(r: Mapping[str, object], column: str) -> str:
        if r.get(column) in ("", None):
            return "–"
        low, high = r.get(f"{column}_low"), r.get(f"{column}_high")
        bounds = f" [{float(low):+.1f}, {float(high):+.1f}]" if low not in ("", None) else ""  # type: ignore[arg-type]
        return f"{float(r[column]):+.1f}{bounds}"  # type: ignore[arg-type]

    def accuracy(value: object) -> str:
        return "–" if value in ("", None) else f"{float(value):.1f}"  # type: ignore[arg-type]

    lines = ["| input | run | seeds | Joint | Joint-Tangent | TMC | TMC-FC | tangent gap | composition loss | "
             "fine-tuning gain | premise | train s/seed |", "|---|---|---:|---:|---:|---:|---:|---|---|---|---|---:|"]
    for r in rows:
        prefix = SCENARIO_PREFIX.get(str(r["scenario"]), str(r["scenario"])[:1].upper())
        lines.append(f"| {r['input']} | {prefix}-{r['dataset']} ({r['tasks']} tasks, {r['regime']}) | {r['seeds']} | "
                     + " | ".join(accuracy(r[c]) for c in ("joint", "joint_tangent", "tmc", "tmc_fc")) + " | "
                     + " | ".join(figure(r, c) for c in ("gap", "loss", "gain"))
                     + f" | {r['premise']} | {float(r['seconds_per_seed']):.0f} |")  # type: ignore[arg-type]
    return "\n".join(lines) + "\n"


def write_map_csv(rows: Sequence[Mapping[str, object]], path: Path) -> Path:
    """Write the map's rows (kind ``premise-map``), atomically."""
    return write_rows_csv(rows, path, MAP_COLUMNS, "premise-map")


_MAYBE_POINTS = replace(POINTS, empty=True)
MAP_CELLS: Dict[str, Cell] = {
    "input": TEXT, "dataset": TEXT, "scenario": TEXT, "tasks": Cell(int, 1, 1000), "seeds": Cell(int, 1, 1000),
    **{c: replace(PERCENT, empty=True) for c in ("joint", "joint_tangent", "tmc", "tmc_fc")},
    **{f"{c}{end}": _MAYBE_POINTS for c in _FIGURE_COLUMNS.values() for end in ("", "_low", "_high")},
    "premise": Cell(str, choices=(MET, NOT_MET, UNRESOLVED)), "seconds_per_seed": Cell(float, 0.0)}
"""What each cell of a map CSV holds: accuracies in %, figures in points (empty: no figure)."""


def read_map_csv(path: Path) -> List[Dict[str, str]]:
    """The rows of a map CSV written by :func:`write_map_csv`, every cell checked
    (:data:`MAP_CELLS`; one row per input and run)."""
    return read_written_csv(path, "premise-map", MAP_COLUMNS, "python -m benchmarks.results.premise --csv",
                            MAP_CELLS, ("input", "dataset", "scenario", "tasks", "regime"))


def main(argv: Optional[Sequence[str]] = None) -> str:
    """Render the premise map of results folders; with ``--csv`` also keep it as a CSV
    (kind ``premise-map``) from which ``python -m benchmarks.report MAP.csv --readme PAGE``
    renders the page's generated block."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.results.premise", description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="+", type=Path, help="results folders (each with a results.csv)")
    p.add_argument("--csv", type=Path, default=None, help="also write the map's rows here (kind premise-map)")
    args = p.parse_args(argv)
    missing = [str(f) for f in args.folders if not (f / "results.csv").is_file()]
    if missing:
        p.error(f"no results.csv in {', '.join(missing)}: run the study first (python -m benchmarks.run --preset "
                "premise-map-32 ...)")
    with one_line(p):
        for folder in args.folders:
            reason = unsafe_cell(folder.name)
            if reason:
                raise ReportFileError(f"{str(folder)!r}: the folder's name is the map's input and holds {reason}, "
                                      "which would break the page the map is generated into: rename the folder.")
        if args.csv is not None:
            check_not_an_input(args.csv, {f / "results.csv": f"the results file of {f}" for f in args.folders},
                               "--csv")
        rows = map_rows(args.folders)
        if not rows:
            raise nothing_to_write(f"no run of {', '.join(map(str, args.folders))} has the rows of a premise figure "
                                   "(joint with joint-tangent or tmc-fc, joint-tangent with tmc, over common seeds)")
        if args.csv is not None:
            with writing(args.csv):
                write_map_csv(rows, args.csv)
    text = map_table(rows)
    print(text, end="")
    return text


if __name__ == "__main__":
    main()
