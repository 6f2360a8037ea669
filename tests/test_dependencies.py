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
"""

import ast
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

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


def _modules() -> Dict[str, Tuple[Path, ast.Module]]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        found[_module_name(path)] = (path, ast.parse(path.read_text(encoding="utf-8")))
    return found


def _imports(module: str, path: Path, tree: ast.AST, top_level_only: bool = False) -> Iterator[Tuple[str, int]]:
    """(imported module, line) of every import; relative imports resolved."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    nodes = _top_level(tree) if top_level_only else ast.walk(tree)
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


def _top_level(tree: ast.Module) -> Iterator[ast.stmt]:
    """Statements run at import time (not inside functions, nor under ``if TYPE_CHECKING``)."""
    stack: List[ast.stmt] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.dump(node.test):
            stack.extend(node.orelse)
            continue
        yield node
        for field in ("body", "orelse", "handlers", "finalbody"):
            stack.extend(getattr(node, field, []) or [])


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
