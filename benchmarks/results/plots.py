"""The plots of benchmark results: accuracy curves, components alone vs composed, and
accuracy against how much of the network is trained (matplotlib's Agg canvas, no display),
in any of :data:`~benchmarks.protocol.choices.PLOT_FORMATS` (PNG at 300 dpi, PDF with
TrueType fonts, SVG with its text as text).

One numbering in every plot and table: step ``t`` is "after step t", after training ``t``
experiences (1..T, the results' ``after_task``); an experience is named by its id,
``exp 0``.. (the results' ``eval_exp``), as ``avalanche_tmc.summary_table`` does. Rows get
one style each (:func:`method_styles`): up to :data:`HUE_FAMILIES` rows a hue family each.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Dict, Iterable, List, NamedTuple, Optional, Sequence, Tuple

from matplotlib import rc_context
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from avalanche_tmc.files.filesystem import atomic_path
from benchmarks.methods import joint_methods
from benchmarks.results.files import (
    ALL,
    COMPONENT_PREFIX,
    COMPOSED,
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
    row_seed,
    run_key,
    run_label,
    seed_count,
)
from benchmarks.results.intervals import mean_std

__all__ = ["plot_accuracy_curves", "plot_forgetting_curves", "component_methods", "plot_components", "plot_regimes",
           "HUE_FAMILIES", "Style", "method_styles", "figure_paths", "PNG_DPI", "TASK_IL_CAPTION"]

PNG_DPI = 300
"""The resolution of the PNG plots (a paper's figures: PDF or SVG, ``--plot-format``)."""

HUE_FAMILIES: Tuple[Tuple[str, str], ...] = (
    ("blue", "#1f5fd1"), ("orange", "#e08a00"), ("green", "#1e9e3c"), ("red", "#d11f30"), ("purple", "#7b2fd1"),
    ("teal", "#009e9e"), ("magenta", "#c2189a"), ("olive", "#6e9400"), ("black", "#000000"),
)
"""The colours of the rows of a figure, in the order rows take them: eight saturated hues at
least 38 degrees apart (no light or dark variant of another: tab20's pairs gave TMC and TME
two blues) and black. A figure's first nine rows never share one; a tenth row takes the
first family again with a dotted line (a nineteenth, dash-dotted), and every row has its
own marker, so the rows stay apart in print and in greyscale too."""

_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "h", "<", ">", "p", "*", "d", "H", "8", "1", "2", "3", "4", "+", "x")
_LINES = ("-", ":", "-.")

TASK_IL_CAPTION = ("Task-IL panels (T-): each prediction is restricted to the classes of its sample's task from "
                   "step 1 on, for every method,\nso a task not yet trained is scored alike for every method (the "
                   "model's best class of that task: about chance).")
"""The note under a figure with a task-IL panel: how its untrained tasks are scored."""


class Style(NamedTuple):
    """How one row is drawn: its colour, marker and line style."""

    color: str
    marker: str
    linestyle: str


