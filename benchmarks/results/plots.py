"""The PNG plots of benchmark results: accuracy curves, components alone vs composed, and
accuracy against how much of the network is trained (matplotlib's Agg canvas, no display).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from matplotlib import colormaps
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
    _regime_panels,
    accuracy_index,
    accuracy_spread,
    final_accuracy,
    list_runs,
    method_info,
    order_methods,
    run_key,
    run_label,
)

__all__ = ["plot_accuracy_curves", "component_methods", "plot_components", "plot_regimes"]


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


def _method_colors(rows: Sequence[Row]) -> Tuple[List[str], Dict[str, object]]:
    """The methods of ``rows`` in table order, and one colour each."""
    methods = order_methods(str(r["method"]) for r in rows)
    cmap = colormaps["tab20"]
    return methods, {m: cmap(i % cmap.N) for i, m in enumerate(methods)}


def _save_with_legend(fig: Figure, path: PathLike, methods: Sequence[str], handles: Dict[str, Line2D]) -> Path:
    shown = [m for m in methods if m in handles]
    fig.legend([handles[m] for m in shown], [method_info(m)[0] for m in shown], loc="outside right upper", fontsize=8)
    return _save(fig, path)


def _save(fig: Figure, path: PathLike) -> Path:
    path = Path(path)
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120)
    return path


def plot_accuracy_curves(rows: Sequence[Row], path: PathLike) -> Optional[Path]:
    """Accuracy on the whole test stream vs. experiences trained, one panel per run: the
    mean over seeds, with a band of ± one standard deviation when there are several.

    Joint paragons (trained once on all data) are a dashed horizontal line with a star at
    ``T``. Returns the PNG path, or None when there are no rows.
    """
    runs = list_runs(rows)
    if not runs:
        return None
    methods, colors = _method_colors(rows)
    spread = accuracy_spread(rows)

    fig, axes = _panels(len(runs), ncols=3, panel_size=(4.5, 3.5))
    handles: Dict[str, Line2D] = {}
    for ax, run in zip(axes, runs):
        for method in methods:
            points = sorted(
                (t, 100 * mean, 100 * std) for (r, m, model, t, e), (mean, std, _) in spread.items()
                if (r, m, model, e) == (run, method, COMPOSED, ALL)
            )
            if not points:
                continue
            xs, ys, stds = zip(*points)
            label, color = method_info(method)[0], colors[method]
            if method in joint_methods():
                ax.axhline(ys[-1], color=color, linestyle="--", linewidth=1)
                (line,) = ax.plot(xs[-1:], ys[-1:], marker="*", markersize=10, color=color, linestyle="--", label=label)
                if stds[-1] > 0:
                    ax.axhspan(ys[-1] - stds[-1], ys[-1] + stds[-1], color=color, alpha=0.08, linewidth=0)
            else:
                (line,) = ax.plot(xs, ys, marker="o", markersize=3, color=color, label=label)
                if any(stds):  # mean ± std over seeds
                    ax.fill_between(xs, [y - d for y, d in zip(ys, stds)], [y + d for y, d in zip(ys, stds)],
                                    color=color, alpha=0.15, linewidth=0)
            handles.setdefault(method, line)
        ax.set_title(run_label(run), fontsize=10)
        ax.set_xlabel("experiences trained")
        ax.set_ylabel("accuracy, all test data (%)")
        ax.set_xticks(range(1, run[2] + 1))
        ax.grid(alpha=0.3)
    return _save_with_legend(fig, path, methods, handles)


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


def plot_components(rows: Sequence[Row], path: PathLike, method: str = "tmc") -> Optional[Path]:
    """Heatmap of per-test-experience accuracy of each component alone vs. the composed model.

    One panel per run that has component rows of ``method``; rows of the heatmap are
    ``component 0..K-1`` then ``composed``, columns test experiences ``0..T-1``, all after
    the last experience. Returns the PNG path, or None (nothing written) without component rows.
    """
    runs = [(run, models) for run in list_runs(rows) if (models := _component_models(rows, run, method))]
    if not runs:
        return None
    index = accuracy_index(rows)
    max_tasks = max(run[2] for run, _ in runs)
    max_models = max(len(models) for _, models in runs) + 1
    fig, axes = _panels(len(runs), ncols=1, panel_size=(2.5 + 0.6 * max_tasks, 1.2 + 0.35 * max_models))
    name = method_info(method)[0]
    for ax, (run, models) in zip(axes, runs):
        tasks = run[2]
        labels = [m.replace("-", " ") for m in models] + [COMPOSED]
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
        ax.set_xticks(range(tasks), [str(e) for e in range(tasks)])
        ax.set_yticks(range(len(labels)), labels, fontsize=8)
        ax.set_xlabel("test experience")
        ax.set_title(f"{name}: components alone vs composed, {run_label(run)}", fontsize=10)
        fig.colorbar(image, ax=ax, label="accuracy (%)")
    return _save(fig, path)


def plot_regimes(rows: Sequence[Row], path: PathLike) -> Optional[Path]:
    """Final accuracy vs. how much of the network is trained (log scale of trained
    parameters, ticks named by regime), one line per method, one panel per dataset and
    scenario run in two or more regimes. Returns the PNG path, or None."""
    panels = _regime_panels(rows)
    if not panels:
        return None
    methods, colors = _method_colors(rows)
    index = accuracy_index(rows)
    fig, axes = _panels(len(panels), ncols=2, panel_size=(5.5, 4.0))
    handles: Dict[str, Line2D] = {}
    for ax, ((dataset, scenario, tasks), runs) in zip(axes, panels.items()):
        for method in methods:
            points = [(size, final_accuracy(index, run, method)) for run, size in runs]
            points = [(x, 100 * y) for x, y in points if y is not None]
            if points:
                xs, ys = zip(*points)
                style = "--" if method in joint_methods() else "-"
                (line,) = ax.plot(xs, ys, marker="o", markersize=4, linestyle=style, color=colors[method])
                handles.setdefault(method, line)
        ax.set_xscale("log")
        ax.set_xticks([size for _, size in runs], [f"{run[3]}\n{size / 1e6:.2g} M" for run, size in runs], fontsize=7)
        ax.minorticks_off()
        ax.set_title(run_label((dataset, scenario, tasks, "")), fontsize=10)
        ax.set_xlabel("trained part of the network (parameters)")
        ax.set_ylabel("final accuracy, all test data (%)")
        ax.grid(alpha=0.3)
    return _save_with_legend(fig, path, methods, handles)
