"""``cairn schedule``: cron schedules that start runs — add, list, show, pause, resume,
delete, backfill (see docs/flow-control.md) — through the HTTP API in remote mode
(:mod:`cairn.cli.remote`, the key's namespace), else on the database. Either way a
schedule is printed from its JSON form (``ScheduleRecord.to_dict()``, as the API serves)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cairn.cli import remote
from cairn.cli._app import app, cwd_importable, json_object, out
from cairn.errors import InvalidInput

if TYPE_CHECKING:
    from cairn.client import Client

schedule = typer.Typer(help="Cron schedules that start runs.", no_args_is_help=True)
app.add_typer(schedule, name="schedule")

NamespaceOption = Annotated[str, typer.Option(help="The schedule's namespace.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]


def _client() -> Client:
    from cairn.client import Client

    cwd_importable()
    return Client()


@schedule.command("add")
def add(  # noqa: PLR0917 - typer passes options by name
    name: Annotated[str, typer.Argument(help="The schedule's name (unique in its namespace).")],
    cron: Annotated[
        str,
        typer.Option(help='Cron expression: "0 9 * * MON"; six fields: seconds first.'),
    ],
    workflow: Annotated[
        str | None, typer.Option(help="The workflow it starts (default: NAME).")
    ] = None,
    version: Annotated[
        int | None, typer.Option(min=1, help="Pin a version (default: the newest at each tick).")
    ] = None,
    input_json: Annotated[str, typer.Option("--input", help="Each run's input (JSON).")] = "{}",
    timezone: Annotated[str, typer.Option(help="The cron's time zone (IANA).")] = "UTC",
    overlap: Annotated[
        str,
        typer.Option(
            help="While the last run is unfinished: skip, buffer_one, cancel_running, allow."
        ),
    ] = "skip",
    catch_up: Annotated[
        str, typer.Option(help="Start ticks missed (no scheduler ran) up to this late.")
    ] = "1d",
    jitter: Annotated[
        str, typer.Option(help="Delay each tick by up to this much (the same for all).")
    ] = "0",
    paused: Annotated[bool, typer.Option(help="Add it paused.")] = False,
    namespace: NamespaceOption = "default",
) -> None:
    """Add a schedule: a run of WORKFLOW at every tick of CRON."""
    from cairn.model.schedules import OverlapPolicy, ScheduleSpec, seconds_of

    if remote.active():
        remote.key_namespace(namespace)
        asked = {
            **{"name": name, "workflow": workflow or name, "cron": cron, "version": version},
            **{"timezone": timezone, "input": json_object(input_json, "--input")},
            **{"overlap": overlap, "catch_up": catch_up, "jitter": jitter, "paused": paused},
        }
        with remote.api() as api:
            added = api.add_schedule({k: v for k, v in asked.items() if v is not None})
        out.print(f"added schedule {added.name}: next tick {_when(added.next_at)}", markup=False)
        return
    spec = ScheduleSpec(
        name=name,
        cron=cron,
        workflow=workflow or name,
        version=version,
        timezone=timezone,
        input=json_object(input_json, "--input"),
        overlap=OverlapPolicy.parse(overlap),
        catch_up_s=seconds_of(catch_up, "--catch-up"),
        jitter_s=seconds_of(jitter, "--jitter", allow_zero=True),
    )
    client = _client()
    try:
        row = client.schedules.add(namespace, spec, paused=paused)
    finally:
        client.close()
    out.print(f"added schedule {row.name}: next tick {_when(row.next_at)}", markup=False)


@schedule.command("list")
def list_schedules(namespace: NamespaceOption = "default", as_json: JsonOption = False) -> None:
    """The namespace's schedules."""
    from rich.table import Table

    if remote.active():
        remote.key_namespace(namespace)
        with remote.api() as api:
            rows = [row.model_dump(exclude={"runs"}) for row in api.schedules().schedules]
    else:
        client = _client()
        try:
            rows = [row.to_dict() for row in client.schedules.of_namespace(namespace)]
        finally:
            client.close()
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    table = Table("name", "workflow", "cron", "overlap", "state", "next tick", "last tick")
    for row in rows:
        table.add_row(
            row["name"],
            row["workflow"] + (f"@{row['version']}" if row["version"] else ""),
            f"{row['cron']} ({row['timezone']})",
            row["overlap"],
            "paused" if row["paused"] else "active",
            "" if row["paused"] else _when(row["next_at"]),
            _when(row["last_tick_at"]),
        )
    out.print(table)


