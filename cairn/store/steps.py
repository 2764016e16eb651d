"""The write path of a step, as the store carries it out: a run started with its first
step, a worker's read before it runs a node, and a result recorded with the decision it
leads to — each all or nothing. They span the table groups (runs, executions, outbox,
timers), which is why they live here, above them; a backend overrides the ones it does
in fewer round trips (:mod:`cairn.store.postgres`: one statement each).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from sqlalchemy import insert, select, update

from cairn.errors import StaleTransition, StoreError
from cairn.faults import fault_point
from cairn.model.keys import ExecutionKey
from cairn.model.outcomes import BranchMerge, Merged, StepResult, StepWrites
from cairn.store.clauses import unfinished, where
from cairn.store.executions import ExecutionsTx
from cairn.store.messages import MessagesTx
from cairn.store.records import ExecutionHead, RunRecord, StepCompletion, outbox_ids
from cairn.store.runs import RunsTx
from cairn.store.schema import events, executions, outbox, runs, snapshots

_NOT_TOGETHER = "{key}: its step, completed with its siblings, is not where it was planned"


class StepsTx(RunsTx, ExecutionsTx, MessagesTx):
    """A step's statements, on the tables they span."""

    def submit_run(
        self, values: Mapping[str, Any], writes: StepWrites
    ) -> tuple[bool, dict[tuple[str, int, str], int]]:
        """A new run, already advanced by its first step, all or nothing; False (and
        nothing written) if its request id is taken. With its outbox ids by (node,
        iteration, phase)."""
        if not self.insert_run(values):
            return False, {}
        return True, outbox_ids(writes, self.write_step(str(values["id"]), writes))

    def submit_runs(
        self, runs: Sequence[tuple[Mapping[str, Any], StepWrites]]
    ) -> list[tuple[bool, dict[tuple[str, int, str], int]]]:
        """:meth:`submit_run` for many runs, in this transaction."""
        return [self.submit_run(values, writes) for values, writes in runs]

    def execution_and_run(self, key: ExecutionKey) -> tuple[ExecutionHead | None, RunRecord | None]:
        """The execution's status and its run (with the cached state), in one statement."""
        query = (
            select(
                executions.c.status.label("execution_status"),
                executions.c.attempt.label("execution_attempt"),
                executions.c.fence.label("execution_fence"),
                executions.c.recoveries.label("execution_recoveries"),
                runs,
            )
            .join(runs, runs.c.id == executions.c.run_id)
            .where(where(key))
        )
        return self._execution_and_run_of(self.connection.execute(query).first(), key)

    def _execution_and_run_of(
        self, row: Any, key: ExecutionKey
    ) -> tuple[ExecutionHead | None, RunRecord | None]:
        """The records of a row holding an execution's columns (``execution_``) and its
        run's; with no such row, the run alone (it may exist without the execution)."""
        if row is None:
            return None, self.run(key.run_id)
        return ExecutionHead.of(row), RunRecord.of(row)

    def complete_step(
        self,
        key: ExecutionKey,
        *,
        attempt: int,
        fence: int,
        known_seq: int,
        result: Mapping[str, Any],
        writes: StepWrites,
    ) -> StepCompletion:
        """The optimistic, all-or-nothing completion of a step: if the run is still at
        ``known_seq`` (the worker's read), record the result (first for this attempt, no
        newer claim) and write the step; what it did is a :class:`StepCompletion` (here
        with no ``moved``: the caller reads a moved run itself). On PostgreSQL one
        statement (cairn.store.fastpath.COMPLETE_STEP), which also returns a moved run."""
        unmoved = self.connection.execute(
            select(runs.c.id)
            .where(runs.c.id == key.run_id, runs.c.last_seq == known_seq)
            .with_for_update()
        ).first()
        if unmoved is None:
            return StepCompletion(False, False, {})
        finish = (
            update(executions)
            .where(unfinished(key, attempt), executions.c.fence <= fence)
            .values(**result)
        )
        if not self.connection.execute(finish).rowcount:
            return StepCompletion(True, False, {})
        return StepCompletion(True, True, outbox_ids(writes, self.write_step(key.run_id, writes)))

    def complete_steps(self, steps: Sequence[StepResult]) -> list[StepCompletion]:
        """Steps of one run completed together, each planned on the one before it (its
        ``known_seq`` the seq the one before writes), all or none: each as
        :meth:`complete_step`, in order — and if one is not written (the run moved, or
        its result is on record), StaleTransition, and this transaction with it. On
        PostgreSQL one round trip and one commit for them all."""
        done: list[StepCompletion] = []
        for step in steps:
            completion = self.complete_step(
                step.key,
                attempt=step.attempt,
                fence=step.fence,
                known_seq=step.known_seq,
                result=step.result,
                writes=step.writes,
            )
            if not (completion.checked and completion.finished):
                raise StaleTransition(_NOT_TOGETHER.format(key=step.key))
            done.append(completion)
        return done

    def merge_step(
        self, step: StepResult, merge: BranchMerge
    ) -> tuple[StepCompletion, Merged | None]:
        """A branch's success merged onto its run as the run is by then (see
        :mod:`cairn.engine.merges`), and where it left the run: only where the store
        ``merges_branches`` (PostgreSQL: cairn.store.branch_merges)."""
        raise StoreError(f"the {self.connection.dialect.name} store does not merge branches")

    def merge_steps(
        self, steps: Sequence[tuple[StepResult, BranchMerge | None]]
    ) -> list[tuple[StepCompletion, Merged | None]]:
        """Steps of one run, each planned on the one before, in one transaction: the
        branches' merges each on its own (see :meth:`merge_step`), the others as
        :meth:`complete_steps` does them — only where the store ``merges_branches``."""
        raise StoreError(f"the {self.connection.dialect.name} store does not merge branches")

    def finish_and_lock(
        self, key: ExecutionKey, attempt: int, fence: int, values: Mapping[str, Any]
    ) -> tuple[RunRecord | None, float]:
        """Record the first result for (key, attempt), if no claim newer than ``fence``
        took the execution over, and lock its run, in one round trip on PostgreSQL.
        Returns (None, 0) if nothing was recorded."""
        finish = (
            update(executions)
            .where(unfinished(key, attempt), executions.c.fence <= fence)
            .values(**values)
        )
        if not self.connection.execute(finish).rowcount:
            return None, 0.0
        return self.lock_run(key.run_id)

    def write_step(self, run_id: str, writes: StepWrites, *, last: bool = True) -> list[int]:
        """Write what a decision produced: each dispatch (its idempotency row and outbox
        message), the event, a snapshot when due, the run row, and published messages
        marked sent; return the outbox ids. The ``last`` statement of its transaction
        commits it in the same round trip on PostgreSQL (see cairn.store.fastpath)."""
        ids = [self._dispatch(key, attempt, payload) for key, attempt, payload in writes.dispatches]
        self._record_event(run_id, writes)
        if writes.snapshot is not None:
            self._record_snapshot(run_id, writes.seq, writes.snapshot)
            fault_point("snapshot.before_commit")
        for timer_id, due_at in writes.armed:
            self.arm_timer(run_id, timer_id, due_at)
        for timer_id in writes.disarmed:
            self.disarm_timer(run_id, timer_id)
        self._advance_run(run_id, writes)
        self.mark_sent(writes.sent)
        return ids

    def _dispatch(self, key: ExecutionKey, attempt: int, payload: Mapping[str, Any]) -> int:
        """Schedule one execution (refused if that attempt or a newer one is on record)
        and queue its message in the outbox; the outbox id."""
        if not self.connection.execute(self._schedule_statement(key, attempt)).rowcount:
            raise StaleTransition(
                f"dispatch of {key} attempt {attempt}: an execution of that attempt or a "
                "newer one is on record"
            )
        return int(
            self.connection.execute(
                insert(outbox)
                .values(
                    run_id=key.run_id,
                    topic="node",
                    payload=dict(payload),
                    created_at=self.stamp(),
                )
                .returning(outbox.c.id)
            ).scalar_one()
        )

    def _record_event(self, run_id: str, writes: StepWrites) -> None:
        self.connection.execute(
            insert(events).values(
                run_id=run_id,
                seq=writes.seq,
                type=writes.event["type"],
                data=dict(writes.event),
                outcome=dict(writes.outcome),
                at=writes.at,
            )
        )

    def _record_snapshot(self, run_id: str, seq: int, snapshot: tuple[int, str, bytes]) -> None:
        """The run's state as of ``seq`` (format, codec, body), unless one is on record."""
        state_format, codec, body = snapshot
        self.connection.execute(
            self._insert(snapshots)
            .values(
                run_id=run_id,
                seq=seq,
                format=state_format,
                codec=codec,
                body=body,
                created_at=self.stamp(),
            )
            .on_conflict_do_nothing()
        )

    def _advance_run(self, run_id: str, writes: StepWrites) -> None:
        """Move the run row to this step's seq, guarded on the seq before it: a step
        written by someone else in between makes this one stale."""
        cached = writes.run.state_json
        advanced = self.connection.execute(
            update(runs)
            .where(runs.c.id == run_id, runs.c.last_seq == writes.seq - 1)
            .values(**{**writes.run.columns(), "state": json.loads(cached) if cached else None})
        )
        if not advanced.rowcount:
            raise StaleTransition(f"run {run_id} is no longer at seq {writes.seq - 1}")
