"""A run's whole history, folded once: its steps (:mod:`cairn.timetravel.steps`) with
what the events around them add — the dispatch, retries, recoveries, holds, operators'
decisions, durations — and its other events (``cairn history``).

A step's **duration** is the worker's own measure (``node_executions.duration_s``) when
the idempotency row still describes this attempt, else the time from the event that
dispatched it to its result (queueing included): ``duration_from`` says which.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from cairn.engine.reads import AUDIT_ONLY, Versions, first_version, replay
from cairn.model.definition import WorkflowDefinition
from cairn.model.state import RunState
from cairn.store.records import EventRecord
from cairn.timetravel.steps import (
    RUN_PHASE,
    ExecutionAttempt,
    Step,
    StepResult,
    bare_step,
    is_step,
    result_of,
)


@dataclass(frozen=True)
class RunEvent:
    """An event of the run that is not a step: its start, a signal, a timer, a cancel
    or rollback request, a hold, a recovery (an audit entry)."""

    seq: int
    at: float
    type: str
    summary: str

    def to_dict(self) -> dict[str, Any]:
        return {"seq": self.seq, "at": self.at, "type": self.type, "summary": self.summary}


@dataclass(frozen=True)
class History:
    run_id: str
    workflow: str
    version: int
    status: str
    last_seq: int
    steps: tuple[Step, ...]
    events: tuple[RunEvent, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "workflow": self.workflow,
            "version": self.version,
            "status": self.status,
            "last_seq": self.last_seq,
            "steps": [step.to_dict() for step in self.steps],
            "events": [event.to_dict() for event in self.events],
        }


def build_history(
    definition: WorkflowDefinition,
    run_id: str,
    event_rows: Iterable[Any],
    executions: Iterable[Any] = (),
    versions: Versions | None = None,
) -> tuple[list[Step], list[RunEvent]]:
    """Fold the whole log once (every event through the decider, from the empty state)
    into its steps and its other events. ``executions`` are the run's idempotency rows,
    for the workers' own durations. Pure: the caller reads the rows."""
    steps: list[Step] = []
    others: list[RunEvent] = []
    # Per execution attempt, what happened to it before its result: the dispatch
    # (seq, at, resumed), recoveries and holds.
    dispatches: dict[ExecutionAttempt, tuple[int, float, bool]] = {}
    recoveries: dict[ExecutionAttempt, list[Mapping[str, Any]]] = {}
    holds: dict[ExecutionAttempt, list[str]] = {}
    event_rows = list(event_rows)
    before = RunState(run_id, definition.name, first_version(event_rows, definition.version))
    for event_row, after in replay(definition, before, event_rows, versions):
        result = result_of(event_row, before) if is_step(event_row) else None
        if result is not None:
            steps.append(
                _step(
                    event_row,
                    result,
                    before,
                    dispatches=dispatches,
                    recoveries=recoveries,
                    holds=holds,
                )
            )
        else:
            others.append(
                RunEvent(event_row.seq, event_row.at, event_row.type, _summary(event_row))
            )
            _note_before_result(event_row, recoveries, holds)
        for execution in _dispatched(event_row.outcome):
            dispatches[execution[:4]] = (event_row.seq, event_row.at, execution[4])
        before = after
    return _with_durations(steps, executions), others


def _step(
    event_row: EventRecord,
    result: StepResult,
    before: RunState,
    *,
    dispatches: Mapping[ExecutionAttempt, tuple[int, float, bool]],
    recoveries: dict[ExecutionAttempt, list[Mapping[str, Any]]],
    holds: dict[ExecutionAttempt, list[str]],
) -> Step:
    execution = (result.node, result.iteration, result.attempt, result.phase)
    marks, notes = list(result.marks), list(result.notes)
    if result.attempt > 1:
        marks.append("retry")
        notes.append(f"attempt {result.attempt} of visit {result.iteration}")
    for recovery in recoveries.pop(execution, []):
        if "recovered" not in marks:
            marks.append("recovered")
        notes.append(
            f"recovered ({recovery.get('cause')}) from the checkpoint at seq "
            f"{recovery.get('from_seq')}"
        )
    for reason in holds.pop(execution, []):
        if "held" not in marks:
            marks.append("held")
        notes.append(f"held for an operator: {reason}")
    dispatch = dispatches.get(execution)
    if dispatch is not None and dispatch[2]:
        marks.append("resumed")
        notes.append(f"run again by an operator's recovery.retry at seq {dispatch[0]}")
    if result.phase != RUN_PHASE:
        marks.append("compensation")
        if (before.cancel or {}).get("rollback"):
            marks.append("rollback")
    transitions = (event_row.outcome or {}).get("transitions", [])
    if result.status == "failed" and [result.node, "retry", result.node] in transitions:
        marks.append("retrying")
        notes.append("transient error: another attempt is scheduled")
    return _replaced(
        bare_step(event_row, result, before),
        dispatched_seq=dispatch[0] if dispatch is not None else None,
        # Until the idempotency rows are matched: the log's measure, dispatch to result.
        duration_s=event_row.at - dispatch[1] if dispatch is not None else None,
        duration_from="log" if dispatch is not None else None,
        marks=tuple(marks),
        notes=tuple(notes),
    )


