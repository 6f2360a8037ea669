"""Every table README.md shows from a results file equals what that committed file gives:
``python -m benchmarks.report PATH --readme README.md`` would change nothing."""

import re
from pathlib import Path

from benchmarks import report

ROOT = Path(__file__).resolve().parents[1]
MARKER = re.compile(r"<!-- generated from (\S+) by: ")


def test_readme_tables_are_generated_from_the_committed_results():
    readme = ROOT / "README.md"
    paths = MARKER.findall(readme.read_text(encoding="utf-8"))
    assert "docs/results/offline/results.csv" in paths and "docs/results/offline-tuning/tuning.csv" in paths
    for path in paths:
        assert report.update_readme(readme, path, report.generated_block(ROOT / path), check=True), (
            f"README.md's block from {path} is stale: run python -m benchmarks.report {path} --readme README.md")
