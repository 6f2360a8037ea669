"""Documentation: every public name has a docstring; the README splits into the site's pages.

Docstrings are read from the source (``ast``), as the API reference renders them, not
from ``obj.__doc__``: a NamedTuple or dataclass gets an automatic ``__doc__`` that would
hide a missing one, and a type alias such as ``Delta = Dict[str, Tensor]`` has no
``__doc__`` of its own. For a module-level assignment the docstring is the string
literal right after it (the convention that mkdocstrings and Sphinx autodoc follow).
"""

import ast
import importlib.util
import pkgutil
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, Optional

import pytest

import avalanche_tmc

ROOT = Path(__file__).resolve().parents[1]


def _load_readme_pages():
    spec = importlib.util.spec_from_file_location("readme_pages", ROOT / "docs" / "readme_pages.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def module_docstrings(source: str) -> Dict[str, Optional[str]]:
    """Top-level name -> its docstring (None when it has none) for every class, function
    and single-name assignment defined in ``source``."""
    docs: Dict[str, Optional[str]] = {}
    body = ast.parse(source).body
    for i, node in enumerate(body):
        if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            docs[node.name] = ast.get_docstring(node)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if len(targets) != 1 or not isinstance(targets[0], ast.Name):
                continue
            after = body[i + 1] if i + 1 < len(body) else None
            is_doc = (
                isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            )
            docs[targets[0].id] = after.value.value if is_doc else None
    return docs


def package_definitions() -> Dict[str, Dict[str, Optional[str]]]:
    """Module name -> :func:`module_docstrings` for every module of ``avalanche_tmc``."""
    root = Path(avalanche_tmc.__file__).parent
    out = {"avalanche_tmc": module_docstrings((root / "__init__.py").read_text(encoding="utf-8"))}
    for info in pkgutil.iter_modules([str(root)]):
        path = root / f"{info.name}.py"
        if path.exists():
            out[f"avalanche_tmc.{info.name}"] = module_docstrings(path.read_text(encoding="utf-8"))
    return out


def test_module_docstrings_reads_definitions_and_attribute_docstrings():
    source = (
        'A = int\n"""An alias."""\n\nB = str\n\n'
        'class C:\n    """A class."""\n\nclass D:\n    x = 1\n\n'
        'def f():\n    """A function."""\n\ndef g():\n    pass\n'
    )
    assert module_docstrings(source) == {
        "A": "An alias.", "B": None, "C": "A class.", "D": None, "f": "A function.", "g": None,
    }


def test_every_public_name_has_a_docstring():
    definitions = package_definitions()
    missing, undefined = [], []
    for name in avalanche_tmc.__all__:
        obj = getattr(avalanche_tmc, name)  # AttributeError: __all__ names a missing object
        module = getattr(obj, "__module__", None)
        if not (isinstance(obj, type) or callable(obj)) or module not in definitions:
            # an alias or constant: the module that assigns it (an import is no definition)
            module = next((m for m, defs in definitions.items() if name in defs), None)
        if module is None or name not in definitions.get(module, {}):
            undefined.append(name)
        elif not (definitions[module][name] or "").strip():
            missing.append(f"{module}.{name}")
    assert not undefined, f"public names not defined in avalanche_tmc's source: {undefined}"
    assert not missing, f"public names without a docstring: {missing}"


def test_version_is_defined_once():
    assert re.fullmatch(r"\d+\.\d+\.\d+([.-]?\w+)?", avalanche_tmc.__version__)
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'version = { attr = "avalanche_tmc.__version__" }' in pyproject
    assert not re.search(r"^version\s*=\s*['\"]", pyproject, re.M), "a second, static version"


def test_readme_sections_become_pages():
    readme_pages = _load_readme_pages()
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    pages = readme_pages.split_readme(text)
    sections = [line[3:].strip() for line in text.splitlines() if line.startswith("## ")]
    assert [p.title for p in pages[1:]] == sections
    assert pages[0].filename == "index.md" and pages[0].markdown.startswith("# ")
    assert len({p.filename for p in pages}) == len(pages)
    for page in pages[1:]:
        assert page.markdown.startswith(f"# {page.title}\n")
    # nothing lost: the pages hold every README line, headings raised by one '#'
    page_lines = {line for p in pages for line in p.markdown.splitlines()}
    for line in text.splitlines():
        if line.strip():
            assert line in page_lines or (line.startswith("##") and line[1:] in page_lines), line


def test_split_readme_leaves_code_blocks_alone():
    readme_pages = _load_readme_pages()
    pages = readme_pages.split_readme(
        "# T\nintro\n## A\n### A1\n````python\n```\n## not a heading\n```\n````\n"
        "```` ```x ```` inline\n## A\ntext\n"
    )
    assert [(p.title, p.filename) for p in pages] == [("T", "index.md"), ("A", "a.md"), ("A", "a-2.md")]
    assert pages[1].markdown == (
        "# A\n## A1\n````python\n```\n## not a heading\n```\n````\n```` ```x ```` inline\n"
    )


def test_mkdocs_config_uses_the_hook_and_the_api_page():
    config = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert "docs/readme_pages.py" in config and "mkdocstrings" in config
    assert "::: avalanche_tmc" in (ROOT / "docs" / "api.md").read_text(encoding="utf-8")


def test_make_docs_builds(tmp_path):
    """The full site build, as ``make docs`` runs it (skipped without the ``docs`` extra)."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    out = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                   cwd=ROOT, check=True, capture_output=True, timeout=300)
    api = (out / "api" / "index.html").read_text(encoding="utf-8")
    for name in avalanche_tmc.__all__:
        assert f'id="avalanche_tmc.{name}"' in api, name
