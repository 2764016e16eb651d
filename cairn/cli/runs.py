"""Commands about runs: register, submit, status, events, wait."""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Group
from rich.live import Live
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from cairn.cli._app import EXIT_INVALID, app, cwd_importable, err, json_object, out

if TYPE_CHECKING:
    from cairn.client import Client
    from cairn.observe.flow import CircuitView
    from cairn.observe.streamed import Streamed
from cairn.errors import InvalidInput
from cairn.model.statuses import RunStatus

EXIT_FAILED = 1
EXIT_TIMEOUT = 3


@app.command()
def register(
    paths: Annotated[list[str], typer.Argument(help="Definition files, .py modules, dirs.")],
    namespace: Annotated[
        str, typer.Option(help="Where the schedules the definitions declare are kept.")
    ] = "default",
) -> None:
    """Register workflow definitions (a version, once registered, cannot change): all of
    them, or none if any is invalid (every fault of every file is listed). The schedules
    they declare are added, or brought up to date."""
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
            out.print(f"registered {definition.key}")
            for schedule in definition.schedules:
                out.print(f"  schedule {schedule.name}: {schedule.cron} ({schedule.timezone})")
    finally:
        client.close()


@app.command()
def submit(  # noqa: PLR0917 - typer passes options by name
    workflow: Annotated[str, typer.Argument(help="Registered workflow name.")],
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
    from cairn.client import Client
    from cairn.observe.explain import context_lines, waiting_lines

    if fleet:
        _fleet_status(as_json)
        return
    if run_id is None:
        raise typer.BadParameter("give a RUN_ID, or --fleet")
    client = Client()
    try:
        orchestrator = client.runtime.orchestrator
        view = orchestrator.get_run(run_id, with_executions=True)
        beats = _heartbeats(client, view)
        definition = orchestrator.registry.get(view.workflow, view.version)
        explained = (
            waiting_lines(definition, view.state, time.time())
            + context_lines(definition, view.state)
            if view.state is not None
            else []
        )
    finally:
        client.close()
    if as_json:
        print(json.dumps({**view.to_dict(), "heartbeats": beats}, indent=2, default=str))
        return
    out.print(
        f"[bold]{view.id}[/bold]  {view.workflow}@{view.version}  [bold]{view.status.value}[/bold]"
    )
    interval = client.settings.heartbeat_interval
    for running, beat in beats.items():
        out.print(f"{running}: {_liveness(beat, interval)}", markup=False)
    for line in explained:
        out.print(line, markup=False)
    if view.priority:
        out.print(f"priority: {view.priority}", markup=False)
    if view.parent_run_id is not None:
        out.print(f"forked from run {view.parent_run_id} at seq {view.fork_seq}", markup=False)
    if view.reason:
        out.print(f"reason: {view.reason}", markup=False)
    table = Table("node", "visit", "phase", "status", "attempt", "duration", "worker")
    for execution in view.executions:
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
    from cairn.client import Client

    payload = json_object(payload_json, "--payload") if payload_json is not None else None
    client = Client()
    try:
        applied = client.signal(
            run_id, name, payload, signal_id=signal_id, node=node, comment=comment
        )
        view = client.get_run(run_id)
    finally:
        client.close()
    if not applied:
        out.print(f"signal {signal_id} was already applied; nothing changed", markup=False)
    out.print(f"{view.id} {view.status.value}", markup=False)


@app.command()
def waiting(
    namespace: Annotated[str | None, typer.Option(help="Only this namespace.")] = None,
    limit: Annotated[int, typer.Option(help="At most this many runs.")] = 100,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
) -> None:
    """List runs waiting for a person, longest waiting first, with what would answer."""
    from cairn.client import Client
    from cairn.observe.explain import describe

    client = Client()
    try:
        found = client.waiting(namespace, limit)
    finally:
        client.close()
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
    from cairn.client import Client

    client = Client()
    try:
        changed = client.cancel(run_id, reason)
        view = client.get_run(run_id)
    finally:
        client.close()
    if not changed:
        out.print("the run was already being cancelled; nothing changed", markup=False)
    out.print(f"{view.id} {view.status.value}", markup=False)


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
    from cairn.client import Client

    node, iteration = _step(step) if step is not None else (None, None)
    client = Client()
    try:
        client.rollback(
            run_id,
            reason,
            confirm=yes,
            to_seq=to_seq,
            step=node,
            step_iteration=iteration,
        )
        view = client.get_run(run_id)
    finally:
        client.close()
    out.print(f"{view.id} {view.status.value}", markup=False)


@app.command()
def events(
    run_id: Annotated[str, typer.Argument()],
    after: Annotated[int, typer.Option(help="Only events after this seq.")] = 0,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Print a run's event log."""
    from cairn.client import Client

    client = Client()
    try:
        history = client.events(run_id, after)
    finally:
        client.close()
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


@app.command()
def watch(
    run_id: Annotated[str, typer.Argument()],
    interval: Annotated[float, typer.Option(help="Seconds between refreshes.")] = 0.5,
    timeout: Annotated[float | None, typer.Option(help="Give up after this many s.")] = None,
    no_text: Annotated[
        bool, typer.Option("--no-text", help="Do not show what model calls are streaming.")
    ] = False,
) -> None:
    """Follow a run live until it ends: a progress bar of its steps, what each running
    node is doing (heartbeats) and the last lines its model call is streaming, what it
    waits for, and every recovery. Exit 0 if it succeeded, 1 if not, 3 on timeout."""
    from cairn.client import Client

    client = Client()
    recoveries: list[str] = []
    seen = 0
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        orchestrator = client.runtime.orchestrator
        reports = _Reports(client, run_id, text=not no_text)
        with Live(console=out, refresh_per_second=4, transient=False) as live:
            while True:
                view = orchestrator.get_run(run_id)
                definition = orchestrator.registry.get(view.workflow, view.version)
                for event in orchestrator.events(run_id, after=seen):
                    seen = event["seq"]
                    if event["type"] == "audit.recovered":
                        recoveries.append(_recovered_line(event["data"]))
                beats = reports.read(view)
                live.update(
                    _watch_view(
                        view,
                        definition,
                        beats,
                        recoveries,
                        client,
                        said=reports.said,
                        problem=reports.problem,
                    )
                )
                if view.status.terminal:
                    break
                if deadline is not None and time.monotonic() > deadline:
                    raise typer.Exit(EXIT_TIMEOUT)
                time.sleep(interval)
    finally:
        client.close()
    if view.status is not RunStatus.SUCCEEDED:
        raise typer.Exit(EXIT_FAILED)


TEXT_ROWS = 4  # rows of a model call's text under its node: a glimpse, not a transcript
TEXT_INDENT = "  │ "
REDIS_RETRY_S = 5.0


class _Reports:
    """What a run's running nodes report through Redis — heartbeats, and what their model
    calls stream — read once per refresh of ``cairn watch``. Best effort: Redis out of
    reach costs the view those lines (and is tried again after ``REDIS_RETRY_S``, so a
    connect timeout does not stall every refresh), never the watch itself."""

    def __init__(self, client: Client, run_id: str, *, text: bool) -> None:
        from cairn.observe.streamed import Streamed

        self.client, self.run_id = client, run_id
        self.said = Streamed() if text else None
        self.problem: str | None = None
        self._retry_at = 0.0

    def read(self, view: Any) -> dict[str, dict[str, Any] | None]:
        import redis

        if time.monotonic() < self._retry_at:
            return {}
        try:
            beats = _heartbeats(self.client, view)
            # While nothing runs there is no text to show: the log is read on when it does.
            if self.said is not None and beats:
                self.said.read(self.client.runtime.leases, self.run_id)
                self.said.prune({s.node: s.iteration for s in view.state.nodes.values()})
        except redis.RedisError as exc:
            self.problem = f"no heartbeats nor streamed text: Redis unreachable ({exc})"
            self._retry_at = time.monotonic() + REDIS_RETRY_S
            return {}
        self.problem = None
        return beats


def _watch_view(
    view: Any,
    definition: Any,
    beats: dict[str, dict[str, Any] | None],
    recoveries: list[str],
    client: Client,
    *,
    said: Streamed | None = None,
    problem: str | None = None,
) -> Group:
    """One frame of ``cairn watch``."""
    from cairn.observe.explain import context_lines, waiting_lines

    state = view.state
    tasks = [n for n, node in definition.nodes.items() if node.kind == "task"]
    done = (
        sum(1 for n in tasks if n in state.nodes and state.nodes[n].status.terminal)
        if state is not None
        else 0
    )
    bar = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), expand=False
    )
    bar.add_task(f"{view.workflow}@{view.version}", total=len(tasks) or 1, completed=done)
    lines = [f"{view.id}  {view.status.value}" + (f": {view.reason}" if view.reason else "")]
    streaming = _streaming(state, said)
    interval = client.settings.heartbeat_interval
    for running, beat in beats.items():
        lines.append(f"{running}: {_liveness(beat, interval)}")
        lines += [TEXT_INDENT + row for row in streaming.get(running, [])]
    if problem is not None:
        lines.append(problem)
    if state is not None:
        lines += waiting_lines(definition, state, time.time()) + context_lines(definition, state)
    lines += recoveries
    return Group(bar, *(Text(line) for line in lines))


