"""The library's dependency rules, read from the source (every import, also inside functions):

* the torch-only math (``avalanche_tmc.composition``) and the tangent machinery
  (``avalanche_tmc.tangent``) import the standard library and torch only (and ``compose``);
* the library never imports the checkout's ``benchmarks``, ``baselines``, ``examples``,
  ``experiments`` or ``tests``;
* the Avalanche glue (``avalanche_tmc.training``) imports neither the files
  (``avalanche_tmc.files``) nor the processes (``avalanche_tmc.distributed``,
  ``avalanche_tmc.distributed_setup``): those act on
  a strategy through the learner protocol (``training/protocols.py``), arrows point down;
* the module-level imports between the library's modules form no cycle.

And the runner's (``benchmarks/``, docs/layout.md):

* its imports, also those inside functions, form no cycle;
* its tools (``benchmarks.tools``) use the runner and are never imported by it;
* the results (``benchmarks.results`` and the report) import neither the runner nor
  Avalanche: a results CSV renders without them (checked in a fresh process too);
* no module is over 400 lines (the library's neither), and only the commands users type sit at its root.
"""

import ast
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[1] / "avalanche_tmc"
CHECKOUT_ONLY = ("benchmarks", "baselines", "examples", "experiments", "tests")
# package -> the library's modules above it, which it must never import
FORBIDDEN = {
    "avalanche_tmc.training": ("avalanche_tmc.files", "avalanche_tmc.distributed", "avalanche_tmc.distributed_setup",
                               "avalanche_tmc.cli", "avalanche_tmc.factories", "avalanche_tmc.loggers"),
}
# package -> the top-level packages (besides the standard library) it may import
ALLOWED = {
    "avalanche_tmc.composition": ("torch", "avalanche_tmc.composition"),
    "avalanche_tmc.tangent": ("torch", "avalanche_tmc.composition", "avalanche_tmc.tangent"),
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules(root: Path = ROOT) -> Dict[str, Tuple[Path, ast.Module]]:
    found = {}
    for path in sorted(root.rglob("*.py")):
        found[_module_name(path)] = (path, ast.parse(path.read_text(encoding="utf-8")))
    return found


def _imports(module: str, path: Path, tree: ast.AST, top_level_only: bool = False,
             runtime: bool = False) -> Iterator[Tuple[str, int]]:
    """(imported module, line) of every import; relative imports resolved. ``top_level_only``:
    those run at import time; ``runtime``: those that may run (in functions too, not under
    ``if TYPE_CHECKING``)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    nodes = _top_level(tree) if top_level_only else _top_level(tree, functions=True) if runtime else ast.walk(tree)
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            yield target, node.lineno
            for alias in node.names:  # `from . import x` / `from .pkg import module`
                yield f"{target}.{alias.name}", node.lineno


def _top_level(tree: ast.Module, functions: bool = False) -> Iterator[ast.stmt]:
    """Statements run at import time (not inside functions, nor under ``if TYPE_CHECKING``);
    ``functions``: also those inside functions (every statement that may run)."""
    stack: List[ast.stmt] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not functions:
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            stack.extend(node.orelse)
            continue
        yield node
        for field in ("body", "orelse", "handlers", "finalbody"):
            stack.extend(getattr(node, field, []) or [])
        stack.extend(getattr(node, "cases", []) or [])


MODULES = _modules()


def _stdlib(name: str) -> bool:
    return name.split(".")[0] in sys.stdlib_module_names or name == "__future__"


def _within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


@pytest.mark.parametrize("package", sorted(ALLOWED))
def test_the_math_and_the_tangent_machinery_import_torch_only(package):
    offending = [f"{module}:{line} imports {target}" for module, (path, tree) in MODULES.items()
                 if _within(module, package) for target, line in _imports(module, path, tree)
                 if not _stdlib(target) and not any(_within(target, a) for a in ALLOWED[package])]
    assert not offending, "\n".join(offending)


def test_the_library_never_imports_the_checkout():
    offending = [f"{module}:{line} imports {target}" for module, (path, tree) in MODULES.items()
                 for target, line in _imports(module, path, tree) if any(_within(target, c) for c in CHECKOUT_ONLY)]
    assert not offending, "\n".join(offending)


def _upward(modules) -> List[str]:
    return [f"{module}:{line} imports {target}" for module, (path, tree) in modules.items()
            for package, above in FORBIDDEN.items() if _within(module, package)
            for target, line in _imports(module, path, tree) if any(_within(target, a) for a in above)]


def test_the_training_glue_imports_neither_files_nor_processes():
    offending = _upward(MODULES)
    assert not offending, "\n".join(offending) + (
        "\n(strategies know nothing of files and processes: those use a strategy through the learner protocol, "
        "training/protocols.py)")


def test_the_upward_import_check_finds_one():
    """The check above on a strategy that imports the files, inside a method, and the
    processes, at the top (what issue 32 found in training/strategies/)."""
    source = ("from ...distributed import train_parallel\n"
              "class S:\n    def load(self):\n        from ...files.learners import components_for\n")
    path = ROOT / "training" / "strategies" / "example.py"
    found = _upward({"avalanche_tmc.training.strategies.example": (path, ast.parse(source))})
    assert found == ["avalanche_tmc.training.strategies.example:1 imports avalanche_tmc.distributed",
                     "avalanche_tmc.training.strategies.example:1 imports avalanche_tmc.distributed.train_parallel",
                     "avalanche_tmc.training.strategies.example:4 imports avalanche_tmc.files.learners",
                     "avalanche_tmc.training.strategies.example:4 imports "
                     "avalanche_tmc.files.learners.components_for"]


def _graph() -> Dict[str, Set[str]]:
    graph: Dict[str, Set[str]] = {}
    for module, (path, tree) in MODULES.items():
        graph[module] = {target for target, _ in _imports(module, path, tree, top_level_only=True)
                         if target in MODULES and target != module}
    return graph


def _cycle(graph: Dict[str, Set[str]]) -> List[str]:
    """One cycle of ``graph`` (empty if none), by depth-first search.

    A package's ``__init__`` importing its own submodules is not a cycle of design, so the
    edge from a submodule up to its parent package is left out."""
    state: Dict[str, int] = {}
    path: List[str] = []

    def visit(node: str) -> List[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if _within(node, nxt):  # submodule -> its own package
                continue
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        state[node] = 2
        path.pop()
        return []

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return []


def test_module_level_imports_have_no_cycle():
    cycle = _cycle(_graph())
    assert not cycle, " -> ".join(cycle)


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) == []
    assert _cycle({"p": {"p.x"}, "p.x": {"p"}}) == []  # a package and its own submodule


# ------------------------------------------------------------------ the runner (benchmarks/)

BENCHMARKS = ROOT.parent / "benchmarks"
RUNNER = _modules(BENCHMARKS)
ENTRY_POINTS = ("benchmarks", "benchmarks.run", "benchmarks.report")  # the commands users type, at the root
TOOLS = "benchmarks.tools"
# the results and the report: the runner's layers they must never import (nor Avalanche)
RESULTS = ("benchmarks.results", "benchmarks.report")
BELOW_THE_RUNNER_ONLY = ("benchmarks.results", "benchmarks.methods", "benchmarks.protocol.choices")
MAX_LINES = 400


def _owner(target: str, modules) -> str:
    """The module of ``modules`` that ``target`` (a module or a name in one) is, or ""."""
    while target and target not in modules:
        target = target.rpartition(".")[0]
    return target


def _runner_graph(modules) -> Dict[str, Set[str]]:
    """Module -> the runner's modules it imports, also inside functions (what may run)."""
    graph: Dict[str, Set[str]] = {}
    for module, (path, tree) in modules.items():
        graph[module] = {owner for target, _ in _imports(module, path, tree, runtime=True)
                         for owner in [_owner(target, modules)] if owner and owner != module}
    return graph


def test_the_runner_has_no_import_cycle():
    cycle = _cycle(_runner_graph(RUNNER))
    assert not cycle, " -> ".join(cycle)


def test_the_runner_cycle_check_finds_a_late_import():
    """builders <-> methods as they were (issue 43): the import back inside a function counts."""
    modules = {"benchmarks.methods": (BENCHMARKS / "methods.py", ast.parse("from benchmarks.builders import x\n")),
               "benchmarks.builders": (BENCHMARKS / "builders.py",
                                       ast.parse("def f():\n    from benchmarks.methods import TrainConfig\n"))}
    assert _cycle(_runner_graph(modules)) == ["benchmarks.builders", "benchmarks.methods", "benchmarks.builders"]


def _tool_imports(modules) -> List[str]:
    return [f"{module}:{line} imports {target}" for module, (path, tree) in modules.items()
            if not _within(module, TOOLS)
            for target, line in _imports(module, path, tree) if _within(target, TOOLS)]


def test_the_tools_are_never_imported_by_the_runner():
    offending = _tool_imports(RUNNER) + _tool_imports(MODULES)
    assert not offending, "\n".join(offending) + "\n(tools use the runner; the runner never uses them)"


def test_the_tool_check_finds_one():
    source = "def measure():\n    from benchmarks.tools.speed import time_network\n"
    found = _tool_imports({"benchmarks.runner.example": (BENCHMARKS / "runner" / "example.py", ast.parse(source))})
    assert found == ["benchmarks.runner.example:2 imports benchmarks.tools.speed",
                     "benchmarks.runner.example:2 imports benchmarks.tools.speed.time_network"]


def _results_imports(modules) -> List[str]:
    """Imports of the results and the report beyond the results, the method registry, the
    standard library and plotting: none of the runner, Avalanche or ``baselines``."""
    allowed = ("avalanche_tmc.files.filesystem", "avalanche_tmc.training.registry", "matplotlib", "numpy", "scipy")
    return sorted(f"{module}:{line} imports {target}" for module, (path, tree) in modules.items()
            if any(_within(module, r) for r in RESULTS)
            for target, line in _imports(module, path, tree, runtime=True)
            if not _stdlib(target) and not any(_within(target, a) for a in (*BELOW_THE_RUNNER_ONLY, *allowed))
            and target != "benchmarks")


def test_the_results_import_neither_the_runner_nor_avalanche():
    offending = _results_imports(RUNNER)
    assert not offending, "\n".join(offending)


def test_the_results_check_finds_one():
    source = "from benchmarks.results.files import read_csv\nimport avalanche\nfrom benchmarks.runner import config\n"
    found = _results_imports({"benchmarks.results.example": (BENCHMARKS / "results" / "example.py",
                                                              ast.parse(source))})
    assert found == ["benchmarks.results.example:2 imports avalanche",
                     "benchmarks.results.example:3 imports benchmarks.runner",
                     "benchmarks.results.example:3 imports benchmarks.runner.config"]


# The layers inside benchmarks/, lowest first: a module may import its own layer and those
# below it (imports inside functions too), never one above (docs/layout.md).
LAYERS: Dict[str, int] = {
    "benchmarks.datasets": 0, "benchmarks.networks": 0,
    "benchmarks.protocol": 1,
    "benchmarks.methods": 2,
    "benchmarks.tuning": 3,
    "benchmarks.results": 3,
    "benchmarks.runner": 4,
    "benchmarks.run": 6, "benchmarks.report": 6,
    "benchmarks.tools": 7,
}


def _layer(module: str) -> Optional[int]:
    """The layer of a module of benchmarks/ (its longest prefix in :data:`LAYERS`), or None."""
    while module:
        if module in LAYERS:
            return LAYERS[module]
        module = module.rpartition(".")[0]
    return None


def _upward_imports(modules) -> List[str]:
    return sorted(f"{module}:{line} imports {target}" for module, (path, tree) in modules.items()
                  for target, line in _imports(module, path, tree, runtime=True)
                  if _layer(module) is not None and _layer(target) is not None and _layer(target) > _layer(module))


def test_the_layers_inside_benchmarks_point_one_way():
    offending = _upward_imports(RUNNER)
    assert not offending, "\n".join(offending) + "\n(lowest first: " + ", ".join(LAYERS) + ")"


@pytest.mark.parametrize("module, source", [
    ("benchmarks.datasets.loading", "from benchmarks.runner.forked_jobs import run_tasks\n"),
    ("benchmarks.tuning.grid", "def trial():\n    from benchmarks.runner.groups import run_group\n"),
    ("benchmarks.results.tables", "from benchmarks.tools import gpu_hours\n"),
    ("benchmarks.methods.strategy", "import benchmarks.run\n"),
])
def test_the_layer_check_finds_a_planted_arrow(module, source):
    path = BENCHMARKS / (module.split(".", 1)[1].replace(".", "/") + ".py")
    assert len(_upward_imports({module: (path, ast.parse(source))})) >= 1
    assert not _upward_imports({"benchmarks.tools.x": (BENCHMARKS / "tools" / "x.py", ast.parse(source))})


def _registry_imports(modules) -> List[str]:
    """Imports of Avalanche or ``baselines`` run when the method registry is imported (its
    strategies import them when built, inside functions); but ``baselines.builtin``, the
    baselines' entries and table rows, which imports neither (tests/baselines/test_imports.py)."""
    return sorted(f"{module}:{line} imports {target}" for module, (path, tree) in modules.items()
                  if _within(module, "benchmarks.methods")
                  for target, line in _imports(module, path, tree, top_level_only=True)
                  if any(_within(target, t) for t in ("avalanche", "baselines"))
                  and not _within(target, "baselines.builtin"))


def test_the_method_registry_imports_avalanche_only_to_build_a_strategy():
    offending = _registry_imports(RUNNER)
    assert not offending, "\n".join(offending)
    late = "def build():\n    from avalanche.training import Naive\n"
    planted = "from baselines.builtin import on_baseline\nimport baselines\nimport avalanche.core\n" + late
    assert _registry_imports({"benchmarks.methods.x": (BENCHMARKS / "x.py", ast.parse(planted))}) \
        == ["benchmarks.methods.x:2 imports baselines", "benchmarks.methods.x:3 imports avalanche.core"]


@pytest.mark.integration  # a process of its own (CONTRIBUTING: subprocesses are the second tier)
def test_a_results_file_renders_without_avalanche(tmp_path):
    """In a fresh process: the report renders the committed results (tables, plots, README
    block) and Avalanche was never imported."""
    results = sorted((ROOT.parent / "docs" / "results").glob("*/results.csv"))[0]
    code = ("import sys\nfrom benchmarks import report\n"
            f"report.write_report(report.read_csv({str(results)!r}), {str(tmp_path)!r})\n"
            f"print(report.generated_block({str(results)!r}))\n"
            "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('avalanche', 'baselines')\n"
            "                if m not in ('baselines', 'baselines.builtin'))  # the rows of the baselines\n"
            "assert not loaded, loaded\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT.parent, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "results.md").is_file()


def _too_long(modules) -> List[str]:
    return [f"{module}: {len(path.read_text(encoding='utf-8').splitlines())} lines"
            for module, (path, _) in modules.items()
            if len(path.read_text(encoding="utf-8").splitlines()) > MAX_LINES]


def test_no_runner_module_is_over_400_lines():
    assert not _too_long(RUNNER), "\n".join(_too_long(RUNNER))


def test_no_library_module_is_over_400_lines():
    assert not _too_long(MODULES), "\n".join(_too_long(MODULES))


def _at_the_root(modules) -> List[str]:
    """The modules (not sub-packages) at the root that are not entry points."""
    return sorted(m for m, entry in modules.items() if m.count(".") == 1 and m not in ENTRY_POINTS
                  and (entry is None or entry[0].name != "__init__.py"))


def test_only_the_entry_points_sit_at_the_runners_root():
    assert not _at_the_root(RUNNER), (f"{_at_the_root(RUNNER)}: put each in the sub-package that owns it "
                                      "(docs/layout.md); the root holds the commands users type only")


def test_the_layout_checks_find_one(tmp_path):
    long = tmp_path / "long.py"
    long.write_text("x = 1\n" * (MAX_LINES + 1))
    assert _too_long({"benchmarks.long": (long, ast.parse(""))}) == [f"benchmarks.long: {MAX_LINES + 1} lines"]
    assert _at_the_root({"benchmarks.run": None, "benchmarks.speed": None, "benchmarks.tools.speed": None}) == [
        "benchmarks.speed"]
