"""The command line run in the test's own process, as a user at the repository's root
would run it: no ``CAIRN_*`` setting but those the test gives, ``sys.path`` restored
afterwards (a command that loads workflows may add to it)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


def at_repo_root(
    monkeypatch: pytest.MonkeyPatch, home: Path | None = None, workflows: list[str] | None = None
) -> None:
    """From the repository's root, with no ``CAIRN_*`` setting but ``CAIRN_HOME`` (if
    ``home``) and ``CAIRN_WORKFLOWS`` (if ``workflows``)."""
    monkeypatch.chdir(REPO_ROOT)
    monkeypatch.setattr(sys, "path", list(sys.path))
    for key in list(os.environ):
        if key.startswith("CAIRN_"):
            monkeypatch.delenv(key)
    if home is not None:
        monkeypatch.setenv("CAIRN_HOME", str(home))
    if workflows is not None:
        monkeypatch.setenv("CAIRN_WORKFLOWS", ",".join(workflows))


def flat(text: str) -> str:
    """Rich wraps long lines at the console width: text with its whitespace collapsed."""
    return " ".join(text.split())
