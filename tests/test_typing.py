"""Every public function and method of the library has type hints (its parameters and its
return), and the wheel says so with ``py.typed`` (tests/test_packaging.py checks the wheel)."""

import ast
from pathlib import Path
from typing import Iterator, List

ROOT = Path(__file__).resolve().parents[1] / "avalanche_tmc"


def _unannotated(body: List[ast.stmt], where: str) -> Iterator[str]:
    for node in body:
        if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            yield from _unannotated(node.body, f"{where}{node.name}.")
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and (
                not node.name.startswith("_") or node.name == "__init__"):
            args = node.args
            params = [a for a in args.posonlyargs + args.args + args.kwonlyargs if a.arg not in ("self", "cls")]
            params += [a for a in (args.vararg, args.kwarg) if a is not None]
            missing = [a.arg for a in params if a.annotation is None]
            if node.returns is None and node.name != "__init__":
                missing.append("return")
            if missing:
                yield f"{where}{node.name} (line {node.lineno}): {', '.join(missing)}"


def test_every_public_function_has_type_hints():
    missing = [f"{path.relative_to(ROOT.parent)}: {entry}" for path in sorted(ROOT.rglob("*.py"))
               for entry in _unannotated(ast.parse(path.read_text(encoding="utf-8")).body, "")]
    assert not missing, "\n".join(missing)


def test_the_check_finds_a_missing_hint():
    tree = ast.parse("def f(a, b: int) -> int: ...\nclass C:\n    def g(self, x: int): ...\n    def _h(self, y): ...")
    assert list(_unannotated(tree.body, "")) == ["f (line 1): a", "C.g (line 3): return"]
