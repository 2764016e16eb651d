"""Commands about definitions: ``cairn validate``, ``cairn describe``, ``cairn config``."""

from __future__ import annotations

import json
import os
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

from cairn.cli._app import EXIT_INVALID, app, cwd_importable, err, out

if TYPE_CHECKING:
    from cairn.definitions.catalog import Found


class DescribeFormat(StrEnum):
    TABLE = "table"
    MERMAID = "mermaid"
    JSON = "json"


@app.command()
def validate(
    paths: Annotated[list[str], typer.Argument(help="Definition files, .py modules, directories.")],
) -> None:
    """Validate workflow definitions; list every problem and exit 2 if there are any.
    With CAIRN_QUEUES set, a node sent to a queue it does not declare is one."""
    from cairn.definitions.catalog import discover

    cwd_importable()
    found = _queues_checked(discover(paths))
    failures = 0
    # typer's echo, not rich: the one command that imports neither the database nor the
    # engine should not wait for a console library either (colour only on a terminal).
    for item in found:
        if item.definition is not None and item.error is None:
            ok = typer.style("ok", fg="green")
            typer.echo(f"{ok}   {item.definition.key}  ({item.source})")
        else:
            failures += 1
            typer.echo(f"{typer.style('fail', fg='red')} {item.source}", err=True)
            assert item.error is not None
            for fault in getattr(item.error, "faults", []):
                typer.echo(f"       - {fault}", err=True)
    if failures:
        typer.echo(f"{failures} of {len(found)} definition(s) invalid", err=True)
        raise typer.Exit(EXIT_INVALID)
    if not found:
        typer.echo("no workflow definitions found", err=True)
        raise typer.Exit(EXIT_INVALID)


def _queues_checked(found: list[Found]) -> list[Found]:
    """``found``, each definition that names a queue outside CAIRN_QUEUES (when it is
    set) with the refusal registering it would meet."""
    # Only then are the settings read (and imported): validating a file needs no deployment.
    if "CAIRN_QUEUES" not in os.environ:
        return found
    from cairn.config import Settings
    from cairn.definitions.catalog import Found
    from cairn.definitions.queues import check_queues
    from cairn.errors import UndeclaredQueue

    settings = Settings.from_env()
    checked = []
    for item in found:
        refusal: UndeclaredQueue | None = None
        if item.definition is not None:
            try:
                check_queues([item.definition], settings.queues, settings.queue)
            except UndeclaredQueue as refused:
                refusal = refused
        checked.append(item if refusal is None else Found(item.source, item.definition, refusal))
    return checked


@app.command()
def describe(
    path: Annotated[str, typer.Argument(help="A definition file or module.")],
    output_format: Annotated[
        DescribeFormat, typer.Option("--format", "-f", help="table, mermaid or json.")
    ] = DescribeFormat.TABLE,
    resolve: Annotated[
        bool,
        typer.Option(
            help="Import handlers and guards (turn off to describe a "
            "definition whose code is not installed here)."
        ),
    ] = True,
) -> None:
    """Print the workflow's transition table: every (from, event, guard, to)."""
    from cairn.cli import render
    from cairn.definitions.catalog import discover

    cwd_importable()
    found = discover([path], resolve=resolve)
    failed = [item for item in found if item.error is not None]
    for item in failed:
        err.print(str(item.error), markup=False)
    if failed or not found:
        if not found:
            err.print(f"no workflow definitions in {path}")
        raise typer.Exit(EXIT_INVALID)
    for item in found:
        assert item.definition is not None
        if output_format is DescribeFormat.TABLE:
            out.print(render.as_table(item.definition))
        elif output_format is DescribeFormat.MERMAID:
            print(render.as_mermaid(item.definition))
        else:
            print(render.as_json(item.definition))


@app.command("config")
def show_config() -> None:
    """Print the effective settings (from CAIRN_* variables), passwords masked."""
    from cairn.config import Settings

    print(json.dumps(Settings.from_env().describe(), indent=2))
