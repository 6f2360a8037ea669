"""Documentation: every public name has a docstring; the site's navigation lists every page;
every relative link of README.md and the pages resolves; the site builds strictly.

Docstrings are read from the source (``ast``), as the API reference renders them, not
from ``obj.__doc__``: a NamedTuple or dataclass gets an automatic ``__doc__`` that would
hide a missing one, and a type alias such as ``Delta = Dict[str, Tensor]`` has no
``__doc__`` of its own. For a module-level assignment the docstring is the string
literal right after it (the convention that mkdocstrings and Sphinx autodoc follow).
"""

import ast
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, List, Optional

import pytest
import yaml

import avalanche_tmc
from tests.doc_pages import DOCS, anchors, documents, links, prose_lines, relative, rendered_text, slug

ROOT = Path(__file__).resolve().parents[1]


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


def module_path(module: str) -> Path:
    """The source file of a module of ``avalanche_tmc`` (a package: its ``__init__.py``)."""
    path = Path(avalanche_tmc.__file__).parent.parent.joinpath(*module.split("."))
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def defining_module(module: str, name: str, depth: int = 0) -> Optional[str]:
    """The module whose source defines ``name`` as ``module`` exports it, following
    ``from .x import name`` re-exports (anywhere in the module, lazy imports included), as
    the API reference resolves it; None when no module of the library defines it."""
    path = module_path(module)
    if depth > 20 or not path.is_file():
        return None
    tree = ast.parse(path.read_text(encoding="utf-8"))
    if name in module_docstrings(path.read_text(encoding="utf-8")):
        return module
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
                    target = ".".join([*base, *([node.module] if node.module else [])])
                    if target.startswith("avalanche_tmc"):
                        return defining_module(target, alias.name, depth + 1)
    return None


def test_defining_module_follows_re_exports():
    assert defining_module("avalanche_tmc", "TMCStrategy") not in (None, "avalanche_tmc")
    assert defining_module("avalanche_tmc", "__version__") == "avalanche_tmc"
    assert defining_module("avalanche_tmc", "no_such_name") is None


def test_every_public_name_has_a_docstring():
    missing, undefined = [], []
    for name in avalanche_tmc.__all__:
        getattr(avalanche_tmc, name)  # AttributeError: __all__ names a missing object
        module = defining_module("avalanche_tmc", name)
        if module is None:
            undefined.append(name)
        elif not (module_docstrings(module_path(module).read_text(encoding="utf-8"))[name] or "").strip():
            missing.append(f"{module}.{name}")
    assert not undefined, f"public names not defined in avalanche_tmc's source: {undefined}"
    assert not missing, f"public names without a docstring: {missing}"


def test_version_is_defined_once():
    assert re.fullmatch(r"\d+\.\d+\.\d+([.-]?\w+)?", avalanche_tmc.__version__)
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    assert 'version = { attr = "avalanche_tmc.__version__" }' in pyproject
    assert not re.search(r"^version\s*=\s*['\"]", pyproject, re.M), "a second, static version"


def nav_pages(nav) -> List[str]:
    """The page paths of an ``mkdocs.yml`` navigation (entries ``title: page`` or sections)."""
    out: List[str] = []
    for entry in nav:
        values = entry.values() if isinstance(entry, dict) else [entry]
        for value in values:
            out.extend(nav_pages(value) if isinstance(value, list) else [value])
    return out


def test_nav_pages_reads_titles_sections_and_bare_pages():
    assert nav_pages([{"Home": "index.md"}, "a.md", {"Studies": [{"S": "s.md"}, "t.md"]}]) == [
        "index.md", "a.md", "s.md", "t.md"]


def test_navigation_lists_every_page_once_and_only_pages_that_exist():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    listed = nav_pages(config["nav"])
    assert len(listed) == len(set(listed)), "a page listed twice"
    on_disk = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert set(listed) == on_disk, (f"pages not in mkdocs.yml's nav: {sorted(on_disk - set(listed))}; "
                                    f"nav entries without a page: {sorted(set(listed) - on_disk)}")
    assert listed[0] == "index.md" and "api.md" in listed
    assert "hooks" not in config, "the pages under docs/ are the site's source, not generated by a hook"


