"""The Markdown tables of benchmark results (results.md and the README's generated blocks).

:func:`markdown_table` is the paper's table (final accuracy per method and run, the cost
columns and the notes on paragons, reused training and settings); :func:`regime_tables`,
:func:`timing_table`, :func:`tuning_table` and :func:`variance_table` the others;
:func:`write_markdown` writes results.md. Rows and their indexes: :mod:`benchmarks.results.files`.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from avalanche_tmc.files.filesystem import atomic_path
from benchmarks.methods import joint_methods, method_family, method_row, method_unit
from benchmarks.results.claims import verdict_table
from benchmarks.results.field_metrics import field_metrics_table
from benchmarks.results.files import (
    ALL,
    COMPOSED,
    MISSING,
    SCENARIO_PREFIX,
    AccuracyIndex,
    PathLike,
    Row,
    RunKey,
    accuracy_index,
    accuracy_spread,
    cost_class,
    final_accuracy,
    list_runs,
    method_info,
    order_methods,
    regime_panels,
    run_key,
    run_label,
    seed_count,
)
from benchmarks.results.intervals import mean_std
from benchmarks.results.machine_moves import moves_of
from benchmarks.results.premise import premise_figures, premise_section

__all__ = ["markdown_table", "regime_tables", "timing_table", "incomplete_note", "write_markdown", "tuning_table",
           "variance_table"]


def _md_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def _emphasis(index: AccuracyIndex, runs: Sequence[RunKey], methods: Sequence[str]) -> Dict[Tuple[RunKey, str], str]:
    """``**`` for the best O(1) method and ``*`` for the best O(T) method of each run (ties all marked)."""
    marks: Dict[Tuple[RunKey, str], str] = {}
    for run in runs:
        for cost, mark in (("O(1)", "**"), ("O(T)", "*")):
            scores = {m: final_accuracy(index, run, m) for m in methods if cost_class(m) == cost}
            scores = {m: v for m, v in scores.items() if v is not None}
            if scores:
                best = max(scores.values())
                marks.update({(run, m): mark for m, v in scores.items() if v == best})
    return marks


def _percent(cell: Tuple[float, float, int], seeds: int = 1) -> str:
    """An accuracy cell in %: ``"81.23"`` for one seed, ``"81.2 ± 1.4"`` (mean ± sample
    standard deviation) for several; a cell from fewer than the table's ``seeds`` says
    from how many (``"81.2 ± 1.4 (2 seeds)"``, ``"81.23 (1 seed)"``)."""
    mean, std, n = cell
    text = f"{100 * mean:.1f} ± {100 * std:.1f}" if n > 1 else f"{100 * mean:.2f}"
    return text + (f" ({n} seed{'s' if n > 1 else ''})" if n < seeds else "")


def markdown_table(rows: Sequence[Row]) -> str:
    """The paper's table: final accuracy (%) per method and run, plus cost columns and notes."""
    runs = list_runs(rows)
    methods = order_methods(str(r["method"]) for r in rows)
    index = accuracy_index(rows)
    spread = accuracy_spread(rows)
    marks = _emphasis(index, runs, methods)
    seeds = seed_count(rows)

    lines = [
        _md_row(["Method", *map(run_label, runs), "Inference/Memory", "Replay buffer", "Parallel tasks"]),
        _md_row(["---", *["---:"] * len(runs), "---", "---", "---"]),
    ]
    fractions = {}  # a replay method's buffer as a fraction of its run's training set (runs alike: the largest)
    buffers: Dict[str, int] = {}  # a replay method's buffer in samples, where the rows record it (the largest)
    for r in rows:
        if r.get("replay_fraction") not in ("", None):
            fractions[str(r["method"])] = max(fractions.get(str(r["method"]), 0.0), float(r["replay_fraction"]))
        if r.get("replay_buffer") not in ("", None):
            buffers[str(r["method"])] = max(buffers.get(str(r["method"]), 0), int(r["replay_buffer"]))  # type: ignore[call-overload]
    rose: Dict[Tuple[object, str], List[str]] = defaultdict(list)  # (run, method) -> seeds whose training loss rose
    for r in rows:
        if r.get("loss_rose") and r.get("model") == COMPOSED and str(r["eval_exp"]) == ALL \
                and int(r["after_task"]) == int(r["tasks"]):  # type: ignore[call-overload]
            rose[(run_key(r), str(r["method"]))].append(f"seed {r.get('seed', '')} (experience {r['loss_rose']})")
    for method in methods:
        name, cost, buffer, parallel = method_info(method, buffers.get(method))  # the run's own buffer
        if method in fractions:
            buffer += (f" ({100 * fractions[method]:.0f}% of the training set"
                       + (": all of it, joint training in disguise)" if fractions[method] >= 1 else ")"))
        cells = []
        for run in runs:
            cell = spread.get((run, method, COMPOSED, run[2], ALL))
            mark = marks.get((run, method), "")
            dagger = " †" if (run, method) in rose else ""
            cells.append(MISSING if cell is None else f"{mark}{_percent(cell, seeds)}{mark}{dagger}")
        lines.append(_md_row([name, *cells, cost, buffer, "yes" if parallel else "no"]))

    backbones = ", ".join(dict.fromkeys(str(r["backbone"]) for r in rows))
    fewer = any(n < seeds for (run, _, model, after, exp), (_, _, n) in spread.items()
                if (model, after, exp) == (COMPOSED, run[2], ALL))
    lines += [
        "",
        "Final accuracy (%) on the whole test stream after the last experience"
        + (f", mean ± sample standard deviation over {seeds} seeds" if seeds > 1 else "")
        + (" (a cell from fewer seeds says how many: a run is missing)" if fewer else "") + f"; backbone: {backbones}. "
        "**Bold**: best single-model (O(1)) method per column (by the mean), joint paragons excluded; *italic*: best "
        "O(T) method" + (" (the verdicts below say which differences the seeds resolve)." if seeds > 1 else "."),
    ]
    in_premise = premise_figures(rows)  # their paragons are in the premise table: not repeated here
    for run in (r for r in runs if r not in in_premise):
        paragons = [(m, spread.get((run, m, COMPOSED, run[2], ALL))) for m in methods if m in joint_methods()]
        parts = [f"{method_info(m)[0]} {_percent(cell, seeds)}" for m, cell in paragons if cell is not None]
        if parts:
            lines.append(f"- Paragon, {run_label(run)}: " + ", ".join(parts))
    lines += [f"- † {method_info(method)[0]}, {run_label(run)}: the training loss ended above twice its start "  # type: ignore[arg-type]
              f"or went non-finite in {', '.join(seeds_at)}: most likely diverged at the learning rate set; its mean "
              "includes those seeds" for (run, method), seeds_at in rose.items()]
    lines += _reuse_lines(rows, runs)
    lines += _settings_lines(rows, runs)
    return "\n".join(lines) + "\n"


