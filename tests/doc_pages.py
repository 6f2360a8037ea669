"""The documentation as the tests read it: which Markdown files there are, their code
blocks, their headings and their links (shared by ``tests/test_code_blocks.py``,
``tests/test_docs.py``, ``tests/test_generated_blocks.py`` and ``tests/test_clean_install.py``).

Fences follow CommonMark, by the rules the report reads pages with
(``benchmarks.results.readme_blocks.opening_fence`` / ``closes_fence``): a fence is 3 or more
backticks or tildes indented at most 3 spaces, a backtick fence's info string has no
backtick (else the line is inline code), and the closing fence is the same character, at
least as long, indented at most 3 spaces, with nothing but spaces or tabs after it.
"""

import re
import unicodedata
from pathlib import Path
from typing import List, NamedTuple, Optional, Tuple

from benchmarks.results.readme_blocks import closes_fence, opening_fence

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
RESULTS = DOCS / "results"  # committed results files (the runner's own reports), not pages we write

NOT_RUN = re.compile(r"^\s*<!--\s*not run:(.*?)-->\s*$")
_OPENING = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


def documents() -> List[Path]:
    """``README.md`` and every page we write under ``docs/`` (not the results files)."""
    pages = sorted(p for p in DOCS.rglob("*.md") if RESULTS not in p.parents)
    return [ROOT / "README.md", *pages]


def all_text() -> str:
    """The text of every document of :func:`documents`, one after the other."""
    return "\n".join(path.read_text(encoding="utf-8") for path in documents())


def relative(path: Path) -> str:
    """``path`` relative to the repository root, with forward slashes (as given when it is
    outside the repository)."""
    resolved = path.resolve()
    return resolved.relative_to(ROOT).as_posix() if ROOT in resolved.parents else path.as_posix()


SNIPPET = re.compile(r'^--8<-- "([^":]+)(?::([\w-]+))?"\s*$')


def rendered_text(path: Path) -> str:
    """The text of page ``path`` as the site renders it: each ``--8<-- "FILE:SECTION"`` line
    (``pymdownx.snippets``, paths from the repository root) replaced by the lines of FILE
    between its ``--8<-- [start:SECTION]`` and ``--8<-- [end:SECTION]`` markers (the whole
    file without a SECTION)."""
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        m = SNIPPET.match(line)
        if not m:
            out.append(line)
            continue
        lines = (ROOT / m.group(1)).read_text(encoding="utf-8").splitlines()
        if m.group(2):
            start = next(i for i, x in enumerate(lines) if f"--8<-- [start:{m.group(2)}]" in x)
            end = next(i for i, x in enumerate(lines) if f"--8<-- [end:{m.group(2)}]" in x)
            lines = lines[start + 1:end]
        out.extend(lines)
    return "\n".join(out) + "\n"


def fences(text: str) -> List[Tuple[int, int, str]]:
    """``(opening line, closing line, language)`` of every fenced block of ``text``
    (1-based line numbers; language lower-cased, ``""`` when there is none)."""
    found, start, fence, lang = [], 0, None, ""
    for number, line in enumerate(text.splitlines(), 1):
        if fence is None:
            fence = opening_fence(line)
            if fence is not None:
                m = _OPENING.match(line)
                start, lang = number, (m.group(2).split() or [""])[0].lower()
        elif closes_fence(line, fence):
            found.append((start, number, lang))
            fence = None
    if fence is not None:
        raise ValueError(f"unclosed code fence opened on line {start}")
    return found


def prose_lines(text: str) -> List[str]:
    """The lines of ``text`` with every fenced block's lines (fences included) blanked."""
    lines = text.splitlines()
    for start, end, _ in fences(text):
        for i in range(start - 1, end):
            lines[i] = ""
    return lines


class Block(NamedTuple):
    """A fenced Python block: the line of its first code line, its code, and the reason
    given by a ``<!-- not run: REASON -->`` comment right before it (None: it runs)."""

    line: int
    code: str
    not_run: Optional[str] = None


def python_blocks(text: str) -> List[Block]:
    """The ```python (or ```py) fenced blocks of Markdown ``text``, in order, each with the
    reason of the ``<!-- not run: ... -->`` comment on the last non-blank line before it
    (an empty string when the comment gives none)."""
    lines = text.splitlines()
    blocks = []
    for start, end, lang in fences(text):
        if lang not in ("python", "py"):
            continue
        before = next((lines[i] for i in range(start - 2, -1, -1) if lines[i].strip()), "")
        m = NOT_RUN.match(before)
        code = "\n".join(lines[start:end - 1]) + "\n"
        blocks.append(Block(start + 1, code, m.group(1).strip() if m else None))
    return blocks


def dangling_not_run_markers(text: str) -> List[int]:
    """Lines of ``<!-- not run: ... -->`` comments that no Python block follows."""
    lines = text.splitlines()
    opening = {start: lang for start, _, lang in fences(text)}
    out = []
    for number, line in enumerate(lines, 1):
        if NOT_RUN.match(line):
            following = next((i + 1 for i in range(number, len(lines)) if lines[i].strip()), None)
            if opening.get(following) not in ("python", "py"):
                out.append(number)
    return out


def slug(heading: str) -> str:
    """The anchor of a heading, as MkDocs' ``toc`` extension makes it (and GitHub, for
    headings of words, digits, spaces and the punctuation it drops alike)."""
    text = re.sub(r"`|\*\*|\*", "", heading)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii").strip().lower()
    text = re.sub(r"[^\w\s-]", "", text)
    return re.sub(r"[-\s]+", "-", text).strip("-")


def anchors(text: str) -> List[str]:
    """The anchors of the ATX headings of ``text`` (outside code blocks)."""
    return [slug(m.group(1)) for line in prose_lines(text) if (m := re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line))]


LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def links(text: str) -> List[Tuple[int, str]]:
    """``(line, target)`` of every inline Markdown link or image in the prose of ``text``
    (code blocks and inline code left out; a link's text may wrap onto the next line)."""
    prose = "\n".join(re.sub(r"(`+).*?\1", "", line) for line in prose_lines(text))
    return [(prose.count("\n", 0, m.start()) + 1, m.group(1)) for m in LINK.finditer(prose)]  # text may wrap