def test_anchor_and_link_helpers():
    text = ("# A `code` title\n```\n# not a heading\n[c](c.md)\n```\n## Two words: more (x)\n"
            "[t](b.md#c) `[n](x.md)` ![i](p.png) [wrapped\ntext](w.md)\n")
    assert anchors(text) == ["a-code-title", "two-words-more-x"]
    assert links(text) == [(7, "b.md#c"), (7, "p.png"), (7, "w.md")]


def _broken_links(path: Path) -> List[str]:
    text = path.read_text(encoding="utf-8")
    broken = []
    for line, target in links(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto: ...
            continue
        file_part, _, fragment = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        if not linked.exists():
            broken.append(f"{relative(path)}:{line}: {target} (no such file)")
        elif fragment and linked.suffix == ".md" and fragment not in anchors(rendered_text(linked)):
            broken.append(f"{relative(path)}:{line}: {target} (no heading #{fragment} there)")
        elif linked.is_file() and path.parent == DOCS and DOCS not in linked.parents:
            broken.append(f"{relative(path)}:{line}: {target} (outside docs/: not on the site)")
    return broken


def test_broken_links_are_found(tmp_path, monkeypatch):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n## Sub part\n")
    page = docs / "b.md"
    page.write_text("[ok](a.md#sub-part) [x](missing.md) [y](a.md#nope) [z](#b) [w](../README.md) "
                    "[u](https://x.org)\n# B\n")
    (tmp_path / "README.md").write_text("")
    monkeypatch.setattr(sys.modules[__name__], "DOCS", docs)
    monkeypatch.setattr(sys.modules[__name__], "relative", lambda p: p.name)
    assert _broken_links(page) == [
        "b.md:1: missing.md (no such file)", "b.md:1: a.md#nope (no heading #nope there)",
        "b.md:1: ../README.md (outside docs/: not on the site)"]


@pytest.mark.parametrize("path", documents(), ids=relative)
def test_relative_links_resolve(path: Path):
    assert not _broken_links(path)


def test_readme_is_short_and_links_every_page():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 250, "README.md is the front page: keep it within 250 lines"
    linked = {(ROOT / target.partition("#")[0]).resolve() for _, target in links(readme)}
    pages = [p for p in documents()[1:] if p.name != "index.md"]
    assert not [relative(p) for p in pages if p.resolve() not in linked], "pages README.md does not link"


KNOWN_ABSENT_FROM_API: list = []


@pytest.mark.integration
def test_make_docs_builds(tmp_path):
    """The full site build, as ``make docs`` runs it (skipped without the ``docs`` extra)."""
    pytest.importorskip("mkdocs")
    pytest.importorskip("mkdocstrings")
    out = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"mkdocs build --strict failed:\n{proc.stderr[-4000:]}"
    api = (out / "api" / "index.html").read_text(encoding="utf-8")
    absent = [name for name in avalanche_tmc.__all__ if f'id="avalanche_tmc.{name}"' not in api]
    assert absent == KNOWN_ABSENT_FROM_API, f"public names the API reference does not render: {absent}"
    home = (out / "index.html").read_text(encoding="utf-8")  # the README's quick start, included
    assert 'id="quick-start"' in home and "TMCStrategy" in home and "8&lt;--" not in home and "--8<--" not in home
    for page in documents()[1:]:
        built = out / page.relative_to(DOCS).with_suffix("") / "index.html"
        assert page.name == "index.md" or built.is_file(), f"{relative(page)} was not built"


def test_the_site_home_includes_the_readme_quick_start():
    home = rendered_text(DOCS / "index.md")
    assert "## Quick start" in home and "strategy.forget(2)" in home and "--8<--" not in home


CHECKOUT_PATH = re.compile(r"`((?:avalanche_tmc|benchmarks|baselines|experiments|examples|tests|docs)/[\w./-]*)`")


def checkout_paths(text: str) -> List[str]:
    """Paths of the checkout that the prose of ``text`` names in inline code
    (``benchmarks/runner/presets.py``, ``tests/avalanche_tmc/files/``)."""
    return [m.group(1) for line in prose_lines(text) for m in CHECKOUT_PATH.finditer(line)]


def test_checkout_paths_reads_inline_code_only():
    text = "see `benchmarks/run.py` and `tests/x/`, not benchmarks/y.py\n```\n`docs/z.md`\n```\n"
    assert checkout_paths(text) == ["benchmarks/run.py", "tests/x/"]


@pytest.mark.parametrize("path", documents(), ids=relative)
def test_files_the_pages_name_exist(path: Path):
    missing = [p for p in checkout_paths(path.read_text(encoding="utf-8")) if not (ROOT / p).exists()]
    assert not missing, f"{relative(path)} names files that do not exist (moved?): {missing}"


def test_the_readme_says_what_the_runner_needs_beyond_its_extra():
    """Issue 42, B12 (the extra now installed in the runner's section, issue 59): the quick start
    implied `.[benchmarks]` was all the runner needs; its data sets are installed otherwise
    (Animal-MNIST with --no-deps, Debian's Fashion-MNIST, npm's emoji sets)."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    runner = readme[readme.index("## Your own images"):readme.index("## Set-up")]  # where the extra is installed
    assert "'.[benchmarks]'" in runner and "'.[benchmarks]'" not in readme[:readme.index("## Your own images")]
    for needed in ("--no-deps\nanimal-mnist", "dataset-fashion-mnist", "@iconify-json/", "docs/install.md"):
        assert needed in runner, needed


SOURCES = ("avalanche_tmc", "benchmarks", "baselines", "experiments", "examples")
PAGE_REFERENCE = re.compile(r"(docs/[\w./-]+\.md|README(?:\.md|'s))"
                            r"(?:[,:]? (?:section |page )?[\"'“‘]([^\"'”’\n]{3,80})[\"'”’])?")


def _source_references():
    """``(file, line, page, section or None)`` of every reference to a page (and a section
    of it, quoted after it) in the code's help texts, messages and docstrings."""
    found = []
    for folder in SOURCES:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                for m in PAGE_REFERENCE.finditer(line):
                    page = "README.md" if m.group(1).startswith("README") else m.group(1)
                    found.append((relative(path), number, page, m.group(2)))
    return found


def test_every_page_and_section_the_code_names_exists():
    """Issue 59, item 7: help texts and messages sent readers to "the README's reproducibility
    notes" and "docs/results.md, 'What is reproducible'", which did not exist. Every page the
    code names exists, and every section it quotes after a page is a heading of that page (its
    first words; case and punctuation aside)."""
    references = _source_references()
    assert len(references) > 20 and any(section for *_, section in references)
    broken = []
    for where, number, page, section in references:
        target = ROOT / page
        if not target.is_file():
            broken.append(f"{where}:{number}: {page} does not exist")
            continue
        if section is None:
            continue
        headings = anchors(rendered_text(target))
        if not any(heading.startswith(slug(section)) for heading in headings):
            broken.append(f"{where}:{number}: {page} has no section {section!r}")
    assert not broken, "\n".join(broken)


def test_a_newcomer_meets_the_import_and_a_training_loop_in_the_first_screenful():
    """Issue 59, item 7: the README opened with an 11-column premise map; a newcomer now reads
    what the project is, the install line, then the import and a training loop within the
    first 40 lines after the title, and the README ends its results with one small table."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    screen = "\n".join(lines[1:41])
    assert "from avalanche_tmc import TangentModel, TMCStrategy" in screen
    assert "for experience in benchmark.train_stream:" in screen and "strategy.train(experience)" in screen
    assert screen.index("pip install") < screen.index("from avalanche_tmc import")
    tables = [line for line in lines if line.startswith("| Method |")]
    assert len(tables) == 1 and len(lines) <= 250
