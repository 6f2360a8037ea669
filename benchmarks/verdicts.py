"""The paper's claims, judged from the result rows over seeds (never written by hand).

Each :class:`Claim` says "row A beats row B" in some scenarios; its verdict per run comes
from the paired per-seed differences of the final accuracy on the whole test stream
(:mod:`benchmarks.intervals`): holds / fails when the 95% interval excludes 0, else not
resolved at that many seeds. A claim whose rows a run lacks is "not run".

The comparison for "the best shipped method" names its method in advance
(``ranpac-layer``, the RanPAC-style head on the layer chosen on experience 0) rather than
picking the best row on the test set. The paper's continual claims ("TMC beats the best
replay-free / replay method") compare with the rival of the highest mean among those named
(``worse`` is a tuple): choosing the strongest rival on the test set can only make the claim
harder to hold, and the cell names the rival it was judged against.
"""

from collections import defaultdict
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Sequence, Tuple, Union

from benchmarks.intervals import PairedDifference, paired_difference, verdict

__all__ = ["Claim", "CLAIMS", "REPLAY_FREE", "REPLAY", "final_by_seed", "rival", "judge", "verdict_rows",
           "verdict_table"]

Row = Mapping[str, object]
RunKey = Tuple[str, str, int, str]


@dataclass(frozen=True)
class Claim:
    """"``better`` beats ``worse``" (final accuracy), in the scenarios ``scenarios``."""

    text: str  # as the table shows it
    better: str
    worse: Union[str, Tuple[str, ...]]  # a tuple: the one of these with the highest mean in the run
    scenarios: Tuple[str, ...] = ("class", "task", "data")

    @property
    def rivals(self) -> Tuple[str, ...]:
        """The rows ``better`` is compared with (one, or the candidates for the strongest)."""
        return self.worse if isinstance(self.worse, tuple) else (self.worse,)


REPLAY_FREE = ("lwf", "ewc")  # the paper's replay-free continual learners among Avalanche's
REPLAY = ("er", "der")  # and its replay methods (buffer of 300)

CLAIMS: Tuple[Claim, ...] = (
    # the composition comparison (the paper's table 2)
    Claim("TMC > Soup", "tmc", "soup"),
    Claim("TMC > Ens-L", "tmc", "ens-l"),
    Claim("TMC > Ens-SM", "tmc", "ens-sm"),
    Claim("TME > Soup", "tme", "soup"),
    Claim("TME > Ens-L", "tme", "ens-l"),
    Claim("TME > Ens-SM", "tme", "ens-sm"),
    Claim("TME > TMC", "tme", "tmc"),
    # the continual comparison (the paper's tables 3-5: the best replay-free and replay methods)
    Claim("TMC > Naive", "tmc", "naive"),
    Claim("TMC > the best replay-free (LwF, EWC)", "tmc", REPLAY_FREE),
    Claim("TMC > the best replay method (ER, DER)", "tmc", REPLAY),
    Claim("TMC > LwF", "tmc", "lwf"),
    Claim("TMC > EWC", "tmc", "ewc"),
    Claim("TMC > TMC-Seq (class-IL)", "tmc", "tmc-seq", ("class", "task")),
    Claim("TMC-Seq > TMC (data-IL)", "tmc-seq", "tmc", ("data",)),
    Claim("TMC with the scenario's β > with the other β", "tmc", "tmc-alt-beta"),
    Claim("RanPAC-style, layer chosen ≥ Joint", "ranpac-layer", "joint"),
    Claim("RanPAC-style, layer chosen ≥ DER", "ranpac-layer", "der"),
)


def _run_key(row: Row) -> RunKey:
    return (str(row["dataset"]), str(row["scenario"]), int(row["tasks"]),  # type: ignore[arg-type]
            str(row.get("regime", "") or ""))


def _seed(row: Row) -> int:
    seed = row.get("seed", "")
    return int(seed) if seed not in ("", None) else 0  # type: ignore[arg-type]


