"""A worker's result recorded the optimistic way: with the step it leads to, in one
statement conditional on the run being where the worker read it (the store's
``complete_step``) — and siblings finishing together in this process in one transaction.

Completions of one run queue on its lock (:meth:`cairn.engine.heads.RunHeads.taking`).
Whoever takes the lock takes every completion queued meanwhile and plans each on the one
before it, from the head the run's last step here left: a fan-out's branches finishing
together on a worker's threads are written together (``complete_steps``: one round trip
and one commit on PostgreSQL) instead of queueing for a statement each. A completion that
cannot go with the others — the run moved, its result is on record, a decision that
writes rows besides the step's own — is tried on its own, as before: again on the run as
its statement found it (or as read anew) when another process moved the run, a few
times; then the caller takes the locking path. Where the store merges branches
(:mod:`cairn.engine.merges`), a branch's success that leaves its join undecided is not
conditional on the seq but merged onto the run as it is by then — when planned on a read
or on a merge committed here, as another process may be moving the run; planned on a
step written here the ordinary way, its seq is likely unmoved, and it is written so
first.

What a completion tells the world — the hooks, its messages, the one its worker keeps to
run next — is told once the run's lock is let go, by the thread that wrote it, in the
order the steps were written; each waiting thread then has its answer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from cairn.decider import Decision
from cairn.engine.heads import RunHeads
from cairn.engine.merges import branch_merge, may_merge
from cairn.engine.outbox import Outbox
from cairn.engine.plan import Plan, Planner, result_values
from cairn.engine.reads import Restored
from cairn.engine.registry import Registry
from cairn.errors import StaleTransition
from cairn.model.definition import WorkflowDefinition
from cairn.model.events import Event
from cairn.model.keys import ExecutionKey
from cairn.model.messages import NodeMessage
from cairn.model.outcomes import BranchMerge, Merged, NodeOutcome, StepResult
from cairn.model.state import RunState
from cairn.store.records import RunRecord, StepCompletion
from cairn.store.sql import Store


@dataclass
class Completion:
    """What became of a worker's result."""

    recorded: bool
    reason: str = ""
    decision: Decision | None = None
    # The message its worker keeps to run next itself (see ``keep``), not published.
    kept: NodeMessage | None = None


# Given a committed step's messages, the one its worker runs next itself (None: publish
# them all). The kept message's outbox row stays unsent: the relay's doorbell if it dies.
Keep = Callable[[Sequence[NodeMessage]], NodeMessage | None]

# Once a plan the store wrote in one statement has committed: tell the hooks, publish its
# messages but the one ``keep`` takes (returned).
Told = Callable[[str, Plan, Mapping[tuple[str, int, str], int], Keep | None], NodeMessage | None]

# One-statement completions a step tries on its own before the locking path, while other
# processes keep moving its run (each try after the first plans on the run as the lost
# try's statement found it on PostgreSQL, or as read again): each lost try means another
# step of the run committed, so a fan-out's branches spread over a few processes all get
# through within a try per sibling.
OPTIMISTIC_TRIES = 8


@dataclass(frozen=True)
class _Moved:
    """A one-statement completion found the run moved since its read: the run as it is
    now, when the statement said (else it is read again)."""

    now: Restored | None


@dataclass
class _Committed:
    """A step written: told to the world once the run's lock is let go."""

    decision: Decision
    plan: Plan
    outbox_ids: dict[tuple[str, int, str], int]


@dataclass
class Pending:
    """A worker's result queued for its run's lock, until its answer is settled."""

    message: NodeMessage
    outcome: NodeOutcome
    worker: str
    known: Restored
    fence: int
    keep: Keep | None
    # Written (to be told), refused (a Completion), or None: the locking path.
    settled: _Committed | Completion | None = None
    error: BaseException | None = None
    answered: threading.Event = field(default_factory=threading.Event)

    def answer(self) -> Completion | None:
        self.answered.wait()
        if self.error is not None:
            raise self.error
        if isinstance(self.settled, _Committed):  # written, its telling cut short
            return Completion(True, decision=self.settled.decision)
        return self.settled


@dataclass
class _Planned:
    pending: Pending
    known: Restored  # the run the step is planned on
    event: Event
    decision: Decision
    plan: Plan
    serialized: bool  # the state written whole (else it may merge: Planner.serialize)


