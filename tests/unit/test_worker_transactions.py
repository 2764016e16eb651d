"""The worker never opens a transaction: no module of the worker, its step pipeline,
model and HTTP recording or flow control calls ``.transaction()``, ``.reading()`` or
``.statements()`` — the engine's door (:mod:`cairn.engine.executions`) and the parts it
hands out open them. (Its import of ``cairn.store.sql`` is an import contract.)"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import cairn

OPENERS = {"transaction", "reading", "statements"}
PACKAGES = ("workers", "recording", "limits")


def opened(source: str) -> list[tuple[int, str]]:
    """The line and name of each call of a transaction opener in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in OPENERS
        ):
            found.append((node.lineno, node.func.attr))
    return found


def modules() -> list[Path]:
    root = Path(cairn.__file__).parent
    return sorted(path for package in PACKAGES for path in (root / package).rglob("*.py"))


def test_the_scan_finds_an_opener() -> None:
    """The check can fail: each opener, however it is reached, is found."""
    source = (
        "with runner.orchestrator.store.transaction() as tx: pass\n"
        "with self.store.reading() as tx: pass\n"
        "with store.statements(writes=True) as tx: pass\n"
    )
    assert opened(source) == [(1, "transaction"), (2, "reading"), (3, "statements")]


def test_the_scan_covers_the_step_pipeline() -> None:
    names = {path.relative_to(Path(cairn.__file__).parent).as_posix() for path in modules()}
    assert {"workers/runner.py", "workers/step/read.py", "workers/step/hold.py"} <= names
    assert {"workers/checkpoints.py", "recording/calls.py", "limits/limiter.py"} <= names


@pytest.mark.parametrize("path", modules(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_worker_module_opens_a_transaction(path: Path) -> None:
    calls = opened(path.read_text())
    assert not calls, f"{path} opens a transaction itself at {calls}: go through the engine"
