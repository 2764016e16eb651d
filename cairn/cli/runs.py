"""Commands about runs: register, submit, status, events, wait — each through the HTTP
API in remote mode (:mod:`cairn.cli.remote`), else the database."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cairn.cli import remote
from cairn.cli._app import EXIT_FAILED, EXIT_TIMEOUT, app, cwd_importable, err, json_object, out
from cairn.cli.deployment import deployment
from cairn.cli.liveness import heartbeats, liveness
from cairn.errors import InvalidInput

if TYPE_CHECKING:
    from cairn.model.definition import WorkflowDefinition

WAIT_POLL_S = 0.2


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
    listed). The schedules they declare are added, or brought up to date. A new version
    of a registered workflow prints what it changes in the transition table."""
    from cairn.definitions.catalog import load_all

    remote.key_namespace(namespace)
    cwd_importable()
    definitions = load_all(paths)
    if remote.active():  # into the key's namespace; its schedules with it
        _register_over_http(definitions)
    else:
        _register_in_database(definitions, namespace)


def _register_over_http(definitions: list[WorkflowDefinition]) -> None:
    from cairn.definitions.loader import load_definition
    from cairn.http import ApiError

    with remote.api() as api:
        for definition in definitions:
            try:
                found = api.workflow(definition.name)
                previous = load_definition(
                    found.spec,
                    source=f"registered workflow {found.name}@{found.version}",
                    resolve=False,
                    registered=True,
                    implied_format=found.format,
                )
            except ApiError as exc:
                if exc.status != 404:
                    raise
                previous = None
            answer = api.register(definition.spec)
            again = "" if answer.created else " (registered already, identically)"
            out.print(f"registered {definition.key} in {answer.namespace}{again}")
            _print_changes(previous, definition, created=answer.created)


def _register_in_database(definitions: list[WorkflowDefinition], namespace: str) -> None:
    from cairn.client import Client
    from cairn.definitions.queues import check_queues
    from cairn.errors import UnknownWorkflow
    from cairn.model.workflow_names import qualified

    client = Client()
    try:
        # All refused before any is written, without a database round trip.
        check_queues(definitions, client.settings.queues, client.settings.queue)
        registry = client.runtime.orchestrator.registry
        for definition in definitions:
            try:
                previous = registry.get(qualified(namespace, definition.name))
            except UnknownWorkflow:
                previous = None
            client.register(definition, namespace=namespace)
            out.print(f"registered {definition.key} in {namespace}")
            for schedule in definition.schedules:
                out.print(f"  schedule {schedule.name}: {schedule.cron} ({schedule.timezone})")
            _print_changes(previous, definition, created=True)
    finally:
        client.close()


def _print_changes(
    previous: WorkflowDefinition | None, definition: WorkflowDefinition, *, created: bool
) -> None:
    """What a new version changes in the moves a run can make, against the newest
    version registered before it."""
    from cairn.definitions.transitions import transition_changes

    if previous is None or not created or previous.version == definition.version:
        return
    changes = transition_changes(previous, definition)
    if not changes:
        out.print(f"  transitions: as in version {previous.version}", markup=False)
        return
    out.print(f"  transitions changed from version {previous.version}:", markup=False)
    for sign, row in changes:
        guard = f"  [{row.guard}]" if row.guard else ""
        line = f"  {sign} {row.source} --{row.event}--> {row.target}{guard}"
        out.print(line, markup=False, soft_wrap=True)  # one line a row, however long


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
    payload = json_object(input_json, "--input")
    if (debounce_key is None) != (debounce is None):
        raise InvalidInput("--debounce-key and --debounce go together")
    if max_wait is not None and debounce_key is None:
        raise InvalidInput("--max-wait needs --debounce-key and --debounce")
    debounced = (
        {"key": debounce_key, "wait": debounce, "max_wait": max_wait}
        if debounce_key is not None
        else None
    )
    single = {"key": singleton_key, "mode": singleton} if singleton_key else None
    asked = Submission(workflow, payload, request_id, webhook, debounced, single, priority)
    print(asked.over_http(namespace) if remote.active() else asked.direct(namespace))


@dataclass(frozen=True)
class Submission:
    """What ``cairn submit`` asks for, sent either way."""

    workflow: str
    payload: dict[str, Any]
    request_id: str | None
    webhook: str | None
    debounce: dict[str, Any] | None
    singleton: dict[str, Any] | None
    priority: int | None

    def direct(self, namespace: str) -> str:
        from cairn.client import Client
        from cairn.model.starts import Debounce, Singleton

        debounced = Debounce.of(self.debounce) if self.debounce is not None else None
        single = Singleton.of(self.singleton) if self.singleton is not None else None
        client = Client()
        try:
            return client.submit(
                self.workflow,
                self.payload,
                request_id=self.request_id,
                webhook=self.webhook,
                namespace=namespace,
                debounce=debounced,
                singleton=single,
                priority=self.priority,
            )
        finally:
            client.close()

    def over_http(self, namespace: str) -> str:
        remote.key_namespace(namespace)
        debounced = (
            {k: v for k, v in self.debounce.items() if v is not None} if self.debounce else None
        )
        with remote.api() as client:
            return client.submit(
                self.workflow,
                self.payload,
                request_id=self.request_id,
                webhook=self.webhook,
                debounce=debounced,
                singleton=self.singleton,
                priority=self.priority,
            ).run_id


