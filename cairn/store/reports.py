"""What the SLA report (:mod:`cairn.observe.sla`) reads of the store: the facts of the runs
in a window — runs, executions, the events that carry timings and charges, dispatches,
budgets — as plain records, in a few queries. The report computes; this only reads."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, or_, select

from cairn.model.workflow_names import qualified, unqualified
from cairn.store.records import from_epoch, to_epoch
from cairn.store.schema import events, executions, runs, workflows
from cairn.store.sql import Tx

RESULT_EVENTS = ("node_succeeded", "node_failed")
# Every event that carries what an execution spent (``charges``).
CHARGING_EVENTS = (*RESULT_EVENTS, "node_cancelled", "child_finished")
RUN_PHASE = "run"


# -- the facts ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RunFacts:
    run_id: str
    workflow: str
    version: int
    status: str
    created_at: float
    finished_at: float | None


@dataclass(frozen=True)
class ExecutionFacts:
    """A row of the idempotency table: one per (run, node, iteration, phase), with its
    latest attempt and how often the scheduler recovered it."""

    run_id: str
    node: str
    iteration: int
    phase: str
    status: str
    attempt: int
    recoveries: int


@dataclass(frozen=True)
class EventFacts:
    """The fields of a logged event that the report reads."""

    run_id: str
    type: str
    at: float
    node: str | None = None
    iteration: int | None = None
    phase: str | None = None
    timings: Mapping[str, float] | None = None
    charges: Mapping[str, float] | None = None
    budget: Mapping[str, float] | None = None


@dataclass(frozen=True)
class DispatchFacts:
    """A run-phase dispatch some decision made, at that decision's time."""

    run_id: str
    node: str
    iteration: int
    at: float


@dataclass(frozen=True)
class SlaFacts:
    runs: Sequence[RunFacts]
    executions: Sequence[ExecutionFacts] = ()
    events: Sequence[EventFacts] = ()
    # Only the runs that have a retried or recovered execution: nothing else needs them.
    dispatches: Sequence[DispatchFacts] = ()
    # The definitions' run budgets, by (workflow, version).
    budgets: Mapping[tuple[str, int], Mapping[str, float]] = field(default_factory=dict)


def read_facts(source: Tx | Connection, since: float, workflow: str | None = None) -> SlaFacts:
    """What the report needs about the runs created or finished since ``since`` (epoch
    seconds), optionally of one workflow."""
    connection = source.connection if isinstance(source, Tx) else source
    since_at = from_epoch(since)
    in_window = or_(runs.c.created_at >= since_at, runs.c.finished_at >= since_at)
    if workflow is not None:
        in_window = in_window & (runs.c.workflow == workflow)
    window = select(runs.c.id).where(in_window)
    run_facts = _run_facts(connection, in_window)
    return SlaFacts(
        run_facts,
        _execution_facts(connection, window),
        _event_facts(connection, window),
        _dispatch_facts(connection, window),
        _budgets(connection, {(run.workflow, run.version) for run in run_facts}),
    )


def _run_facts(connection: Connection, in_window: Any) -> list[RunFacts]:
    columns = (runs.c.id, runs.c.workflow_namespace, runs.c.workflow, runs.c.version)
    return [
        RunFacts(
            row.id,
            qualified(row.workflow_namespace, row.workflow),  # two namespaces' are two
            int(row.version),
            row.status,
            to_epoch(row.created_at),
            to_epoch(row.finished_at) if row.finished_at is not None else None,
        )
        for row in connection.execute(
            select(*columns, runs.c.status, runs.c.created_at, runs.c.finished_at).where(in_window)
        )
    ]


def _execution_facts(connection: Connection, window: Any) -> list[ExecutionFacts]:
    return [
        ExecutionFacts(
            row.run_id,
            row.node,
            int(row.iteration),
            row.phase,
            row.status,
            int(row.attempt),
            int(row.recoveries or 0),
        )
        for row in connection.execute(
            select(
                executions.c.run_id,
                executions.c.node,
                executions.c.iteration,
                executions.c.phase,
                executions.c.status,
                executions.c.attempt,
                executions.c.recoveries,
            ).where(executions.c.run_id.in_(window))
        )
    ]


def _event_facts(connection: Connection, window: Any) -> list[EventFacts]:
    data = events.c.data
    return [
        EventFacts(
            row.run_id,
            row.type,
            float(row.at),
            node=row.node,
            iteration=int(row.iteration) if row.iteration is not None else None,
            phase=row.phase,
            timings=_amounts(row.timings),
            charges=_amounts(row.charges),
            budget=_amounts(row.budget),
        )
        for row in connection.execute(
            select(
                events.c.run_id,
                events.c.type,
                events.c.at,
                data["node"].as_string().label("node"),
                data["iteration"].as_integer().label("iteration"),
                data["phase"].as_string().label("phase"),
                data["timings"].label("timings"),
                data["charges"].label("charges"),
                data["budget"].label("budget"),
            ).where(
                events.c.run_id.in_(window),
                events.c.type.in_(["run_started", *CHARGING_EVENTS]),
            )
        )
    ]


def _dispatch_facts(connection: Connection, window: Any) -> list[DispatchFacts]:
    """When each node of a run that retried or recovered was dispatched."""
    troubled = (
        select(executions.c.run_id)
        .where(
            executions.c.run_id.in_(window),
            (executions.c.attempt > 1) | (executions.c.recoveries > 0),
        )
        .distinct()
    )
    return [
        DispatchFacts(row.run_id, command["node"], int(command["iteration"]), float(row.at))
        for row in connection.execute(
            select(events.c.run_id, events.c.at, events.c.outcome).where(
                events.c.run_id.in_(troubled)
            )
        )
        for command in (row.outcome or {}).get("commands", ())
        if command.get("command") == "Dispatch" and command.get("phase", RUN_PHASE) == RUN_PHASE
    ]


def _budgets(
    connection: Connection, versions: set[tuple[str, int]]
) -> dict[tuple[str, int], Mapping[str, float]]:
    """The budget each (workflow, version) declares, for those that declare one."""
    budgets: dict[tuple[str, int], Mapping[str, float]] = {}
    if not versions:
        return budgets
    names = sorted({unqualified(name)[1] for name, _ in versions})
    for row in connection.execute(
        select(
            workflows.c.namespace,
            workflows.c.name,
            workflows.c.version,
            workflows.c.spec["budget"].label("budget"),
        ).where(workflows.c.name.in_(names))
    ):
        budget = _amounts(row.budget)
        which = (qualified(row.namespace, row.name), int(row.version))
        if which in versions and budget:
            budgets[which] = budget
    return budgets


def _amounts(value: Any) -> dict[str, float] | None:
    """A JSON object of numbers (timings, charges, a budget); anything else is None."""
    if not isinstance(value, Mapping):
        return None
    return {
        str(name): float(amount)
        for name, amount in value.items()
        if isinstance(amount, int | float) and not isinstance(amount, bool)
    }
