"""Reading runs: a run's state restored from its log, and the views people and workers
read (``cairn status``, ``cairn events``, what parked runs wait for, rollback
checkpoints). Nothing here writes."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from cairn.decider import decide
from cairn.engine.awaiting import awaiting
from cairn.engine.registry import Registry
from cairn.errors import InvalidInput, RunNotFound, StoreError
from cairn.model.awaiting import Awaiting
from cairn.model.definition import WorkflowDefinition
from cairn.model.events import Event, RunMigrated, event_from_dict
from cairn.model.keys import ExecutionKey
from cairn.model.state import RunState
from cairn.model.statuses import RunStatus
from cairn.model.workflow_names import DEFAULT_NAMESPACE, qualified
from cairn.store.records import RunRecord, to_epoch
from cairn.store.sql import Store, Tx

AUDIT_ONLY = "audit"  # events with this "type" prefix are history, not decider input


# A definition of the run's workflow by version: a history that crosses a migration
# (``run_migrated``) is decided under the version the run was on at each event.
Versions = Callable[[int], WorkflowDefinition]


def replay(
    definition: WorkflowDefinition,
    state: RunState,
    event_rows: Iterable[Any],
    versions: Versions | None = None,
) -> Iterator[tuple[Any, RunState]]:
    """Each logged event with the run's state after it: the log folded into ``state`` (the
    state before the first of them) through the decider. Audit entries are history, not
    the decider's input: the state after one is the state before it.

    Each event is decided under the definition of the version the run is on then, and a
    migration under the version it moves to: ``definition`` where that is its version,
    else ``versions(version)``. Without ``versions``, a history that needs another
    version raises :class:`~cairn.errors.StoreError` rather than misread it."""
    for event_row in event_rows:
        if not event_row.type.startswith(AUDIT_ONLY):
            event = event_from_dict(event_row.data)
            wanted = decided_under(event, state)
            if wanted != definition.version:
                definition = _other_version(definition, wanted, versions)
            state = decide(definition, state, event).state
        yield event_row, state


def decided_under(event: Event, state: RunState) -> int:
    """The version whose definition decides ``event``: a migration's target, else the
    version the run is on."""
    return event.to_version if isinstance(event, RunMigrated) else state.version


def first_version(event_rows: Sequence[Any], latest: int) -> int:
    """The version a run's history starts on: where its first migration moved it from,
    or (never migrated) the version it is on."""
    for event_row in event_rows:
        if event_row.type == RunMigrated.type:
            return int(event_row.data["from_version"])
    return latest


def _other_version(
    definition: WorkflowDefinition, version: int, versions: Versions | None
) -> WorkflowDefinition:
    if versions is None:
        raise StoreError(
            f"the history of a run of {definition.name} crosses versions (a migration) and "
            f"this reader has only version {definition.version}"
        )
    return versions(version)


def restore(
    tx: Tx,
    row: RunRecord,
    definition: WorkflowDefinition,
    upto: int | None = None,
    versions: Versions | None = None,
) -> RunState:
    """The run's state after event ``upto`` (default: its latest).

    The latest is cached on the run row; any other (or an uncached one) is the latest
    snapshot at or before ``upto`` plus the events after it, replayed (a migration writes
    a snapshot, so the latest never replays across one; an earlier state may, and needs
    ``versions``).
    """
    upto = row.last_seq if upto is None else upto
    if upto == row.last_seq and row.state is not None:
        return RunState.from_dict(row.state)
    snapshot = tx.latest_snapshot(row.id, at_or_before=upto)
    event_rows = tx.events_after(row.id, snapshot.seq if snapshot else 0, upto)
    if snapshot is None:
        whole = event_rows if upto == row.last_seq else tx.events_after(row.id, 0)
        state = RunState(row.id, definition.name, first_version(whole, definition.version))
    else:
        state = RunState.from_dict(snapshot.state)
    for _event_row, replayed in replay(definition, state, event_rows, versions):
        state = replayed
    return state


def versions_of(registry: Registry, row: RunRecord, tx: Tx) -> Versions:
    """The definitions of ``row``'s workflow by version, as its history needs them."""
    return lambda version: registry.get(row.workflow_ref, version, tx)


@dataclass(frozen=True)
class Restored:
    """A run as a worker read it before running a node: the row, the state as of its
    ``last_seq``, and the database's clock at the read (carried forward by a monotonic
    clock, so an event's time still comes from the one clock)."""

    row: RunRecord
    state: RunState
    db_time: float
    read_at: float = field(default_factory=time.monotonic)
    # Whether the run's row caches its state (None: as the row read says; a head
    # committed here says so itself, its row carries no state).
    row_cached: bool | None = None
    # Whether a branch's success planned on this is written as a merge
    # (cairn.engine.merges): planned on a read, or on a merge committed here — other
    # processes may be moving the run; not on a step this process wrote the ordinary way,
    # whose seq its next is likely to find unmoved.
    merging: bool = True

    @property
    def cached(self) -> bool:
        return self.row.state is not None if self.row_cached is None else self.row_cached

    def now(self) -> float:
        return self.db_time + (time.monotonic() - self.read_at)