def _reuse_lines(rows: Sequence[Row], runs: Sequence[RunKey]) -> List[str]:
    """One line per run whose rows were evaluated from another scenario's training, naming
    the rows trained for the run itself (their training reads task labels)."""
    lines = []
    for run in runs:
        in_run = [r for r in rows if run_key(r) == run and r["model"] == COMPOSED]
        sources = {str(r["trained_in"]) for r in in_run if r.get("trained_in")}
        own = order_methods({str(r["method"]) for r in in_run if not r.get("trained_in")})
        for source in sorted(sources):
            other = run_label((run[0], source, run[2], run[3]))
            lines.append(f"- {run_label(run)}: the rows are {other}'s training, evaluated with each test sample's "
                         "prediction restricted to the classes of its task (the task label is known at test time; "
                         "those methods do not read it to train, so training again with task labels gives the same "
                         "models)" + (f", except {', '.join(method_info(m)[0] for m in own)}, whose training reads "
                                      "task labels: trained on this split" if own else ""))
    return lines


def _order_line(rows: Sequence[Row], run: RunKey) -> str:
    """Whether ``run``'s class order (class/task-IL) or shards (data-IL) varied with the seed,
    from the rows' ``data_seed`` ("" when the file does not record it)."""
    by_seed = {r.get("seed"): r.get("data_seed") for r in rows if run_key(r) == run}
    data_seeds = {d for d in by_seed.values() if d not in ("", None)}
    if not data_seeds or len(by_seed) < 2:
        return ""
    if len(data_seeds) == 1:
        return f"the same for every seed (data seed {next(iter(data_seeds))}): the spread is training randomness only"
    return (f"drawn per seed (data seeds {', '.join(str(d) for d in sorted(data_seeds))}): the spread includes "
            "the order")


