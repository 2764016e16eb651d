"""The public API is typed for the people who write handlers: the examples pass
``mypy --strict --disallow-any-explicit`` (no ``ctx: Any``), and code that misuses
``ctx.model`` or ``ctx.effect``, or declares a task on what is not a handler, is refused
by it, line by line.

mypy runs as users run it, from the repository's root (its ``pyproject.toml`` applies),
once for both cases. Its cache is kept under ``.mypy_cache/`` (a directory of its own: these
flags are not ``make lint``'s), so a run after the first re-reads only what changed — as
mypy runs for a user — instead of the SDKs' types each time (40 s against 1.5 s). It is an
integration test because it starts mypy as a process over the whole repository.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MISUSE = ROOT / "tests" / "fixtures" / "typing" / "misuse_model.py"
MYPY_CACHE = ROOT / ".mypy_cache" / "examples-strict"
ERROR_LINE = re.compile(r"^(?P<path>[^:]+):(?P<line>\d+): error: (?P<message>.*)$")


@pytest.fixture(scope="module")
def checked() -> tuple[int, list[str]]:
    """mypy's exit code and its error lines for the examples and the misuses, in one run
    (most of its time is reading the SDKs' types, once; then from the cache)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mypy",
            "--strict",
            "--disallow-any-explicit",
            "--cache-dir",
            str(MYPY_CACHE),
            "--hide-error-context",
            "--no-error-summary",
            "--no-pretty",
            "examples",
            str(MISUSE.relative_to(ROOT)),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=150,
        check=False,
    )
    return done.returncode, [line for line in done.stdout.splitlines() if ": error: " in line]


def refused_lines(errors: list[str]) -> dict[Path, dict[int, list[str]]]:
    """file -> line -> mypy's messages there."""
    refused: dict[Path, dict[int, list[str]]] = {}
    for line in errors:
        found = ERROR_LINE.match(line)
        assert found is not None, line
        where = refused.setdefault((ROOT / found["path"]).resolve(), {})
        where.setdefault(int(found["line"]), []).append(found["message"])
    return refused


@pytest.mark.timeout(180)
def test_the_examples_pass_strict_mypy_without_explicit_any(
    checked: tuple[int, list[str]],
) -> None:
    code, errors = checked
    assert code == 1  # the misuses' errors, and only theirs:
    assert set(refused_lines(errors)) == {MISUSE}, errors


@pytest.mark.timeout(180)
def test_misusing_ctx_model_ctx_effect_or_a_decorator_fails_mypy_on_those_lines(
    checked: tuple[int, list[str]],
) -> None:
    refused = refused_lines(checked[1]).get(MISUSE, {})
    source = MISUSE.read_text().splitlines()
    marked = {number for number, text in enumerate(source, 1) if "  # wrong" in text}
    assert set(refused) == marked
    messages = "\n".join(message for found in refused.values() for message in found)
    # What each says: the SDK's own signature, through the recorded client.
    assert 'Unexpected keyword argument "mesages"' in messages
    assert '"ChatCompletionMessage" has no attribute "contnet"' in messages
    assert 'Argument "prompt" has incompatible type "int"; expected "str"' in messages
    assert 'Incompatible types in "await" (actual type "ChatCompletion"' in messages
    assert 'Value of type variable "_Result" of "effect"' in messages
    assert 'Value of type variable "_Handler" of function cannot be' in messages
