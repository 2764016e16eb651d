"""Broken links in the markdown pages: a relative link to a file that is not there, or to
an ``#anchor`` that no heading (or ``<a id>``) of the target page makes.

Anchors are made as GitHub makes them from a heading's text: lower case, punctuation
dropped (``-`` and ``_`` kept), spaces to ``-``, and ``-1``, ``-2`` ... on repeats.
Links with a scheme (``https:``, ``mailto:``) are not followed.

    python scripts/doc_links.py            # README.md and docs/*.md; exit 1 on any
"""

from __future__ import annotations

import itertools
import re
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from urllib.parse import unquote

from markdown_it import MarkdownIt
from markdown_it.token import Token

ROOT = Path(__file__).resolve().parents[1]
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")
HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")
NOT_IN_SLUG = re.compile(r"[^\w\- ]")


def pages(root: Path = ROOT) -> list[Path]:
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def _tokens(path: Path) -> list[Token]:
    return MarkdownIt("commonmark").enable("table").parse(path.read_text(encoding="utf-8"))


def slug(text: str) -> str:
    return NOT_IN_SLUG.sub("", text.strip().lower()).replace(" ", "-")


def _inline_text(token: Token) -> str:
    return "".join(
        child.content for child in token.children or [] if child.type in {"text", "code_inline"}
    )


@cache
def anchors(path: Path) -> frozenset[str]:
    """The anchors a page makes: its headings' slugs and its explicit ``<a id>``."""
    made: set[str] = set()
    seen: dict[str, int] = {}
    tokens = _tokens(path)
    for previous, token in itertools.pairwise(tokens):
        if previous.type == "heading_open" and token.type == "inline":
            base = slug(_inline_text(token))
            count = seen.get(base, 0)
            seen[base] = count + 1
            made.add(base if count == 0 else f"{base}-{count}")
    made.update(HTML_ANCHOR.findall(path.read_text(encoding="utf-8")))
    return frozenset(made)


def links(path: Path) -> Iterator[tuple[int, str]]:
    """(line, target) of every link and image in a page."""
    for token in _tokens(path):
        if token.type != "inline":
            continue
        line = (token.map[0] + 1) if token.map else 0
        for child in token.children or []:
            target = child.attrs.get("href") or child.attrs.get("src")
            if child.type in {"link_open", "image"} and isinstance(target, str):
                yield line, target


def broken(path: Path, root: Path = ROOT) -> list[str]:
    """``page:line: target (why)`` for every link of ``path`` that leads nowhere."""
    found = []
    for line, target in links(path):
        if SCHEME.match(target):
            continue
        file_part, _, anchor = target.partition("#")
        destination = (path.parent / unquote(file_part)).resolve() if file_part else path
        where = f"{path.relative_to(root)}:{line}: {target}"
        if not destination.exists():
            found.append(f"{where} (no such file)")
        elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
            found.append(f"{where} (no such anchor in {destination.name})")
    return found


def all_broken(root: Path = ROOT) -> list[str]:
    return [problem for page in pages(root) for problem in broken(page, root)]


if __name__ == "__main__":
    problems = all_broken()
    print("\n".join(problems) or "no broken links")
    sys.exit(1 if problems else 0)
