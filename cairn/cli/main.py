"""The ``cairn`` command line."""

from __future__ import annotations

import json
import sys
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from cairn.cli import render
from cairn.config import Settings
from cairn.errors import CairnError, WorkflowDefinitionError
from cairn.orchestrator.catalog import discover

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


class DescribeFormat(StrEnum):
    TABLE = "table"
    MERMAID = "mermaid"
    JSON = "json"


@app.command()
def validate(
    paths: Annotated[list[str], typer.Argument(help="Definition files, .py modules, directories.")],
) -> None:
    """Validate workflow definitions; list every problem and exit 2 if there are any."""
    _cwd_importable()
    found = discover(paths)
    failures = 0
    for item in found:
        if item.definition is not None:
            out.print(f"[green]ok[/green]   {item.definition.key}  ({item.source})")
        else:
            failures += 1
            err.print(f"[red]fail[/red] {item.source}")
            assert item.error is not None
            for fault in getattr(item.error, "faults", []):
                err.print(f"       - {fault}", markup=False)
    if failures:
        err.print(f"{failures} of {len(found)} definition(s) invalid")
        raise typer.Exit(EXIT_INVALID)
    if not found:
        err.print("no workflow definitions found")
        raise typer.Exit(EXIT_INVALID)


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
    _cwd_importable()
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
    print(json.dumps(Settings.from_env().describe(), indent=2))


def _cwd_importable() -> None:
    """Handlers are named ``package.module:function`` relative to the project, as for
    ``python -m``: make the working directory importable."""
    cwd = str(Path.cwd())
    if cwd not in sys.path:
        sys.path.insert(0, cwd)


def main() -> None:
    from cairn.cli import (  # noqa: F401, PLC0415
        api,
        artifacts,
        demo,
        effects,
        processes,
        replay,
        runs,
        sla,
        timeline,
    )

    _cwd_importable()
    try:
        app()
    except WorkflowDefinitionError as exc:
        err.print(str(exc), markup=False)
        sys.exit(EXIT_INVALID)
    except CairnError as exc:
        err.print(f"error: {exc}", markup=False)
        sys.exit(EXIT_INVALID)
