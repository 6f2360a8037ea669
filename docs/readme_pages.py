"""MkDocs hook: the README's sections become the site's pages.

The README is the single source: its text before the first ``## `` heading is the home
page, and each ``## `` section is one page, with its headings raised one level (``##``
becomes the page title ``#``, ``###`` becomes ``##``; lines inside code fences are left
alone). ``api.md`` (the API reference rendered by mkdocstrings) comes last.

:func:`split_readme` is plain Python (tested without MkDocs); ``on_config`` and
``on_files`` are the MkDocs hook entry points (``hooks:`` in ``mkdocs.yml``).
"""

import os
import re
from typing import List, NamedTuple

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
README = os.path.join(ROOT, "README.md")
OPENING = re.compile(r"^ {0,3}(`{3,}|~{3,})(.*)$")


class Page(NamedTuple):
    """One generated page: its navigation title, file name and Markdown text."""

    title: str
    filename: str
    markdown: str


def _slug(title: str) -> str:
    """A file-name-safe slug of a heading."""
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "section"


def in_code(lines: List[str]) -> List[bool]:
    """For each line, whether it belongs to a fenced code block (fences included).

    CommonMark's rules, as far as a README needs them: a fence is 3 or more backticks or
    tildes, a backtick fence's info string has no backtick (else the line is inline
    code), and the closing fence is the same character, at least as long, alone.
    """
    flags, fence = [], None
    for line in lines:
        if fence is None:
            m = OPENING.match(line)
            if m and not (m.group(1)[0] == "`" and "`" in m.group(2)):
                fence = m.group(1)
            flags.append(fence is not None)
        else:
            flags.append(True)
            if re.fullmatch(re.escape(fence[0]) + "{%d,}" % len(fence), line.strip()):
                fence = None
    return flags


def _raise_headings(lines: List[str]) -> List[str]:
    """Drop one ``#`` from every ATX heading of level 2 or more, outside code fences."""
    return [
        line[1:] if not code and re.match(r"^#{2,6} ", line) else line
        for line, code in zip(lines, in_code(lines))
    ]


def split_readme(text: str) -> List[Page]:
    """Split README text into pages: the intro (``index.md``), then one per ``## `` section."""
    lines = text.splitlines()
    sections, current = [], []
    for line, code in zip(lines, in_code(lines)):
        if not code and line.startswith("## "):
            sections.append(current)
            current = []
        current.append(line)
    sections.append(current)
    intro, rest = sections[0], sections[1:]
    title = next((line[2:].strip() for line in intro if line.startswith("# ")), "Home")
    pages = [Page(title, "index.md", "\n".join(intro).strip() + "\n")]
    used = {"index", "api"}
    for lines in rest:
        heading = lines[0][3:].strip()
        slug = base = _slug(heading)
        n = 2
        while slug in used:
            slug, n = f"{base}-{n}", n + 1
        used.add(slug)
        pages.append(Page(heading, slug + ".md", "\n".join(_raise_headings(lines)).strip() + "\n"))
    return pages


def _pages() -> List[Page]:
    with open(README, encoding="utf-8") as f:
        return split_readme(f.read())


def on_config(config, **kwargs):
    """Navigation: the README's pages in order, then the API reference."""
    config["nav"] = [{page.title: page.filename} for page in _pages()] + [{"API reference": "api.md"}]
    return config


def on_files(files, config, **kwargs):
    """Add the README's pages as generated files."""
    from mkdocs.structure.files import File

    for page in _pages():
        files.append(File.generated(config, page.filename, content=page.markdown))
    return files