class OneStatement:
    """The optimistic completions of one process (see the module's docstring)."""

    def __init__(
        self,
        store: Store,
        registry: Registry,
        planner: Planner,
        outbox: Outbox,
        *,
        heads: RunHeads[Pending],
        told: Told,
    ) -> None:
        self.store, self.registry, self.planner, self.outbox = store, registry, planner, outbox
        self.heads, self.told = heads, told

    def complete(
        self,
        message: NodeMessage,
        outcome: NodeOutcome,
        worker: str,
        known: Restored,
        fence: int,
        *,
        keep: Keep | None,
    ) -> Completion | None:
        """Record the result and write its step, alone or with siblings queued with it.
        None means: take the locking path."""
        mine = Pending(message, outcome, worker, known, fence, keep)
        settled: list[Pending] = []
        try:
            with self.heads.taking(message.run_id, mine) as taken:
                settled = taken
                self._settle(taken)
        finally:
            for pending in settled:
                self._tell(pending)
        return mine.answer()

    def _settle(self, taken: list[Pending]) -> None:
        """Under the run's lock: write the completions taken, together as far as they
        go, the rest one by one. What fails one is its own thread's to hear; what fails
        the lot (the database gone) each unsettled one's."""
        try:
            if len(taken) > 1:
                self._together(taken)
            for pending in taken:
                if pending.settled is not None:
                    continue
                try:
                    pending.settled = self._alone(pending)
                except Exception as failed:
                    pending.error = failed
        except BaseException as failed:
            for pending in taken:
                if pending.settled is None and pending.error is None:
                    pending.error = failed
            if not isinstance(failed, Exception):
                raise

    def _tell(self, pending: Pending) -> None:
        """Once the run's lock is let go: tell the world of a written step (its messages
        published but the one its worker keeps), and answer its thread."""
        try:
            written = pending.settled
            if isinstance(written, _Committed):
                run_id = pending.message.run_id
                kept = self.told(run_id, written.plan, written.outbox_ids, pending.keep)
                pending.settled = Completion(True, decision=written.decision, kept=kept)
        except Exception as failed:
            pending.error = failed
        finally:
            pending.answered.set()

    # -- together ----------------------------------------------------------------------

    def _together(self, taken: list[Pending]) -> None:
        """Plan the completions taken, each on the one before, and write in one
        transaction the first of them that plan to nothing but their own step: all or
        none — but where branches merge, a branch's merge the run refuses writes nothing
        and leaves the others be. Fewer than two such plans, or a refusal (the run moved,
        a result on record): none is written — each goes alone, and hears why."""
        planned = self._plans(taken)
        if len(planned) < 2:
            return
        merges = [None if p.serialized else self._merge_of(p) for p in planned]
        for p, merge in zip(planned, merges, strict=True):
            if merge is None and not p.serialized:
                p.plan = self.planner.serialize(p.plan, cached=p.known.cached)
        # Sent-marks ride on each step: the first written marks them, the others find
        # them marked.
        sent = self.outbox.sent.drain()
        steps = [self._step(p.pending, p.known, p.plan, p.event, sent) for p in planned]
        try:
            with self.store.statements(writes=True) as tx:
                if any(merges):
                    done = tx.merge_steps(list(zip(steps, merges, strict=True)))
                else:
                    done = [(completion, None) for completion in tx.complete_steps(steps)]
        except StaleTransition:
            self.outbox.sent.add(sent)  # nothing was written, the marks included
            return
        written = [(p, c, m) for p, (c, m) in zip(planned, done, strict=True) if c.finished]
        if not written:
            self.outbox.sent.add(sent)
            return
        for p, completion, _merged in written:
            p.pending.settled = _Committed(p.decision, p.plan, completion.outbox_ids)
        last, _completion, merged = written[-1]
        if merged is None:
            self.heads.committed(last.known, last.plan.run, last.decision.state)
        else:
            self._merged(last.known, last.plan, merged)

    def _mergeable(self, known: Restored, event: Event) -> bool:
        """Whether the step ``event`` leads to from ``known`` may be a merge, planned so."""
        return self.store.merges_branches and known.merging and may_merge(known.state, event)

    def _merge_of(self, planned: _Planned) -> BranchMerge | None:
        message = planned.pending.message
        definition = self.registry.get(message.workflow, message.version)
        return branch_merge(
            planned.known, definition, planned.event, planned.plan, self.planner.settings
        )

    def _plans(self, taken: list[Pending]) -> list[_Planned]:
        """Each completion planned on the one before, from the newest the run is known
        to be, as far as each plans to nothing but its own step."""
        known = max(
            (self.heads.latest(p.known) for p in taken), key=lambda restored: restored.row.last_seq
        )
        planned: list[_Planned] = []
        for pending in taken:
            _definition, event, mergeable, decision, plan = self._plan(pending, known)
            if plan is None or plan.writes_other_rows:
                break
            planned.append(_Planned(pending, known, event, decision, plan, not mergeable))
            known = self.heads.after(
                known, plan.run, decision.state, cached=known.cached if mergeable else None
            )
        return planned

    # -- alone -------------------------------------------------------------------------

    def _alone(self, pending: Pending) -> _Committed | Completion | None:
        """The one-statement completion of one result, tried again on the run as it is
        now when it moved (another process's step): at most OPTIMISTIC_TRIES statements —
        a merge (:mod:`cairn.engine.merges`) where the step allows one (planned again on
        the run as a refused merge found it, a step the run allows or one that is not a
        merge). None means: take the locking path."""
        known = self.heads.latest(pending.known)
        for _try in range(OPTIMISTIC_TRIES):
            done = self._unmoved(pending, known)
            if not isinstance(done, _Moved):
                return done
            reread = done.now or self._reread(pending.message.key, known)
            if reread is None:
                return None
            known = reread
        return None

    def _reread(self, key: ExecutionKey, known: Restored) -> Restored | None:
        """The run as it is now, with its cached state (None: not cached, for the locking
        path to restore)."""
        with self.store.statements() as tx:
            execution, row = tx.execution_and_run(key)
        if row is None or row.state is None:
            return None
        db_now = execution.db_now if execution is not None else None
        return Restored(row, RunState.from_dict(row.state), db_now or known.now())

    def _unmoved(
        self, pending: Pending, known: Restored
    ) -> _Committed | Completion | _Moved | None:
        """The store's one-step completion, when the decision only dispatches: it records
        the result and writes the step if the run is where it was planned on — or, for a
        merge, where the merge may go. None means: take the locking path."""
        message = pending.message
        definition, event, mergeable, decision, plan = self._plan(pending, known)
        if plan is None or plan.writes_other_rows:
            return None
        merge = None
        if mergeable:
            merge = branch_merge(known, definition, event, plan, self.planner.settings)
            if merge is None:
                plan = self.planner.serialize(plan, cached=known.cached)
        sent = self.outbox.sent.drain()
        step = self._step(pending, known, plan, event, sent)
        try:
            done, merged = self._write(step, merge)
        except StaleTransition:
            if merge is None:
                raise
            self.outbox.sent.add(sent)  # claimed anew as it merged: nothing written
            return None
        if not (done.checked and done.finished):
            self.outbox.sent.add(sent)  # nothing was written, the marks included
            if done.checked:
                return _recorded_already(message)
            return _Moved(_restored(done.moved))
        if merge is None:
            self.heads.committed(known, plan.run, decision.state)
        else:
            self._merged(known, plan, merged)
        return _Committed(decision, plan, done.outbox_ids)

    def _plan(
        self, pending: Pending, known: Restored
    ) -> tuple[WorkflowDefinition, Event, bool, Decision, Plan | None]:
        """The completion's event and its step planned on ``known``, and whether the step
        may be a merge — a merge writes only what it changes, so its plan does not
        serialize the state (:meth:`~cairn.engine.plan.Planner.serialize` if it is not)."""
        message = pending.message
        definition = self.registry.get(message.workflow, message.version)
        event = replace(pending.outcome.event, at=known.now())
        mergeable = self._mergeable(known, event)
        decision, plan = self.planner.plan(
            known.row,
            definition,
            known.state,
            event,
            cached=known.cached,
            serialized=not mergeable,
        )
        return definition, event, mergeable, decision, plan

    def _step(
        self, pending: Pending, known: Restored, plan: Plan, event: Event, sent: Sequence[int]
    ) -> StepResult:
        """A completion's result and the step it plans, planned on ``known``."""
        message = pending.message
        return StepResult(
            message.key,
            message.attempt,
            pending.fence,
            known.row.last_seq,
            result_values(pending.outcome, pending.worker),
            self.planner.writes(plan, event, sent),
        )

    def _write(
        self, step: StepResult, merge: BranchMerge | None
    ) -> tuple[StepCompletion, Merged | None]:
        """The step's one statement: conditional on the run's seq, or a merge."""
        with self.store.statements(writes=True) as tx:
            if merge is not None:
                return tx.merge_step(step, merge)
            done = tx.complete_step(
                step.key,
                attempt=step.attempt,
                fence=step.fence,
                known_seq=step.known_seq,
                result=step.result,
                writes=step.writes,
            )
            return done, None

    def _merged(self, known: Restored, plan: Plan, merged: Merged | None) -> None:
        """The run's head once a merge is written: as the merge left it, siblings merged
        before included — what siblings queued here plan on, and what a sibling
        delivered here next begins from without a read."""
        assert merged is not None  # a merge written says where it left the run
        run = replace(plan.run, last_seq=merged.seq, current=merged.current)
        state = plan.decision.state if merged.state is None else RunState.from_dict(merged.state)
        self.heads.committed(known, run, state, cached=True, merging=True)


def _recorded_already(message: NodeMessage) -> Completion:
    return Completion(
        False, f"a result for {message.key} attempt {message.attempt} is already recorded"
    )


def _restored(moved: tuple[RunRecord, float] | None) -> Restored | None:
    """The run a completion found moved, as it is now, when its state is cached (else the
    locking path restores it)."""
    if moved is None:
        return None
    row, db_now = moved
    return None if row.state is None else Restored(row, RunState.from_dict(row.state), db_now)
