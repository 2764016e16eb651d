"""Commands about a namespace's runs as a set: ``cairn runs`` lists them (filtered, a
page at a time), ``cairn runs migrate`` moves those of one version of a workflow to
another (docs/versions.md), and ``cairn waiting`` lists those waiting for a person —
through the HTTP API in remote mode (:mod:`cairn.cli.remote`), else on the database."""

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
from cairn.errors import InvalidInput

if TYPE_CHECKING:
    pass

PAGE_MAX = 500  # as GET /v1/runs
REASON_WIDTH = 60
RUN_ID_WIDTH = 36  # a UUID

# A page of runs: each as GET /v1/runs shows it, and the cursor of the next page (None:
# this was the last).
Page = tuple[list[dict[str, Any]], str | None]


runs = typer.Typer(
    help="List a namespace's runs (with no command), or migrate them between versions.",
    invoke_without_command=True,
    no_args_is_help=False,
)
app.add_typer(runs, name="runs")


@runs.callback()
def list_runs(  # noqa: PLR0917 - typer passes options by name
    context: typer.Context,
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
    if context.invoked_subcommand is not None:
        return
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


@runs.command("migrate")
def migrate(  # noqa: PLR0917 - typer passes options by name
    source: Annotated[
        str | None, typer.Option("--from", help="WORKFLOW@VERSION: the runs' version.")
    ] = None,
    target: Annotated[
        str | None, typer.Option("--to", help="WORKFLOW@VERSION: where they move.")
    ] = None,
    mapping: Annotated[
        str | None,
        typer.Option("--map", help="The mapping, package.module:function (docs/versions.md)."),
    ] = None,
    where: Annotated[
        list[str] | None,
        typer.Option(help="KEY=VALUE, every one must hold: node, status, id, vars.FIELD."),
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option("--dry-run", help="Check every run, say what would move and why not."),
    ] = False,
    rollback: Annotated[
        str | None,
        typer.Option(
            "--rollback", metavar="RUN", help="Undo this run's migration (unmoved since)."
        ),
    ] = None,
    reason: Annotated[str | None, typer.Option(help="Why (kept in each run's event).")] = None,
    namespace: Annotated[
        str, typer.Option(help="The runs' namespace (direct mode; remote: the key's).")
    ] = "default",
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """Move the unfinished runs of WORKFLOW@FROM to WORKFLOW@TO through a mapping of their
    node and state, each checked first against its own history; --dry-run writes nothing
    and says per run what would move and why not. --rollback RUN returns a migrated run,
    unmoved since, to its old version as it was (docs/versions.md)."""
    remote.key_namespace(namespace)
    if rollback is not None:
        _undo_migration(rollback, reason or "")
        return
    asked = _asked(source, target, mapping) | {"where": where or [], "reason": reason or ""}
    if remote.active():
        with remote.api() as client:
            sent = asked | {"reason": asked["reason"] or None}  # None: the API's default
            report = client.migrate_runs(**sent, dry_run=dry_run).model_dump()
    else:
        report = _migrate_directly(asked, namespace, dry_run=dry_run)
    if as_json:
        print(json.dumps(report, indent=2))
        return
    _print_report(report)


def _asked(source: str | None, target: str | None, mapping: str | None) -> dict[str, Any]:
    """The move the options ask: the workflow, its two versions and the mapping."""
    if source is None or target is None or mapping is None:
        raise InvalidInput("name the runs and the move: --from WF@N --to WF@M --map module:fn")
    workflow, from_version = _versioned(source, "--from")
    moved_to, to_version = _versioned(target, "--to")
    if moved_to != workflow:
        raise InvalidInput(f"--from and --to name two workflows ({workflow}, {moved_to})")
    return {
        "workflow": workflow,
        "from_version": from_version,
        "to_version": to_version,
        "mapping": mapping,
    }


def _versioned(text: str, option: str) -> tuple[str, int]:
    name, sep, version = text.rpartition("@")
    if not sep or not name or not version.isdigit() or int(version) < 1:
        raise InvalidInput(f"{option} {text!r}: write WORKFLOW@VERSION (book_flight@2)")
    return name, int(version)


def _migrate_directly(asked: dict[str, Any], namespace: str, *, dry_run: bool) -> dict[str, Any]:
    from contextlib import nullcontext

    from cairn.engine.migrations import MigrationRequest
    from cairn.model.migrations import Where

    request = MigrationRequest(
        namespace,
        asked["workflow"],
        asked["from_version"],
        asked["to_version"],
        asked["mapping"],
        Where.parse(asked["where"]),
        asked["reason"],
    )
    move = f"{request.workflow}@{request.from_version}->{request.to_version}"
    with deployment() as opened:
        writes = opened.writes
        audited = nullcontext() if dry_run else writes.audited("runs.migrate", namespace, move)
        with audited:
            found = opened.orchestrator.migrate_runs(request, actor=writes.actor, dry_run=dry_run)
    return found.to_dict()


def _undo_migration(run_id: str, reason: str) -> None:
    if remote.active():
        with remote.api() as client:
            undone = client.rollback_migration(run_id, reason or None)
        version, status, seq = undone.version, undone.status, undone.seq
    else:
        with deployment() as opened:
            writes = opened.writes
            with writes.on_run("run.migration.rollback", run_id):
                done = opened.orchestrator.rollback_migration(
                    run_id, actor=writes.actor, reason=reason
                )
        version, status, seq = done.version, done.status.value, done.seq
    out.print(f"{run_id} back on version {version}, {status} (seq {seq})", markup=False)


def _print_report(report: dict[str, Any]) -> None:
    """One line per run (what moves where, or why not), then the counts."""
    dry = report["dry_run"]
    for run in report["runs"]:
        where = run["node"] or "-"
        if run["movable"]:
            verb = "would move" if dry else ("moved" if run["moved"] else "not moved")
            line = f"{run['run_id']}  {where} -> {run['to_node']}  {verb}"
        else:
            why = "; ".join(f"{r['code']}: {r['message']}" for r in run["reasons"])
            line = f"{run['run_id']}  {where}  stays: {why}"
        out.print(line, markup=False, soft_wrap=True)
    move = f"{report['workflow']}@{report['from_version']} -> @{report['to_version']}"
    stays = report["selected"] - (report["movable"] if dry else report["moved"])
    done = f"{report['movable']} would move" if dry else f"{report['moved']} moved"
    out.print(
        f"{move}: {report['selected']} selected, {done}, {stays} stay"
        + (" (dry run: nothing written)" if dry else ""),
        markup=False,
    )


@app.command()
def waiting(
    namespace: Annotated[
        str | None, typer.Option(help="Only this namespace (direct mode; remote: the key's).")
    ] = None,
    limit: Annotated[int, typer.Option(help="At most this many runs.")] = 100,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """List runs waiting for a person, longest waiting first, with what would answer."""
    from cairn.model.awaiting import Awaiting
    from cairn.observe.waits import describe

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
        out.print(f"{entry['run_id']}  {describe(Awaiting.from_dict(entry), now)}", markup=False)
