"""Forking a run (``cairn fork``): a new run that starts from another run's checkpoint,
its vars patched, linked to it by lineage (parent run, fork seq).

- The **fork point** is the parent's state after event ``SEQ``, under the rules of a
  rollback's checkpoint (:meth:`Orchestrator.checkpoint`: a decision, not an audit entry;
  the run going; not inside a parallel section) — its latest seq included — with a JSON
  merge patch (RFC 7386) applied to its ``vars``.
- A **dry run** (the default) goes forward from there in this process: the decider, and
  the handlers in a replay context (:class:`~cairn.timetravel.replay_space.ReplaySpace`) — no
  broker, no lease, no row written — until the run ends, parks at a wait (what it waits
  for is reported), starts a child run (not simulated), hits an effect, a model call or
  an HTTP request it may not answer (refused), or the step cap. Its effects never reach
  the world: the parent's recorded outcomes are returned again, anything else is a stub's
  fake result or refused; model calls and recorded HTTP are answered from the parent's
  record of the same execution (its node, visit and phase). It is
  reported, not persisted (see ``docs/time-travel.md``: a parked never-dispatched run in
  the shared tables would be listed by ``cairn waiting`` and could be signalled into real
  work).
- A **live** fork is a real run in the parent's namespace, started through
  :meth:`Orchestrator.fork` (a ``run_forked`` first event) and dispatched to the fleet;
  its effect keys are its own (``<key>@fork:<run id>``), so neither the ledger nor the
  external system dedupes them against the parent's.
"""

from __future__ import annotations

import copy
import json
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from cairn.decider.graph import Decision, decide
from cairn.decider.stopping import restarted_by_fork
from cairn.effects.ledger import effect_scope
from cairn.engine.awaiting import awaiting
from cairn.engine.orchestrator import Orchestrator
from cairn.errors import InvalidInput, RunNotFound
from cairn.model.awaiting import Awaiting
from cairn.model.commands import Dispatch, StartChild
from cairn.model.definition import WorkflowDefinition
from cairn.model.events import Event, Phase, RunForked, TimerFired
from cairn.model.payloads import storable_json
from cairn.model.state import RunState, TimerKind
from cairn.model.statuses import RunStatus
from cairn.timetravel.diff import plain
from cairn.timetravel.ledger import EffectUse
from cairn.timetravel.replay_space import Executed, ReplaySpace
from cairn.timetravel.sandbox import ArtifactSandbox, replay_namespace
from cairn.timetravel.timeline import SeqOutOfRange

DEFAULT_MAX_STEPS = 200


class BadPatch(InvalidInput):
    """A ``--patch`` that is not a JSON object."""

    code = "bad_patch"


class NotACheckpoint(InvalidInput):
    """A seq a run cannot be forked at: an audit entry, a run not going then, a parallel
    section half joined."""

    code = "not_a_checkpoint"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch: ``patch``'s members replace ``target``'s, recursively
    for objects; a ``null`` member removes one; a non-object patch replaces the whole."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    merged = dict(target) if isinstance(target, Mapping) else {}
    for key, value in patch.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = merge_patch(merged.get(key), value)
    return merged


def parse_patch(text: str | None) -> dict[str, Any] | None:
    """``--patch`` as a JSON object (a merge patch of the vars), or :class:`BadPatch`."""
    if text is None:
        return None
    try:
        patch = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadPatch(f"--patch is not JSON: {exc}") from exc
    if not isinstance(patch, dict):
        raise BadPatch(
            f"--patch is a JSON object (a merge patch of the run's vars), not "
            f"{type(patch).__name__}"
        )
    return patch


@dataclass(frozen=True)
class ForkPoint:
    """Where a fork starts: the parent's checkpoint after ``seq``, patched."""

    run_id: str
    namespace: str
    scope: str | None  # the parent's effect-key scope (a fork of a fork has one)
    seq: int
    definition: WorkflowDefinition
    state: RunState
    patch: dict[str, Any] | None


