"""Every ```python block of README.md and of the pages under docs/ runs as written, so the
documentation cannot rot.

Each block runs on its own (a copy-paste unit, not a continuation of the block before) in
a fresh interpreter, from an empty temporary directory, with only the library on
``PYTHONPATH``: a block that imports ``benchmarks``, ``examples`` or ``tests``, or reads a
file of the checkout, fails as it would for a user who installed the package.

A block that cannot run so (it needs a data folder, a GPU, a checkout) is preceded by an
HTML comment ``<!-- not run: REASON -->``; it is then reported as skipped with that reason,
so ``pytest -rs`` lists and counts them. A marker without a reason, or one that no Python
block follows, fails. Shell blocks are not run here (``tests/test_clean_install.py`` runs
the command-line walk-through and the torchrun example in a fresh install).
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.doc_pages import ROOT, dangling_not_run_markers, documents, fences, python_blocks, relative

LIBRARY = ("avalanche_tmc", "avalanche_tmc_torchvision_fallback.py")
TIMEOUT_S = 300

BLOCKS = [(relative(path), block) for path in documents() for block in python_blocks(path.read_text(encoding="utf-8"))]


def test_parser_finds_every_python_fence_and_the_not_run_marker():
    text = (
        "intro\n```python\nprint(1)\n```\n\n```bash\n```python\n```\n"
        "<!-- not run: needs a GPU -->\n\n~~~py\nx = 1\n~~~\n```\nplain\n```\n"
        "```` ```python ```` is inline code\n<!-- not run: -->\n```python\ny = 2\n```\n"
    )
    blocks = python_blocks(text)
    assert [b.code for b in blocks] == ["print(1)\n", "x = 1\n", "y = 2\n"]
    assert [b.line for b in blocks] == [3, 12, 20]
    assert [b.not_run for b in blocks] == [None, "needs a GPU", ""]
    assert [lang for _, _, lang in fences(text)] == ["python", "bash", "py", "", "python"]
    with pytest.raises(ValueError, match="unclosed"):
        python_blocks("```python\nprint(1)\n")


def test_a_not_run_marker_must_precede_a_python_block():
    text = ("<!-- not run: a GPU -->\n```bash\nls\n```\n<!-- not run: a file -->\n\nprose\n"
            "<!-- not run: ok -->\n```py\n1\n```\n")
    assert dangling_not_run_markers(text) == [1, 5]


def test_blocks_found_and_every_skipped_one_says_why():
    assert any(path == "README.md" for path, _ in BLOCKS), "README.md has no Python example"
    assert len({path for path, _ in BLOCKS}) >= 3, "the docs pages' examples were not collected"
    runnable = [b for _, b in BLOCKS if b.not_run is None]
    assert len(runnable) >= len(BLOCKS) / 2, "most examples are marked 'not run'"
    unexplained = [f"{path}:{b.line}" for path, b in BLOCKS if b.not_run == ""]
    assert not unexplained, f"'<!-- not run: -->' without a reason before the blocks at {unexplained}"
    for path in documents():
        dangling = dangling_not_run_markers(path.read_text(encoding="utf-8"))
        assert not dangling, f"{relative(path)} lines {dangling}: '<!-- not run' not followed by a Python block"


@pytest.fixture(scope="module")
def library_only_path(tmp_path_factory) -> Path:
    """A directory holding links to the library alone (not the whole checkout)."""
    path = tmp_path_factory.mktemp("library")
    for name in LIBRARY:
        (path / name).symlink_to(ROOT / name)
    return path


@pytest.mark.integration
@pytest.mark.parametrize("where, block", BLOCKS, ids=[f"{path}:{b.line}" for path, b in BLOCKS])
def test_block_runs(where: str, block, library_only_path: Path, tmp_path: Path):
    if block.not_run is not None:
        pytest.skip(f"{where} line {block.line}: not run: {block.not_run}")
    script = tmp_path / "doc_block.py"
    script.write_text(block.code, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(library_only_path), MPLBACKEND="Agg")
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=TIMEOUT_S,
    )
    assert proc.returncode == 0, (
        f"{where}: the block at line {block.line} failed (exit {proc.returncode}):\n{proc.stderr[-4000:]}"
    )
