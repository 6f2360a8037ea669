"""What the test suite costs, per tier and per module, from a run's JUnit XML reports:
``python -m benchmarks.results.suite_costs --tier fast FAST.xml --tier e2e E2E.xml --out
docs/results/tests/costs.csv``; docs/tests.md shows the table generated from that file
(``python -m benchmarks.report docs/results/tests/costs.csv --readme docs/tests.md``).

What it is for: keeping ``make test`` within its 10 minutes, and seeing where the time of
each tier goes before it grows. The reports come from ``pytest --junitxml`` (the
wall-clock time of the session is the ``testsuite`` element's ``time``); the seconds of a
module are the sum of its tests' setup, call and teardown, so under ``pytest -n`` the
modules add up to more than the wall clock.
"""

import argparse
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from benchmarks.results.files import COST_COLUMNS, ReportFileError, read_written_csv, write_rows_csv
from benchmarks.results.outputs import check_not_an_input, one_line, writing
from benchmarks.results.reading import TEXT, Cell

__all__ = ["COLUMNS", "WALL", "module_costs", "cost_rows", "cost_table", "main"]

COLUMNS = COST_COLUMNS
WALL = "(wall clock)"
"""The ``module`` of a tier's total row: its ``seconds`` are the session's wall clock."""
SHOWN = 15
COST_CELLS: Dict[str, Cell] = {"tier": TEXT, "module": TEXT, "tests": Cell(int, 0), "seconds": Cell(float, 0.0)}
"""What each cell of a costs file holds (counts and seconds: finite, not negative)."""


def module_costs(report: Path) -> Tuple[float, Dict[str, Tuple[int, float]]]:
    """``(wall-clock seconds, {module path: (tests, seconds)})`` of one JUnit XML report."""
    try:
        root = ET.parse(report).getroot()
    except (OSError, ET.ParseError) as error:
        raise ReportFileError(f"{report}: not a readable JUnit XML report ({error}): run pytest with "
                              "--junitxml=FILE") from None
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        raise ReportFileError(f"{report}: no <testsuite> element: not a pytest --junitxml report")
    costs: Dict[str, List[float]] = defaultdict(lambda: [0, 0.0])
    for case in suite.iter("testcase"):
        module = case.get("classname", "").replace(".", "/") + ".py"
        costs[module][0] += 1
        costs[module][1] += float(case.get("time") or 0.0)
    return float(suite.get("time") or 0.0), {m: (int(n), s) for m, (n, s) in costs.items()}


def cost_rows(reports: Sequence[Tuple[str, Path]]) -> List[Dict[str, str]]:
    """The rows of the costs file: per tier, its wall clock, then each module (slowest first)."""
    rows = []
    for tier, report in reports:
        wall, modules = module_costs(report)
        rows.append(dict(tier=tier, module=WALL, tests=str(sum(n for n, _ in modules.values())),
                         seconds=f"{wall:.1f}"))
        rows += [dict(tier=tier, module=m, tests=str(n), seconds=f"{s:.1f}")
                 for m, (n, s) in sorted(modules.items(), key=lambda item: -item[1][1])]
    return rows


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {seconds % 60:02.0f} s"


def cost_table(rows: Sequence[Dict[str, str]], shown: int = SHOWN) -> str:
    """Markdown: each tier's wall clock and tests, then the ``shown`` costliest modules."""
    walls = [r for r in rows if r["module"] == WALL]
    modules = sorted((r for r in rows if r["module"] != WALL), key=lambda r: -float(r["seconds"]))
    lines = ["| tier | wall clock | tests | test-seconds |", "|---|---:|---:|---:|"]
    for wall in walls:
        spent = sum(float(r["seconds"]) for r in modules if r["tier"] == wall["tier"])
        lines.append(f"| {wall['tier']} | {_minutes(float(wall['seconds']))} | {wall['tests']} | {spent:.0f} |")
    lines += ["", f"The {min(shown, len(modules))} costliest modules:", "",
              "| module | tier | tests | seconds |", "|---|---|---:|---:|"]
    lines += [f"| `{r['module']}` | {r['tier']} | {r['tests']} | {float(r['seconds']):.0f} |" for r in modules[:shown]]
    return "\n".join(lines)


def read_costs(path: Path) -> List[Dict[str, str]]:
    """The rows of a costs file written by :func:`main`, every cell checked (:data:`COST_CELLS`;
    one row per tier and module)."""
    return read_written_csv(path, "test-costs", COLUMNS, "python -m benchmarks.results.suite_costs", COST_CELLS,
                            ("tier", "module"))


def main(argv: Optional[Sequence[str]] = None) -> Path:
    """Write the costs file from one JUnit XML report per tier; returns its path."""
    p = argparse.ArgumentParser(prog="python -m benchmarks.results.suite_costs", description=__doc__.split("\n\n")[0])
    p.add_argument("--tier", nargs=2, action="append", required=True, metavar=("NAME", "JUNIT_XML"),
                   help="a tier's name (fast, e2e) and its pytest --junitxml report (repeatable)")
    p.add_argument("--out", type=Path, default=Path("docs/results/tests/costs.csv"))
    args = p.parse_args(argv)
    with one_line(p):
        check_not_an_input(args.out, {Path(report): f"the {name} tier's report" for name, report in args.tier})
        rows = cost_rows([(name, Path(report)) for name, report in args.tier])
        with writing(args.out):
            args.out.parent.mkdir(parents=True, exist_ok=True)
            write_rows_csv(rows, args.out, COLUMNS, kind="test-costs")
    print(cost_table(rows))
    return args.out


if __name__ == "__main__":
    main()
