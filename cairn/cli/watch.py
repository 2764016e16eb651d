"""``cairn watch``: a run, live, until it ends — its steps as a progress bar, what each
running node is doing (heartbeats) and what its model call is saying, what it waits
for, and every recovery."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from cairn.cli import remote
from cairn.cli._app import EXIT_FAILED, EXIT_TIMEOUT, app, out
from cairn.cli.deployment import deployment
from cairn.cli.liveness import heartbeats, liveness

if TYPE_CHECKING:
    from rich.console import Group

    from cairn.lease.port import Leases
    from cairn.observe.streamed import Streamed


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
    if remote.active():
        _watch_over_http(run_id, interval, timeout)
        return
    from rich.live import Live

    from cairn.model.statuses import RunStatus

    recoveries: list[str] = []
    seen = 0
    deadline = None if timeout is None else time.monotonic() + timeout
    with deployment() as opened:
        orchestrator = opened.orchestrator
        interval_s = opened.settings.heartbeat_interval
        reports = _Reports(opened.leases, run_id, text=not no_text)
        with Live(console=out, refresh_per_second=4, transient=False) as live:
            while True:
                view = orchestrator.get_run(run_id)
                definition = orchestrator.registry.get(view.workflow_ref, view.version)
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
                        interval_s,
                        said=reports.said,
                        problem=reports.problem,
                    )
                )
                if view.status.terminal:
                    break
                if deadline is not None and time.monotonic() > deadline:
                    raise typer.Exit(EXIT_TIMEOUT)
                time.sleep(interval)
    if view.status is not RunStatus.SUCCEEDED:
        raise typer.Exit(EXIT_FAILED)


def _watch_over_http(run_id: str, interval: float, timeout: float | None) -> None:
    """``cairn watch`` in remote mode: the run as the API shows it (its progress counted
    there), refreshed; what model calls stream is not shown."""
    from rich.live import Live

    from cairn.cli.views import all_events, heartbeat_interval_s
    from cairn.model.statuses import RunStatus

    recoveries: list[str] = []
    seen = 0
    deadline = None if timeout is None else time.monotonic() + timeout
    with remote.api() as client, Live(console=out, refresh_per_second=4) as live:
        while True:
            detail = client.get_run(run_id)
            for event in all_events(client, run_id, seen):
                seen = event["seq"]
                if event["type"] == "audit.recovered":
                    recoveries.append(_recovered_line(event["data"]))
            head = f"{detail.id}  {detail.status}" + (f": {detail.reason}" if detail.reason else "")
            lines = [head]
            lines += [
                f"{ran}: {liveness(beat, heartbeat_interval_s(detail))}"
                for ran, beat in detail.heartbeats.items()
            ]
            lines += detail.explain + recoveries
            title = f"{detail.workflow}@{detail.version}"
            live.update(_frame(title, detail.progress.total, detail.progress.done, lines))
            if RunStatus(detail.status).terminal:
                break
            if deadline is not None and time.monotonic() > deadline:
                raise typer.Exit(EXIT_TIMEOUT)
            time.sleep(interval)
    if detail.status != RunStatus.SUCCEEDED:
        raise typer.Exit(EXIT_FAILED)


def _frame(title: str, total: int, done: int, lines: list[str]) -> Group:
    """A frame: the steps as a progress bar, then the lines."""
    from rich.console import Group
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
    from rich.text import Text

    bar = Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), expand=False
    )
    bar.add_task(title, total=total or 1, completed=done)
    return Group(bar, *(Text(line) for line in lines))


TEXT_ROWS = 4  # rows of a model call's text under its node: a glimpse, not a transcript
TEXT_INDENT = "  │ "
REDIS_RETRY_S = 5.0


class _Reports:
    """What a run's running nodes report through Redis — heartbeats, and what their model
    calls stream — read once per refresh of ``cairn watch``. Best effort: Redis out of
    reach costs the view those lines (and is tried again after ``REDIS_RETRY_S``, so a
    connect timeout does not stall every refresh), never the watch itself."""

    def __init__(self, leases: Leases, run_id: str, *, text: bool) -> None:
        from cairn.observe.streamed import Streamed

        self.leases, self.run_id = leases, run_id
        self.said = Streamed() if text else None
        self.problem: str | None = None
        self._retry_at = 0.0

    def read(self, view: Any) -> dict[str, dict[str, Any] | None]:
        import redis

        if time.monotonic() < self._retry_at:
            return {}
        try:
            beats = heartbeats(self.leases, view)
            # While nothing runs there is no text to show: the log is read on when it does.
            if self.said is not None and beats:
                self.said.read(self.leases, self.run_id)
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
    interval_s: float,
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
    lines = [f"{view.id}  {view.status.value}" + (f": {view.reason}" if view.reason else "")]
    streaming = _streaming(state, said)
    for running, beat in beats.items():
        lines.append(f"{running}: {liveness(beat, interval_s)}")
        lines += [TEXT_INDENT + row for row in streaming.get(running, [])]
    if problem is not None:
        lines.append(problem)
    if state is not None:
        lines += waiting_lines(definition, state, time.time()) + context_lines(definition, state)
    lines += recoveries
    return _frame(f"{view.workflow}@{view.version}", len(tasks), done, lines)


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
