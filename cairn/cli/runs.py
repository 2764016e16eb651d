"""Commands about runs: register, submit, status, events, wait."""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import typer

from cairn.cli._app import EXIT_FAILED, EXIT_TIMEOUT, app, cwd_importable, err, json_object, out
from cairn.cli.deployment import deployment
from cairn.cli.liveness import heartbeats, liveness
from cairn.errors import InvalidInput


@app.command()
def register(
    paths: Annotated[list[str], typer.Argument(help="Definition files, .py modules, dirs.")],
    namespace: Annotated[
        str,
        typer.Option(help="The namespace they (and the schedules they declare) belong to."),
    ] = "default",
) -> None:
    """Register workflow definitions into a namespace (a version, once registered, cannot
    change): all of them, or none if any is invalid (every fault of every file is
    listed). The schedules they declare are added, or brought up to date."""
    from cairn.client import Client
    from cairn.definitions.catalog import load_all
    from cairn.definitions.queues import check_queues

    cwd_importable()
    definitions = load_all(paths)
    client = Client()
    try:
        # All refused before any is written, without a database round trip.
        check_queues(definitions, client.settings.queues, client.settings.queue)
        for definition in definitions:
            client.register(definition, namespace=namespace)
            out.print(f"registered {definition.key} in {namespace}")
            for schedule in definition.schedules:
                out.print(f"  schedule {schedule.name}: {schedule.cron} ({schedule.timezone})")
    finally:
        client.close()


@app.command()
def submit(  # noqa: PLR0917 - typer passes options by name
    workflow: Annotated[str, typer.Argument(help="NAME, NAME@VERSION or OWNER/NAME@VERSION.")],
    input_json: Annotated[
        str, typer.Option("--input", help="The run's input, a JSON object.")
    ] = "{}",
    request_id: Annotated[
        str | None, typer.Option(help="Idempotency key: the same id returns the same run.")
    ] = None,
    webhook: Annotated[
        str | None,
        typer.Option(help="Announce the run's end and milestones to this URL, signed."),
    ] = None,
    namespace: Annotated[str, typer.Option(help="The run's namespace.")] = "default",
    debounce_key: Annotated[
        str | None,
        typer.Option(help="Debounce: submissions with this key collapse into one run."),
    ] = None,
    debounce: Annotated[
        str | None,
        typer.Option(help="...started this long after the last of them (30s, 5m), with its input."),
    ] = None,
    max_wait: Annotated[
        str | None,
        typer.Option(help="...but no later than this long after the first of them."),
    ] = None,
    singleton_key: Annotated[
        str | None,
        typer.Option(help="Singleton: one unfinished run per key in the namespace."),
    ] = None,
    singleton: Annotated[
        str,
        typer.Option(
            help="...while one is unfinished: skip (print its id) or cancel (it, then start)."
        ),
    ] = "skip",
    priority: Annotated[
        int | None,
        typer.Option(
            help="-5..5 (default 0), higher first: who gets the next free concurrency slot "
            "and the next worker."
        ),
    ] = None,
) -> None:
    """Start a run; print its id (with --debounce-key or --singleton-key, the run that
    the key collapses into or keeps)."""
    from cairn.client import Client
    from cairn.model.flow import Debounce, Singleton

    payload = json_object(input_json, "--input")
    if (debounce_key is None) != (debounce is None):
        raise InvalidInput("--debounce-key and --debounce go together")
    if max_wait is not None and debounce_key is None:
        raise InvalidInput("--max-wait needs --debounce-key and --debounce")
    debounced = (
        Debounce.of({"key": debounce_key, "wait": debounce, "max_wait": max_wait})
        if debounce_key is not None
        else None
    )
    single = Singleton.of({"key": singleton_key, "mode": singleton}) if singleton_key else None
    client = Client()
    try:
        print(
            client.submit(
                workflow,
                payload,
                request_id=request_id,
                webhook=webhook,
                namespace=namespace,
                debounce=debounced,
                singleton=single,
                priority=priority,
            )
        )
    finally:
        client.close()