@app.command()
def status(
    run_id: Annotated[str | None, typer.Argument(help="A run (omit with --fleet).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Machine-readable output.")] = False,
    fleet: Annotated[bool, typer.Option("--fleet", help="The workers and their leases.")] = False,
) -> None:
    """Show a run (status, liveness of its running nodes, node results), or the fleet."""
    if fleet:
        remote.direct_only("status --fleet", "the leases and queues are read from Redis")
        from cairn.cli.fleet import fleet_status

        fleet_status(as_json)
        return
    if run_id is None:
        raise typer.BadParameter("give a RUN_ID, or --fleet")
    shown = _over_http(run_id) if remote.active() else _from_database(run_id)
    if as_json:
        print(json.dumps({**shown.view, "heartbeats": shown.beats}, indent=2, default=str))
        return
    view = shown.view
    out.print(
        f"[bold]{view['id']}[/bold]  {view['workflow']}@{view['version']}  "
        f"[bold]{view['status']}[/bold]"
    )
    for running, beat in shown.beats.items():
        out.print(f"{running}: {liveness(beat, shown.interval_s)}", markup=False)
    for line in shown.explained:
        out.print(line, markup=False)
    if view.get("waiting_for_build"):
        out.print(f"waiting for a worker of build {view['waiting_for_build']}", markup=False)
    if view["priority"]:
        out.print(f"priority: {view['priority']}", markup=False)
    if view["parent_run_id"] is not None:
        out.print(
            f"forked from run {view['parent_run_id']} at seq {view['fork_seq']}", markup=False
        )
    if view["reason"]:
        out.print(f"reason: {view['reason']}", markup=False)
    _executions(view["executions"])


@dataclass(frozen=True)
class RunShown:
    """What ``cairn status`` shows of a run, read either way."""

    view: dict[str, Any]  # RunView.to_dict()
    beats: dict[str, dict[str, Any] | None]
    explained: list[str]
    interval_s: float


def _from_database(run_id: str) -> RunShown:
    from cairn.observe.explain import context_lines, waiting_lines

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
    return RunShown(view.to_dict(), beats, explained, opened.settings.heartbeat_interval)


def _over_http(run_id: str) -> RunShown:
    from cairn.cli.views import heartbeat_interval_s, run_view

    with remote.api() as client:
        detail = client.get_run(run_id)
    interval_s = heartbeat_interval_s(detail)
    return RunShown(run_view(detail), detail.heartbeats, detail.explain, interval_s)


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
def events(
    run_id: Annotated[str, typer.Argument()],
    after: Annotated[int, typer.Option(help="Only events after this seq.")] = 0,
    as_json: Annotated[bool, typer.Option("--json")] = False,
) -> None:
    """Print a run's event log."""
    if remote.active():
        from cairn.cli.views import all_events

        with remote.api() as client:
            history = all_events(client, run_id, after)
    else:
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
    status_, reason = (
        _waited_over_http(run_id, timeout) if remote.active() else _waited(run_id, timeout)
    )
    out.print(f"{run_id} {status_}" + (f": {reason}" if reason else ""), markup=False)
    if status_ != "succeeded":
        raise typer.Exit(EXIT_FAILED)


def _waited(run_id: str, timeout: float) -> tuple[str, str | None]:
    from cairn.client import Client, WaitTimeout

    client = Client()
    try:
        view = client.wait(run_id, timeout)
    except WaitTimeout as exc:
        err.print(str(exc), markup=False)
        raise typer.Exit(EXIT_TIMEOUT) from exc
    finally:
        client.close()
    return view.status.value, view.reason


def _waited_over_http(run_id: str, timeout: float) -> tuple[str, str | None]:
    from cairn.model.statuses import RunStatus

    deadline = time.monotonic() + timeout
    with remote.api() as client:
        while True:
            detail = client.get_run(run_id)
            if RunStatus(detail.status).terminal:
                return detail.status, detail.reason
            if time.monotonic() >= deadline:
                err.print(
                    f"run {run_id} is still {detail.status} after {timeout:g} s", markup=False
                )
                raise typer.Exit(EXIT_TIMEOUT)
            time.sleep(WAIT_POLL_S)


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