def _streaming(state: Any, said: Streamed | None) -> dict[str, list[str]]:
    """The rows of text to show under each running execution, by its heartbeat's label.
    Only the run phase's: a chunk does not say which phase published it."""
    if state is None or said is None:
        return {}
    width = out.width - len(TEXT_INDENT)
    return {
        f"{s.node}#{s.iteration}": said.shown(s.node, s.iteration, s.attempt, TEXT_ROWS, width)
        for s in state.active_nodes
    }


def _recovered_line(data: dict[str, Any]) -> str:
    skipped = data.get("skipped_done") or []
    return (
        f"recovered {data.get('node')}#{data.get('iteration')} ({data.get('cause')}) from "
        f"checkpoint at seq {data.get('from_seq')}, skipped {len(skipped)} finished step(s)"
    )


def _step(text: str) -> tuple[str, int | None]:
    node, _, visit = text.partition("#")
    if not node or (visit and not visit.isdigit()):
        raise InvalidInput(f"--step is NODE or NODE#VISIT, not {text!r}")
    return node, int(visit) if visit else None


def _rate_line(bucket: Any) -> str:
    """``rate default/openai: requests 12/600 per 60 s, tokens 8000/200000 per 60 s, 3 waiting``."""
    parts = []
    for unit, used, cap, period in (
        ("requests", bucket.requests_used, bucket.requests_limit, bucket.requests_period_s),
        ("tokens", bucket.tokens_used, bucket.tokens_limit, bucket.tokens_period_s),
    ):
        if cap is not None:
            parts.append(f"{unit} {used}/{cap} per {_age(round(period))}")
    if bucket.waiting:
        parts.append(f"{bucket.waiting} waiting")
    if bucket.paused_for_s:
        parts.append(f"paused {bucket.paused_for_s:.1f}s more (429)")
    return f"rate {bucket.bucket}: " + ", ".join(parts)