def final_by_seed(rows: Sequence[Row]) -> Dict[Tuple[RunKey, str], Dict[int, float]]:
    """``(run, method) -> {seed: final accuracy}`` (composed model, whole test stream,
    after the last experience)."""
    finals: Dict[Tuple[RunKey, str], Dict[int, float]] = defaultdict(dict)
    for r in rows:
        if r["model"] == "composed" and str(r["eval_exp"]) == "all" and int(r["after_task"]) == int(r["tasks"]):  # type: ignore[arg-type]
            finals[(_run_key(r), str(r["method"]))][_seed(r)] = float(r["accuracy"])  # type: ignore[arg-type]
    return dict(finals)


def rival(claim: Claim, finals: Mapping[Tuple[RunKey, str], Dict[int, float]], run: RunKey) -> Optional[str]:
    """The row ``claim`` is judged against in ``run``: its one rival, or the rival with the
    highest mean final accuracy among those run (None when none was)."""
    run_rivals = [m for m in claim.rivals if finals.get((run, m))]
    if not run_rivals:
        return None
    return max(run_rivals, key=lambda m: sum(finals[(run, m)].values()) / len(finals[(run, m)]))


def judge(claim: Claim, finals: Mapping[Tuple[RunKey, str], Dict[int, float]],
          run: RunKey) -> Optional[Tuple[str, PairedDifference]]:
    """``(verdict, paired difference)`` of ``claim`` in ``run``; None when not run there."""
    if run[1] not in claim.scenarios:
        return None
    worse_row = rival(claim, finals, run)
    better, worse = finals.get((run, claim.better)), finals.get((run, worse_row)) if worse_row else None
    if not better or not worse:
        return None
    difference = paired_difference(better, worse)
    return None if difference is None else (verdict(difference), difference)


def verdict_rows(rows: Sequence[Row]) -> List[Dict[str, object]]:
    """One dict per (claim, run) that could be judged: the claim, the run, the verdict,
    the mean difference and its 95% interval in accuracy points, and the seed count."""
    finals = final_by_seed(rows)
    runs = list(dict.fromkeys(_run_key(r) for r in rows))
    out = []
    for claim in CLAIMS:
        for run in runs:
            judged = judge(claim, finals, run)
            if judged is not None:
                result, d = judged
                out.append(dict(claim=claim.text, run=run, verdict=result, difference=100 * d.mean,
                                low=100 * d.low, high=100 * d.high, seeds=d.n, rival=rival(claim, finals, run)))
    return out


def _cell(judged: Optional[Tuple[str, PairedDifference]], against: Optional[str] = None) -> str:
    if judged is None:
        return "not run"
    result, d = judged
    versus = f" (vs {against})" if against else ""
    if d.n < 2:
        return f"{100 * d.mean:+.1f}{versus} (1 seed): {result}"
    shown = result if result != "not resolved" else f"not resolved at {d.n} seeds"
    return f"{100 * d.mean:+.1f} [{100 * d.low:+.1f}, {100 * d.high:+.1f}]{versus}: **{shown}**"


def _rival_label(claim: Claim, finals, run: RunKey) -> Optional[str]:
    """The rival's name as the table shows it, for claims against the strongest of several."""
    if len(claim.rivals) < 2:
        return None
    from benchmarks.methods import method_row  # the registry's labels (imported late: no cycle)

    name = rival(claim, finals, run)
    row = method_row(name) if name else None
    return row.label if row else name


def verdict_table(rows: Sequence[Row], run_label=None) -> str:
    """The claims (rows) by run (columns): the mean per-seed difference in accuracy points,
    its 95% interval and the verdict. Empty when no claim could be judged."""
    finals = final_by_seed(rows)
    runs = list(dict.fromkeys(_run_key(r) for r in rows))
    label = run_label or (lambda run: f"{run[1]}-{run[0]}")
    lines = []
    for claim in CLAIMS:
        cells = [_cell(judge(claim, finals, run), _rival_label(claim, finals, run)) for run in runs]
        if any(c != "not run" for c in cells):
            lines.append("| " + " | ".join([claim.text, *cells]) + " |")
    if not lines:
        return ""
    header = ["| Claim | " + " | ".join(label(run) for run in runs) + " |",
              "| --- | " + " | ".join("---" for _ in runs) + " |"]
    seeds = sorted({_seed(r) for r in rows})
    note = (f"Mean difference of final accuracy (points) over {len(seeds)} seed(s), paired by seed, with its 95% "
            "t-interval: **holds** / **fails** when the interval excludes 0, else not resolved.")
    return "\n".join(header + lines + ["", note]) + "\n"