def fork_point(
    orchestrator: Orchestrator, run_id: str, seq: int, patch: Mapping[str, Any] | None = None
) -> ForkPoint:
    """The checkpoint of ``run_id`` after event ``seq`` with ``patch`` merged into its
    vars; :class:`RunNotFound`, :class:`SeqOutOfRange`, :class:`NotACheckpoint` or
    :class:`BadPatch` otherwise. Reads only."""
    if patch is not None and not isinstance(patch, Mapping):
        raise BadPatch(f"a patch is a JSON object, not {type(patch).__name__}")
    with orchestrator.store.reading() as tx:
        row = tx.run(run_id)
        if row is None:
            raise RunNotFound(f"no run {run_id}")
        if not 1 <= seq <= row.last_seq:
            raise SeqOutOfRange(
                f"run {run_id} has events 1 to {row.last_seq}; there is no seq {seq}"
            )
        definition = orchestrator.registry.get(row.workflow_ref, row.version, tx)
    try:
        state = orchestrator.checkpoint(run_id, seq, latest=True)
    except RunNotFound:
        raise
    except InvalidInput as exc:
        raise NotACheckpoint(str(exc)) from exc
    state = RunState.from_dict(plain(state))  # a copy of its own
    if patch:
        state.vars = merge_patch(state.vars, patch)
        storable_json(
            state.vars, what="the patched vars", limit_bytes=orchestrator.settings.max_payload_bytes
        )
    return ForkPoint(
        run_id,
        row.namespace,
        effect_scope(row),
        seq,
        definition,
        state,
        dict(patch) if patch is not None else None,
    )


def fork_live(
    orchestrator: Orchestrator,
    point: ForkPoint,
    *,
    confirm: bool = False,
    actor: str | None = None,
    request_id: str | None = None,
) -> str:
    """Start the fork as a real run (see :meth:`Orchestrator.fork`); its id."""
    return orchestrator.fork(
        point.run_id,
        point.seq,
        point.state,
        patch=point.patch,
        confirm=confirm,
        actor=actor,
        request_id=request_id,
    )


# -- the dry run --------------------------------------------------------------------------


class Ending:
    ENDED = "ended"  # the run reached a terminal status
    PARKED = "parked"  # it waits for a signal or an operator (see ``awaiting``)
    # An effect, a model call or an HTTP request the record cannot answer and no stub
    # does: not answered, never sent.
    REFUSED = "refused"
    CHILD_RUN = "child_run"  # it would start a child run: not simulated
    STEP_CAP = "step_cap"  # it was still going after ``max_steps`` decisions


@dataclass(frozen=True)
class DryStep:
    """One execution in a dry run, and where the decider took the run with its result."""

    node: str
    iteration: int
    attempt: int
    phase: str
    executed: Executed
    transitions: tuple[str, ...]
    status_after: str

    @property
    def label(self) -> str:
        undo = "" if self.phase == Phase.RUN.value else f" ({self.phase})"
        return f"{self.node}#{self.iteration}/{self.attempt}{undo}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "iteration": self.iteration,
            "attempt": self.attempt,
            "phase": self.phase,
            "label": self.label,
            **self.executed.to_dict(),
            "transitions": list(self.transitions),
            "run_status": self.status_after,
        }


