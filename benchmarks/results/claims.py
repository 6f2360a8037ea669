"""The paper's claims, judged from the result rows over seeds (never written by hand).

Each :class:`Claim` says "row A beats row B" in some scenarios; its verdict per run comes
from the paired per-seed differences of the final accuracy on the whole test stream
(:mod:`benchmarks.results.intervals`): holds / fails when the 95% interval excludes 0, else not
resolved at that many seeds. A claim whose rows a run lacks is "not run".

Each table is one family: its verdicts are corrected for their number by Holm's step-down
procedure at family-wise α = 0.05 over the two-sided p-values of the paired t statistic
(:func:`benchmarks.results.intervals.holm`); a cell shows the raw 95% interval, the interval at the
level of its Holm step and the adjusted p-value, and a claim resolved before the correction
but not after is "not resolved after Holm". A comparison is counted once: a "best of" claim
whose strongest rival has its own claim in the run (TMC > the best replay-free, judged
against LwF, is "TMC > LwF") refers to that claim and is not in the family. A table gives
verdicts only over at least :data:`MIN_SEEDS` seeds and when each of its trained rows
trained at least :data:`MIN_EPOCHS` epochs per experience (the results' ``epochs``
column; training-free rows do not count); below that (a smoke run) it shows the numbers and
says why it gives no verdicts (:func:`withheld_reason`).

A verdict must also survive another machine (:mod:`benchmarks.results.machine_moves`): rows
trained by SGD moved between machines computing with their own kernels (docs/results/machines/),
while the tangent and training-free rows were the same to 0.0. Each row's mean over n seeds
may move by the 95% bound of the measured moves at n seeds; a claim whose Holm interval clears
0 (or, for "equivalent", ±δ) by less than its two rows' bounds together is "not resolved across
machines". Which moves bound a row is the margin rule (``rule``, one of
:data:`~benchmarks.results.machine_moves.MARGIN_RULES`): ``pinned`` (the default, the
amendment of issue 58) bounds a row computed with the pinned AVX2 arithmetic (its
``arithmetic`` column ``avx2``) by the comparisons of pinned rows across machines, and a row
computed with a CPU's own kernels (another value, or none: a file written before the column)
by the others;
``preregistered`` bounds every row by the comparisons of natively computed rows, as the
pre-registration fixed it.

The comparison for "the best shipped method" names its method in advance
(``ranpac-layer``, the RanPAC-style head on the layer chosen on experience 0) rather than
picking the best row on the test set. The paper's continual claims ("TMC beats the best
replay-free / replay method") compare with the rival of the highest mean among those named
(``worse`` is a tuple): choosing the strongest rival on the test set can only make the claim
harder to hold, and the cell names the rival it was judged against.
"""

from collections import defaultdict
from dataclasses import dataclass
from typing import Dict, Mapping, Optional, Sequence, Tuple, Union

from benchmarks.methods import method_family, method_row
from benchmarks.results.files import row_seed, run_key
from benchmarks.results.intervals import (
    ALPHA,
    EQUIVALENT,
    FAILS,
    HOLDS,
    NOT_RESOLVED,
    PairedDifference,
    holm,
    interval,
    p_value,
    paired_difference,
    verdict,
    within,
)
from benchmarks.results.machine_moves import machine_margin
from benchmarks.results.margins import DEFAULT_RULE, MARGIN_TEXT, row_moves

__all__ = ["Claim", "CLAIMS", "REPLAY_FREE", "REPLAY", "final_by_seed", "rival", "judge",
           "verdict_table", "MIN_SEEDS", "MIN_EPOCHS", "NO_VERDICT", "withheld_reason", "repeated_claim",
           "ACROSS_MACHINES", "SMALLEST_DIFFERENCE", "EQUIVALENT", "judged_cells", "verdict_counts", "counts_text",
           "VERDICT_ORDER", "row_moves", "DEFAULT_RULE", "whole_buffer_rows"]

MIN_SEEDS = 3  # a table gives verdicts only over at least this many seeds
MIN_EPOCHS = 5  # and when every trained row of it trained at least this many epochs per experience
NO_VERDICT = "no verdict"  # a table below those (a smoke run): its numbers, no verdicts
ACROSS_MACHINES = "not resolved across machines"  # resolved after Holm, but a machine's shift could flip it
# points: δ, the smallest difference of final accuracy that matters, fixed before the
# confirmatory run (docs/preregistration.md): a claim whose Holm interval, widened by its
# rows' machine margins, lies inside ±δ is "equivalent" (no real difference either way)
SMALLEST_DIFFERENCE = 2.0

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


