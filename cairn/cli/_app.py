"""What every ``cairn`` subcommand shares: the Typer app they register on, the consoles,
the exit code of invalid input, and making the project importable. Subcommand modules
import this, never each other nor :mod:`cairn.cli.main`; they import what does I/O
inside their commands, so that ``cairn --help`` starts fast."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console

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