@dataclass(frozen=True)
class DryRun:
    """What a fork would do, run in a sandbox: reported, never persisted."""

    run_id: str  # the dry run's own id (no row has it)
    namespace: str  # "<namespace>.replay": where its writes went, never the real one
    parent_run_id: str
    fork_seq: int
    patch: dict[str, Any] | None
    workflow: str
    version: int
    ending: str
    detail: str
    state: RunState
    steps: tuple[DryStep, ...]
    awaiting: tuple[Awaiting, ...] = ()

    @property
    def effects(self) -> list[EffectUse]:
        return [use for step in self.steps for use in step.executed.effects]

    @property
    def went_well(self) -> bool:
        """It ended succeeded, or parked at a wait (as a live run would wait there)."""
        if self.ending == Ending.ENDED:
            return self.state.status is RunStatus.SUCCEEDED
        return self.ending == Ending.PARKED

    def to_dict(self) -> dict[str, Any]:
        return {
            "dry_run": True,
            "run_id": self.run_id,
            "namespace": self.namespace,
            "lineage": {"parent_run_id": self.parent_run_id, "fork_seq": self.fork_seq},
            "patch": self.patch,
            "workflow": self.workflow,
            "version": self.version,
            "ending": self.ending,
            "detail": self.detail,
            "status": self.state.status.value,
            "reason": self.state.reason,
            "vars": plain(self.state)["vars"],
            "steps": [step.to_dict() for step in self.steps],
            "awaiting": [entry.to_dict() for entry in self.awaiting],
            "effects": [use.to_dict() for use in self.effects],
        }


def dry_run(
    orchestrator: Orchestrator,
    point: ForkPoint,
    *,
    max_steps: int = DEFAULT_MAX_STEPS,
    on_step: Callable[[DryStep], None] | None = None,
) -> DryRun:
    """Run the fork forward in this process, isolated (see the module): the decider's
    commands carried out in memory — dispatches executed one at a time in a replay
    context, retry timers fired on a virtual clock — until it ends or cannot go on."""
    if max_steps < 1:
        raise InvalidInput(f"the step cap is at least 1, not {max_steps}")
    definition = point.definition
    run_id = str(uuid.uuid4())
    space = ReplaySpace(
        orchestrator.store,
        orchestrator.settings,
        point.namespace,
        point.scope,
        point.run_id,
        ArtifactSandbox(replay_namespace(point.namespace)),
        # What the fork starts again is a new visit of it: the parent's record of the
        # visit it repeats answers it (and each later visit of those nodes).
        {node.node: 1 for node in restarted_by_fork(point.state)},
    )
    sandbox = _Sandbox(definition, RunState(run_id, definition.name, definition.version))
    walk = _DryWalk(definition, run_id, space, sandbox, time.time(), on_step)
    sandbox.apply(
        RunForked(
            at=walk.clock,
            parent_run_id=point.run_id,
            fork_seq=point.seq,
            state=plain(point.state),
            patch=point.patch,
        )
    )
    ending, detail = walk.run(max_steps)
    return DryRun(
        run_id,
        space.sandbox.namespace,
        point.run_id,
        point.seq,
        point.patch,
        definition.name,
        definition.version,
        ending,
        detail,
        sandbox.state,
        tuple(walk.steps),
        tuple(awaiting(definition, sandbox.state)) if ending == Ending.PARKED else (),
    )


