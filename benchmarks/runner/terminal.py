"""What the runner says on the terminal beyond its tables: the arithmetic it computes with
(:func:`arithmetic_header`, its first line), the learning-rate schedule of
its header (:func:`schedule_text`), the label of a progress line (:func:`piece_label`), the
decided claims at the end of a run (:func:`decided_claims`) and the one line of a Ctrl-C
(:func:`interrupted_message`, exit :data:`EXIT_INTERRUPTED`)."""

import contextlib
import glob
import os
import shlex
import sys
from fractions import Fraction
from typing import Any, Callable, Iterator, List, Mapping, Optional, Sequence, Tuple

from benchmarks.methods import TrainConfig
from benchmarks.methods.builders import schedule_milestones
from benchmarks.results.claims import REPLAY

__all__ = ["EXIT_INTERRUPTED", "PROG", "Interrupted", "arithmetic_header", "REPLAY_GROUPS", "replay_text",
           "capped_text", "plan_text",
           "schedule_text", "tuned_text", "piece_label", "decided_claims",
           "interrupted_message", "says_what_was_kept", "interruptible"]

PROG = "python -m benchmarks.run"
EXIT_INTERRUPTED = 130
"""The exit code of a run stopped by Ctrl-C (128 + SIGINT, as a shell reports it)."""


class Interrupted(KeyboardInterrupt):
    """A Ctrl-C that stopped the runner; ``str`` is the line that says what was kept."""


def _and(items: Sequence[str]) -> str:
    return " and ".join([", ".join(items[:-1]), items[-1]] if len(items) > 2 else items)


def arithmetic_header(native: bool = False) -> str:
    """Pin the CPU arithmetic (or, ``native``, leave the CPU's own:
    :func:`~benchmarks.networks.arithmetic.runner_arithmetic`) and say in one line what the
    run computes with: the first line of every run, before torch's first operation."""
    from benchmarks.networks.arithmetic import runner_arithmetic

    return f"[{PROG}] {runner_arithmetic(native).describe()}"


REPLAY_GROUPS = REPLAY
"""The method groups that replay a buffer of past samples (``TrainConfig.mem_size`` of them):
the claims' replay methods."""


def replay_text(groups: Sequence[str], mem_size: int, train_size: int) -> str:
    """``", replay buffer (ER, DER) 300 samples, 17% of the 1800 training samples"`` when one of
    ``groups`` replays, with a warning when the buffer holds the whole training set (those
    methods then train on every past sample: joint training in disguise; no verdict is drawn
    from their rows, :mod:`benchmarks.results.claims`); empty otherwise."""
    replaying = [g.upper() for g in groups if g in REPLAY_GROUPS]
    if not replaying:
        return ""
    from benchmarks.runner.config import DEFAULT_BUFFER

    text = (f", replay buffer ({', '.join(replaying)}) {mem_size} samples, {100 * mem_size / train_size:.0f}% of the "
            f"{train_size} training samples")
    if mem_size < DEFAULT_BUFFER:
        text += (f" (sized to the data: {DEFAULT_BUFFER} would be over a fifth of it; 20 a class, at most a fifth, "
                 "docs/benchmarks.md)")
    if mem_size >= train_size:
        text += (" (WARNING: the buffer holds the whole training set, so these methods replay every past sample: "
                 "joint training in disguise; no verdict is drawn from their rows)")
    return text


def capped_text(groups: Sequence[Any], cfg: TrainConfig) -> str:
    """``", TME Adam lr 0.0003 (the tangent rate capped for it ...)"`` for each group an
    untuned cap lowers (:data:`~benchmarks.methods.registry.UNTUNED_LR_CAPS`); empty otherwise."""
    from benchmarks.methods import UNTUNED_LR_CAPS, config_for, tuning_unit

    parts = []
    for group in groups:
        if tuning_unit(group) in UNTUNED_LR_CAPS and tuning_unit(group) not in cfg.tuned:
            used = config_for(group, cfg).lr_tangent
            if used != cfg.lr_tangent:
                parts.append(f", {group.rows[0].label if group.rows else group.name} Adam lr {used:g} (the tangent "
                             f"rate capped at what its tuning chose; --unit {tuning_unit(group)}=LR:EPOCHS sets it)")
    return "".join(parts)


def plan_text(seeds: int, groups: int, pieces: int, kept: int, jobs: int, estimate: str = "") -> str:
    """The plan, before any training: ``"  plan: 12 trainings (3 seeds x 4 method groups), 2 at a
    time; 0 kept from an earlier run; about 3 min of training estimated (...); the ETA follows
    each finished training"`` (``estimate``: :func:`benchmarks.runner.estimate.estimate_text`)."""
    extra, todo = pieces - seeds * groups, pieces - kept
    plural = {n: "s" if n != 1 else "" for n in (todo, seeds, groups)}
    return (f"  plan: {todo} training{plural[todo]} ({seeds} seed{plural[seeds]} x {groups} method group"
            f"{plural[groups]}" + (f", {extra} more on the task-labelled split" if extra else "")
            + f"), {jobs} at a time" + (f"; {kept} kept from an earlier run" if kept else "") + estimate
            + "; the ETA follows each finished training")


