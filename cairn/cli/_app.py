"""What every ``cairn`` subcommand shares: the Typer app they register on, the consoles,
the exit code of invalid input, and making the project importable.

Subcommand modules import this, never each other nor :mod:`cairn.cli.main`. Importing
them must stay cheap — typer, the standard library, :mod:`cairn.errors` — because
``cairn --help`` imports them all: what a command uses (the database, the engine, rich's
widgets, the user's handlers) it imports when it runs.
``tests/integration/test_cli_imports.py`` holds every command to it; ``bench/cli.py`` times
them.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, cast

import typer

from cairn.errors import InvalidInput

if TYPE_CHECKING:
    from rich.console import Console

app = typer.Typer(
    name="cairn",
    help="cairn: a durable workflow engine for long-running, multi-step work.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Typer's plain help, not its rich panels: those label every flag <bool> (typer 0.29)
    # and import markdown and syntax highlighting, 100 ms of every --help.
    rich_markup_mode=None,
)

EXIT_FAILED = 1  # the run ended other than succeeded
EXIT_INVALID = 2
EXIT_TIMEOUT = 3


class _LazyConsole:
    """A rich Console made on first use, so that a command that prints nothing through
    it (``--version``, a JSON answer) does not import rich's console."""

    def __init__(self, **options: Any) -> None:
        self._options = options
        self._console: Console | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self._made(), name)

    def __enter__(self) -> Console:  # rich's Live holds its console as a context manager
        return self._made().__enter__()

    def __exit__(self, *exc: object) -> None:
        self._made().__exit__(*exc)

    def _made(self) -> Console:
        if self._console is None:
            from rich.console import Console

            self._console = Console(**self._options)
        return self._console


out = cast("Console", _LazyConsole())
err = cast("Console", _LazyConsole(stderr=True, soft_wrap=True))


def _print_version(asked: bool) -> None:
    if asked:
        from importlib.metadata import version

        print(f"cairn {version('cairn')}")
        raise typer.Exit()


@app.callback()
def _root(
    _version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print the installed cairn's version and exit.",
        ),
    ] = False,
    api_url: Annotated[
        str | None,
        typer.Option(
            "--api-url",
            help="Remote mode: talk to the HTTP API at this URL with the key in "
            "CAIRN_API_KEY (as CAIRN_API_URL does), not to the database.",
        ),
    ] = None,
) -> None:
    """cairn: a durable workflow engine for long-running, multi-step work.

    Remote mode: with CAIRN_API_URL set (or --api-url), operator commands go through the
    HTTP API with the key in CAIRN_API_KEY; without it, they use the database directly."""
    from cairn.cli.remote import forget, use_url

    forget()
    if api_url:
        use_url(api_url)


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
