"""The executions door: every transaction a worker's step needs, opened here, in the
engine — the worker hands over a message and gets records back, never a connection
(as procrastinate's worker hands each job to its manager).

- :meth:`Executions.begin` — the execution, its run, the definition and the restored
  state, in one statement (the hot path's one read), or why there is nothing to run;
  :meth:`Executions.begin_here` the same, with no round trip, for a message whose
  execution a step this process committed just dispatched (kept by its worker, or a
  sibling delivered here);
- :meth:`Executions.now` — the database's clock, which every event's time comes from;
- :meth:`Executions.claim` — a claim recorded before running (a takeover, an
  irreversible node), fenced;
- :meth:`Executions.take_over` — the recovery a takeover found, counted;
- and, handed out as parts, a running node's checkpoints and model calls, and the
  worker's code faults.

Each call is one transaction of its own on the same store methods the worker called
before: the PostgreSQL hot path (``statements``) is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

from cairn.engine.code_faults import CodeFaultBook, CodeMissing
from cairn.engine.heads import RunHeads
from cairn.engine.model_calls import ModelCallBook
from cairn.engine.node_checkpoints import NodeCheckpoints
from cairn.engine.reads import restore
from cairn.engine.registry import Registry
from cairn.errors import WorkflowDefinitionError
from cairn.model.definition import TaskNode, WorkflowDefinition
from cairn.model.events import Phase
from cairn.model.keys import ExecutionKey
from cairn.model.messages import InvalidMessage, NodeMessage
from cairn.model.state import RunState
from cairn.model.statuses import ExecutionStatus, NodeStatus, RunStatus
from cairn.store.records import ExecutionClaim, ExecutionHead, RunRecord
from cairn.store.sql import Store, Tx


class Skip(Enum):
    """Why a message has nothing to run, found by its read."""

    ALREADY_DONE = "already_done"  # finished, or a newer attempt superseded it
    RUN_FINISHED = "run_finished"  # its run ended


@dataclass(frozen=True)
class Begun:
    """What a message's read found: its execution, its run, the definition (its handlers
    imported) and the restored state (None while the run is being cancelled)."""

    execution: ExecutionHead
    run: RunRecord
    definition: WorkflowDefinition
    state: RunState | None
    # Whether the run's row caches its state, when the read was answered by a head
    # committed here (its row carries no state); None: as ``run`` says.
    row_cached: bool | None = None
    # Whether a branch's success is written as a merge (Restored.merging): after a
    # read, yes; answered by a head, as that head's step was written.
    merging: bool = True


class Executions:
    """The worker's door to the executions it runs; one per process, over its store.
    The fenced writes a running node makes are handed out as parts of their own:
    ``checkpoints``, ``model_calls``, and the worker's ``code_faults``."""

    def __init__(
        self, store: Store, registry: Registry, heads: RunHeads[Any] | None = None
    ) -> None:
        self.store, self.registry = store, registry
        # The states this process's own steps left (shared with its write path).
        self.heads = heads or RunHeads()
        self.checkpoints = NodeCheckpoints(store)
        self.model_calls = ModelCallBook(store)
        self.code_faults = CodeFaultBook(store)

    def begin(self, message: NodeMessage) -> Begun | Skip:
        """The message's execution, run, definition and state; a :class:`Skip` if there
        is nothing to run. :class:`InvalidMessage` if it names what never was;
        :class:`CodeMissing` if its definition's handlers cannot be imported here."""
        key = message.key
        # One statement; on a cache miss, immutable rows (snapshot, events up to last_seq)
        with self.store.statements() as tx:
            execution, run = tx.execution_and_run(key)
            if execution is None or run is None:
                raise InvalidMessage(f"no execution {key} was ever dispatched")
            if run.workflow_ref != message.workflow or run.version != message.version:
                raise InvalidMessage(
                    f"{key} belongs to {run.workflow_ref}@{run.version}, "
                    f"not {message.workflow}@{message.version}"
                )
            if not execution.status.active or execution.attempt != message.attempt:
                return Skip.ALREADY_DONE
            status = run.status
            if status.terminal:
                return Skip.RUN_FINISHED
            try:
                definition = self.registry.get(message.workflow, message.version, tx)
            except WorkflowDefinitionError as fault:
                raise CodeMissing(message, fault) from fault
            state = None if status is RunStatus.CANCELLING else self._state(tx, run, definition)
        return Begun(execution, run, definition, state)

    def begin_here(self, message: NodeMessage, within_s: float) -> Begun | None:
        """A message's read answered, with no round trip, by the last step this process
        committed to its run — as a read a moment after that commit would have found
        it: the execution a first attempt that commit's head shows dispatched and not
        yet begun, less than ``within_s`` ago. The message's worker keeps it from the
        step it just committed (:mod:`cairn.workers.step.continuation`), or a sibling
        this process dispatched is delivered to it. Whatever moved the run since
        (another process's step, a cancel) its commit's condition on the run's seq still
        finds, as it finds what moves a run between any read and its commit.

        None: read it — a later or resumed attempt (its row holds claims of its own, or
        it waited), an irreversible node (its claim is the record), a run no step of
        committed here or not running, an execution dispatched longer ago than
        ``within_s``. ``within_s`` stays below the lease's TTL: no claim of the execution
        can have lapsed and been taken over since it was dispatched, so the row holds
        none (a first claim is recorded in the lease alone)."""
        if message.attempt != 1 or message.resumed or message.phase is not Phase.RUN:
            return None
        head = self.heads.current(message.run_id)
        if head is None or head.row.status is not RunStatus.RUNNING:
            return None
        node = head.state.nodes.get(message.node)
        if (
            node is None
            or node.iteration != message.iteration
            or node.attempt != 1
            or node.status is not NodeStatus.SCHEDULED
            or not node.dispatched
            or head.row.workflow_ref != message.workflow
            or head.row.version != message.version
        ):
            return None
        now = head.now()
        if now - node.first_at >= within_s:
            return None
        try:
            definition = self.registry.get(message.workflow, message.version)
        except WorkflowDefinitionError:  # the read says why
            return None
        task = definition.nodes.get(message.node)
        if isinstance(task, TaskNode) and task.irreversible:
            return None
        execution = ExecutionHead(ExecutionStatus.SCHEDULED, 1, 0, 0, now)
        return Begun(execution, head.row, definition, head.state, head.cached, head.merging)

    def _state(self, tx: Tx, run: RunRecord, definition: WorkflowDefinition) -> RunState:
        """The run's latest state: as this process's last step of it left it, when the
        run is still there; else from the row's cache, or restored."""
        state = self.heads.state_at(run.id, run.last_seq)
        return state if state is not None else restore(tx, run, definition)

    def now(self) -> float:
        """The database's clock (a read of its own)."""
        with self.store.reading() as tx:
            return tx.now()

    def claim(
        self, key: ExecutionKey, attempt: int, fence: int, *, first: bool
    ) -> ExecutionClaim | None:
        """Record the claim ``fence`` of ``key`` at ``attempt`` (``first``: none may have
        been recorded before); None if it may not run (finished, or a newer claim)."""
        with self.store.statements(writes=True) as tx:
            return tx.claim_execution(key, attempt, fence, first=first)

    def take_over(self, key: ExecutionKey, attempt: int) -> int | None:
        """Count the recovery of an execution whose holder died; its recoveries so far,
        or None if it finished meanwhile."""
        with self.store.transaction() as tx:
            return tx.touch_execution(key, attempt, died=True)