def schedule_text(cfg: TrainConfig, per_unit: bool = False) -> str:
    """The learning-rate schedule of ``cfg`` in words: ``lr x0.1 from epochs 3 and 4 of 4
    (1/2 and 3/4 of the epochs)``; ``per_unit``: each tuning unit has its own epochs, so
    only the fractions are said."""
    fractions = [str(Fraction(f).limit_denominator(100)) for f in cfg.decay_at]
    if per_unit and fractions and not cfg.milestones:
        return f"lr x0.1 at {_and(fractions)} of each unit's epochs"
    epochs = [str(m + 1) for m in schedule_milestones(cfg)]  # 1-based: the first epoch at the lower rate
    if not epochs:
        return "constant learning rate"
    text = f"lr x0.1 from epoch{'s' if len(epochs) > 1 else ''} {_and(epochs)} of {cfg.epochs}"
    return text + (f" ({_and(fractions)} of the epochs)" if fractions else "")


def tuned_text(tuned: Mapping[str, Tuple[float, int]]) -> str:
    """``tangent 0.003 / 10 epochs, ...``: each tuning unit's learning rate and epochs."""
    return ", ".join(f"{unit} {lr:g} / {epochs} epochs" for unit, (lr, epochs) in tuned.items())


def piece_label(seed: int, rows: Sequence[str], task_labelled: bool = False) -> str:
    """``seed 0 lwf``, with `` (task-labelled training)`` for the second training of a
    task-IL column (LwF, joint: their training reads the task labels)."""
    return f"seed {seed} {'+'.join(rows)}" + (" (task-labelled training)" if task_labelled else "")


def decided_claims(rows: Sequence[Mapping[str, object]], report: str) -> str:
    """The lines printed after the table: the reason a run gives no verdicts, or the claims
    the verdict table decides (holds, fails, equivalent; a repeated comparison once), one a
    line, headed by how many of the judged claims that is and where all of them are
    (``report``); empty when no claim compares the rows."""
    from benchmarks.results.claims import CLAIMS, judged_cells  # (the verdict table's own cells)
    from benchmarks.results.files import run_label
    from benchmarks.results.intervals import EQUIVALENT, FAILS, HOLDS

    cells, _, reason = judged_cells(rows)
    if not cells:
        return ""
    if reason:
        return f"{reason} The differences are in {report}."
    judged = [c for c in cells.values() if c["repeats"] is None]
    several = {claim.text: claim.rivals for claim in CLAIMS}
    decided = [c for c in judged if c["verdict"] in (HOLDS, FAILS, EQUIVALENT)]
    lines = [f"Verdicts: {len(decided)} claim{'s' if len(decided) != 1 else ''} decided of {len(judged)} judged "
             f"(every claim, its intervals and the rule: {report})"]
    for cell in decided:
        low, high = cell.get("adjusted_low", cell["low"]), cell.get("adjusted_high", cell["high"])
        versus = f" (vs {cell['rival']})" if len(several.get(cell["claim"], ())) > 1 else ""
        where = run_label(cell["run"])  # type: ignore[arg-type]
        lines.append(f"  {cell['claim']}{versus}, {where}: {cell['verdict']}, "
                     f"{cell['difference']:+.1f} points [{low:+.1f}, {high:+.1f}]")
    return "\n".join(lines)


def interrupted_message(out_dir: Optional[str], argv: Sequence[str]) -> str:
    """The one line of a Ctrl-C: what the output folder keeps (finished method groups of
    unfinished runs, finished runs) and the command that resumes (``argv`` without
    ``--restart``: a stopped restart goes on replacing when resumed without it)."""
    groups = len(glob.glob(os.path.join(out_dir, "progress", "*.json"))) if out_dir else 0
    runs = len(glob.glob(os.path.join(out_dir, "runs", "*.json"))) if out_dir else 0
    kept = [f"{n} finished {what}{'s' if n != 1 else ''}" for n, what in ((groups, "method group"), (runs, "run"))
            if n]
    resume = f"{PROG} {shlex.join(a for a in argv if a != '--restart')}".rstrip()
    if not kept:
        return f"interrupted: nothing finished was kept; run again with: {resume}"
    return f"interrupted: kept {_and(kept)} in {out_dir}; resume with: {resume}"


@contextlib.contextmanager
def says_what_was_kept(out: List[str], argv: Optional[Sequence[str]]) -> Iterator[None]:
    """Turn a Ctrl-C in the block into :class:`Interrupted` with :func:`interrupted_message`
    for the output folder ``out[0]`` (once known) and the command's ``argv``."""
    try:
        yield
    except KeyboardInterrupt as stop:
        if isinstance(stop, Interrupted):
            raise
        argv = sys.argv[1:] if argv is None else argv
        raise Interrupted(interrupted_message(out[0] if out else None, argv)) from None


def interruptible(main: Callable[[Optional[Sequence[str]]], Any], argv: Optional[Sequence[str]] = None) -> int:
    """``python -m benchmarks.run``: ``main`` under the refusals' :func:`command_line`; a
    Ctrl-C prints its one line on stderr and returns :data:`EXIT_INTERRUPTED`."""
    from benchmarks.runner.refusals import command_line

    try:
        return command_line(main, PROG, argv)
    except KeyboardInterrupt as stop:
        print(f"{PROG}: {stop if isinstance(stop, Interrupted) else 'interrupted'}", file=sys.stderr)
        return EXIT_INTERRUPTED
