"""``python -m benchmarks.report``: the report of a results file (its table, plots and the
blocks of a page generated from it), made from :mod:`benchmarks.results`.

A result row is a dict with the keys in :data:`COLUMNS`. One row is the accuracy of one
model (``"composed"``, or ``"component-<k>"`` evaluated alone) of one method and seed,
after training ``after_task`` experiences, on one test experience (``eval_exp`` ``"0"``,
``"1"``, ...) or on the whole test stream (``eval_exp == "all"``). Rows that share all
keys but ``seed``/``accuracy``/timings are summarised as mean ± sample standard deviation
over seeds; the claims of the paper are judged from paired per-seed differences
(:mod:`benchmarks.results.claims`). A run is a (dataset, scenario, tasks, regime) — the regime
says how much of the network was trained; a results file with several regimes of one
dataset also gets ``regimes.png`` (accuracy vs. how much is trained, one line per method).

``python -m benchmarks.report results/x/results.csv`` re-makes the table and plots next
to the CSV; ``--readme README.md`` (or ``--readme docs/results.md``: any Markdown file)
also rewrites the blocks of that file generated from the CSV (between ``<!-- generated
from PATH by: COMMAND -->`` and ``<!-- end generated -->``; PATH is relative to the Markdown
file, COMMAND the one to run from the repository root). Marker lines count only at the
start of a line outside fenced code (CommonMark's fences: an example quoting them is not a
block, nor is a fence line quoted inside the code its end); every block
generated from the CSV is rewritten; a page whose markers do not pair up (a block that lost
its end marker) is refused before anything is written; the page is written through a
symlink to its target, keeping its mode and line endings.

A results file that is malformed (cut mid-line by a killed write or copy, a row of another
length, a value that is not a number, unknown or missing columns, an accuracy that is NaN,
infinite or outside [0, 1], a duplicated row) is refused with
:class:`ReportFileError`; the command prints its one-line message and exits with status 2.

The pieces: :mod:`benchmarks.results.files` (the schema, reading and writing results files),
:mod:`benchmarks.results.tables` (Markdown tables), :mod:`benchmarks.results.plots` (plots: PNG,
PDF or SVG, ``--plot-format png,pdf,svg``) and
:mod:`benchmarks.results.readme_blocks` (the generated blocks of a page and what a file's
block shows); this module writes the report; its names are also importable from here.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import Dict, Optional, Sequence

from benchmarks.protocol.choices import PLOT_FORMATS, plot_formats_argument
from benchmarks.results.field_metrics import with_field_metrics
from benchmarks.results.files import (
    COLUMNS,
    TUNING_COLUMNS,
    PathLike,
    ReportFileError,
    Row,
    accuracy_index,
    accuracy_spread,
    atomic_path,
    cost_class,
    csv_kind,
    final_accuracy,
    list_runs,
    method_info,
    order_methods,
    read_csv,
    read_tuning_csv,
    run_key,
    run_label,
    seed_count,
    write_csv,
    write_tuning_csv,
)
from benchmarks.results.plots import (
    component_methods,
    figure_paths,
    plot_accuracy_curves,
    plot_components,
    plot_forgetting_curves,
    plot_regimes,
)
from benchmarks.results.readme_blocks import GENERATED_END as GENERATED_END
from benchmarks.results.readme_blocks import (
    find_generated_blocks,
    generated_block,
    missing_runs,
    readme_block,
    update_readme,
)
from benchmarks.results.tables import (
    incomplete_note,
    markdown_table,
    regime_tables,
    timing_table,
    tuning_table,
    variance_table,
    write_markdown,
)

__all__ = [
    "COLUMNS", "TUNING_COLUMNS", "method_info", "cost_class", "order_methods", "run_key", "list_runs", "run_label",
    "accuracy_index", "final_accuracy", "atomic_path", "write_csv", "read_csv", "write_tuning_csv", "markdown_table",
    "write_markdown", "regime_tables", "plot_accuracy_curves", "plot_forgetting_curves", "component_methods",
    "plot_components", "plot_regimes",
    "write_report", "accuracy_spread", "seed_count", "readme_block", "read_tuning_csv", "tuning_table",
    "generated_block", "variance_table", "update_readme", "timing_table", "main", "ReportFileError",
    "find_generated_blocks", "incomplete_note",
]


def write_report(rows: Sequence[Row], out_dir: PathLike, include_csv: bool = True,
                 missing: Sequence[str] = (), formats: Sequence[str] = ("png",)) -> Dict[str, Path]:
    """Write results.csv (unless ``include_csv`` is False), results.md, accuracy_curves,
    forgetting_curves (methods with a complete accuracy matrix), regimes (when a dataset was
    run in several regimes) and components_<method> for every method with component rows,
    each plot in every one of ``formats`` (``png``, ``pdf``, ``svg``); return the paths keyed
    ``csv``, ``markdown``, ``curves``, ``forgetting``, ``regimes``, ``components_<method>``
    (a plot's first format; ``curves.svg``... its others).
    ``missing``: the planned runs not finished yet (the runner's
    :mod:`benchmarks.runner.outdir`), named at the top of results.md."""
    out = Path(out_dir)
    paths: Dict[str, Optional[Path]] = {}
    if include_csv:
        paths["csv"] = write_csv(with_field_metrics(rows), out / "results.csv")
    paths["markdown"] = write_markdown(rows, out / "results.md", missing)
    plots = {"curves": plot_accuracy_curves(rows, out / "accuracy_curves", formats),
             "forgetting": plot_forgetting_curves(rows, out / "forgetting_curves", formats),
             "regimes": plot_regimes(rows, out / "regimes", formats)}
    for method in component_methods(rows):
        plots[f"components_{method}"] = plot_components(rows, out / f"components_{method}", method, formats)
    for key, first in plots.items():
        if first is not None:
            paths[key] = first
            paths.update({f"{key}.{fmt}": p for fmt, p in zip(formats[1:], figure_paths(first, formats)[1:])})
    return {k: p for k, p in paths.items() if p is not None}


def main(argv: Optional[Sequence[str]] = None) -> Dict[str, Path]:
    """``python -m benchmarks.report CSV [--readme README.md]``: re-make the table and
    plots next to ``CSV`` (and the Markdown file's blocks generated from it)."""
    parser = argparse.ArgumentParser(prog="python -m benchmarks.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("csv", type=Path, help="results CSV written by write_csv / write_report")
    parser.add_argument("--readme", type=Path, default=None,
                        help="also rewrite this Markdown file's block generated from CSV (README.md, "
                             "docs/results.md; the path in its marker is relative to the file's folder)")
    parser.add_argument("--summary", action="store_true",
                        help="with --readme: write the small table of a results file (a few representative rows, "
                             "one column per scenario, the verdicts' count), as README.md shows it")
    parser.add_argument("--plot-format", type=plot_formats_argument, default=("png",), metavar="FORMATS",
                        help=f"the plots' formats, comma-separated: {', '.join(PLOT_FORMATS)} (default png, at 300 "
                             "dpi; pdf and svg keep their text editable)")
    args = parser.parse_args(argv)
    try:
        block = generated_block(args.csv, summary=args.summary)
        paths: Dict[str, Path] = {}
        existed = {p.resolve() for p in args.csv.parent.iterdir() if p.is_file()} if args.csv.parent.is_dir() else set()
        if csv_kind(args.csv) == "results":
            rows = read_csv(args.csv)
            paths = write_report(rows, args.csv.parent, include_csv=False, missing=missing_runs(args.csv.parent),
                                 formats=args.plot_format)
        print(block)
        for key, path in paths.items():  # an edited results.md or plot is replaced: said, not silent
            print(f"{key}: {path}" + (" (overwritten)" if path.resolve() in existed else ""))
        if args.readme is not None:
            relative = Path(os.path.relpath(args.csv.resolve(), args.readme.resolve().parent)).as_posix()
            command = (f"python -m benchmarks.report {args.csv.as_posix()} --readme {args.readme.as_posix()}"
                       + (" --summary" if args.summary else ""))
            update_readme(args.readme, relative, block, command=command)
            print(f"readme: {args.readme} (block generated from {relative})")
    except ReportFileError as e:
        parser.exit(2, f"{parser.prog}: error: {e}\n")
    except OSError as e:
        parser.exit(2, f"{parser.prog}: error: {e.filename}: {e.strerror}\n")
    return paths


if __name__ == "__main__":
    main()
