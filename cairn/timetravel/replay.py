"""Handlers run again, isolated from the real world: ``cairn replay`` (and, through
:mod:`cairn.timetravel.fork`, a fork's dry run).

A replay re-executes, for each recorded result of a run from ``--from SEQ`` on, the
handler *registered in code now* on the state that execution was given, in a replay
context (:class:`~cairn.timetravel.replay_space.ReplaySpace`), and compares what it
returns with what was recorded:

- **input state** — the run's state just before the result's event, rebuilt from the
  log by the decider: the same definition ``cairn history`` uses for its inputs digest
  (:mod:`cairn.timetravel.steps`): ``ctx.state`` is its vars, ``ctx.messages`` and
  ``ctx.sessions`` its agent context;
- **effects** (``ctx.effect``) go through a read-only :class:`~cairn.timetravel.ledger.
  ReplayLedger`: recorded outcomes are returned (or raised) again, anything else is a
  stub's fake result or :class:`~cairn.timetravel.ledger.ReplayRefused`; ``call`` never runs;
- **artifacts**: reads see the real store (the latest version *as of the input state*);
  puts go to an in-memory sandbox tagged ``replay`` (never registered on the run);
- ``ctx.charge``, ``ctx.progress``: noted in the report only. No lease, no heartbeat,
  no Sentry report. Nothing is written to the database.

Each step's verdict is ``same``, ``diverged`` (its output — canonical JSON, with the
messages, sessions and artifact digests it added — or its error class differs; a
readable diff says where), ``refused`` (an effect the replay could not answer) or
``skipped`` (nothing a handler returned: a child run, a cancellation, an operator's
decision). For a diverged step the decider is asked too: fed the replayed result in the
recorded state, does it take the same transitions?

The pieces, one module each: the sandbox and namespace a replay writes to
(:mod:`cairn.timetravel.sandbox`), running a handler in a replay context
(:mod:`cairn.timetravel.replay_space`), and comparing its result with the recorded one
(:mod:`cairn.timetravel.compare`). This module walks a run's steps and reports.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cairn.engine.orchestrator import Orchestrator
from cairn.engine.reads import replay
from cairn.errors import RunNotFound
from cairn.model.definition import TaskNode, WorkflowDefinition
from cairn.model.events import Phase, event_from_dict
from cairn.model.state import RunState
from cairn.store.artifacts import ArtifactInfo
from cairn.timetravel.compare import compare, decider_check
from cairn.timetravel.diff import Change
from cairn.timetravel.history import build_history
from cairn.timetravel.replay_space import Executed, ReplaySpace
from cairn.timetravel.steps import Step
from cairn.timetravel.timeline import SeqOutOfRange

REPLAYED_EVENTS = frozenset({"node_succeeded", "node_failed"})
# A node_failed the scheduler wrote for a node whose worker died every time: no handler
# returned it (see Scheduler._give_up).
GIVEN_UP_PREFIX = "max_attempts:"


class Verdict:
    SAME = "same"
    DIVERGED = "diverged"
    REFUSED = "refused"
    SKIPPED = "skipped"


@dataclass(frozen=True)
class StepReplay:
    """One recorded step, replayed (or skipped), and its verdict."""

    step: Step
    verdict: str
    executed: Executed | None = None
    changes: tuple[Change, ...] = ()
    note: str = ""
    decider: str | None = None  # how the decider would move differently, if it would

    def to_dict(self) -> dict[str, Any]:
        step = self.step
        return {
            "seq": step.seq,
            "node": step.node,
            "iteration": step.iteration,
            "attempt": step.attempt,
            "phase": step.phase,
            "label": step.label,
            "verdict": self.verdict,
            "recorded": step.status,
            "replayed": self.executed.to_dict() if self.executed is not None else None,
            "changes": [change.to_dict() for change in self.changes],
            "note": self.note,
            "decider": self.decider,
        }


@dataclass(frozen=True)
class ReplayReport:
    run_id: str
    workflow: str
    version: int
    namespace: str  # where the replay's writes went (never the run's): "<namespace>.replay"
    from_seq: int
    last_seq: int
    steps: tuple[StepReplay, ...]
    artifacts: tuple[ArtifactInfo, ...] = ()  # what the replay put, in its sandbox

    @property
    def first_divergence(self) -> StepReplay | None:
        return next((s for s in self.steps if s.verdict == Verdict.DIVERGED), None)

    @property
    def diverged(self) -> bool:
        return self.first_divergence is not None

    @property
    def refused(self) -> list[StepReplay]:
        return [s for s in self.steps if s.verdict == Verdict.REFUSED]

    def counts(self) -> dict[str, int]:
        found = dict.fromkeys((Verdict.SAME, Verdict.DIVERGED, Verdict.REFUSED, Verdict.SKIPPED), 0)
        for step in self.steps:
            found[step.verdict] += 1
        return found

    def to_dict(self) -> dict[str, Any]:
        first = self.first_divergence
        return {
            "run_id": self.run_id,
            "workflow": self.workflow,
            "version": self.version,
            "namespace": self.namespace,
            "from_seq": self.from_seq,
            "last_seq": self.last_seq,
            "diverged": self.diverged,
            "first_divergence": first.to_dict() if first is not None else None,
            "refused": [s.step.seq for s in self.refused],
            "counts": self.counts(),
            "steps": [step.to_dict() for step in self.steps],
            "artifacts": [info.to_dict() for info in self.artifacts],
        }


@dataclass
class Replayer:
    """``cairn replay``: re-execute a run's recorded steps in a replay context."""

    orchestrator: Orchestrator
    run_id: str

    def run(
        self, from_seq: int = 1, on_step: Callable[[StepReplay], None] | None = None
    ) -> ReplayReport:
        orchestrator = self.orchestrator
        with orchestrator.store.reading() as tx:
            row = tx.run(self.run_id)
            if row is None:
                raise RunNotFound(f"no run {self.run_id}")
            if not 1 <= from_seq <= max(row.last_seq, 1):
                raise SeqOutOfRange(
                    f"run {self.run_id} has events 1 to {row.last_seq}; there is no seq {from_seq}"
                )
            definition = orchestrator.registry.get(row.workflow_ref, row.version, tx)
            event_rows = tx.events_after(self.run_id, 0, row.last_seq)
            executions = tx.executions_of(self.run_id)
        steps, _others = build_history(definition, self.run_id, event_rows, executions)
        wanted = [step for step in steps if step.seq >= from_seq]
        before = states_before(definition, self.run_id, event_rows, {s.seq for s in wanted})
        data = {event_row.seq: event_row.data for event_row in event_rows}
        space = ReplaySpace.of(orchestrator.store, orchestrator.settings, row)
        replayed = []
        for step in wanted:
            result = self._step(space, definition, step, before[step.seq], data[step.seq])
            replayed.append(result)
            if on_step is not None:
                on_step(result)
        return ReplayReport(
            self.run_id,
            row.workflow,
            row.version,
            space.sandbox.namespace,
            from_seq,
            row.last_seq,
            tuple(replayed),
            tuple(space.sandbox.infos()),
        )

    def _step(
        self,
        space: ReplaySpace,
        definition: WorkflowDefinition,
        step: Step,
        before: RunState,
        recorded: Mapping[str, Any],
    ) -> StepReplay:
        skipped = _why_skipped(definition, step, recorded)
        if skipped is not None:
            return StepReplay(step, Verdict.SKIPPED, note=skipped)
        executed = space.execute(
            definition,
            before,
            run_id=self.run_id,
            node=step.node,
            iteration=step.iteration,
            attempt=step.attempt,
            phase=Phase(step.phase),
            at=step.at,
            resumed="resumed" in step.marks,
            # Told what the recorded execution was told (False: it never asked).
            recorded_patches=recorded.get("patches") or {},
        )
        same, changes, note = compare(recorded, executed.event)
        refused = executed.refused
        if refused:
            note = "; ".join(
                f"effect {use.name} {use.key!r} {use.detail}: refused" for use in refused
            )
            return StepReplay(step, Verdict.REFUSED, executed, tuple(changes), note)
        # A call the record could not answer — refused, or answered by a stub — is the
        # step's divergence, whatever the handler made of it.
        unanswered = [*executed.refused_calls, *executed.stubbed_calls]
        if unanswered:
            note = "; ".join([*unanswered, *([note] if note else [])])
        elif same:
            return StepReplay(step, Verdict.SAME, executed)
        moved = decider_check(definition, before, event_from_dict(recorded), executed.event)
        return StepReplay(step, Verdict.DIVERGED, executed, tuple(changes), note, moved)