def final_by_seed(rows: Sequence[Row]) -> Dict[Tuple[RunKey, str], Dict[int, float]]:
    """``(run, method) -> {seed: final accuracy}`` (composed model, whole test stream,
    after the last experience)."""
    finals: Dict[Tuple[RunKey, str], Dict[int, float]] = defaultdict(dict)
    for r in rows:
        if r["model"] == "composed" and str(r["eval_exp"]) == "all" and int(r["after_task"]) == int(r["tasks"]):  # type: ignore[arg-type]
            finals[(run_key(r), str(r["method"]))][row_seed(r)] = float(r["accuracy"])  # type: ignore[arg-type]
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


def repeated_claim(claim: Claim, finals: Mapping[Tuple[RunKey, str], Dict[int, float]],
                   run: RunKey) -> Optional[Claim]:
    """The claim of :data:`CLAIMS` that ``claim`` repeats in ``run``: for a "best of" claim,
    the one-rival claim with the same better row against the rival it resolved to, when
    that claim is judged in ``run`` (None otherwise: the comparison is its own)."""
    if len(claim.rivals) < 2:
        return None
    against = rival(claim, finals, run)
    return next((c for c in CLAIMS if c is not claim and c.better == claim.better and c.rivals == (against,)
                 and judge(c, finals, run) is not None), None)


def _trained(method: str) -> bool:

    return method_family(method) != "training-free"


def withheld_reason(rows: Sequence[Row]) -> Optional[str]:
    """Why ``rows`` give no verdicts (one sentence), or None when they do: fewer than
    :data:`MIN_SEEDS` seeds, or a trained row (final accuracy of a method that trains)
    trained fewer than :data:`MIN_EPOCHS` epochs per experience or does not record them."""
    finals = [r for r in rows if r["model"] == "composed" and str(r["eval_exp"]) == "all"
              and int(r["after_task"]) == int(r["tasks"])]  # type: ignore[arg-type]
    seeds = len({row_seed(r) for r in finals})
    epochs = [r.get("epochs", "") for r in finals if _trained(str(r["method"]))]
    unrecorded = any(e in ("", None) for e in epochs)
    fewest = min((int(e) for e in epochs if e not in ("", None)), default=None)  # type: ignore[call-overload]
    if seeds >= MIN_SEEDS and not unrecorded and (fewest is None or fewest >= MIN_EPOCHS):
        return None
    short = []  # only what falls short: "5 epochs" beside "1 seed" read as if 5 epochs were too few
    if seeds < MIN_SEEDS:
        short.append(f"{seeds} seed{'s' if seeds != 1 else ''} (a verdict needs at least {MIN_SEEDS})")
    if unrecorded:
        short.append(f"epochs per experience not recorded (a verdict needs at least {MIN_EPOCHS}, recorded)")
    elif fewest is not None and fewest < MIN_EPOCHS:
        short.append(f"{fewest} epoch{'s' if fewest != 1 else ''} per experience of a trained row (a verdict needs "
                     f"at least {MIN_EPOCHS})")
    return "No verdicts: " + " and ".join(short) + "."


def whole_buffer_rows(rows: Sequence[Row]) -> set:
    """``(method, run)`` of the replay rows whose buffer holds at least their whole training set
    (``replay_fraction`` ≥ 1): they replay every past sample, joint training in disguise, so no
    claim is judged against them (the cell shows its numbers and why)."""
    return {(str(r["method"]), run_key(r)) for r in rows
            if r.get("replay_fraction") not in ("", None) and float(r["replay_fraction"]) >= 1}  # type: ignore[arg-type]


def _label(method: str) -> str:
    row = method_row(method)
    return row.label if row else method