@app.command()
def status(
    run_id: Annotated[str | None, typer.Argument(help="A run (omit with --fleet).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    fleet: Annotated[bool, typer.Option("--fleet", help="The workers and their leases.")] = False,
) -> None:
    """Show a run (status, liveness of its running nodes, node results), or the fleet."""
    from cairn.observe.explain import context_lines, waiting_lines

    if fleet:
        from cairn.cli.fleet import fleet_status

        fleet_status(as_json)
        return
    if run_id is None:
        raise typer.BadParameter("give a RUN_ID, or --fleet")
    with deployment() as opened:
        orchestrator = opened.orchestrator
        view = orchestrator.get_run(run_id, with_executions=True)
        beats = heartbeats(opened.leases, view)
        definition = orchestrator.registry.get(view.workflow_ref, view.version)
        explained = (
            waiting_lines(definition, view.state, time.time())
            + context_lines(definition, view.state)
            if view.state is not None
            else []
        )
    if as_json:
        print(json.dumps({**view.to_dict(), "heartbeats": beats}, indent=2, default=str))
        return
    out.print(
        f"[bold]{view.id}[/bold]  {view.workflow}@{view.version}  [bold]{view.status.value}[/bold]"
    )
    for running, beat in beats.items():
        out.print(f"{running}: {liveness(beat, opened.settings.heartbeat_interval)}", markup=False)
    for line in explained:
        out.print(line, markup=False)
    if view.priority:
        out.print(f"priority: {view.priority}", markup=False)
    if view.parent_run_id is not None:
        out.print(f"forked from run {view.parent_run_id} at seq {view.fork_seq}", markup=False)
    if view.reason:
        out.print(f"reason: {view.reason}", markup=False)
    _executions(view.executions)


def _executions(executions: list[dict[str, Any]]) -> None:
    from rich.table import Table

    table = Table("node", "visit", "phase", "status", "attempt", "duration", "worker")
    for execution in executions:
        duration = execution["duration_s"]
        table.add_row(
            execution["node"],
            str(execution["iteration"]),
            execution["phase"],
            execution["status"],
            str(execution["attempt"]),
            f"{duration * 1000:.0f} ms" if duration is not None else "",
            execution["worker"] or "",
        )
    out.print(table)


@app.command()
def signal(
    run_id: Annotated[str, typer.Argument()],
    name: Annotated[
        str,
        typer.Argument(
            help="A signal the run's wait declares, or an operator's decision about a held "
            "node: recovery.retry, recovery.complete, recovery.fail."
        ),
    ],
    *,
    payload_json: Annotated[
        str | None,
        typer.Option(
            "--payload",
            help='A JSON object (recovery.complete: {"output": {...}}; recovery.fail: '
            '{"reason": "..."}).',
        ),
    ] = None,
    comment: Annotated[
        str | None,
        typer.Option(help="What you say beside it (kept in the log; who decides is you)."),
    ] = None,
    signal_id: Annotated[
        str | None, typer.Option("--id", help="Idempotency: the same id is applied once.")
    ] = None,
    node: Annotated[
        str | None, typer.Option(help="The wait or held node this answers (if several).")
    ] = None,
) -> None:
    """Send a signal to a waiting run; refused (exit 2, nothing written) if it cannot
    take it. Its actor is db:<your user> (this command writes to the database)."""
    payload = json_object(payload_json, "--payload") if payload_json is not None else None
    with deployment() as opened:  # what the signal dispatches is published after the answer
        writes = opened.writes
        with writes.on_run("run.signal", run_id):
            decision = opened.orchestrator.signal(
                run_id,
                name,
                payload,
                actor=writes.actor,
                signal_id=signal_id,
                node=node,
                comment=comment,
                role=writes.principal.role.value,
            )
        if decision.ignored is not None:
            out.print(f"signal {signal_id} was already applied; nothing changed", markup=False)
        out.print(f"{run_id} {decision.state.status.value}", markup=False)


@app.command()
def waiting(
    namespace: Annotated[str | None, typer.Option(help="Only this namespace.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many runs.")] = 100,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """List runs waiting for a person, longest waiting first, with what would answer."""
    from cairn.observe.explain import describe

    with deployment() as opened:
        found = opened.orchestrator.waiting(namespace, limit)
    if as_json:
        print(json.dumps([entry.to_dict() for entry in found], indent=2))
        return
    if not found:
        out.print("no run is waiting for a person")
        return
    now = time.time()
    for entry in found:
        out.print(f"{entry.run_id}  {describe(entry, now)}", markup=False)


@app.command()
def cancel(
    run_id: Annotated[str, typer.Argument()],
    reason: Annotated[
        str, typer.Option(help="Why (kept in the log and on the run).")
    ] = "cancelled from the command line",
) -> None:
    """Cancel a run: nothing new starts, running nodes stop at their next safe point (or
    are detached after the workflow's cancel_timeout), then it ends cancelled."""
    with deployment() as opened:  # what the cancel stops is told after the answer
        writes = opened.writes
        with writes.on_run("run.cancel", run_id):
            decision = opened.orchestrator.cancel(run_id, reason, actor=writes.actor)
        if decision.ignored is not None:
            out.print("the run was already being cancelled; nothing changed", markup=False)
        out.print(f"{run_id} {decision.state.status.value}", markup=False)


@app.command()
def rollback(
    run_id: Annotated[str, typer.Argument()],
    *,
    reason: Annotated[str, typer.Option(help="Why (kept in the log and on the run).")],
    yes: Annotated[bool, typer.Option("--yes", help="Confirm: this undoes applied steps.")] = False,
    to_seq: Annotated[
        int | None,
        typer.Option(
            "--to-seq", help="Back to the checkpoint after this event (see cairn events)."
        ),
    ] = None,
    step: Annotated[
        str | None,
        typer.Option("--step", help="Undo only this step's change: NODE or NODE#VISIT."),
    ] = None,
) -> None:
    """Roll a run back: stop it, run the compensation of every step that took effect
    (last first), end rolled_back; or, --to-seq S, undo only the steps after event S and
    resume from the state the run had there; or, --step NODE, undo only that step and
    go on. Refused without --yes."""
    node, iteration = _step(step) if step is not None else (None, None)
    with deployment() as opened:
        writes = opened.writes
        with writes.on_run("run.rollback", run_id):
            opened.orchestrator.rollback(
                run_id,
                reason,
                actor=writes.actor,
                confirm=yes,
                to_seq=to_seq,
                step=node,
                step_iteration=iteration,
            )
        view = opened.orchestrator.get_run(run_id)
        out.print(f"{view.id} {view.status.value}", markup=False)


@app.command()
def events(
    run_id: Annotated[str, typer.Argument()],
    after: Annotated[int, typer.Option(help="Only events after this seq.")] = 0,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Print a run's event log."""
    with deployment() as opened:
        history = opened.orchestrator.events(run_id, after)
    if as_json:
        print(json.dumps(history, indent=2))
        return
    for entry in history:
        # An audit entry (a recovery, an operator's note) decided nothing: no moves.
        moves = ", ".join(
            f"{s} -{label}-> {t}" for s, label, t in entry["outcome"].get("transitions", [])
        )
        out.print(
            f"{entry['seq']:>5}  {_clock(entry['at'])}  {entry['type']:<16} "
            f"{_subject(entry['data'])}  {moves}",
            markup=False,
        )


@app.command()
def wait(
    run_id: Annotated[str, typer.Argument()],
    timeout: Annotated[float, typer.Option(help="Seconds to wait.")] = 60.0,
) -> None:
    """Wait for a run to finish: exit 0 if it succeeded, 1 if not, 3 on timeout."""
    from cairn.client import Client, WaitTimeout
    from cairn.model.statuses import RunStatus

    client = Client()
    try:
        view = client.wait(run_id, timeout)
    except WaitTimeout as exc:
        err.print(str(exc), markup=False)
        raise typer.Exit(EXIT_TIMEOUT) from exc
    finally:
        client.close()
    out.print(
        f"{view.id} {view.status.value}" + (f": {view.reason}" if view.reason else ""), markup=False
    )
    if view.status is not RunStatus.SUCCEEDED:
        raise typer.Exit(EXIT_FAILED)


def _step(text: str) -> tuple[str, int | None]:
    node, _, visit = text.partition("#")
    if not node or (visit and not visit.isdigit()):
        raise InvalidInput(f"--step is NODE or NODE#VISIT, not {text!r}")
    return node, int(visit) if visit else None


def _clock(at: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(at)) + f".{int(at * 1000) % 1000:03d}"


def _subject(data: dict[str, Any]) -> str:
    if "node" in data:
        return f"{data['node']}#{data.get('iteration', 1)}/{data.get('attempt', 1)}"
    if "name" in data:
        return f"signal {data['name']}"
    if "timer_id" in data:
        return str(data["timer_id"])
    return ""