@dataclass
class _DryWalk:
    """A dry run's decisions, one at a time: a dispatch executed in the replay space, a
    timer fired on the virtual clock, until the run ends or cannot go on."""

    definition: WorkflowDefinition
    run_id: str
    space: ReplaySpace
    sandbox: _Sandbox
    clock: float
    on_step: Callable[[DryStep], None] | None
    steps: list[DryStep] = field(default_factory=list)

    def run(self, max_steps: int) -> tuple[str, str]:
        for _decision in range(max_steps):
            ended = self._ended() or self._next()
            if ended is not None:
                return ended
        return (
            Ending.STEP_CAP,
            f"still {self.sandbox.state.status.value} after {max_steps} decisions",
        )

    def _ended(self) -> tuple[str, str] | None:
        state = self.sandbox.state
        if state.status.terminal:
            return Ending.ENDED, f"the run {state.status.value}"
        if self.sandbox.children:
            child = self.sandbox.children[0]
            return Ending.CHILD_RUN, (
                f"{child.node}#{child.iteration} would start a child run of "
                f"{child.workflow}: not simulated in a dry run"
            )
        return None

    def _next(self) -> tuple[str, str] | None:
        """Take the next decision; how the dry run ended, if it did."""
        dispatch = self.sandbox.next_dispatch()
        if dispatch is not None:
            return self._execute(dispatch)
        state = self.sandbox.state
        timers = [t for t in state.timers.values() if t.kind is not TimerKind.WAIT]
        if timers:  # a retry's backoff, a deadline: the virtual clock moves to it
            timer = min(timers, key=lambda t: (t.due_at, t.timer_id))
            self.clock = max(self.clock, timer.due_at)
            self.sandbox.apply(TimerFired(at=self.clock, timer_id=timer.timer_id))
            return None
        return Ending.PARKED, "it waits for " + (
            ", ".join(
                f"{entry.node}#{entry.iteration} ({', '.join(entry.signals)})"
                for entry in awaiting(self.definition, state)
            )
            or "nothing it can be given here"
        )

    def _execute(self, dispatch: Dispatch) -> tuple[str, str] | None:
        self.clock += 0.001  # executions follow each other in time
        executed = self.space.execute(
            self.definition,
            self.sandbox.state,
            run_id=self.run_id,
            node=dispatch.node,
            iteration=dispatch.iteration,
            attempt=dispatch.attempt,
            phase=dispatch.phase,
            at=self.clock,
            resumed=dispatch.resumed,
        )
        # A refused effect, model call or HTTP request stops the dry run before its
        # result counts: what the handler made of the refusal is not what the fork would do.
        refusal = _refusal(executed)
        moved = () if refusal else self.sandbox.apply(executed.event).transitions
        step = DryStep(
            dispatch.node,
            dispatch.iteration,
            dispatch.attempt,
            dispatch.phase.value,
            executed,
            tuple(f"{t.source} -{t.label}-> {t.target}" for t in moved),
            self.sandbox.state.status.value,
        )
        self.steps.append(step)
        if self.on_step is not None:
            self.on_step(step)
        if refusal:
            return Ending.REFUSED, f"{step.label}: {refusal} (its result not applied)"
        return None


def _refusal(executed: Executed) -> str | None:
    """What the execution was refused, in words (None: nothing)."""
    if executed.refused:
        use = executed.refused[0]
        return f"effect {use.name} {use.key!r} {use.detail}: refused"
    if executed.refused_calls:
        return executed.refused_calls[0]
    return None


class _Sandbox:
    """The decider with its commands kept in memory: dispatches to execute, child runs
    it would start. Timers are in the state itself."""

    def __init__(self, definition: WorkflowDefinition, state: RunState) -> None:
        self.definition = definition
        self.state = state
        self.dispatches: list[Dispatch] = []
        self.children: list[StartChild] = []

    def apply(self, event: Event) -> Decision:
        decision = decide(self.definition, self.state, event)
        self.state = decision.state
        for command in decision.commands:
            if isinstance(command, Dispatch):
                self.dispatches.append(command)
            elif isinstance(command, StartChild):
                self.children.append(command)
        return decision

    def next_dispatch(self) -> Dispatch | None:
        """The next dispatch the run still waits for (one the decider cancelled since, a
        quorum's straggler, is dropped as a worker would drop it)."""
        while self.dispatches:
            dispatch = self.dispatches.pop(0)
            if self._awaited(dispatch):
                return dispatch
        return None

    def _awaited(self, dispatch: Dispatch) -> bool:
        if dispatch.phase is Phase.COMPENSATE:
            compensation = self.state.compensation
            current = compensation.current if compensation is not None else None
        else:
            current = self.state.nodes.get(dispatch.node)
        return (
            current is not None
            and current.active
            and (current.node, current.iteration, current.attempt)
            == (dispatch.node, dispatch.iteration, dispatch.attempt)
        )


__all__ = [
    "DEFAULT_MAX_STEPS",
    "BadPatch",
    "DryRun",
    "DryStep",
    "Ending",
    "ForkPoint",
    "NotACheckpoint",
    "dry_run",
    "fork_live",
    "fork_point",
    "merge_patch",
    "parse_patch",
]