def judged_cells(rows: Sequence[Row], rule: str = DEFAULT_RULE
                 ) -> Tuple[Dict[Tuple[str, RunKey], Dict[str, object]], int, Optional[str]]:
    """Every judged (claim, run) of the table ``rows`` make, with its verdict after Holm
    (its cross-machine margin by the margin ``rule``, :func:`row_moves`), the family's size
    m, and :func:`withheld_reason`."""
    finals = final_by_seed(rows)
    runs = list(dict.fromkeys(run_key(r) for r in rows))
    reason = withheld_reason(rows)
    whole = whole_buffer_rows(rows)
    cells: Dict[Tuple[str, RunKey], Dict[str, object]] = {}
    for claim in CLAIMS:
        for run in runs:
            judged = judge(claim, finals, run)
            if judged is None:
                continue
            result, d = judged
            repeated = repeated_claim(claim, finals, run)
            against = rival(claim, finals, run)
            replaying = [m for m in (claim.better, against) if (m, run) in whole]
            cells[(claim.text, run)] = dict(
                claim=claim.text, run=run, difference=100 * d.mean, low=100 * d.low, high=100 * d.high, seeds=d.n,
                rival=against, raw_verdict=result, paired=d, repeats=repeated.text if repeated else None,
                withheld=f"{_label(replaying[0])}'s replay buffer holds the whole training set" if replaying else None,
                # below the seed rule a cell is not resolved, wherever its verdict is shown or counted
                verdict=NO_VERDICT if reason or replaying else NOT_RESOLVED if d.n < MIN_SEEDS else None)
    family = [key for key, c in cells.items() if c["verdict"] is None and c["repeats"] is None]
    steps = holm([p_value(cells[key]["paired"]) for key in family])  # type: ignore[arg-type]
    moves = row_moves(rows, rule) if family else None
    for key, step in zip(family, steps):
        cell, d = cells[key], cells[key]["paired"]
        low, high = interval(d, step.level)  # type: ignore[arg-type]
        claim = next(c for c in CLAIMS if c.text == key[0])
        margin = sum(machine_margin(m, d.n, moves(m, key[1]))  # type: ignore[misc,union-attr]
                     for m in (claim.better, cell["rival"]))
        verdict = (HOLDS if d.mean > 0 else FAILS) if step.rejected else NOT_RESOLVED  # type: ignore[union-attr]
        if verdict != NOT_RESOLVED and min(abs(100 * low), abs(100 * high)) <= margin:
            verdict = ACROSS_MACHINES
        elif verdict == NOT_RESOLVED and within(100 * low, 100 * high, SMALLEST_DIFFERENCE):
            # two one-sided tests at the claim's Holm level; another machine must not push it out
            widened = within(100 * low - margin, 100 * high + margin, SMALLEST_DIFFERENCE)
            verdict = EQUIVALENT if widened else ACROSS_MACHINES
        cell.update(p=step.p, adjusted_p=step.adjusted, level=step.level, adjusted_low=100 * low,
                    adjusted_high=100 * high, machine_margin=margin, verdict=verdict)
    for cell in cells.values():  # a repeated comparison takes the verdict of the claim it repeats
        if cell["repeats"] is not None and cell["verdict"] is None:
            cell["verdict"] = cells[(cell["repeats"], cell["run"])]["verdict"]  # type: ignore[index]
        if cell["verdict"] is None:  # fewer seeds than a verdict needs in a table that gives verdicts
            cell["verdict"] = NOT_RESOLVED
    return cells, len(family), reason


VERDICT_ORDER = (HOLDS, FAILS, EQUIVALENT, ACROSS_MACHINES, NOT_RESOLVED)
"""The verdicts a judged cell ends in, in the order the counts name them."""


def verdict_counts(verdicts) -> Dict[str, int]:
    """How many of ``verdicts`` (the verdict of each cell of a table, e.g. from
    :func:`judged_cells`) are each verdict, in :data:`VERDICT_ORDER`; a cell counted once
    under the claim it repeats is counted here too."""
    counts = dict.fromkeys(VERDICT_ORDER, 0)
    for shown in map(str, verdicts):
        counts[shown] = counts.get(shown, 0) + 1
    return counts


def counts_text(verdicts) -> str:
    """``"24 hold, 2 fails, 0 equivalent, ..."``: :func:`verdict_counts` in words."""
    return ", ".join(f"{n} {'hold' if shown == HOLDS and n != 1 else shown}"
                     for shown, n in verdict_counts(verdicts).items())


def _counts_line(cells: Mapping[Tuple[str, RunKey], Mapping[str, object]], m: int) -> str:
    repeats = sum(1 for cell in cells.values() if cell["repeats"] is not None)
    return (f"Of the table's {len(cells)} judged cells (m = {m} in the family, {repeats} counted once "
            f"under the claim they repeat): {counts_text(c['verdict'] for c in cells.values())}.")


def _level(level: float) -> str:
    return f"{100 * level:.4g}%"