def _fleet_status(as_json: bool) -> None:
    from cairn.client import Client
    from cairn.definitions.queues import known_queues
    from cairn.observe.flow import circuit_views, is_circuit_pool, pool_reports

    client = Client()
    try:
        stats = client.runtime.leases.stats()
        waits = client.runtime.leases.waits()
        running = client.runtime.leases.running()
        slots = client.runtime.slots
        pools = pool_reports(client.runtime.store, slots) if slots is not None else []
        circuits = client.runtime.circuits
        breakers = circuit_views(circuits, pools) if circuits is not None else []
        pools = [pool for pool in pools if not is_circuit_pool(pool)]
        rate_keys = client.runtime.rates.report() if client.runtime.rates is not None else []
        settings = client.settings
        # An embedded broker's queue is this process's own, empty: nothing to show.
        backlogs = (
            {
                queue: client.runtime.orchestrator.publisher.backlog(queue)
                for queue in known_queues(settings.queues, settings.queue)
            }
            if settings.broker_url is not None
            else {}
        )
    finally:
        client.close()
    if as_json:
        wait = {"count": waits.count, "sum_s": waits.sum_s, "buckets": dict(waits.cumulative())}
        fleet = {
            "leases": stats,
            "lease_wait": wait,
            "running": running,
            "queues": backlogs,
            "concurrency": [pool.to_dict() for pool in pools],
            "circuits": [view.to_dict() for view in breakers],
            "rates": [bucket.to_dict() for bucket in rate_keys],
        }
        print(json.dumps(fleet, indent=2, default=str))
        return
    interval = client.settings.heartbeat_interval
    lease_counts = {name: count for name, count in stats.items() if "|" not in name}
    out.print(
        "leases: " + ", ".join(f"{name} {count}" for name, count in sorted(lease_counts.items()))
        if lease_counts
        else "leases: none taken yet"
    )
    if backlogs:  # a queue that fills while the others drain has no worker consuming it
        out.print(
            "queued: "
            + ", ".join(
                f"{queue} {'?' if count is None else count}" for queue, count in backlogs.items()
            ),
            markup=False,
        )
    anomalies = [
        [*name.split("|")[1:], str(n)] for name, n in stats.items() if name.startswith("anomalies|")
    ]
    if anomalies:  # "anomalies|workflow|kind|action" (cairn.observe.alerts)
        out.print(
            "anomalies: " + ", ".join(f"{w} {k} {a} {n}" for w, k, a, n in sorted(anomalies)),
            markup=False,
        )
    if waits.count:  # the histogram behind cairn_lease_wait_seconds
        out.print(f"lease wait (publish to lease): {waits.summary()}", markup=False)
    for pool in pools:
        limit = f"/{pool.limit}" if pool.limit is not None else ""
        waited = f" (oldest {_age(pool.oldest_wait_s)})" if pool.oldest_wait_s is not None else ""
        out.print(
            f"concurrency {pool.pool}: {pool.running}{limit} running, "
            f"{pool.waiting} waiting{waited}",
            markup=False,
        )
    for view in breakers:
        out.print(_circuit_line(view), markup=False)
    for bucket in rate_keys:
        out.print(_rate_line(bucket), markup=False)
    by_worker: dict[str, list[dict[str, Any]]] = {}
    for record in running:
        by_worker.setdefault(str(record.get("worker", "?")), []).append(record)
    if not by_worker:
        out.print("no node is running")
    for worker, records in sorted(by_worker.items()):
        freshest = min(float(r["age_s"]) for r in records)
        state = "suspect" if freshest > 3 * interval else "alive"
        out.print(
            f"{worker}: {state}, {len(records)} running, last beat {_age(freshest)} ago",
            markup=False,
        )
        for record in records:
            _, _, run, node, iteration, phase = record["lease"].split(":")
            out.print(
                f"  {run} {node}#{iteration} ({phase}): {_liveness(record, interval)}", markup=False
            )


