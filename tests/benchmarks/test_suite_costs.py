"""``python -m benchmarks.results.suite_costs``: the test suite's costs per tier and module, read from
JUnit XML reports, written as a CSV the report renders into docs/tests.md."""

import pytest

from benchmarks import report
from benchmarks.results.files import ReportFileError
from benchmarks.results.suite_costs import WALL, cost_table, main, module_costs

JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" errors="0" failures="0" skipped="0" tests="4" time="{wall}">
<testcase classname="tests.benchmarks.test_a" name="test_one" time="1.5" />
<testcase classname="tests.benchmarks.test_a" name="test_two" time="2.25" />
<testcase classname="tests.test_b" name="test_three[x]" time="{b}" />
<testcase classname="tests.test_b" name="test_four" time="0.25"><skipped message="no" /></testcase>
</testsuite></testsuites>"""


def _report(tmp_path, name, wall, b):
    path = tmp_path / name
    path.write_text(JUNIT.format(wall=wall, b=b))
    return path


def test_module_costs_add_each_module_s_tests(tmp_path):
    wall, modules = module_costs(_report(tmp_path, "fast.xml", 42.5, 10.0))
    assert wall == 42.5
    assert modules == {"tests/benchmarks/test_a.py": (2, 3.75), "tests/test_b.py": (2, 10.25)}


def test_the_costs_file_renders_as_a_generated_block(tmp_path):
    fast, e2e = _report(tmp_path, "fast.xml", 130, 10.0), _report(tmp_path, "e2e.xml", 610, 500.0)
    out = main(["--tier", "fast", str(fast), "--tier", "e2e", str(e2e), "--out", str(tmp_path / "costs.csv")])
    block = report.generated_block(out)
    assert block == cost_table([
        {"tier": "fast", "module": WALL, "tests": "4", "seconds": "130.0"},
        {"tier": "fast", "module": "tests/test_b.py", "tests": "2", "seconds": "10.2"},
        {"tier": "fast", "module": "tests/benchmarks/test_a.py", "tests": "2", "seconds": "3.8"},
        {"tier": "e2e", "module": WALL, "tests": "4", "seconds": "610.0"},
        {"tier": "e2e", "module": "tests/test_b.py", "tests": "2", "seconds": "500.2"},
        {"tier": "e2e", "module": "tests/benchmarks/test_a.py", "tests": "2", "seconds": "3.8"},
    ])
    lines = block.splitlines()
    assert "| fast | 2 min 10 s | 4 | 14 |" in lines and "| e2e | 10 min 10 s | 4 | 504 |" in lines
    # the costliest module first, whichever tier it is in
    modules = [line for line in lines if line.startswith("| `")]
    assert modules[0] == "| `tests/test_b.py` | e2e | 2 | 500 |" and len(modules) == 4


def test_a_file_that_is_not_a_junit_report_is_refused(tmp_path, capsys):
    bad = tmp_path / "bad.xml"
    bad.write_text("<html>")
    with pytest.raises(ReportFileError, match="not a readable JUnit XML report"):
        module_costs(bad)
    with pytest.raises(SystemExit):
        main(["--tier", "fast", str(bad), "--out", str(tmp_path / "c.csv")])
    assert "--junitxml" in capsys.readouterr().err and not (tmp_path / "c.csv").exists()