def _settings_lines(rows: Sequence[Row], runs: Sequence[RunKey]) -> List[str]:
    """One line per run: the learning rate and epochs each tuning unit (a family, or a
    method tuned for itself) trained with."""
    lines = []
    orders = {run: _order_line(rows, run) for run in runs}
    if len(runs) > 1 and len(set(orders.values())) == 1 and next(iter(orders.values())):
        lines.append(f"- Class order (class-IL) and shards (data-IL), every run: {next(iter(orders.values()))}")
        orders = {run: "" for run in runs}
    for run in runs:
        used: Dict[str, Tuple[object, object]] = {}
        tuned = "no"
        for r in rows:
            unit = method_unit(str(r["method"])) if method_family(str(r["method"])) != "training-free" else None
            if run_key(r) == run and r.get("lr", "") != "" and unit is not None:
                used.setdefault(unit, (r["lr"], r["epochs"]))
                tuned = str(r.get("tuned") or "no")
        for method in order_methods(str(r["method"]) for r in rows if run_key(r) == run and r.get("setting")):
            setting = next(r["setting"] for r in rows
                           if run_key(r) == run and r["method"] == method and r.get("setting"))
            lines.append(f"- {method_info(method)[0]}, {run_label(run)}: {setting}")
        order = orders[run]
        if order:
            lines.append(f"- {'Shards' if run[1] == 'data' else 'Class order'}, {run_label(run)}: {order}")
        if used:
            how = ("chosen on a validation split of the training data, see tuning.csv" if tuned == "yes" else
                   "set by the run" if tuned == "no" else
                   f"chosen on a validation split of the training data by {tuned}")
            lines.append(f"- Learning rate / epochs per experience, {run_label(run)}: "
                         + ", ".join(f"{f} {lr:g} / {ep}" for f, (lr, ep) in used.items()) + f" ({how})")
    return lines


def regime_tables(rows: Sequence[Row]) -> str:
    """For each dataset and scenario run in several regimes: final accuracy (%) per method
    (rows) and regime (columns, fewest trained parameters first), and the best method of
    the library (a ``shipped`` row) against joint fine-tuning. Empty when no dataset has two regimes."""
    index = accuracy_index(rows)
    parts = []
    for (dataset, scenario, tasks), runs in regime_panels(rows).items():
        methods = order_methods(str(r["method"]) for r in rows if run_key(r) in {run for run, _ in runs})
        lines = [f"{run_label((dataset, scenario, tasks, ''))}: final accuracy (%) by trained part", "",
                 _md_row(["Method", *(f"{run[3]} ({size / 1e6:.2g} M)" for run, size in runs)]),
                 _md_row(["---", *["---:"] * len(runs)])]
        for method in methods:
            cells = [final_accuracy(index, run, method) for run, _ in runs]
            values = (MISSING if a is None else f"{100 * a:.2f}" for a in cells)
            lines.append(_md_row([method_info(method)[0], *values]))
        best = []
        for run, _ in runs:
            scores = {m: final_accuracy(index, run, m) for m in methods
                      if m not in joint_methods() and getattr(method_row(m), "shipped", False)}
            scores = {m: v for m, v in scores.items() if v is not None}
            joint = final_accuracy(index, run, "joint")
            if scores and joint is not None:
                top = max(scores, key=scores.get)
                best.append(f"{run[3]}: {method_info(top)[0]} {100 * scores[top]:.2f} vs joint {100 * joint:.2f} "
                            f"({100 * (scores[top] - joint):+.2f})")
        versus = ["", "Best avalanche-tmc method vs joint fine-tuning: " + "; ".join(best)] if best else []
        parts.append("\n".join(lines + versus))
    return "\n\n".join(parts) + ("\n" if parts else "")