def _heartbeats(client: Client, view: Any) -> dict[str, dict[str, Any] | None]:
    """The heartbeat record of every execution the run is waiting for (lossy, in Redis)."""
    from cairn.lease.heartbeat import run_beats

    state = view.state
    if state is None:
        return {}
    return run_beats(client.runtime.leases, view.id, state.running)


def _liveness(beat: dict[str, Any] | None, interval_s: float) -> str:
    if beat is None:
        return "waiting for a worker (no heartbeat)"
    age = float(beat["age_s"])
    where = f"on {beat.get('worker', '?')}"
    progress = ""
    if beat.get("done") is not None:
        total = f"/{beat['total']}" if beat.get("total") not in (None, "None") else ""
        message = f" {beat['message']}" if beat.get("message") else ""
        progress = f", {beat['done']}{total}{message}"
    if age > 3 * interval_s:  # three missed beats
        return f"suspect: no heartbeat for {_age(age)} (last {where}){progress}"
    if beat.get("stalled"):
        idle = _age(float(beat.get("progress_age_s", 0.0)))
        return f"stalled {where}: beating, but no progress for {idle}{progress}"
    return f"working {where}, last beat {_age(age)} ago{progress}"


def _age(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


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


__all__ = ["EXIT_INVALID"]


def _circuit_line(view: CircuitView) -> str:
    circuit = view.circuit
    if circuit.state == "closed":
        told = f"closed, {circuit.failures} run(s) failed in a row"
    elif circuit.state == "open":
        left = max(0.0, (circuit.open_until or 0.0) - time.time())
        told = f"OPEN ({circuit.failures} failures, opened {circuit.opens}x), probe in {_age(left)}"
    else:
        told = f"HALF-OPEN ({circuit.failures} failures, opened {circuit.opens}x), probing"
    return f"circuit {circuit.dependency}: {told}; {view.waiting} waiting, {view.probing} probing"
