"""Running a handler again in a replay context (:class:`ReplaySpace`): the state it was
given, effects answered by a read-only :class:`~cairn.timetravel.ledger.ReplayLedger`,
model calls and recorded HTTP answered from the record of the execution it replays
(the run's own, or a fork's parent's), every other HTTP request refused, artifacts put
into a :class:`~cairn.timetravel.sandbox.ArtifactSandbox`, checkpoints kept in memory,
no lease, no heartbeat, nothing written to the database — and its result as the event a
worker would have reported (:class:`Executed`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from cairn.config import Settings
from cairn.decider.budget import allowance
from cairn.effects.ledger import effect_scope
from cairn.engine.model_calls import ModelCallBook
from cairn.engine.node_checkpoints import NodeCheckpoints
from cairn.errors import InvalidInput, UnknownNode
from cairn.model.classify import classify
from cairn.model.definition import PersistKind, Ref, TaskNode, WorkflowDefinition
from cairn.model.events import NodeCancelled, NodeFailed, NodeSucceeded, Phase
from cairn.model.failures import Cancelled
from cairn.model.keys import ExecutionKey
from cairn.model.state import RunState
from cairn.recording.calls import ModelCalls
from cairn.recording.http import recording
from cairn.store.records import RunRecord
from cairn.store.sql import Store
from cairn.timetravel.ledger import Answer, EffectUse, ReplayLedger
from cairn.timetravel.model_stubs import model_stand_in
from cairn.timetravel.sandbox import (
    ArtifactSandbox,
    ReplayArtifacts,
    ReplayCheckpoints,
    replay_namespace,
)
from cairn.workers.context import StepContext
from cairn.workers.execute import OUTPUT_HINT, call_handler, check_output


@dataclass(frozen=True)
class Executed:
    """One handler execution in a replay context, and everything it did there."""

    event: NodeSucceeded | NodeFailed | NodeCancelled
    effects: tuple[EffectUse, ...] = ()
    progress: tuple[dict[str, Any], ...] = ()
    puts: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    # Model calls (or recorded HTTP) the record could not answer, answered by a stub.
    stubbed_calls: tuple[str, ...] = ()
    # Model calls and HTTP requests refused (never sent), whatever the handler made of it.
    refused_calls: tuple[str, ...] = ()
    checkpoints: int = 0  # checkpoints the handler saved (kept in memory, never written)

    @property
    def status(self) -> str:
        return self.event.type.removeprefix("node_")

    @property
    def output(self) -> Mapping[str, Any] | None:
        return self.event.output if isinstance(self.event, NodeSucceeded) else None

    @property
    def error(self) -> str | None:
        if isinstance(self.event, NodeFailed):
            return f"{self.event.error_class.value}: {self.event.message}"
        return "cancelled at a safe point" if isinstance(self.event, NodeCancelled) else None

    @property
    def refused(self) -> list[EffectUse]:
        return [use for use in self.effects if use.answer == Answer.REFUSED]

    def to_dict(self) -> dict[str, Any]:
        charges = getattr(self.event, "charges", None)
        return {
            "status": self.status,
            "output": dict(self.output) if self.output is not None else None,
            "error": self.error,
            "effects": [use.to_dict() for use in self.effects],
            "charges": dict(charges) if charges else {},
            "progress": list(self.progress),
            "artifacts": {name: dict(ref) for name, ref in self.puts.items()},
            "stubbed_calls": list(self.stubbed_calls),
            "refused_calls": list(self.refused_calls),
            "checkpoints": self.checkpoints,
        }


@dataclass
class ReplaySpace:
    """Where one replay (or dry run) reads and where its writes go.

    ``namespace`` and ``scope`` locate the recorded effects (the real run's, or a fork's
    parent's); ``source_run`` is the run whose artifacts, model calls and recorded HTTP
    stand for the replayed run's; ``sandbox`` takes every artifact put. Nothing here
    writes the database.

    ``restarted``: the nodes a fork started again as a new visit (what was in progress
    at the fork point), by how many visits the fork's count of them runs ahead of the
    parent's: the fork's visit ``n`` of such a node is answered from the parent's record
    of visit ``n - 1``, the one it repeats."""

    store: Store
    settings: Settings
    namespace: str
    scope: str | None
    source_run: str
    sandbox: ArtifactSandbox
    restarted: Mapping[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, store: Store, settings: Settings, run: RunRecord) -> ReplaySpace:
        """Reading the real run ``run`` (its row)."""
        return cls(
            store,
            settings,
            run.namespace,
            effect_scope(run),
            str(run.id),
            ArtifactSandbox(replay_namespace(run.namespace)),
        )

    def execute(
        self,
        definition: WorkflowDefinition,
        state: RunState,
        *,
        run_id: str,
        node: str,
        iteration: int,
        attempt: int,
        phase: Phase,
        at: float,
        resumed: bool = False,
        recorded_patches: Mapping[str, bool] | None = None,
    ) -> Executed:
        """Run the handler (or compensation) registered now for ``node`` on ``state``,
        in a replay context; its result as the event a worker would have reported.
        ``recorded_patches``: a replay's, the answers to ``ctx.patched`` the recorded
        execution was given (None: a dry run's new execution, answered by the rule
        from ``state``, as a live fork would be)."""
        task, ref = _what_runs(definition, node, phase)
        execution = _Execution(run_id, node, iteration, attempt, phase)
        ledger = self._ledger(task, execution)
        calls, checkpoints = self._recorders(task, execution)
        progress: list[dict[str, Any]] = []
        ctx = self._context(
            definition,
            state,
            execution,
            resumed=resumed,
            recorded_patches=recorded_patches,
            ledger=ledger,
            calls=calls,
            checkpoints=checkpoints,
            progress=progress,
        )
        # Every replay intercepts the handler's HTTP, whether or not its node records it:
        # answered from the record, or refused — never sent (DESIGN.md, guarantee 3).
        with recording(calls):
            event = _run(ref.resolve(), ctx, phase, at, self.settings.max_payload_bytes)
        return Executed(
            event,
            tuple(ledger.uses),
            tuple(progress),
            ctx.added_artifacts(),
            tuple(calls.stood_in),
            tuple(calls.refused),
            len(checkpoints.saved_contexts),
        )

    def _context(
        self,
        definition: WorkflowDefinition,
        state: RunState,
        execution: _Execution,
        *,
        resumed: bool,
        recorded_patches: Mapping[str, bool] | None,
        ledger: ReplayLedger,
        calls: ModelCalls,
        checkpoints: ReplayCheckpoints,
        progress: list[dict[str, Any]],
    ) -> StepContext:
        """The handler's ``ctx``, as a worker would build it, on the replay's ledger,
        recorders and artifact sandbox; each progress report is appended to ``progress``."""
        phase = execution.phase
        return StepContext(
            run_id=execution.run_id,
            workflow=definition.name,
            node=execution.node,
            iteration=execution.iteration,
            attempt=execution.attempt,
            phase=phase.value,
            state=state,
            on_progress=lambda p: progress.append(
                {"done": p.done, "total": p.total, "message": p.message}
            ),
            resumed=resumed,
            allowance=allowance(definition, state, execution.node) if phase is Phase.RUN else None,
            artifacts=self._artifacts(state, execution),
            effects=ledger,
            model_calls=calls,
            checkpoints=checkpoints,
            recorded_patches=recorded_patches,
        )

    def _ledger(self, task: TaskNode | None, execution: _Execution) -> ReplayLedger:
        """The effects ledger, read only: what the recorded run's effects answered."""
        ephemeral = task is not None and task.persist.kind is PersistKind.EPHEMERAL
        return ReplayLedger(
            self.store,
            namespace=self.namespace,
            run_id=execution.run_id,
            node=execution.node,
            iteration=execution.iteration,
            attempt=execution.attempt,
            fence=0,
            max_payload_bytes=self.settings.max_payload_bytes,
            refusal=f"{execution.node} is ephemeral: it cannot have external effects"
            if ephemeral
            else None,
            scope=self.scope,
        )

    def _recorders(
        self, task: TaskNode | None, execution: _Execution
    ) -> tuple[ModelCalls, ReplayCheckpoints]:
        """The execution's model calls — answered from the record, in order, or refused:
        never sent — and its checkpoints, kept in memory. The record is that of the
        execution replayed: the run's own, or (a fork's dry run goes on from the
        parent's state) the parent's."""
        recorded_visit = execution.iteration - self.restarted.get(execution.node, 0)
        key = ExecutionKey(self.source_run, execution.node, recorded_visit, execution.phase.value)
        limit = self.settings.max_payload_bytes
        calls = ModelCalls(
            ModelCallBook(self.store),
            key,
            execution.attempt,
            0,
            max_bytes=limit,
            reconnect_within=0.0,
            live=False,
            may_have_record=True,
            # Compacted as the live run was: its summaries are answered from the record.
            context=task.context if task is not None else None,
            stand_in=model_stand_in(
                execution.run_id, execution.node, execution.iteration, execution.attempt
            ),
            records_http=task is not None and task.record_http,
        )
        policy = task.checkpoint if task is not None else None
        checkpoints = ReplayCheckpoints(
            NodeCheckpoints(self.store), key, execution.attempt, 0, limit, 0.0, policy=policy
        )
        return calls, checkpoints

    def _artifacts(self, state: RunState, execution: _Execution) -> ReplayArtifacts:
        return ReplayArtifacts(
            self.store,
            self.settings,
            self.sandbox,
            run_id=execution.run_id,
            source_run=self.source_run,
            known=state.artifacts,
            node=execution.node,
            iteration=execution.iteration,
            attempt=execution.attempt,
            phase=execution.phase.value,
        )


class _Execution(NamedTuple):
    """The execution a replay runs (its run: the replay's, or a dry run's own id)."""

    run_id: str
    node: str
    iteration: int
    attempt: int
    phase: Phase


def _what_runs(
    definition: WorkflowDefinition, node: str, phase: Phase
) -> tuple[TaskNode | None, Ref]:
    """The node as a task (None if it is another kind) and what runs for it in
    ``phase``: its handler, or its compensation; refused if the node has nothing there."""
    declared = definition.nodes.get(node)
    if declared is None:
        raise UnknownNode(f"{definition.key} has no node {node!r}")
    task = declared if isinstance(declared, TaskNode) else None
    handler = task.handler if task is not None else None
    ref = declared.compensate if phase is Phase.COMPENSATE else handler
    if ref is None:
        raise InvalidInput(f"{definition.key} node {node!r} has nothing to run in {phase}")
    return task, ref


def _run(
    handler: Callable[..., Any], ctx: StepContext, phase: Phase, at: float, limit: int
) -> NodeSucceeded | NodeFailed | NodeCancelled:
    """The handler's result as the worker would report it (see NodeRunner._execute)."""
    common: dict[str, Any] = {
        "at": at,
        "node": ctx.node,
        "iteration": ctx.iteration,
        "attempt": ctx.attempt,
        "phase": phase,
    }
    started = time.perf_counter()
    try:
        # An async def handler is awaited on this process's event loop, as a worker would.
        output = check_output(call_handler(handler, ctx, None), limit, hint=OUTPUT_HINT)
    except Cancelled:
        return NodeCancelled(**common, charges=ctx.charges or None)
    except Exception as exc:  # the handler's failure is the result being compared
        ctx.log.info("replayed handler failed: %s: %s", type(exc).__name__, exc)
        return NodeFailed(
            **common,
            error_class=classify(exc),
            message=f"{type(exc).__name__}: {exc}",
            charges=ctx.charges or None,
            timings=ctx.execution_timings(time.perf_counter() - started),
            patches=dict(ctx.patches) or None,
        )
    return NodeSucceeded(
        **common,
        output=output,
        messages=ctx.added_messages(),
        sessions=ctx.changed_sessions() or None,
        charges=ctx.charges or None,
        artifacts=ctx.added_artifacts() or None,
        timings=ctx.execution_timings(time.perf_counter() - started),
        patches=dict(ctx.patches) or None,
    )
