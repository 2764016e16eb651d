"""``cairn dev``: a worker, a scheduler and the API with its console, for development,
in one terminal (docs/dev.md). The work is done in :mod:`cairn.dev`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from cairn.cli import remote
from cairn.cli._app import app, cwd_importable

INTERRUPTED = 130  # the shell's code for a command ended by SIGINT


@app.command()
def dev(
    workflows: Annotated[
        list[str] | None,
        typer.Option(
            "--workflows",
            help="Definitions to run: YAML files, directories or Python modules (repeat "
            "the option, or separate with commas); default: CAIRN_WORKFLOWS.",
        ),
    ] = None,
    host: Annotated[
        str,
        typer.Option(
            help="Address the API and console listen on; the default is reached from this "
            "machine only."
        ),
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Port of the API.")] = 8000,
    watch: Annotated[
        list[Path] | None,
        typer.Option(
            help="Folders whose .py and definition files restart the worker when they "
            "change (repeatable); default: the working directory."
        ),
    ] = None,
) -> None:
    """Run a development fleet: worker, scheduler and API with the console, one log,
    the worker reloaded when handler code changes. SQLite in ./.cairn by default;
    PostgreSQL, Redis and Celery when CAIRN_DATABASE_URL etc. are set. Ctrl-C stops it."""
    from cairn.dev.lines import Log
    from cairn.dev.plan import make_plan, prepare
    from cairn.dev.supervisor import Supervisor

    remote.process_note("dev")
    cwd_importable()  # the definitions are registered here first, handlers imported
    plan = make_plan(
        workflows=[part for item in workflows or [] for part in item.split(",") if part],
        host=host,
        port=port,
        watch=watch or [],
        project=Path.cwd(),
        environ=os.environ,
    )
    log = Log(json_lines=os.environ.get("CAIRN_LOG_FORMAT") == "json")
    try:
        revision = prepare(plan)
    except KeyboardInterrupt:  # Ctrl-C before anything started: nothing to stop
        raise typer.Exit(INTERRUPTED) from None
    log.say(f"database migrated (revision {revision}), definitions registered")
    raise typer.Exit(Supervisor(plan, log).run())
