"""Which rows two machines computed alike, bit for bit::

    python -m benchmarks.tools.same_rows docs/results/offline-confirm/results.csv rerun/results.csv \
        --names "the committed run (AVX2)" "this machine, pinned" --out docs/results/machines/pinned-confirm.csv

Every row both results files hold (each method's accuracy after every experience, on every
evaluation stream, at every seed both ran) is compared as the stored double; the CSV gives,
per run and method, the rows compared, those equal and the largest difference
(:mod:`benchmarks.results.same_rows`); ``python -m benchmarks.report <csv> --readme <page>``
shows it. Exit 1 when a row differs.
"""

from pathlib import Path
from typing import Optional, Sequence

from benchmarks.results.files import SAME_ROWS_COLUMNS, read_csv
from benchmarks.results.outputs import two_results_parser, write_from_inputs
from benchmarks.results.same_rows import same_rows, same_rows_counts, same_rows_table

__all__ = ["main"]


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Compare two results files row by row and write the comparison."""
    p = two_results_parser("python -m benchmarks.tools.same_rows", __doc__.split("\n\n")[0])
    args = p.parse_args(argv)
    rows = write_from_inputs(p, Path(args.out), {args.results_a: "the first results file",
                                                 args.results_b: "the second results file"},
                             lambda: same_rows(read_csv(args.results_a), read_csv(args.results_b), *args.names),
                             SAME_ROWS_COLUMNS, "same-rows",
                             f"{args.results_a} and {args.results_b} have no row in common")
    print(same_rows_table(rows))
    equal, compared = same_rows_counts(rows)
    return 0 if equal == compared else 1


if __name__ == "__main__":
    raise SystemExit(main())