def _note_before_result(
    event_row: EventRecord,
    recoveries: dict[ExecutionAttempt, list[Mapping[str, Any]]],
    holds: dict[ExecutionAttempt, list[str]],
) -> None:
    """Recoveries and holds, kept for the step that ends the execution they concern."""
    data = event_row.data
    execution = (
        data.get("node", ""),
        data.get("iteration", 1),
        data.get("attempt", 1),
        data.get("phase", RUN_PHASE),
    )
    if event_row.type == f"{AUDIT_ONLY}.recovered":
        recoveries.setdefault(execution, []).append(data)
    elif event_row.type == "node_held":
        holds.setdefault(execution, []).append(str(data.get("reason")))


def _dispatched(outcome: Mapping[str, Any] | None) -> list[tuple[str, int, int, str, bool]]:
    """The executions a decision dispatched (or started as child runs), from what the
    live decision recorded beside its event: (node, iteration, attempt, phase, resumed)."""
    found = []
    for command in (outcome or {}).get("commands", []):
        if command.get("command") in ("Dispatch", "StartChild"):
            found.append(
                (
                    command["node"],
                    command["iteration"],
                    command["attempt"],
                    command.get("phase", RUN_PHASE),
                    bool(command.get("resumed", False)),
                )
            )
    return found


def _with_durations(steps: list[Step], executions: Iterable[Any]) -> list[Step]:
    """The worker's own measure where the idempotency row (one per node, visit and phase,
    overwritten by each attempt) still describes the step: its latest, same attempt,
    finished by a worker."""
    rows = {(e.node, e.iteration, e.phase): e for e in executions}
    latest: dict[tuple[str, int, str], int] = {}
    for index, step in enumerate(steps):
        latest[(step.node, step.iteration, step.phase)] = index
    measured = list(steps)
    for key, index in latest.items():
        step, row = steps[index], rows.get(key)
        if (
            row is None
            or row.attempt != step.attempt
            or row.duration_s is None
            or row.finished_at is None
            or "operator" in step.marks
        ):
            continue
        measured[index] = _replaced(step, duration_s=float(row.duration_s), duration_from="worker")
    return measured


def _replaced(step: Step, **changes: Any) -> Step:
    return Step(**{**step.__dict__, **changes})


def _summary(event_row: EventRecord) -> str:
    """A run event in a few words."""
    data: Mapping[str, Any] = event_row.data
    kind: str = event_row.type
    if kind == "run_started":
        parent = data.get("parent")
        return f"started (child of run {parent['run_id']})" if parent else "started"
    if kind == "run_forked":
        return f"forked from run {data.get('parent_run_id')} at seq {data.get('fork_seq')}"
    if kind == "signal_received":
        by = f" by {data['actor']}" if data.get("actor") else ""
        return f"signal {data.get('name')}{by}"
    if kind == "timer_fired":
        return f"timer {data.get('timer_id')} fired"
    if kind == "cancel_requested":
        return f"cancel requested: {data.get('reason')}"
    if kind == "rollback_requested":
        what = (
            f" to seq {data['to_seq']}"
            if data.get("to_seq") is not None
            else (f" of step {data['step']}" if data.get("step") else "")
        )
        return f"rollback{what} requested: {data.get('reason')}"
    if kind == "node_held":
        return f"{data.get('node')}#{data.get('iteration')} held: {data.get('reason')}"
    if kind == f"{AUDIT_ONLY}.recovered":
        return (
            f"recovered {data.get('node')}#{data.get('iteration')}/{data.get('attempt', 1)} "
            f"({data.get('cause')}) from the checkpoint at seq {data.get('from_seq')}"
        )
    return kind
