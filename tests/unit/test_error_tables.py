"""The documented error tables are complete and true: every code the code can raise is in
docs/errors.md with the status the API answers for it, docs/api.md's table by status
agrees, and every validation fault a definition can get is in docs/definitions.md."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

import cairn
from cairn.api.errors import HTTP_CODES, status_of
from cairn.errors import CairnError

ROOT = Path(__file__).resolve().parents[2]
CODE = re.compile(r"^[a-z]+(?:_[a-z]+)*$")
# Mirrors of the engine's errors that carry the server's code, not one of their own.
MIRRORS = "cairn.http.errors"
# Codes made where no CairnError subclass names them: the API's last resort and the HTTP
# client's "no answer" (an ApiError instance's code).
BESIDE_CLASSES = {"internal_error": 500, "unreachable": None}


def _table(markdown: str, heading: str) -> list[list[str]]:
    """The rows of the first table under ``heading`` (up to the next ``## ``), as cells."""
    section = f"\n{markdown}".split(f"\n{heading}\n", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def _codes(cell: str) -> list[str]:
    return [code for code in re.findall(r"`([a-z_]+)`", cell) if CODE.match(code)]


def _error_classes() -> Iterator[type[CairnError]]:
    for module in pkgutil.walk_packages(cairn.__path__, "cairn."):
        if module.name.endswith("__main__") or module.name.startswith("cairn.testing"):
            continue
        importlib.import_module(module.name)
    pending: list[type[CairnError]] = [CairnError]
    while pending:
        kind = pending.pop()
        pending.extend(kind.__subclasses__())
        if kind is not CairnError and kind.__module__ != MIRRORS:
            yield kind


@pytest.fixture(scope="module")
def documented() -> dict[str, int | None]:
    """docs/errors.md's codes and their HTTP statuses (``None``: never over HTTP)."""
    text = (ROOT / "docs" / "errors.md").read_text()
    found: dict[str, int | None] = {}
    for code_cell, _raised_as, status, _when in _table(text, "# Error codes"):
        (code,) = _codes(code_cell)
        assert code not in found, f"{code} is in docs/errors.md twice"
        found[code] = None if status == "—" else int(status)
    return found


def test_every_error_the_code_raises_is_documented_with_its_status(
    documented: dict[str, int | None],
) -> None:
    raised: dict[str, set[int]] = {}
    for kind in _error_classes():
        raised.setdefault(kind.code, set()).add(status_of(kind.__new__(kind)))
    undocumented = sorted(set(raised) - set(documented))
    assert not undocumented, f"add to docs/errors.md: {undocumented}"
    for code, statuses in raised.items():
        if documented[code] is not None:
            assert statuses == {documented[code]}, f"{code}: the API answers {statuses}"
    for code, status in BESIDE_CLASSES.items():
        assert documented[code] == status
    stale = sorted(set(documented) - set(raised) - set(BESIDE_CLASSES))
    assert not stale, f"docs/errors.md names codes nothing raises: {stale}"


def test_the_http_layers_refusals_are_documented(documented: dict[str, int | None]) -> None:
    text = (ROOT / "docs" / "errors.md").read_text()
    rows = _table(text, "## Refusals of the HTTP layer itself")
    layer = {_codes(code)[0]: int(status) for code, status, _when in rows}
    for status, code in HTTP_CODES.items():  # cairn's own errors use some codes too
        assert layer.get(code, documented.get(code)) == status, code


def test_the_apis_table_by_status_lists_every_code_the_api_answers(
    documented: dict[str, int | None],
) -> None:
    text = (ROOT / "docs" / "api.md").read_text()
    by_status = {int(status): set(_codes(cell)) for status, cell in _table(text, "## Errors")}
    expected: dict[int, set[str]] = {}
    layer = {code: status for status, code in HTTP_CODES.items()}
    for code, status in [*documented.items(), *layer.items()]:
        if status is not None:
            expected.setdefault(status, set()).add(code)
    assert by_status == expected


def _fault_codes() -> dict[str, str]:
    """Every code a definition fault is made with: a string (or an error class's
    ``code``) handed to ``DefinitionFault``, ``reader.fault`` or the catalog's
    ``_failure``."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "cairn").rglob("*.py")):
        for call in ast.walk(ast.parse(path.read_text())):
            if not isinstance(call, ast.Call):
                continue
            func = call.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name not in {"DefinitionFault", "fault", "_failure"}:
                continue
            for arg in call.args[:2]:
                code = _literal_code(arg)
                if code is not None:
                    found.setdefault(code, str(path.relative_to(ROOT)))
    return found


def _literal_code(arg: ast.expr) -> str | None:
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and CODE.match(arg.value):
        return arg.value
    if isinstance(arg, ast.Attribute) and arg.attr == "code" and isinstance(arg.value, ast.Name):
        kind = getattr(importlib.import_module("cairn.errors"), arg.value.id, None)
        # Else a fault re-worded under its own code (``fault.code``): counted where made.
        if isinstance(kind, type) and issubclass(kind, CairnError):
            return kind.code
        return None
    return None


def test_every_validation_fault_is_documented() -> None:
    text = (ROOT / "docs" / "definitions.md").read_text()
    rows = _table(text, "## Validation faults")
    documented = {code for cell, _fault in rows for code in _codes(cell)}
    made = _fault_codes()
    assert len(made) > 30  # the scan finds what it looks for
    undocumented = {code: where for code, where in made.items() if code not in documented}
    assert not undocumented, f"add to docs/definitions.md's validation faults: {undocumented}"
    assert not documented - set(made), f"documented but never made: {documented - set(made)}"