def timing_table(rows: Sequence[Row]) -> str:
    """Seconds each method took per seed (training; evaluation after every experience),
    mean over seeds, one column per run. Rows that share a training (TMC and TME, the
    Soup/Ens rows) show the same training time."""
    runs = list_runs(rows)
    methods = order_methods(str(r["method"]) for r in rows)
    train: Dict[Tuple[RunKey, str], Dict[object, float]] = defaultdict(dict)
    evals: Dict[Tuple[RunKey, str], Dict[object, float]] = defaultdict(dict)
    reused: Dict[Tuple[RunKey, str], str] = {}
    for r in rows:
        if r["model"] != COMPOSED or r["eval_exp"] != ALL:
            continue
        key, seed = (run_key(r), str(r["method"])), r.get("seed", "")
        train[key][seed] = max(train[key].get(seed, 0.0), float(r["train_seconds"]))  # type: ignore[arg-type]
        evals[key][seed] = evals[key].get(seed, 0.0) + float(r["eval_seconds"])  # type: ignore[arg-type]
        if r.get("trained_in"):
            reused[key] = str(r["trained_in"])
    lines = [_md_row(["Method", *map(run_label, runs)]), _md_row(["---", *["---:"] * len(runs)])]
    for method in methods:
        cells = []
        for run in runs:
            t, e = train.get((run, method)), evals.get((run, method))
            trained = (f"{SCENARIO_PREFIX.get(reused[(run, method)], '?')}-IL's" if (run, method) in reused else
                       f"{sum(t.values()) / len(t):.0f}" if t else "")  # type: ignore[union-attr]
            cells.append(MISSING if not t else f"{trained} / {sum(e.values()) / len(e):.0f}")  # type: ignore[union-attr]
        lines.append(_md_row([method_info(method)[0], *cells]))
    note = (" A cell \"C-IL's\" reuses the class-IL column's training (its seconds are there): only the evaluation "
            "is this column's." if reused else "")
    return ("Seconds per seed, training / evaluation (mean over seeds; one process and thread each)." + note + "\n\n"
            + "\n".join(lines) + "\n")


def incomplete_note(missing: Sequence[str]) -> str:
    """The line that heads the report of an unfinished invocation: the planned runs it lacks."""
    return (f"**Incomplete: {len(missing)} planned run(s) missing: {', '.join(missing)}.** Their results are in "
            "neither this report nor results.csv (the runner was stopped or is still going; the same command "
            "resumes it; status.json lists the runs).\n")


