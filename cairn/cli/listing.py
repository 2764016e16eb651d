"""Commands that list runs: ``cairn runs`` (filtered, a page at a time) and ``cairn
waiting`` (those waiting for a person) — through the HTTP API in remote mode
(:mod:`cairn.cli.remote`), else from the database."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cairn.cli import remote
from cairn.cli._app import app, out
from cairn.cli.deployment import deployment
from cairn.cli.options import (
    CreatedAfterOption,
    CreatedBeforeOption,
    RunSelection,
    StatusOption,
    VersionOption,
    WorkflowOption,
)

if TYPE_CHECKING:
    from cairn.engine.awaiting import Awaiting

PAGE_MAX = 500  # as GET /v1/runs
REASON_WIDTH = 60
RUN_ID_WIDTH = 36  # a UUID

# A page of runs: each as GET /v1/runs shows it, and the cursor of the next page (None:
# this was the last).
Page = tuple[list[dict[str, Any]], str | None]


@app.command("runs")
def list_runs(  # noqa: PLR0917 - typer passes options by name
    status: StatusOption = None,
    workflow: WorkflowOption = None,
    version: VersionOption = None,
    created_after: CreatedAfterOption = None,
    created_before: CreatedBeforeOption = None,
    namespace: Annotated[
        str, typer.Option(help="The runs' namespace (direct mode; remote: the key's).")
    ] = "default",
    limit: Annotated[int, typer.Option(min=1, max=PAGE_MAX, help="Runs per page.")] = 50,
    before: Annotated[
        str | None,
        typer.Option("--before", help="The next page: the cursor the previous one printed."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """List a namespace's runs, newest first, a page at a time: filtered by status
    (several), workflow, version and creation time; the next page with --before CURSOR
    (keyset paging: runs created meanwhile shift nothing)."""
    selection = RunSelection.of(status, workflow, version, created_after, created_before)
    if remote.active():
        remote.key_namespace(namespace)
        runs, cursor = _page_over_http(selection, limit, before)
    else:
        runs, cursor = _page(selection, namespace, limit, before)
    if as_json:
        print(json.dumps({"runs": runs, "next_cursor": cursor}, indent=2))
        return
    _print_runs(runs)
    if cursor is not None:
        out.print(f"more: add --before {cursor}", markup=False, soft_wrap=True)


def _page(selection: RunSelection, namespace: str, limit: int, before: str | None) -> Page:
    from cairn.model.selection import cursor_position, page_cursor

    position = cursor_position(before) if before else None
    with deployment() as opened, opened.store.reading() as tx:
        rows = tx.runs_page(namespace, selection.to_filter(), limit=limit + 1, before=position)
    page = rows[:limit]
    # One more than asked tells whether there is a next page.
    cursor = page_cursor(page[-1].created_at, page[-1].id) if len(rows) > limit else None
    return [row.to_summary() for row in page], cursor


def _page_over_http(selection: RunSelection, limit: int, before: str | None) -> Page:
    with remote.api() as client:
        found = client.runs_page(**selection.query(), limit=limit, cursor=before)
    return [run.model_dump() for run in found.runs], found.next_cursor


def _print_runs(runs: list[dict[str, Any]]) -> None:
    from rich.table import Table

    if not runs:
        out.print("no run matches", markup=False)
        return
    # Plain columns, as ``kubectl get`` lists: the run id whole, however narrow the
    # terminal (it is copied from here); only the last column folds.
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("run", no_wrap=True, min_width=RUN_ID_WIDTH)
    for header in ("workflow", "status", "created"):
        table.add_column(header, no_wrap=True)
    table.add_column("at / reason", overflow="fold")
    for run in runs:
        reason = run["reason"] or ""
        where = ", ".join(run["current"]) or (
            reason if len(reason) <= REASON_WIDTH else reason[: REASON_WIDTH - 1] + "…"
        )
        table.add_row(
            run["id"],
            f"{run['workflow']}@{run['version']}",
            run["status"],
            time.strftime("%m-%d %H:%M:%S", time.localtime(run["created_at"])),
            where,
        )
    out.print(table)


@app.command()
def waiting(
    namespace: Annotated[
        str | None, typer.Option(help="Only this namespace (direct mode; remote: the key's).")
    ] = None,
    limit: Annotated[int, typer.Option(help="At most this many runs.")] = 100,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """List runs waiting for a person, longest waiting first, with what would answer."""
    from cairn.observe.explain import describe

    if remote.active():
        remote.key_namespace(namespace)
        with remote.api() as client:
            shown = client.waiting(limit).waiting
    else:
        with deployment() as opened:
            shown = [entry.to_dict() for entry in opened.orchestrator.waiting(namespace, limit)]
    if as_json:
        print(json.dumps(shown, indent=2))
        return
    if not shown:
        out.print("no run is waiting for a person")
        return
    now = time.time()
    for entry in shown:
        out.print(f"{entry['run_id']}  {describe(_awaiting(entry), now)}", markup=False)


def _awaiting(shown: dict[str, Any]) -> Awaiting:
    """An :class:`Awaiting` again, from its JSON form."""
    from cairn.engine.awaiting import Awaiting

    fields = {name: value for name, value in shown.items() if name != "held"}
    fields["signals"] = tuple(fields.get("signals") or ())
    fields["approvers"] = tuple(fields.get("approvers") or ())
    return Awaiting(**fields)
