"""How far the same run's numbers move between two machines.

Two results files of the same runs (``results.csv`` of the main job on two machines) are
compared row by row over the seeds both have: each method's mean final accuracy on each
machine and the largest per-seed difference. With the same code, data and seeds, the only
difference is the machine (its CPU's instruction set decides which kernels PyTorch's
oneDNN and BLAS pick, and so the float rounding; SGD over many steps amplifies it, a
closed-form training-free head or a convex tangent fit much less)::

    python -m benchmarks.tools.spread docs/results/offline/results.csv docs/results/machines/other-machine.csv \
        --names "this machine" "another machine" --out docs/results/machines/spread.csv

writes the comparison; ``python -m benchmarks.report docs/results/machines/spread.csv
--readme README.md`` shows it (:func:`benchmarks.results.tables.spread_table`).
"""

from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

from benchmarks.results.claims import final_by_seed
from benchmarks.results.files import (
    ALL,
    COMPOSED,
    SPREAD_COLUMNS,
    ReportFileError,
    read_csv,
    run_key,
    run_label,
    write_rows_csv,
)
from benchmarks.results.intervals import mean_std
from benchmarks.results.outputs import check_not_an_input, nothing_to_write, one_line, two_results_parser, writing
from benchmarks.results.tables import spread_table

__all__ = ["machine_spread", "write_spread_csv", "main"]

Row = Mapping[str, object]


SAME = ("backbone", "setting")
"""What two machines' rows of one run and method must share (their other settings too
unless tuned: ``UNTUNED``); an empty value (an older file) is not compared."""
UNTUNED = ("epochs", "lr")


def _settings(rows: Sequence[Row]) -> Dict[tuple, Dict[str, set]]:
    """(run, method) -> column -> the values its final rows hold (epochs and lr left out when tuned)."""
    found: Dict[tuple, Dict[str, set]] = {}
    for r in rows:
        if r.get("model") != COMPOSED or str(r.get("eval_exp")) != ALL:
            continue
        columns = SAME + (() if r.get("tuned") == "yes" else UNTUNED)
        values = found.setdefault((run_key(r), str(r["method"])), {})
        for c in columns:
            if r.get(c) not in ("", None):
                values.setdefault(c, set()).add(r[c])
    return found


def _check_same_runs(rows_a: Sequence[Row], rows_b: Sequence[Row], name_a: str, name_b: str) -> None:
    """Refuse (:class:`ReportFileError`) two files whose rows of one run and method were
    trained otherwise (another backbone, setting, epoch count or learning rate)."""
    settings_b = _settings(rows_b)
    for key, values_a in _settings(rows_a).items():
        values_b = settings_b.get(key, {})
        for column in values_a.keys() & values_b.keys():
            if values_a[column] != values_b[column]:
                shown = [", ".join(map(str, sorted(v, key=str))) for v in (values_a[column], values_b[column])]
                raise ReportFileError(f"{run_label(key[0])}, {key[1]}: {column} {shown[0]} on {name_a} but "
                                      f"{shown[1]} on {name_b}: not the same run, so their difference is not the "
                                      "machine's; compare files of the same command.")


def machine_spread(rows_a: Sequence[Row], rows_b: Sequence[Row], name_a: str, name_b: str) -> List[Dict[str, object]]:
    """One dict per (run, method) that both files have: the mean final accuracy on each
    machine over the seeds both ran, the largest absolute per-seed difference and the
    sample standard deviation of the per-seed differences (0 over one seed), from which
    :mod:`benchmarks.results.machine_moves` derives the cross-machine margin.
    :class:`~benchmarks.results.files.ReportFileError` when a run and method of both was
    trained otherwise on each (:data:`SAME`, :data:`UNTUNED`): not one run on two machines."""
    _check_same_runs(rows_a, rows_b, name_a, name_b)
    finals_a, finals_b = final_by_seed(rows_a), final_by_seed(rows_b)
    out = []
    for key, seeds_a in finals_a.items():
        seeds_b = finals_b.get(key)
        common = sorted(set(seeds_a) & set(seeds_b or {}))
        if not common:
            continue
        (dataset, scenario, tasks, regime), method = key
        a, b = [seeds_a[s] for s in common], [seeds_b[s] for s in common]  # type: ignore[index]
        out.append(dict(dataset=dataset, scenario=scenario, tasks=tasks, regime=regime, method=method,
                        seeds=" ".join(map(str, common)), machine_a=name_a, mean_a=mean_std(a)[0], machine_b=name_b,
                        mean_b=mean_std(b)[0], max_seed_difference=max(abs(x - y) for x, y in zip(a, b)),
                        seed_difference_std=mean_std([y - x for x, y in zip(a, b)])[1]))
    return out


def write_spread_csv(rows: Sequence[Row], path: Path) -> Path:
    """Write :func:`machine_spread`'s rows (:data:`SPREAD_COLUMNS`)."""
    return write_rows_csv(rows, path, SPREAD_COLUMNS, "spread")


def main(argv: Optional[Sequence[str]] = None) -> Path:
    """Compare two results files and write the spread CSV."""
    p = two_results_parser("python -m benchmarks.tools.spread", __doc__.split("\n\n")[0])
    args = p.parse_args(argv)
    path = Path(args.out)
    with one_line(p):
        check_not_an_input(path, {args.results_a: "the first results file", args.results_b: "the second results file"})
        rows = machine_spread(read_csv(args.results_a), read_csv(args.results_b), *args.names)
        if not rows:
            raise nothing_to_write(f"{args.results_a} and {args.results_b} have no run, method and seed in common")
        with writing(path):
            write_spread_csv(rows, path)
    print(spread_table(rows))
    return path


if __name__ == "__main__":
    main()
