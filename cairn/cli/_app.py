"""What every ``cairn`` subcommand shares: the Typer app they register on, the consoles,
the exit code of invalid input, and making the project importable. Subcommand modules
import this, never each other nor :mod:`cairn.cli.main`; they import what does I/O
inside their commands, so that ``cairn --help`` starts fast."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from cairn.errors import InvalidInput

app = typer.Typer(
    name="cairn",
    help="cairn: a durable workflow engine for long-running, multi-step work.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
out = Console()
err = Console(stderr=True, soft_wrap=True)

EXIT_INVALID = 2


def cwd_importable() -> None:
    """Handlers are named ``package.module:function`` relative to the project, as for
    ``python -m``: make the working directory importable."""
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)


def json_object(text: str, option: str) -> dict[str, Any]:
    """An option's value that is a JSON object (``--input``, ``--payload``)."""
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidInput(f"{option} is not JSON: {exc}") from exc
    if not isinstance(payload, dict):
        raise InvalidInput(f"{option} must be a JSON object")
    return payload
