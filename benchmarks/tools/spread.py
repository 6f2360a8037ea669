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

import argparse
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

from benchmarks.results.claims import final_by_seed
from benchmarks.results.files import SPREAD_COLUMNS, ReportFileError, read_csv, write_rows_csv
from benchmarks.results.intervals import mean_std
from benchmarks.results.tables import spread_table

__all__ = ["machine_spread", "write_spread_csv", "main"]

Row = Mapping[str, object]


def machine_spread(rows_a: Sequence[Row], rows_b: Sequence[Row], name_a: str, name_b: str) -> List[Dict[str, object]]:
    """One dict per (run, method) that both files have: the mean final accuracy on each
    machine over the seeds both ran, the largest absolute per-seed difference and the
    sample standard deviation of the per-seed differences (0 over one seed), from which
    :mod:`benchmarks.results.machine_moves` derives the cross-machine margin."""
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
    p = argparse.ArgumentParser(prog="python -m benchmarks.tools.spread", description=__doc__.split("\n\n")[0])
    p.add_argument("results_a")
    p.add_argument("results_b")
    p.add_argument("--names", nargs=2, default=("machine A", "machine B"), metavar=("A", "B"))
    p.add_argument("--out", required=True)
    args = p.parse_args(argv)
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
