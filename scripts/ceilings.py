"""The size ceilings `make lint` checks: no module in cairn/ over 600 lines, no function or
method over 60 (from its ``def`` to its last line, docstring and comments included).

ruff has a ceiling on a function's statements (PLR0915) but none on its length, and none
on a module's. Migrations are left out: each is history, never edited once shipped.

A function still past the ceiling is named in ``KNOWN`` with its length today, so the list
can only shrink: a new offender fails, so does a known one that grew, and so does a known
one that no longer needs its entry (take it out). Prints each offender, one a line."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

MODULE_LINES = 600
FUNCTION_LINES = 60
ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "cairn"
SKIPPED = (PACKAGE / "store" / "migrations",)

# Functions over the ceiling, at their length: to be split, never to grow. None today.
KNOWN: dict[str, int] = {}


def _functions(tree: ast.AST, prefix: str = "") -> Iterator[tuple[str, int]]:
    """(qualified name, lines) of every function and method, nested ones included."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            name = f"{prefix}{node.name}"
            yield name, (node.end_lineno or node.lineno) - node.lineno + 1
            yield from _functions(node, f"{name}.")
        elif isinstance(node, ast.ClassDef):
            yield from _functions(node, f"{prefix}{node.name}.")
        else:
            yield from _functions(node, prefix)


def offenders(package: Path = PACKAGE, known: dict[str, int] = KNOWN) -> list[str]:
    found: list[str] = []
    seen: set[str] = set()
    for path in sorted(package.rglob("*.py")):
        if any(path.is_relative_to(skipped) for skipped in SKIPPED):
            continue
        where = path.relative_to(package.parent).as_posix()
        text = path.read_text(encoding="utf-8")
        lines = text.count("\n") + (not text.endswith("\n") and bool(text))
        if lines > MODULE_LINES:
            found.append(f"{where}: {lines} lines (module ceiling {MODULE_LINES})")
        for name, length in _functions(ast.parse(text, filename=where)):
            key = f"{where}:{name}"
            if length <= FUNCTION_LINES:
                continue
            seen.add(key)
            allowed = known.get(key)
            if allowed is None:
                found.append(f"{key}: {length} lines (function ceiling {FUNCTION_LINES})")
            elif length > allowed:
                found.append(f"{key}: {length} lines, grown past its known {allowed}")
    for key in sorted(set(known) - seen):
        found.append(f"{key}: within the ceiling now; take it out of KNOWN")
    return found


def main() -> int:
    found = offenders()
    for line in found:
        print(line)
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
