"""The paper's premise, measured in every run: does the tangent model train about as well
as the network, and is fine-tuning beyond the head worth it?

Three figures per run, each a paired per-seed difference of final accuracy with its 95%
interval (:func:`benchmarks.intervals.paired_difference`):

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

``python -m benchmarks.premise FOLDER [FOLDER ...] --out docs/premise-map.md`` renders the
map of several results folders (one regime study each): the figures, the status and the
training seconds per seed of every run.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from benchmarks.intervals import PairedDifference, mean_std, paired_difference
from benchmarks.verdicts import RunKey, final_by_seed

__all__ = ["FIGURES", "MAX_GAP", "MIN_GAIN", "MET", "NOT_MET", "UNRESOLVED", "premise_figures", "premise_status",
           "premise_table", "map_table", "main"]

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
    from benchmarks.verdicts import _run_key, _seed

    seen: Dict[Tuple[RunKey, str, int], float] = {}
    for r in rows:
        final = r.get("model") == "composed" and str(r.get("eval_exp")) == "all"
        if final and r.get("train_seconds") not in ("", None):
            seen[(_run_key(r), str(r["method"]), _seed(r))] = float(r["train_seconds"])  # type: ignore[arg-type]
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
    from benchmarks.results_io import run_label

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


def map_table(folders: Sequence[Path]) -> str:
    """The premise map: :func:`premise_table` of each folder's results.csv, the folder's
    name (e.g. ``32px``) in front, and the training seconds per seed of each run."""
    from benchmarks.results_io import read_csv, run_label

    lines: List[str] = []
    for folder in folders:
        rows = read_csv(folder / "results.csv")
        seconds = _seconds(rows)
        table = premise_table(rows, label=lambda run, s=seconds: f"{run_label(run)}, {s.get(run, 0):.0f} s/seed")
        body = table.splitlines()
        if not lines:
            lines += ["| input " + body[0], "|---" + body[1]]
        lines += [f"| {folder.name} " + line for line in body[2:]]
    return "\n".join(lines) + "\n" if lines else ""


def main(argv: Optional[Sequence[str]] = None) -> str:
    """Render the premise map of results folders to stdout or ``--out``."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.premise", description=__doc__.split("\n\n")[0])
    p.add_argument("folders", nargs="+", type=Path, help="results folders (each with a results.csv)")
    p.add_argument("--out", type=Path, default=None, help="write the table here (default: print it)")
    args = p.parse_args(argv)
    missing = [str(f) for f in args.folders if not (f / "results.csv").is_file()]
    if missing:
        p.error(f"no results.csv in {', '.join(missing)}: run the study first (python -m benchmarks.run --preset "
                "premise-map-32 ...)")
    text = map_table(args.folders)
    if args.out is None:
        print(text, end="")
    else:
        args.out.write_text(text, encoding="utf-8")
    return text


if __name__ == "__main__":
    main()