@dataclass
class RunView:
    """A run as ``cairn status`` and ``cairn.get_run`` show it."""

    id: str
    workflow: str
    version: int
    status: RunStatus
    namespace: str
    request_id: str | None
    current: list[str]
    reason: str | None
    last_seq: int
    created_at: float
    updated_at: float
    state: RunState | None = None
    executions: list[dict[str, Any]] = field(default_factory=list)
    # Lineage of a fork: the run it was forked from, and after which of its events.
    parent_run_id: str | None = None
    fork_seq: int | None = None
    priority: int = 0  # -5..5, higher first
    # Whose definition it runs: its own namespace's, or the one that shared it.
    workflow_namespace: str = DEFAULT_NAMESPACE
    # The build it started on, and the one it waits for while no live worker runs its
    # nodes (docs/versions.md); None: not routed by build, or a worker can run it.
    build: str | None = None
    waiting_for_build: str | None = None

    @property
    def workflow_ref(self) -> str:
        """Its workflow as the registry names it (``acme/checkout``)."""
        return qualified(self.workflow_namespace, self.workflow)

    @property
    def result(self) -> dict[str, Any] | None:
        return self.state.vars if self.state is not None else None

    def to_dict(self) -> dict[str, Any]:
        data = {key: value for key, value in self.__dict__.items() if key != "state"}
        data["status"] = self.status.value
        if self.state is not None:
            data["vars"] = self.state.vars
            data["visits"] = self.state.visits
            data["nodes"] = {name: node.status.value for name, node in self.state.nodes.items()}
        return data


class Reads:
    """The engine's read side: each read one read-only transaction."""

    def __init__(
        self,
        store: Store,
        registry: Registry,
        waiting_for: Callable[[str, WorkflowDefinition], str | None] | None = None,
    ) -> None:
        self.store = store
        self.registry = registry
        # The build a run waits for a worker of (cairn.engine.builds.BuildBook).
        self.waiting_for = waiting_for

    def load(
        self, run_id: str, upto: int | None = None
    ) -> tuple[Any, WorkflowDefinition, RunState]:
        with self.store.reading() as tx:
            row = tx.run(run_id)
            if row is None:
                raise RunNotFound(f"no run {run_id}")
            definition = self.registry.get(row.workflow_ref, row.version, tx)
            versions = versions_of(self.registry, row, tx)
            return row, definition, restore(tx, row, definition, upto, versions)

    def get_run(self, run_id: str, *, with_executions: bool = False) -> RunView:
        row, definition, state = self.load(run_id)
        view = RunView(
            id=row.id,
            workflow=row.workflow,
            version=row.version,
            status=row.status,
            namespace=row.namespace,
            workflow_namespace=row.workflow_namespace,
            request_id=row.request_id,
            current=list(row.current),
            reason=row.reason,
            last_seq=row.last_seq,
            created_at=to_epoch(row.created_at),
            updated_at=to_epoch(row.updated_at),
            state=state,
            parent_run_id=row.parent_run_id,
            fork_seq=row.fork_seq,
            priority=row.priority,
            build=row.build,
        )
        if self.waiting_for is not None and not row.status.terminal:
            view.waiting_for_build = self.waiting_for(row.id, definition)
        if with_executions:
            with self.store.reading() as tx:
                view.executions = [
                    {
                        "node": e.node,
                        "iteration": e.iteration,
                        "phase": e.phase,
                        "status": e.status,
                        "attempt": e.attempt,
                        "worker": e.worker,
                        "duration_s": e.duration_s,
                        "error": e.error,
                    }
                    for e in tx.executions_of(run_id)
                ]
        return view

    def waiting(self, namespace: str | None = None, limit: int = 100) -> list[Awaiting]:
        """What every parked run waits for (a signal, an operator), longest first."""
        found: list[Awaiting] = []
        with self.store.reading() as tx:
            for row in tx.waiting_runs(namespace, limit):
                definition = self.registry.get(row.workflow_ref, row.version, tx)
                found.extend(awaiting(definition, restore(tx, row, definition)))
        return sorted(found, key=lambda entry: entry.since)

    def events(self, run_id: str, after: int = 0) -> list[dict[str, Any]]:
        with self.store.reading() as tx:
            if tx.run(run_id) is None:
                raise RunNotFound(f"no run {run_id}")
            return [
                {"seq": e.seq, "type": e.type, "at": e.at, "data": e.data, "outcome": e.outcome}
                for e in tx.events_after(run_id, after)
            ]

    def checkpoint(self, run_id: str, seq: int, *, latest: bool = False) -> RunState:
        """The state a rollback may rewind to: after a decision (not an audit entry)
        before the latest (``latest``: or the latest itself, for a fork), with the run
        going and no parallel section half joined."""
        with self.store.reading() as tx:
            row = tx.run(run_id)
            if row is None:
                raise RunNotFound(f"no run {run_id}")
            last = row.last_seq if latest else row.last_seq - 1
            entries = tx.events_after(run_id, seq - 1, seq) if seq >= 1 else []
            if not entries or entries[0].type.startswith(AUDIT_ONLY) or seq > last:
                raise InvalidInput(
                    f"run {run_id} has no checkpoint at seq {seq}: pick the seq of a decision "
                    f"(not an audit entry) from 1 to {last} (cairn events)"
                )
            definition = self.registry.get(row.workflow_ref, row.version, tx)
            state = restore(tx, row, definition, seq, versions_of(self.registry, row, tx))
        if state.status not in (RunStatus.RUNNING, RunStatus.WAITING):
            raise InvalidInput(f"at seq {seq} run {run_id} was {state.status.value}: not resumable")
        if any(not join.done for join in state.joins.values()):
            raise InvalidInput(
                f"at seq {seq} run {run_id} was inside a parallel section; roll back to a "
                "seq before its fan-out or after its join"
            )
        return state

    def fenced_out(self, key: ExecutionKey, fence: int) -> bool:
        """True if a claim newer than ``fence`` took the execution over."""
        with self.store.reading() as tx:
            return tx.execution_fence(key) > fence

    def stop_requested(self, key: ExecutionKey, attempt: int) -> bool:
        """True once the run is being cancelled or no longer waits for this execution
        (asked by heartbeats, for ``ctx.cancelled``)."""
        with self.store.statements() as tx:
            return tx.stop_requested(key, attempt)
