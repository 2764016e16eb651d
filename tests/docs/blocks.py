"""The code blocks of a markdown page that a reader is told to run, in the page's order.

A ```` ```bash ```` (or ``sh``, ``shell``) block is shell, a ```` ```python ```` (or
``py``) block is Python; every other block (YAML, text, output) is only read. A block
runs unless an HTML comment just before it — invisible on the rendered page, plain in
its source — says otherwise:

``<!-- docs-test: skip: REASON -->``
    the block is not run; the reason is required (it starts a long-lived service the
    page only shows, needs a provider's key, runs the whole suite, ...).
``<!-- docs-test: background -->``
    the block is started in the background, as a reader starts a server in a second
    terminal, and ended with the page's other processes when the page is done.
``<!-- docs-test: background; ready: COMMAND -->``
    the same, then the next block waits until ``COMMAND`` succeeds (60 s at most).

A marker anywhere else — not right before a block that runs, unknown, or without its
reason — is an error: a page cannot quietly stop being tested.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from markdown_it import MarkdownIt

Language = Literal["shell", "python"]

LANGUAGES: dict[str, Language] = {
    "bash": "shell",
    "sh": "shell",
    "shell": "shell",
    "python": "python",
    "py": "python",
    "python3": "python",
}

MARKER = re.compile(r"<!--\s*docs-test:(?P<body>.*?)-->", re.DOTALL)
READY = re.compile(r"background\s*;\s*ready:\s*(?P<command>\S.*)", re.DOTALL)


class MarkerError(ValueError):
    """A ``docs-test`` marker the test cannot honour: it names where and why."""


@dataclass(frozen=True)
class Marker:
    skip: str | None = None  # the reason the block is not run
    background: bool = False
    ready: str | None = None  # a command that succeeds once the background block is up


@dataclass(frozen=True)
class Block:
    """A block to run: where it stands on its page, its language, its text, its marker."""

    page: str
    line: int  # of the opening fence, 1-based
    language: Language
    text: str
    marker: Marker = Marker()

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def parse_marker(body: str, where: str) -> Marker:
    """The marker's meaning; :class:`MarkerError` for one the test does not know."""
    body = " ".join(body.split())
    if body.startswith("skip"):
        reason = body.removeprefix("skip").lstrip(":").strip()
        if not reason:
            raise MarkerError(f"{where}: 'docs-test: skip' needs a reason: skip: WHY")
        return Marker(skip=reason)
    if body == "background":
        return Marker(background=True)
    if ready := READY.fullmatch(body):
        return Marker(background=True, ready=ready["command"].strip())
    raise MarkerError(
        f"{where}: unknown docs-test marker {body!r}: "
        "use 'skip: REASON', 'background' or 'background; ready: COMMAND'"
    )


def page_blocks(text: str, page: str) -> list[Block]:
    """Every shell and Python block of a markdown page, in order, with its marker."""
    found: list[Block] = []
    pending: tuple[Marker, str] | None = None
    for token in MarkdownIt("commonmark").parse(text):
        line = (token.map[0] + 1) if token.map else 0
        if token.type == "html_block" and (marked := MARKER.fullmatch(token.content.strip())):
            if pending is not None:
                raise MarkerError(f"{pending[1]}: a second docs-test marker before its block")
            pending = (parse_marker(marked["body"], f"{page}:{line}"), f"{page}:{line}")
            continue
        if pending is not None and token.type != "fence":
            raise MarkerError(f"{pending[1]}: a docs-test marker must stand right before a block")
        if token.type != "fence":
            continue
        language = LANGUAGES.get(token.info.split()[0].lower() if token.info.strip() else "")
        if language is None:
            if pending is not None:
                raise MarkerError(f"{pending[1]}: the marked block is not shell or Python")
            continue
        marker = pending[0] if pending is not None else Marker()
        found.append(Block(page, line, language, token.content, marker))
        pending = None
    if pending is not None:
        raise MarkerError(f"{pending[1]}: a docs-test marker with no block after it")
    return found


def read_blocks(path: Path, page: str) -> list[Block]:
    return page_blocks(path.read_text(encoding="utf-8"), page)
