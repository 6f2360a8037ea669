"""One owner of the learning-rate schedule (issue 49 item 5): every method of the comparison
gets its schedule from ``benchmarks.methods.strategy.build_strategy`` (Avalanche's
``LRSchedulerPlugin`` around a ``MultiStepLR``), and nothing else in the library, the
baselines or the runner builds one; the run header states it (tests/benchmarks/test_terminal.py)."""

import ast
from pathlib import Path
from typing import List

ROOT = Path(__file__).resolve().parents[2]
OWNER = "benchmarks/methods/strategy.py"
# the base network's own pre-training (make base) and the library's path as a researcher writes it, timed against
# the runner's (benchmarks/tools/library_speed.py, issue 60): not methods of the comparison
OUTSIDE_THE_COMPARISON = ("benchmarks/networks/pretrain_base.py", "benchmarks/tools/library_speed.py")


def _schedulers_built(path: Path) -> List[int]:
    """Lines of ``path`` that build an LR scheduler or attach one (a call of
    ``torch.optim.lr_scheduler.*`` or of ``LRSchedulerPlugin``)."""
    lines = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Call):
            called = ast.unparse(node.func)
            if "lr_scheduler." in called or called.endswith("LRSchedulerPlugin") or called in ("MultiStepLR", "StepLR"):
                lines.append(node.lineno)
    return lines


def _builders(packages=("avalanche_tmc", "baselines", "benchmarks")) -> List[str]:
    return sorted(f"{path.relative_to(ROOT)}:{line}" for package in packages
                  for path in (ROOT / package).rglob("*.py") for line in _schedulers_built(path))


def test_only_build_strategy_builds_a_schedule():
    found = [where for where in _builders() if not where.startswith(OUTSIDE_THE_COMPARISON)]
    assert found and all(where.startswith(OWNER + ":") for where in found), found


def test_the_check_finds_a_planted_scheduler(tmp_path):
    planted = tmp_path / "x.py"
    planted.write_text("import torch\ndef build(opt):\n    return torch.optim.lr_scheduler.StepLR(opt, 2)\n")
    assert _schedulers_built(planted) == [3]