def write_markdown(rows: Sequence[Row], path: PathLike, missing: Sequence[str] = ()) -> Path:
    """Write :func:`markdown_table` (with the field's metrics, the verdicts, regime and timing tables) to
    ``path``, headed by :func:`incomplete_note` when planned runs are ``missing``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    regimes = regime_tables(rows)
    verdicts = verdict_table(rows, run_label)
    premise = premise_section(rows)
    field = field_metrics_table(rows)
    with atomic_path(path) as tmp:
        tmp.write_text((incomplete_note(missing) + "\n" if missing else "")
                       + markdown_table(rows) + ("\n" + premise if premise else "")
                       + ("\n" + verdicts if verdicts else "") + ("\n" + field if field else "")
                       + ("\n" + regimes if regimes else "") + "\n" + timing_table(rows), encoding="utf-8")
    return path


def tuning_table(trials: Sequence[Row]) -> str:
    """The chosen learning rate and epochs of each tuning unit per run, with its validation
    accuracy, the best and worst trial of the unit, and whether the choice is on the edge
    of the grid."""
    lines = [_md_row(["Run", "Unit", "Learning rate", "Epochs", "Validation", "Unit's trials (worst–best)",
                      "On the grid's edge"]), _md_row(["---", "---", "---:", "---:", "---:", "---", "---"])]
    for t in trials:
        if t["chosen"] != "yes":
            continue
        run = (str(t["dataset"]), str(t["scenario"]), int(t["tasks"]), str(t["regime"]))  # type: ignore[arg-type]
        scores = [float(u["validation_accuracy"]) for u in trials  # type: ignore[arg-type]
                  if (u["dataset"], u["scenario"], u["regime"], u["family"]) ==
                  (t["dataset"], t["scenario"], t["regime"], t["family"])]
        lines.append(_md_row([run_label(run), str(t["family"]), f"{float(t['lr']):g}", str(t["epochs"]),  # type: ignore[arg-type]
                              f"{100 * float(t['validation_accuracy']):.1f}",  # type: ignore[arg-type]
                              f"{100 * min(scores):.1f}–{100 * max(scores):.1f} ({len(scores)})",
                              str(t.get("edge") or "no")]))
    return "\n".join(lines) + "\n"


def variance_table(rows: Sequence[Row]) -> str:
    """The spread of each method's final accuracy over seeds (points) when one source of
    randomness varies at a time (``experiments/variance.py``'s ``variance.csv``)."""
    methods = list(dict.fromkeys(str(r["method"]) for r in rows))
    protocols = list(dict.fromkeys(str(r["protocol"]) for r in rows))
    lines = [_md_row(["Varied (others fixed)", *(method_info(m)[0] for m in methods)]),
             _md_row(["---", *["---:"] * len(methods)])]
    for protocol in protocols:
        cells = []
        for method in methods:
            values = [float(r["accuracy"]) for r in rows  # type: ignore[arg-type]
                      if r["protocol"] == protocol and r["method"] == method]
            cells.append(f"{100 * mean_std(values)[1]:.1f}" if values else MISSING)
        lines.append(_md_row([protocol, *cells]))
    seeds = len({r["seed"] for r in rows})
    return ("Sample standard deviation of the final accuracy (points) over "
            f"{seeds} seeds, one source of randomness varied at a time:\n\n" + "\n".join(lines) + "\n")


def spread_table(rows: Sequence[Row]) -> str:
    """Methods (rows) by run (columns): the mean final accuracy on each machine and the
    largest per-seed difference, in points."""
    runs: List[Tuple[str, str, int, str]] = list(dict.fromkeys(
        (str(r["dataset"]), str(r["scenario"]), int(r["tasks"]), str(r["regime"])) for r in rows))  # type: ignore
    cells = {((str(r["dataset"]), str(r["scenario"]), int(r["tasks"]), str(r["regime"])), str(r["method"])): r  # type: ignore
             for r in rows}
    methods = order_methods(str(r["method"]) for r in rows)
    lines = [_md_row(["Method", *map(run_label, runs)]), _md_row(["---", *["---:"] * len(runs)])]
    for method in methods:
        values = []
        for run in runs:
            r = cells.get((run, method))
            values.append("–" if r is None else f"{100 * float(r['mean_a']):.1f} vs {100 * float(r['mean_b']):.1f} "  # type: ignore[arg-type]
                          f"(≤ {100 * float(r['max_seed_difference']):.1f})")  # type: ignore[arg-type]
        lines.append(_md_row([method_info(method)[0], *values]))
    first = rows[0] if rows else {}
    seeds = sorted({s for r in rows for s in str(r["seeds"]).split()}, key=int)
    moves = moves_of(rows)
    bounds = ", ".join(f"{moves.margin('joint', n):.1f} over {n}" for n in (5, 10, 20))
    shift = ("every move 0" if moves.bias_p is None else
             f"{'distinguishable' if moves.bias_p < 0.05 else 'not distinguishable'} from 0: p = {moves.bias_p:.2g} "
             "that the rows' mean moves lie this far from 0 with no systematic shift")
    measured = (f"\nThe SGD rows' moves ({moves.moves} seeds of {moves.rows} rows; "
                f"benchmarks/results/machine_moves.py): σ = {moves.seed_sd:.2f} points one seed's move, "
                f"B = {moves.bias:.2f} points a row's systematic shift ({shift}), so a row's mean may move by "
                f"1.96·sqrt(B² + σ²/n) = {bounds} seeds.\n") if moves.rows else ""
    return (f"Final accuracy (%) of the same runs on {first.get('machine_a', '?')} vs {first.get('machine_b', '?')}, "
            f"mean over the seeds both ran ({', '.join(seeds)}), and in brackets the largest difference of one seed "
            "(points):\n\n" + "\n".join(lines) + "\n" + measured)
