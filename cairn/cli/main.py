"""The ``cairn`` command line: the command modules registered on one Typer app, and the
entry point that turns cairn's refusals into a message and exit code 2.

A command line imports the module of the command it runs and no other: building every
command's options is a tenth of what a quick command costs. ``cairn --help``, an unknown
command and :data:`app` (as tests use it) load them all.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from cairn.cli._app import EXIT_INVALID, cwd_importable, err
from cairn.cli.preload.place import ROOT_VALUE_OPTIONS
from cairn.cli.remote import error_line
from cairn.errors import CairnError

if TYPE_CHECKING:
    import typer
    from typer import _click as click

__all__ = ["COMMAND_MODULES", "app", "main"]  # noqa: F822 - app: __getattr__

# Each top-level command (or group) and the module of cairn.cli that registers it;
# tests/unit/test_cli.py holds this to what the modules register.
COMMAND_MODULES: Final = {
    "audit": "access",
    "keys": "access",
    "signal": "actions",
    "cancel": "actions",
    "rollback": "actions",
    "api": "api",
    "artifacts": "artifacts",
    "artifacts-cleanup": "artifacts",
    "bulk": "bulk",
    "validate": "definitions",
    "describe": "definitions",
    "config": "definitions",
    "demo": "demo",
    "dev": "dev",
    "effects": "effects",
    "resolve": "effects",
    "reconcile": "effects",
    "runs": "listing",
    "waiting": "listing",
    "calls": "model_calls",
    "pause": "pauses",
    "resume": "pauses",
    "pauses": "pauses",
    "worker": "processes",
    "scheduler": "processes",
    "db": "processes",
    "probe": "processes",
    "replay": "replay",
    "fork": "replay",
    "register": "runs",
    "submit": "runs",
    "status": "runs",
    "events": "runs",
    "wait": "runs",
    "schedule": "schedules",
    "shares": "shares",
    "sla": "sla",
    "versions": "versions",
    "history": "timeline",
    "state": "timeline",
    "diff": "timeline",
    "bisect": "timeline",
    "watch": "watch",
}


def load(modules: Sequence[str] | None = None) -> typer.Typer:
    """The app with the commands of ``modules`` registered (all of them: None)."""
    for module in sorted(set(COMMAND_MODULES.values())) if modules is None else modules:
        importlib.import_module(f"cairn.cli.{module}")
    from cairn.cli._app import app

    return app


def command_of(args: Sequence[str]) -> str | None:
    """The command word of a command line, if it names one before any ``--help`` (or
    ``--version``, which the root answers)."""
    words = iter(args)
    for word in words:
        if word in ROOT_VALUE_OPTIONS:
            next(words, None)
        elif not word.startswith("-") or word in {"--help", "--version"}:
            return word
    return None


def modules_for(args: Sequence[str]) -> list[str] | None:
    """The command modules a command line needs: its command's; none for ``--version``;
    all of them (None) for the root's help and for a word that is no command."""
    command = command_of(args)
    if command == "--version":
        return []
    module = COMMAND_MODULES.get(command or "")
    return None if module is None else [module]


class _Built:
    """The click command of every command, built once by the preloaded command line
    (:func:`prebuild`): a tenth of a second that each command it forks then skips."""

    command: click.Command | None = None


def prebuild() -> None:
    from typer.main import get_command

    _Built.command = get_command(load())


def main() -> None:
    cwd_importable()
    app = load(modules_for(sys.argv[1:]))
    try:
        _Built.command() if _Built.command is not None else app()
    except CairnError as exc:  # a definition's faults follow its line, one per line
        err.print(error_line(exc), markup=False)
        sys.exit(EXIT_INVALID)


def __getattr__(name: str) -> typer.Typer:
    if name == "app":  # every command: for tests and for what embeds the command line
        return load()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
