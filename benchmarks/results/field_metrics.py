"""The continual-learning field's metrics, beside the table's final accuracy on the whole
test stream: from each (run, method, seed)'s accuracy matrix ``a[i][j]``, the accuracy on
experience ``j`` after training experience ``i`` (the results rows of the composed model,
``after_task = i + 1``, ``eval_exp = j``), over ``T`` experiences:

* **final average accuracy** ``A = (1/T) Σ_j a[T-1][j]``: every experience weighs the same
  (the table's final accuracy weighs every test sample the same);
* **average incremental accuracy** ``Ā = (1/T) Σ_i (1/(i+1)) Σ_{j≤i} a[i][j]``: the average
  accuracy on the experiences seen so far, averaged over the steps (Rebuffi et al., iCaRL);
* **forgetting**, as Avalanche's ``StreamForgetting`` defines it: ``F = (1/(T-1)) Σ_{j<T-1}
  (a[j][j] − a[T-1][j])``, each experience's accuracy right after it was trained minus at the
  end;
* **backward transfer** ``BWT = (1/(T-1)) Σ_{j<T-1} (a[T-1][j] − a[j][j]) = −F`` (Lopez-Paz &
  Ranzato, GEM): the same number, the other sign, under the name many papers use.

Means ± sample standard deviations over seeds, in points (:func:`field_metrics_table`).
"""

from collections import defaultdict
from typing import Dict, List, Mapping, Sequence, Tuple

from benchmarks.results.files import ALL, COMPOSED, method_info, order_methods, row_seed, run_key, run_label
from benchmarks.results.intervals import mean_std

__all__ = ["METRICS", "METRIC_COLUMNS", "accuracy_matrices", "field_metrics", "field_metrics_table",
           "with_field_metrics"]

Row = Mapping[str, object]
METRICS = ("final average accuracy", "average incremental accuracy", "forgetting", "backward transfer")
METRIC_COLUMNS = dict(zip(METRICS, ("final_average_accuracy", "average_incremental_accuracy", "forgetting",
                                    "backward_transfer")))
"""The results.csv column of each metric (fractions, on the row of the composed model on the
whole stream after the last experience; empty on every other row)."""


def accuracy_matrices(rows: Sequence[Row]) -> Dict[Tuple[object, str, int], List[List[float]]]:
    """``(run, method, seed) -> a`` with ``a[i][j]`` the accuracy on experience ``j`` after
    experience ``i``; only complete matrices (every experience evaluated after every step)."""
    cells: Dict[Tuple[object, str, int], Dict[Tuple[int, int], float]] = defaultdict(dict)
    for r in rows:
        if r.get("model") != COMPOSED or str(r["eval_exp"]) == ALL:
            continue
        cells[(run_key(r), str(r["method"]), row_seed(r))][(int(r["after_task"]) - 1, int(r["eval_exp"]))] = \
            float(r["accuracy"])  # type: ignore[arg-type]
    matrices = {}
    for key, found in cells.items():
        tasks = key[0][2]  # type: ignore[index]
        if all((i, j) in found for i in range(tasks) for j in range(tasks)):
            matrices[key] = [[found[(i, j)] for j in range(tasks)] for i in range(tasks)]
    return matrices


def field_metrics(a: Sequence[Sequence[float]]) -> Dict[str, float]:
    """The four metrics of :data:`METRICS` of one accuracy matrix (fractions; forgetting and
    backward transfer 0 for a single experience)."""
    t = len(a)
    final = sum(a[t - 1]) / t
    incremental = sum(sum(a[i][:i + 1]) / (i + 1) for i in range(t)) / t
    forgetting = sum(a[j][j] - a[t - 1][j] for j in range(t - 1)) / (t - 1) if t > 1 else 0.0
    return dict(zip(METRICS, (final, incremental, forgetting, -forgetting)))


def with_field_metrics(rows: Sequence[Row]) -> List[Dict[str, object]]:
    """``rows`` with the four metrics (:data:`METRIC_COLUMNS`) on the row that holds each
    (run, method, seed)'s final accuracy (composed model, whole stream, after the last
    experience) where its accuracy matrix is complete; other rows unchanged."""
    metrics = {key: field_metrics(a) for key, a in accuracy_matrices(rows).items()}
    out: List[Dict[str, object]] = []
    for r in rows:
        found = metrics.get((run_key(r), str(r["method"]), row_seed(r))) if r.get("model") == COMPOSED and \
            str(r["eval_exp"]) == ALL and int(r["after_task"]) == int(r["tasks"]) else None  # type: ignore[call-overload]
        out.append(dict(r, **({METRIC_COLUMNS[m]: v for m, v in found.items()} if found else {})))
    return out


def field_metrics_table(rows: Sequence[Row]) -> str:
    """Methods (rows) by run and metric (columns), mean ± std over seeds in points; empty when
    no method has a complete accuracy matrix (a joint paragon trains once: it has none)."""
    per: Dict[Tuple[object, str], List[Dict[str, float]]] = defaultdict(list)
    for (run, method, _), a in sorted(accuracy_matrices(rows).items(), key=lambda kv: kv[0][2]):
        per[(run, method)].append(field_metrics(a))
    if not per:
        return ""
    runs = list(dict.fromkeys(run for run, _ in per))
    methods = order_methods(dict.fromkeys(method for _, method in per))
    lines: List[str] = []
    for run in runs:
        lines += ["", f"| {run_label(run)} | A | Ā | F | BWT |", "| --- | ---: | ---: | ---: | ---: |"]  # type: ignore[arg-type]
        for method in methods:
            values = per.get((run, method))
            if not values:
                continue
            cells = []
            for metric in METRICS:
                mean, std = mean_std([100 * v[metric] for v in values])[:2]
                mean = mean + 0.0 if abs(mean) >= 0.05 else 0.0  # no "-0.0"
                cells.append(f"{mean:.1f} ± {std:.1f}" if len(values) > 1 else f"{mean:.1f}")
            lines.append("| " + " | ".join([method_info(method)[0], *cells]) + " |")
    seeds = sorted({seed for (_, _, seed) in accuracy_matrices(rows)})
    return ("The field's metrics (points, mean ± sample standard deviation over " + f"{len(seeds)} seed(s)): A, the "
            "final average accuracy over the experiences (each experience weighs the same); Ā, the average incremental "
            "accuracy (the average accuracy on the experiences seen so far, over the steps); F, forgetting as "
            "Avalanche's StreamForgetting (each experience's accuracy right after its training minus at the end, "
            "averaged over all but the last); BWT, backward transfer, −F (benchmarks/results/field_metrics.py):\n\n"
            + "\n".join(lines[1:]) + "\n")
