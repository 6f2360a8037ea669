"""The library's dependency rules, read from the source (every import, also inside functions):

* the torch-only math (``avalanche_tmc.composition``) and the tangent machinery
  (``avalanche_tmc.tangent``) import the standard library and torch only (and ``compose``);
* the library never imports the checkout's ``benchmarks``, ``baselines``, ``examples``,
  ``experiments`` or ``tests``;
* no library module imports an old path that only a deprecation shim keeps alive;
* the module-level imports between the library's modules form no cycle.
"""

import ast
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

import pytest

from avalanche_tmc._compat import MOVED_MODULES

ROOT = Path(__file__).resolve().parents[1] / "avalanche_tmc"
CHECKOUT_ONLY = ("benchmarks", "baselines", "examples", "experiments", "tests")
# package -> the top-level packages (besides the standard library) it may import
ALLOWED = {
    "avalanche_tmc.composition": ("torch", "avalanche_tmc.composition"),
    "avalanche_tmc.tangent": ("torch", "avalanche_tmc.composition", "avalanche_tmc.tangent"),
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_shim(tree: ast.Module) -> bool:
    return any(isinstance(n, ast.ImportFrom) and n.module == "avalanche_tmc._compat"
               and any(a.name == "moved_module_getattr" for a in n.names) for n in tree.body)


def _modules() -> Dict[str, Tuple[Path, ast.Module]]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        if not _is_shim(tree):
            found[_module_name(path)] = (path, tree)
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


def test_no_library_module_imports_a_deprecated_path():
    offending = [f"{module}:{line} imports {target}" for module, (path, tree) in MODULES.items()
                 if module != "avalanche_tmc._compat" for target, line in _imports(module, path, tree)
                 if any(_within(target, old) for old in MOVED_MODULES)]
    assert not offending, "\n".join(offending) + "\n(import from the new module instead)"


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