def _cell(cell: Optional[Dict[str, object]], against: Optional[str] = None) -> str:
    if cell is None:
        return "not run"
    versus = f" (vs {against})" if against else ""
    n = cell["seeds"]
    if n < 2:  # type: ignore[operator]
        return f"{cell['difference']:+.1f}{versus} (1 seed)" + ("" if cell["verdict"] == NO_VERDICT else
                                                                  f": {NOT_RESOLVED}")
    numbers = f"{cell['difference']:+.1f} [{cell['low']:+.1f}, {cell['high']:+.1f}]{versus}"
    if cell.get("withheld"):
        return f"{numbers}: **no verdict** ({cell['withheld']})"
    if cell["verdict"] == NO_VERDICT:
        return numbers
    if cell["repeats"] is not None:
        return f"{numbers}: see \"{cell['repeats']}\" (counted once)"
    if "level" not in cell:
        return f"{numbers}: **not resolved at {n} seeds**"
    adjusted = (f"; Holm {_level(cell['level'])} [{cell['adjusted_low']:+.1f}, {cell['adjusted_high']:+.1f}], "  # type: ignore[arg-type]
                f"adj. p {cell['adjusted_p']:.2g}")
    shown = cell["verdict"]
    if shown == EQUIVALENT:
        return f"{numbers}{adjusted}: **{shown}** (within ±{SMALLEST_DIFFERENCE:g})"
    if shown == ACROSS_MACHINES:
        return f"{numbers}{adjusted}: **{shown}** (its rows may move ±{cell['machine_margin']:.1f} together)"
    if shown == NOT_RESOLVED:
        shown = "not resolved after Holm" if cell["raw_verdict"] != NOT_RESOLVED else f"not resolved at {n} seeds"
    return f"{numbers}{adjusted}: **{shown}**"


def _rival_label(claim: Claim, finals, run: RunKey) -> Optional[str]:
    """The rival's name as the table shows it, for claims against the strongest of several."""
    if len(claim.rivals) < 2:
        return None

    name = rival(claim, finals, run)
    row = method_row(name) if name else None
    return row.label if row else name


def verdict_table(rows: Sequence[Row], run_label=None, rule: str = DEFAULT_RULE) -> str:
    """The claims (rows) by run (columns): the mean per-seed difference in accuracy points,
    its 95% interval, the interval at its Holm step's level, the Holm-adjusted p-value and
    the verdict after Holm (the margin ``rule``, :func:`row_moves`); below :data:`MIN_SEEDS`
    seeds or :data:`MIN_EPOCHS` epochs the differences and their 95% intervals only, headed
    by why (:func:`withheld_reason`). Empty when no claim could be judged."""
    finals = final_by_seed(rows)
    runs = list(dict.fromkeys(run_key(r) for r in rows))
    label = run_label or (lambda run: f"{run[1]}-{run[0]}")
    cells, m, reason = judged_cells(rows, rule)
    lines = []
    for claim in CLAIMS:
        shown = [_cell(cells.get((claim.text, run)), _rival_label(claim, finals, run)) for run in runs]
        if any(c != "not run" for c in shown):
            lines.append("| " + " | ".join([claim.text, *shown]) + " |")
    if not lines:
        return ""
    header = ["| Claim | " + " | ".join(label(run) for run in runs) + " |",
              "| --- | " + " | ".join("---" for _ in runs) + " |"]
    seeds = sorted({row_seed(r) for r in rows})
    if reason:
        note = (f"{reason} Mean difference of final accuracy (points) over {len(seeds)} seed(s), paired by seed, "
                "with its 95% t-interval.")
        return "\n".join([reason, ""] + header + lines + ["", note]) + "\n"
    note = (f"Mean difference of final accuracy (points) over {len(seeds)} seed(s), paired by seed, with its 95% "
            f"t-interval; then, over the m = {m} distinct comparisons of this table (one family, family-wise "
            f"α = {ALPHA:g}), Holm's step-down procedure on the two-sided p-values of the same paired t statistic: the "
            "interval at the level of the claim's Holm step (1 − α/(m − k + 1) for the claim at rank k; after the "
            "first claim not rejected, that claim's level; tied p-values share the rank of the first of them) and "
            "the Holm-adjusted p-value. **holds** / **fails** when the Holm interval excludes 0 (adjusted p ≤ α); "
            "\"not resolved after Holm\" when only the 95% interval excludes 0. **equivalent** when the Holm "
            f"interval lies inside ±{SMALLEST_DIFFERENCE:g} points, the smallest difference that matters (two "
            "one-sided tests at the claim's Holm level): no real difference either way. A \"best of\" claim whose "
            "strongest rival has its own claim refers to it and is counted once. \"Not resolved across machines\" "
            "when the Holm interval clears 0 (or, for equivalence, ±δ) by no more than the two rows could move on "
            f"another machine: {MARGIN_TEXT[rule]}. Verdicts need at least "
            f"{MIN_SEEDS} seeds and {MIN_EPOCHS} epochs per experience of every trained row.")
    return "\n".join(header + lines + ["", note, "", _counts_line(cells, m)]) + "\n"
