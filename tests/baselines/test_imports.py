"""Importing ``baselines`` imports neither torch nor Avalanche, nor ``baselines.composition``:
the method registry (``benchmarks/methods/catalogue.py``) reads the baselines' table rows
from their ``@baseline`` entries in ``baselines.builtin`` (tests/test_dependencies.py allows
it that one import of ``baselines``), and the report renders them without Avalanche."""

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.test_dependencies import _imports, _modules, _stdlib, _within

CHECKOUT = Path(__file__).resolve().parents[2]
BASELINES = _modules(CHECKOUT / "baselines")
# run when the method registry imports baselines.builtin (the package's __init__ first)
LIGHT_MODULES = ("baselines", "baselines.builtin")
# what they may import at module level besides the standard library
LIGHT_IMPORTS = ("avalanche_tmc.training.registry", "avalanche_tmc_torchvision_fallback", "baselines.builtin")


def _heavy_imports(modules) -> list:
    return sorted(f"{module}:{line} imports {target}" for module, (path, tree) in modules.items()
                  if module in LIGHT_MODULES
                  for target, line in _imports(module, path, tree, top_level_only=True)
                  if not _stdlib(target) and not any(_within(target, a) for a in LIGHT_IMPORTS))


def test_baselines_and_its_builtin_module_import_only_the_strategy_registry_at_import():
    assert set(LIGHT_MODULES) <= set(BASELINES)
    offending = _heavy_imports(BASELINES)
    assert not offending, "\n".join(offending)


def test_the_check_finds_a_planted_import():
    late = "def build():\n    from avalanche.training.supervised import Naive\n"  # when built: allowed
    planted = {"baselines.builtin": (BASELINES["baselines.builtin"][0], ast.parse("import torch\n" + late)),
               "baselines": (BASELINES["baselines"][0], ast.parse("from .composition import COMBINE_MODES\n")),
               "baselines.composition": (BASELINES["baselines.composition"][0], ast.parse("import avalanche\n"))}
    assert _heavy_imports(planted) == ["baselines.builtin:1 imports torch", "baselines:1 imports baselines.composition",
                                       "baselines:1 imports baselines.composition.COMBINE_MODES"]


@pytest.mark.integration  # a process of its own (CONTRIBUTING: subprocesses are the second tier)
def test_importing_baselines_and_the_method_registry_imports_neither_torch_nor_avalanche():
    code = ("import sys\nimport baselines\nfrom avalanche_tmc import create_strategy\n"
            "heavy = lambda: sorted({m.split('.')[0] for m in sys.modules} & {'torch', 'avalanche'}) + "
            "[m for m in sys.modules if m == 'baselines.composition']\n"
            "assert not heavy(), heavy()\nassert create_strategy.__module__ == 'avalanche_tmc.training.registry'\n"
            "import benchmarks.methods\n"
            "assert not [m for m in heavy() if m != 'torch'], heavy()  # the catalogue may import torch\n"
            "assert [g.name for g in benchmarks.methods.method_groups()][-7:] == list(baselines.BUILTIN_METHODS)\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=CHECKOUT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
