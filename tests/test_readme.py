"""Every ```python block of README.md runs as written, so the README cannot rot.

Each block runs on its own (a copy-paste unit, not a continuation of the block before)
in a fresh interpreter, from an empty temporary directory, with only the library on
``PYTHONPATH``: a block that imports ``benchmarks``, ``examples`` or ``tests``, or reads
a file of the checkout, fails as it would for a user who installed the package.

A block that cannot run offline (it needs a GPU, a data set or weights the reader
supplies) must say so on its first line, ``# not run: <reason>``; it is then reported
as skipped with that reason, so ``pytest -rs`` lists and counts them.
"""

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import List, NamedTuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SKIP_MARKER = "# not run:"
LIBRARY = ("avalanche_tmc", "avalanche_tmc_torchvision_fallback.py")
TIMEOUT_S = 300


class Block(NamedTuple):
    """A fenced ```python block: the README line of its first code line, and its code."""

    line: int
    code: str

    @property
    def skip_reason(self):
        """The reason after ``# not run:`` on the first line, or None if the block runs."""
        first = self.code.lstrip("\n").split("\n", 1)[0].strip()
        return first[len(SKIP_MARKER):].strip() if first.startswith(SKIP_MARKER) else None


def python_blocks(text: str) -> List[Block]:
    """The ```python (or ```py) fenced blocks of Markdown ``text``, in order."""
    blocks, code, start, fence = [], None, 0, None
    for number, line in enumerate(text.splitlines(), 1):
        if code is None:
            m = re.match(r"^(`{3,}|~{3,})\s*(.*)$", line)
            # (CommonMark: a backtick fence's info string has no backtick, else it is inline code)
            if m and not (m.group(1)[0] == "`" and "`" in m.group(2)):
                fence, lang = m.group(1), (m.group(2).split() or [""])[0].lower()
                code, start = ([] if lang in ("python", "py") else False), number + 1
        elif re.fullmatch(re.escape(fence[0]) + "{%d,}" % len(fence), line.strip()):
            if code is not False:
                blocks.append(Block(start, "\n".join(code) + "\n"))
            code = None
        elif code is not False:
            code.append(line)
    if code is not None:
        raise ValueError(f"unclosed code fence opened on line {start - 1}")
    return blocks


BLOCKS = python_blocks(README.read_text(encoding="utf-8"))


def test_parser_finds_every_python_fence_and_the_skip_marker():
    text = (
        "intro\n```python\nprint(1)\n```\n\n```bash\n```python\n```\n"
        "~~~py\n# not run: needs a GPU\nx = 1\n~~~\n```\nplain\n```\n"
        "```` ```python ```` is inline code\n"
    )
    blocks = python_blocks(text)
    assert [b.code for b in blocks] == ["print(1)\n", "# not run: needs a GPU\nx = 1\n"]
    assert [b.line for b in blocks] == [3, 10]
    assert [b.skip_reason for b in blocks] == [None, "needs a GPU"]
    with pytest.raises(ValueError, match="unclosed"):
        python_blocks("```python\nprint(1)\n")


def test_readme_blocks_found_and_at_least_one_runs():
    opened = len(re.findall(r"^```python\s*$", README.read_text(encoding="utf-8"), re.M))
    assert len(BLOCKS) == opened >= 1
    skipped = [b for b in BLOCKS if b.skip_reason is not None]
    assert len(skipped) < len(BLOCKS), "every README example is marked '# not run'"
    for block in skipped:
        assert block.skip_reason, f"README line {block.line}: '# not run:' needs a reason"


@pytest.fixture(scope="module")
def library_only_path(tmp_path_factory) -> Path:
    """A directory holding links to the library alone (not the whole checkout)."""
    path = tmp_path_factory.mktemp("library")
    for name in LIBRARY:
        (path / name).symlink_to(ROOT / name)
    return path


@pytest.mark.parametrize("block", BLOCKS, ids=[f"README.md:{b.line}" for b in BLOCKS])
def test_readme_block_runs(block: Block, library_only_path: Path, tmp_path: Path):
    if block.skip_reason is not None:
        pytest.skip(f"README.md line {block.line}: not run: {block.skip_reason}")
    script = tmp_path / "readme_block.py"
    script.write_text(block.code, encoding="utf-8")
    env = dict(os.environ, PYTHONPATH=str(library_only_path), MPLBACKEND="Agg")
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=TIMEOUT_S,
    )
    assert proc.returncode == 0, (
        f"README.md block at line {block.line} failed (exit {proc.returncode}):\n"
        f"{proc.stderr[-4000:]}"
    )
