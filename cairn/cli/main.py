"""The ``cairn`` command line: every command module registered on one Typer app, and the
entry point that turns cairn's refusals into a message and exit code 2."""

from __future__ import annotations

import sys

from cairn.cli import (  # noqa: F401 - each module registers its commands
    access,
    actions,
    api,
    artifacts,
    bulk,
    definitions,
    demo,
    dev,
    effects,
    listing,
    model_calls,
    pauses,
    processes,
    replay,
    runs,
    schedules,
    shares,
    sla,
    timeline,
    watch,
)
from cairn.cli._app import EXIT_INVALID, app, cwd_importable, err
from cairn.cli.remote import error_line
from cairn.errors import CairnError

__all__ = ["app", "main"]


def main() -> None:
    cwd_importable()
    try:
        app()
    except CairnError as exc:  # a definition's faults follow its line, one per line
        err.print(error_line(exc), markup=False)
        sys.exit(EXIT_INVALID)