@schedule.command("show")
def show(
    name: Annotated[str, typer.Argument()],
    namespace: NamespaceOption = "default",
    as_json: JsonOption = False,
) -> None:
    """A schedule, where its ticks stand, and the runs it started lately."""
    if remote.active():
        remote.key_namespace(namespace)
        with remote.api() as api:
            row = api.schedule(name).model_dump()
    else:
        client = _client()
        try:
            found = client.schedules.get(namespace, name)
            row = {**found.to_dict(), "runs": _runs(client.schedules.runs(namespace, name))}
        finally:
            client.close()
    if as_json:
        print(json.dumps(row, indent=2))
        return
    _print_schedule(row)
    for run in row["runs"] or []:
        out.print(f"  {run['tick']}  {run['run_id']}  {run['status']}", markup=False)


@schedule.command("pause")
def pause(name: Annotated[str, typer.Argument()], namespace: NamespaceOption = "default") -> None:
    """Stop ticking (ticks while paused are not started, then or later)."""
    if remote.active():
        remote.key_namespace(namespace)
        with remote.api() as api:
            api.pause_schedule(name)
    else:
        client = _client()
        try:
            client.schedules.pause(namespace, name)
        finally:
            client.close()
    out.print(f"paused schedule {name}", markup=False)


@schedule.command("resume")
def resume(name: Annotated[str, typer.Argument()], namespace: NamespaceOption = "default") -> None:
    """Tick again, from now."""
    if remote.active():
        remote.key_namespace(namespace)
        with remote.api() as api:
            next_at = api.resume_schedule(name).next_at
    else:
        client = _client()
        try:
            next_at = client.schedules.resume(namespace, name).next_at
        finally:
            client.close()
    out.print(f"resumed schedule {name}: next tick {_when(next_at)}", markup=False)


@schedule.command("delete")
def delete(name: Annotated[str, typer.Argument()], namespace: NamespaceOption = "default") -> None:
    """Delete a schedule (the runs it started go on)."""
    if remote.active():
        remote.key_namespace(namespace)
        with remote.api() as api:
            api.delete_schedule(name)
    else:
        client = _client()
        try:
            client.schedules.delete(namespace, name)
        finally:
            client.close()
    out.print(f"deleted schedule {name}", markup=False)


@schedule.command("backfill")
def backfill(
    name: Annotated[str, typer.Argument()],
    start: Annotated[str, typer.Option(help="From this time (ISO 8601; UTC if no zone).")],
    end: Annotated[str, typer.Option(help="To this time, not included.")],
    namespace: NamespaceOption = "default",
    as_json: JsonOption = False,
) -> None:
    """Start a run for every tick in [START, END), now; a tick that has its run already
    (started by the schedule, or an earlier backfill) starts nothing new."""
    first, last = _instant(start, "--start"), _instant(end, "--end")
    if remote.active():
        remote.key_namespace(namespace)
        with remote.api() as api:
            done = api.backfill_schedule(name, first, last).model_dump()
    else:
        client = _client()
        try:
            found = client.schedules.backfill(namespace, name, first, last)
        finally:
            client.close()
        done = {
            "ticks": found.ticks,
            "created": found.created,
            "existing": found.existing,
            "run_ids": found.run_ids,
        }
    if as_json:
        print(json.dumps(done))
        return
    out.print(
        f"{done['ticks']} ticks: {done['created']} runs started, {done['existing']} had theirs",
        markup=False,
    )


def _print_schedule(row: dict[str, Any]) -> None:
    pinned = f"@{row['version']}" if row["version"] else " (newest version)"
    lines = [
        f"schedule {row['namespace']}/{row['name']}: {row['workflow']}{pinned}",
        f"  cron      {row['cron']} ({row['timezone']})",
        f"  overlap   {row['overlap']}; catch-up {row['catch_up_s']:g} s; "
        f"jitter {row['jitter_s']:g} s",
        f"  input     {json.dumps(row['input'])}",
        f"  state     {'paused' if row['paused'] else 'active'}; next tick {_when(row['next_at'])}",
        f"  last tick {_when(row['last_tick_at'])}"
        + (f" -> run {row['last_run_id']}" if row["last_run_id"] else ""),
        f"  skipped   {row['skipped']} tick(s)",
    ]
    if row["buffered_at"] is not None:
        lines.append(f"  buffered  {_when(row['buffered_at'])} (waits for the last run to end)")
    if row["last_error"]:
        lines.append(f"  error     {row['last_error']}")
    for line in lines:
        out.print(line, markup=False)


def _runs(runs: list[Any]) -> list[dict[str, str]]:
    return [
        {"tick": r.request_id.split(":", 2)[2], "run_id": r.id, "status": r.status} for r in runs
    ]


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _instant(text: str, option: str) -> float:
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise InvalidInput(f"{option}: {text!r} is not an ISO 8601 time") from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()
