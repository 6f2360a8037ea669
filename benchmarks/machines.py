"""How far the same run's numbers move between two machines.

Two results files of the same runs (``results.csv`` of the main job on two machines) are
compared row by row over the seeds both have: each method's mean final accuracy on each
machine and the largest per-seed difference. With the same code, data and seeds, the only
difference is the machine (its CPU's instruction set decides which kernels PyTorch's
oneDNN and BLAS pick, and so the float rounding; SGD over many steps amplifies it, a
closed-form training-free head or a convex tangent fit much less)::

    python -m benchmarks.machines docs/results/offline/results.csv docs/results/machines/other-machine.csv \
        --names "this machine" "another machine" --out docs/results/machines/spread.csv

writes the comparison; ``python -m benchmarks.report docs/results/machines/spread.csv
--readme README.md`` shows it (:func:`spread_table`).
"""

import argparse
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from benchmarks.intervals import mean_std
from benchmarks.verdicts import final_by_seed

__all__ = ["SPREAD_COLUMNS", "machine_spread", "write_spread_csv", "read_spread_csv", "spread_table", "main"]

Row = Mapping[str, object]
SPREAD_COLUMNS = ("dataset", "scenario", "tasks", "regime", "method", "seeds", "machine_a", "mean_a", "machine_b",
                  "mean_b", "max_seed_difference")


def machine_spread(rows_a: Sequence[Row], rows_b: Sequence[Row], name_a: str, name_b: str) -> List[Dict[str, object]]:
    """One dict per (run, method) that both files have: the mean final accuracy on each
    machine over the seeds both ran, and the largest absolute per-seed difference."""
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
                        mean_b=mean_std(b)[0], max_seed_difference=max(abs(x - y) for x, y in zip(a, b))))
    return out


def write_spread_csv(rows: Sequence[Row], path: Path) -> Path:
    """Write :func:`machine_spread`'s rows (:data:`SPREAD_COLUMNS`)."""
    from benchmarks.results_io import write_rows_csv

    return write_rows_csv(rows, path, SPREAD_COLUMNS, "spread")


def read_spread_csv(path: Path) -> List[Dict[str, object]]:
    """Rows written by :func:`write_spread_csv`, numbers restored;
    :class:`~benchmarks.results_io.ReportFileError` (one line naming the file and line) for
    a malformed file, a value that is not a number, an accuracy (or difference of two) that
    is not a fraction in [0, 1], or two rows of one run, method and machines."""
    from benchmarks.results_io import ReportFileError, _check_fraction, _check_unique, _read_table

    rows: List[Dict[str, object]] = []
    seen: Dict[tuple, int] = {}
    for line, raw in _read_table(path, required=SPREAD_COLUMNS)[1]:
        r: Dict[str, object] = dict(raw)
        try:
            r["tasks"] = int(raw["tasks"])
            for column in ("mean_a", "mean_b", "max_seed_difference"):
                r[column] = float(raw[column])
        except ValueError:
            raise ReportFileError(f"{path}, line {line}: a value that is not a number: a cut or edited row.") \
                from None
        for column in ("mean_a", "mean_b", "max_seed_difference"):
            _check_fraction(path, line, column, raw[column])
        _check_unique(path, seen, tuple(raw[c] for c in ("dataset", "scenario", "tasks", "regime", "method",
                                                          "machine_a", "machine_b")), line,
                      "run, method and machines")
        rows.append(r)
    return rows


def spread_table(rows: Sequence[Row]) -> str:
    """Methods (rows) by run (columns): the mean final accuracy on each machine and the
    largest per-seed difference, in points."""
    from benchmarks.results_io import method_info, order_methods, run_label
    from benchmarks.tables import _md_row

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
    return (f"Final accuracy (%) of the same runs on {first.get('machine_a', '?')} vs {first.get('machine_b', '?')}, "
            f"mean over the seeds both ran ({', '.join(seeds)}), and in brackets the largest difference of one seed "
            "(points):\n\n" + "\n".join(lines) + "\n")


def main(argv: Optional[Sequence[str]] = None) -> Path:
    """Compare two results files and write the spread CSV."""
    from benchmarks.results_io import read_csv

    p = argparse.ArgumentParser(prog="python -m benchmarks.machines", description=__doc__.split("\n\n")[0])
    p.add_argument("results_a")
    p.add_argument("results_b")
    p.add_argument("--names", nargs=2, default=("machine A", "machine B"), metavar=("A", "B"))
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
    from benchmarks.results_io import ReportFileError

    try:
        results = read_csv(args.results_a), read_csv(args.results_b)
    except ReportFileError as error:
        p.exit(2, f"{p.prog}: error: {error}\n")
    except OSError as error:
        p.exit(2, f"{p.prog}: error: {error.filename}: {error.strerror}\n")
    rows = machine_spread(*results, *args.names)
    path = write_spread_csv(rows, Path(args.out))
    print(spread_table(rows))
    return path


if __name__ == "__main__":
    main()