def method_styles(methods: Sequence[str]) -> Dict[str, Style]:
    """One :class:`Style` per row of a figure, in the figure's order: row ``i`` takes hue
    family ``i mod 9`` (:data:`HUE_FAMILIES`), a solid line for the first nine rows, dotted
    for the next nine, and marker ``i``."""
    n = len(HUE_FAMILIES)
    return {m: Style(HUE_FAMILIES[i % n][1], _MARKERS[i % len(_MARKERS)], _LINES[(i // n) % len(_LINES)])
            for i, m in enumerate(methods)}


def figure_paths(path: PathLike, formats: Sequence[str] = ("png",)) -> List[Path]:
    """The files a plot named ``path`` is written to: its name with each format's suffix."""
    return [Path(path).with_suffix(f".{fmt}") for fmt in formats]


def _panels(n: int, ncols: int, panel_size: Tuple[float, float]) -> Tuple[Figure, List[Axes]]:
    """An Agg figure with ``n`` axes on a grid of ``ncols`` columns (extra axes hidden)."""
    ncols = max(1, min(ncols, n))
    nrows = math.ceil(n / ncols)
    fig = Figure(figsize=(panel_size[0] * ncols, panel_size[1] * nrows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = list(fig.subplots(nrows, ncols, squeeze=False).flat)
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def _method_styles(rows: Sequence[Row]) -> Tuple[List[str], Dict[str, Style]]:
    """The methods of ``rows`` in table order, and one style each."""
    methods = order_methods(str(r["method"]) for r in rows)
    return methods, method_styles(methods)


def _save_with_legend(fig: Figure, path: PathLike, methods: Sequence[str], handles: Dict[str, Line2D],
                      formats: Sequence[str]) -> Path:
    shown = [m for m in methods if m in handles]
    fig.legend([handles[m] for m in shown], [method_info(m)[0] for m in shown], loc="outside right upper", fontsize=8)
    return _save(fig, path, formats)


# editable text in the vector formats: TrueType fonts in PDFs (no Type 3: journals refuse them), text in SVGs
_VECTOR_TEXT = {"pdf.fonttype": 42, "ps.fonttype": 42, "svg.fonttype": "none"}
_NO_DATE = {"pdf": {"CreationDate": None}, "svg": {"Date": None}}  # the same figure, the same bytes


def _save(fig: Figure, path: PathLike, formats: Sequence[str] = ("png",)) -> Path:
    """Write ``fig`` in each of ``formats`` (:func:`figure_paths`); the first file's path."""
    paths = figure_paths(path, formats)
    with rc_context(_VECTOR_TEXT):
        for fmt, target in zip(formats, paths):
            with atomic_path(target) as tmp:
                fig.savefig(tmp, format=fmt, dpi=PNG_DPI, metadata=_NO_DATE.get(fmt), bbox_inches="tight",
                            pad_inches=0.05)  # whole titles and the caption, however long
    return paths[0]


def plot_accuracy_curves(rows: Sequence[Row], path: PathLike, formats: Sequence[str] = ("png",)) -> Optional[Path]:
    """After each step (1..T), one panel per run, the average accuracy on the experiences
    trained so far (each weighs the same; the whole test stream where the rows have no
    per-experience accuracies): the mean over seeds, with a band of ± one standard
    deviation when there are several; the figure says so, and over how many seeds.

    Joint paragons (trained once on all data) are a dashed horizontal line with their
    marker at ``T``. A figure with a task-IL panel says under it how a task not yet trained
    is scored (:data:`TASK_IL_CAPTION`: under the task mask, alike for every method). Writes
    ``path`` in each of ``formats``; returns the first file's path, or None when there are no rows.
    """
    runs = list_runs(rows)
    if not runs:
        return None
    methods, styles = _method_styles(rows)
    spread = accuracy_spread(rows)
    seen = _seen_so_far(rows)

    fig, axes = _panels(len(runs), ncols=3, panel_size=(4.5, 3.5))
    handles: Dict[str, Line2D] = {}
    for ax, run in zip(axes, runs):
        for method in methods:
            points = seen.get((run, method)) or sorted(
                (t, 100 * mean, 100 * std) for (r, m, model, t, e), (mean, std, _) in spread.items()
                if (r, m, model, e) == (run, method, COMPOSED, ALL)
            )
            if not points:
                continue
            xs, ys, stds = zip(*points)
            label, style = method_info(method)[0], styles[method]
            color = style.color
            if method in joint_methods():
                ax.axhline(ys[-1], color=color, linestyle="--", linewidth=1)
                (line,) = ax.plot(xs[-1:], ys[-1:], marker=style.marker, markersize=8, color=color, linestyle="--",
                                  label=label)
                if stds[-1] > 0:
                    ax.axhspan(ys[-1] - stds[-1], ys[-1] + stds[-1], color=color, alpha=0.08, linewidth=0)
            else:
                (line,) = ax.plot(xs, ys, marker=style.marker, markersize=4, color=color, linestyle=style.linestyle,
                                  label=label)
                if any(stds):  # mean ± std over seeds
                    ax.fill_between(xs, [y - d for y, d in zip(ys, stds)], [y + d for y, d in zip(ys, stds)],
                                    color=color, alpha=0.15, linewidth=0)
            handles.setdefault(method, line)
        ax.set_title(run_label(run), fontsize=10)
        ax.set_xlabel("after step")
        ax.set_ylabel("average accuracy, experiences seen (%)" if any(key[0] == run for key in seen)
                      else "accuracy, all test data (%)")
        ax.set_xticks(range(1, run[2] + 1))
        ax.grid(alpha=0.3)
    seeds = seed_count(rows)
    caption = (f"Lines: mean over {seeds} seed(s)" + ("; bands: ± one standard deviation over the seeds" if seeds > 1
                                                     else "") + ". After each step, as each panel's axis says: the "
               "average accuracy on the experiences seen so far (each weighs the same), or on all test data where the "
               "rows have no accuracy per experience; a joint paragon, trained once, at the last step.")
    fig.supxlabel(caption + ("\n" + TASK_IL_CAPTION if any(run[1] == "task" for run in runs) else ""), fontsize=8,
                  x=0.0, ha="left")
    return _save_with_legend(fig, path, methods, handles, formats)


def plot_forgetting_curves(rows: Sequence[Row], path: PathLike, formats: Sequence[str] = ("png",)) -> Optional[Path]:
    """After each step from the second, one panel per run, forgetting as Avalanche's
    ``StreamForgetting`` measures it then: the mean over the experiences trained before of
    their accuracy right after their own training minus now (points; mean over seeds, ± one
    standard deviation as a band). Only methods with a complete accuracy matrix (a joint
    paragon, trained once, has none). Returns the first file's path, or None."""
    curves = _forgetting_so_far(rows)
    runs = [run for run in list_runs(rows) if any(key[0] == run for key in curves)]
    if not runs:
        return None
    methods, styles = _method_styles(rows)
    methods = [m for m in methods if any((run, m) in curves for run in runs)]
    fig, axes = _panels(len(runs), ncols=3, panel_size=(4.5, 3.5))
    handles: Dict[str, Line2D] = {}
    for ax, run in zip(axes, runs):
        for method in methods:
            points = curves.get((run, method))
            if not points:
                continue
            xs, ys, stds = zip(*points)
            style = styles[method]
            (line,) = ax.plot(xs, ys, marker=style.marker, markersize=4, color=style.color,
                              linestyle=style.linestyle, label=method_info(method)[0])
            if any(stds):
                ax.fill_between(xs, [y - d for y, d in zip(ys, stds)], [y + d for y, d in zip(ys, stds)],
                                color=style.color, alpha=0.15, linewidth=0)
            handles.setdefault(method, line)
        ax.set_title(run_label(run), fontsize=10)
        ax.set_xlabel("after step")
        ax.set_ylabel("forgetting (points)")
        ax.set_xticks(range(2, run[2] + 1))
        ax.axhline(0, color="grey", linewidth=0.8)
        ax.grid(alpha=0.3)
    seeds = seed_count(rows)
    fig.supxlabel(f"Lines: mean over {seeds} seed(s)" + ("; bands: ± one standard deviation over the seeds"
                                                          if seeds > 1 else "")
                  + ". Forgetting after step t (Avalanche's StreamForgetting): each experience trained before t, its "
                  "accuracy right after its own training minus after step t, averaged over those experiences.",
                  fontsize=8, x=0.0, ha="left")
    return _save_with_legend(fig, path, methods, handles, formats)


def _forgetting_so_far(rows: Sequence[Row]) -> Dict[Tuple[RunKey, str], List[Tuple[int, float, float]]]:
    """``(run, method) -> [(step, mean, std)]`` of forgetting (points) after steps 2..T, over
    the seeds, from each seed's complete accuracy matrix."""
    from benchmarks.results.field_metrics import accuracy_matrices

    per: Dict[Tuple[RunKey, str], Dict[int, List[float]]] = {}
    for (run, method, _), a in accuracy_matrices(rows).items():
        for t in range(2, len(a) + 1):
            value = 100 * sum(a[j][j] - a[t - 1][j] for j in range(t - 1)) / (t - 1)
            per.setdefault((run, method), {}).setdefault(t, []).append(value)  # type: ignore[index]
    return {key: [(t, *mean_std(values)[:2]) for t, values in sorted(steps.items())] for key, steps in per.items()}


def _seen_so_far(rows: Sequence[Row]) -> Dict[Tuple[RunKey, str], List[Tuple[int, float, float]]]:
    """``(run, method) -> [(step, mean, std)]`` of the average accuracy (%) on the experiences
    trained so far, over the seeds, from each seed's complete accuracy matrix
    (:func:`~benchmarks.results.field_metrics.accuracy_matrices`)."""
    from benchmarks.results.field_metrics import accuracy_matrices

    per: Dict[Tuple[RunKey, str], Dict[int, List[float]]] = {}
    for (run, method, _), a in accuracy_matrices(rows).items():
        for t in range(1, len(a) + 1):
            per.setdefault((run, method), {}).setdefault(t, []).append(100 * sum(a[t - 1][:t]) / t)  # type: ignore[index]
    return {key: [(t, *mean_std(values)[:2]) for t, values in sorted(steps.items())] for key, steps in per.items()}


def _component_models(rows: Iterable[Row], run: RunKey, method: str) -> List[str]:
    """``component-<k>`` models of ``method`` in ``run``, sorted by k."""
    models = {
        str(r["model"]) for r in rows
        if r["method"] == method and run_key(r) == run and str(r["model"]).startswith(COMPONENT_PREFIX)
    }
    return sorted(models, key=_component_number)


def _component_number(model: str) -> float:
    """k of ``component-<k>`` (inf when k is not a number, so such names sort last)."""
    suffix = model[len(COMPONENT_PREFIX):]
    return int(suffix) if suffix.isdigit() else math.inf


def component_methods(rows: Iterable[Row]) -> List[str]:
    """Methods that have rows for components evaluated alone."""
    return order_methods(str(r["method"]) for r in rows if str(r["model"]).startswith(COMPONENT_PREFIX))


def plot_components(rows: Sequence[Row], path: PathLike, method: str = "tmc",
                    formats: Sequence[str] = ("png",)) -> Optional[Path]:
    """Heatmap of per-test-experience accuracy of each component alone vs. the composed model.

    One panel per run that has component rows of ``method``; rows of the heatmap are
    ``component 0..K-1`` then ``composed``, columns test experiences ``exp 0..T-1``, all
    after the last step. Writes ``path`` in each of ``formats``; returns the first file's
    path, or None (nothing written) without component rows.
    """
    runs = [(run, models) for run in list_runs(rows) if (models := _component_models(rows, run, method))]
    if not runs:
        return None
    index = accuracy_index(rows)
    max_tasks = max(run[2] for run, _ in runs)
    max_models = max(len(models) for _, models in runs) + 1
    fig, axes = _panels(len(runs), ncols=1, panel_size=(2.5 + 0.6 * max_tasks, 1.2 + 0.35 * max_models))
    name = method_info(method)[0]
    whole = "ensemble" if cost_class(method) == "O(T)" else COMPOSED  # TME, Ens-L, Ens-SM do not compose
    for ax, (run, models) in zip(axes, runs):
        tasks = run[2]
        labels = [m.replace("-", " ") for m in models] + [whole]
        grid = [
            [100 * index.get((run, method, model, tasks, str(e)), math.nan) for e in range(tasks)]
            for model in models + [COMPOSED]
        ]
        image = ax.imshow(grid, vmin=0, vmax=100, cmap="viridis", aspect="auto")
        for i, row in enumerate(grid):
            for j, value in enumerate(row):
                if not math.isnan(value):
                    ax.text(j, i, f"{value:.0f}", ha="center", va="center", fontsize=7,
                            color="white" if value < 60 else "black")
        ax.axhline(len(models) - 0.5, color="white", linewidth=2)
        ax.set_xticks(range(tasks), [f"exp {e}" for e in range(tasks)], fontsize=8)
        ax.set_yticks(range(len(labels)), labels, fontsize=8)
        ax.set_xlabel("test experience")
        ax.set_title(f"{name}: components alone vs {whole}, {run_label(run)}\n{_seeds_caption(rows, run, method)}",
                     fontsize=9)
        fig.colorbar(image, ax=ax, label="accuracy (%)")
    return _save(fig, path, formats)


def _seeds_caption(rows: Sequence[Row], run: RunKey, method: str) -> str:
    """What a heatmap's cells average: the seeds, and whether experience j held other classes
    (or shards) in each of them."""
    mine = [r for r in rows if run_key(r) == run and r["method"] == method]
    seeds = {row_seed(r) for r in mine}
    orders = {r.get("data_seed", "") for r in mine}
    text = f"mean over {len(seeds)} seed{'s' if len(seeds) != 1 else ''}" if len(seeds) > 1 else "1 seed"
    if len(seeds) > 1 and len(orders) > 1:
        text += "; each drew its own class order or shards: experience j is not the same data in each"
    return text


def plot_regimes(rows: Sequence[Row], path: PathLike, formats: Sequence[str] = ("png",)) -> Optional[Path]:
    """Final accuracy vs. how much of the network is trained (log scale of trained
    parameters, ticks named by regime), one line per method, one panel per dataset and
    scenario run in two or more regimes. Writes ``path`` in each of ``formats``; returns
    the first file's path, or None."""
    panels = regime_panels(rows)
    if not panels:
        return None
    methods, styles = _method_styles(rows)
    index = accuracy_index(rows)
    fig, axes = _panels(len(panels), ncols=2, panel_size=(5.5, 4.0))
    handles: Dict[str, Line2D] = {}
    for ax, ((dataset, scenario, tasks), runs) in zip(axes, panels.items()):
        for method in methods:
            points = [(size, final_accuracy(index, run, method)) for run, size in runs]
            points = [(x, 100 * y) for x, y in points if y is not None]
            if points:
                xs, ys = zip(*points)
                style = styles[method]
                line_style = "--" if method in joint_methods() else style.linestyle
                (line,) = ax.plot(xs, ys, marker=style.marker, markersize=4, linestyle=line_style, color=style.color)
                handles.setdefault(method, line)
        ax.set_xscale("log")
        ax.set_xticks([size for _, size in runs], [f"{run[3]}\n{size / 1e6:.2g} M" for run, size in runs], fontsize=7)
        ax.minorticks_off()
        ax.set_title(run_label((dataset, scenario, tasks, "")), fontsize=10)
        ax.set_xlabel("trained part of the network (parameters)")
        ax.set_ylabel("final accuracy, all test data (%)")
        ax.grid(alpha=0.3)
    return _save_with_legend(fig, path, methods, handles, formats)