def states_before(
    definition: WorkflowDefinition, run_id: str, event_rows: Sequence[Any], seqs: Iterable[int]
) -> dict[int, RunState]:
    """The run's state just before each event in ``seqs``: the log folded once through
    the decider (:func:`cairn.engine.reads.replay`, as the timeline folds it)."""
    wanted = set(seqs)
    found: dict[int, RunState] = {}
    state = RunState(run_id, definition.name, definition.version)
    for event_row, after in replay(definition, state, event_rows):
        if event_row.seq in wanted:
            found[event_row.seq] = state
        state = after
    return found


def _why_skipped(
    definition: WorkflowDefinition, step: Step, recorded: Mapping[str, Any]
) -> str | None:
    if "operator" in step.marks:
        return "settled by an operator: no handler returned it"
    if step.event not in REPLAYED_EVENTS:
        return {
            "child_finished": "executed by a child run (replay that run)",
            "node_cancelled": "cancelled at a safe point: nothing returned to compare",
            "plan_invalidated": "the on_resume check re-planned: no handler result",
        }.get(step.event, f"{step.event}: no handler result")
    if step.event == "node_failed" and str(recorded.get("message", "")).startswith(GIVEN_UP_PREFIX):
        return "failed by the scheduler (its worker died every time): no handler result"
    node = definition.nodes.get(step.node)
    if node is None:
        return f"node {step.node!r} is no longer in {definition.key}"
    if step.phase == Phase.COMPENSATE.value and node.compensate is None:
        return "no compensation declared now"
    if step.phase == Phase.RUN.value and not (
        isinstance(node, TaskNode) and node.handler is not None
    ):
        return "no handler declared now"
    return None


__all__ = [
    "ReplayReport",
    "Replayer",
    "StepReplay",
    "Verdict",
    "states_before",
]
