"""The store's contract: what the engine, the workers and the scheduler rely on from a
:class:`~cairn.store.sql.Store`, whichever database is behind it. Every guarded
write is specified here once — the first result wins, a claim is fenced, a timer fires
once, an outbox row is claimed by one relay, an inbox entry is applied once, an effect's
intent is refused to a stale claim — and ``tests/contract`` runs it on SQLite and on
PostgreSQL. Subclass it as ``Test...`` beside a ``store`` fixture yielding a fresh,
migrated store.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest

from cairn.errors import StaleTransition, StoreRefused
from cairn.model.keys import Claim, ExecutionKey
from cairn.model.outcomes import RunWrite, StepResult, StepWrites
from cairn.model.statuses import ExecutionStatus, RunStatus
from cairn.store.messages import HeldQueues
from cairn.store.records import (
    Intent,
    RunRecord,
    from_epoch,
    to_epoch,
)
from cairn.store.sql import Store
from cairn.testing.store_rows import (
    NODE,
    new_run_values,
    next_step,
    result,
    seq_and_events,
    started,
    step_to,
    the_effect,
    the_execution,
    the_run,
)


class StoreContract:
    # Whether the backend's one-step completion reads a run that moved in the same
    # statement (StepCompletion.moved): PostgreSQL's does; elsewhere the caller reads it.
    reads_moved_run = False

    # -- runs and their steps -------------------------------------------------------------

    def test_a_run_and_its_first_step_are_written_together(self, store: Store) -> None:
        run_id, _key, _at = started(store)
        with store.reading() as tx:
            row = the_run(tx, run_id)
            (execution,) = tx.executions_of(run_id)
            events = tx.events_after(run_id, 0)
            timers = tx.due_timers(tx.now() + 7200, 10)
            assert tx.has_unsent(tx.now() + 1)
        assert (row.status, row.last_seq, list(row.current)) == ("running", 1, ["fetch#1"])
        assert (execution.node, execution.status, execution.attempt) == (NODE, "scheduled", 1)
        assert [event.seq for event in events] == [1]
        assert [t.timer_id for t in timers] == ["node_timeout:fetch:1:1"]

    def test_a_run_moves_to_another_version_only_from_the_one_it_is_on(self, store: Store) -> None:
        run_id, _key, _at = started(store)
        with store.transaction() as tx:
            version = the_run(tx, run_id).version
            tx.move_run_version(run_id, version, version + 1)
        with pytest.raises(StaleTransition), store.transaction() as tx:
            tx.move_run_version(run_id, version, version + 2)  # a move that lost a race
        with store.reading() as tx:
            assert the_run(tx, run_id).version == version + 1

    def test_a_request_id_names_one_run(self, store: Store) -> None:
        first = new_run_values(store, request_id="order-42")
        again = {**new_run_values(store, request_id="order-42")}
        with store.transaction() as tx:
            assert tx.insert_run(first)
            assert not tx.insert_run(again)
            found = tx.run_by_request("default", "order-42")
            assert found is not None and found.id == first["id"]
            assert tx.run_by_request("default", "order-43") is None

    def test_lock_run_reads_the_row_and_the_databases_clock(self, store: Store) -> None:
        run_id, _key, at = started(store)
        with store.transaction() as tx:
            row, now = tx.lock_run(run_id)
        assert row is not None and row.id == run_id and abs(now - at) < 60
        with store.transaction() as tx:
            assert tx.lock_run("no-such-run")[0] is None

    def test_rows_come_back_as_the_same_typed_records_from_every_backend(
        self, store: Store
    ) -> None:
        run_id, key, _at = started(store)
        with store.statements() as tx:  # how a worker reads (one statement)
            head, with_run = tx.execution_and_run(key)
            missing = tx.execution_and_run(ExecutionKey("no-such-run", NODE, 1, "run"))
        with store.reading() as tx:
            run = the_run(tx, run_id)
            (execution,) = tx.executions_of(run_id)
            (event,) = tx.events_after(run_id, 0)
            (listed,) = tx.runs_page("default", limit=1)
            polled = tx.run_head(run_id)
        assert isinstance(run, RunRecord) and run.status is RunStatus.RUNNING
        assert isinstance(run.created_at, datetime) and run.input == {}
        assert with_run == run  # the same record, read with the execution
        assert head is not None and head.status is ExecutionStatus.SCHEDULED
        assert (head.attempt, head.fence, head.recoveries) == (1, 0, 0)
        # The database's clock comes with the read where the backend reads it so.
        assert head.db_now is None or isinstance(head.db_now, float)
        assert execution.key == key and execution.status is ExecutionStatus.SCHEDULED
        assert (event.seq, event.type) == (1, "run_started") and isinstance(event.at, float)
        assert (listed.id, listed.status, listed.last_seq) == (run_id, RunStatus.RUNNING, 1)
        assert polled is not None and polled.status is RunStatus.RUNNING
        with store.reading() as tx:
            pinned = tx.pinned_versions([run_id, "no-such-run", run_id])
            assert pinned == {run_id: (run.workflow, run.version)}
            assert tx.pinned_versions([]) == {}
            assert tx.run("no-such-run") is None
            assert tx.run_head("no-such-run") is None
            assert tx.execution(ExecutionKey("no-such-run", NODE, 1, "run")) is None
        assert missing == (None, None)

    # -- the idempotency table --------------------------------------------------------------

    def test_the_first_result_for_an_attempt_wins(self, store: Store) -> None:
        run_id, key, _at = started(store)
        with store.transaction() as tx:
            row, _now = tx.finish_and_lock(key, 1, 1, result())
            assert row is not None and row.id == run_id
        with store.transaction() as tx:  # a duplicate delivery's result
            assert tx.finish_and_lock(key, 1, 1, result(ExecutionStatus.FAILED))[0] is None
        with store.reading() as tx:
            (execution,) = tx.executions_of(run_id)
        assert execution.status == "succeeded" and execution.result == {"ok": True}

    def test_a_result_for_another_attempt_is_refused(self, store: Store) -> None:
        _run_id, key, _at = started(store)
        with store.transaction() as tx:
            assert tx.finish_and_lock(key, 2, 1, result())[0] is None

    def test_a_taken_over_claim_cannot_record_its_result(self, store: Store) -> None:
        _run_id, key, _at = started(store)
        with store.transaction() as tx:
            assert tx.claim_execution(key, 1, 2)  # a takeover records fence 2
            assert not tx.claim_execution(key, 1, 2)  # fences only rise
        with store.reading() as tx:
            assert tx.execution_fence(key) == 2
            assert the_execution(tx, key).status == "running"
        with store.transaction() as tx:
            assert tx.finish_and_lock(key, 1, 1, result())[0] is None  # the stale holder
        with store.transaction() as tx:
            assert tx.finish_and_lock(key, 1, 2, result())[0] is not None

    def test_an_irreversible_claim_is_recorded_once_per_attempt(self, store: Store) -> None:
        _run_id, key, _at = started(store)
        with store.transaction() as tx:
            assert tx.claim_execution(key, 1, 1, first=True)
        with store.transaction() as tx:
            assert not tx.claim_execution(key, 1, 2, first=True)  # claimed before

    def test_recoveries_are_counted_on_unfinished_executions_only(self, store: Store) -> None:
        _run_id, key, _at = started(store)
        with store.transaction() as tx:
            assert tx.touch_execution(key, 1, died=True) == 1
            assert tx.touch_execution(key, 1, died=False) == 1
            assert tx.touch_execution(key, 1, died=True) == 2
            tx.finish_and_lock(key, 1, 1, result())
        with store.transaction() as tx:
            assert tx.touch_execution(key, 1, died=True) is None

    def test_a_claim_reads_the_recoveries_counted_before_it(self, store: Store) -> None:
        """The claim's own write says how many recoveries were counted: one a sweep counted
        after the worker's read of the execution is not missed."""
        _run_id, key, _at = started(store)
        with store.transaction() as tx:
            claim = tx.claim_execution(key, 1, 2)
            assert claim is not None and claim.recoveries == 0
            assert tx.touch_execution(key, 1, died=True) == 1
            claim = tx.claim_execution(key, 1, 3)
            assert claim is not None and claim.recoveries == 1

    def test_a_lost_execution_is_held_then_settled_by_an_operator(self, store: Store) -> None:
        run_id, key, _at = started(store)
        with store.transaction() as tx:
            tx.hold_execution(key, 1)
        with store.reading() as tx:
            assert the_execution(tx, key).status == "held"
        with store.transaction() as tx:
            tx.settle_execution(key, "succeeded", {"charge_id": "ch_1"}, None)
        with store.reading() as tx:
            row = the_execution(tx, key)
        assert (row.status, row.result, row.worker) == (
            "succeeded",
            {"charge_id": "ch_1"},
            "operator",
        )
        with pytest.raises(StaleTransition), store.transaction() as tx:
            tx.settle_execution(key, "failed", None, "too late")  # only a held one is settled
        with store.reading() as tx:
            assert the_execution(tx, key).status == "succeeded"
        assert run_id

    def test_stop_requested_when_the_execution_is_no_longer_awaited(self, store: Store) -> None:
        _run_id, key, _at = started(store)
        with store.reading() as tx:
            assert not tx.stop_requested(key, 1)
            assert tx.stop_requested(key, 2)  # a newer attempt is the one awaited
        with store.transaction() as tx:
            tx.set_execution_status(key, ExecutionStatus.CANCELLED)
        with store.reading() as tx:
            assert tx.stop_requested(key, 1)

    # -- checkpoints inside a node --------------------------------------------------------

    def test_a_checkpoint_is_saved_numbered_and_read_back(self, store: Store) -> None:
        _run_id, key, _at = started(store)
        context = {"messages": [{"role": "assistant", "content": "turn 0"}], "turns": 1}
        with store.statements(writes=True) as tx:
            assert tx.save_checkpoint(key, 1, 1, context) == 1
            assert tx.save_checkpoint(key, 1, 1, {**context, "turns": 2}) == 2
        with store.reading() as tx:
            saved = tx.checkpoint_of(key)
        assert saved is not None and (saved.seq, saved.attempt, saved.fence) == (2, 1, 1)
        assert saved.context == {**context, "turns": 2}
        with store.transaction() as tx:
            tx.drop_checkpoint(key)
        with store.reading() as tx:
            assert tx.checkpoint_of(key) is None

    def test_a_checkpoint_stores_what_changed_and_reads_back_whole(self, store: Store) -> None:
        """A checkpoint that extends an earlier one stores only the change; reading folds
        the chain from the newest back to a whole context. One that says it extends a
        checkpoint another save also extended (a save retried through an outage) reads
        as its own chain says."""
        _run_id, key, _at = started(store)
        turn = [{"role": "assistant", "content": f"turn {n}"} for n in range(4)]
        with store.statements(writes=True) as tx:
            assert tx.save_checkpoint(key, 1, 1, {"messages": turn[:1], "turns": 1}) == 1
            change = {"append": {"messages": turn[1:2]}, "set": {"turns": 2}}
            assert tx.save_checkpoint(key, 1, 1, change, base=1) == 2
            change = {"append": {"messages": turn[2:4]}, "set": {"turns": 4}}
            assert tx.save_checkpoint(key, 1, 1, change, base=2) == 3
        with store.reading() as tx:
            saved = tx.checkpoint_of(key)
        assert saved is not None and saved.seq == 3
        assert saved.context == {"messages": turn, "turns": 4}
        with store.statements(writes=True) as tx:  # the save of 3, retried
            assert tx.save_checkpoint(key, 1, 1, change, base=2) == 4
        with store.reading() as tx:
            again = tx.checkpoint_of(key)
        assert again is not None and (again.seq, again.context) == (4, saved.context)
        with store.transaction() as tx:
            tx.drop_checkpoint(key)
        with store.reading() as tx:
            assert tx.checkpoint_of(key) is None

    def test_a_checkpoint_is_fenced_like_a_result(self, store: Store) -> None:
        """Refused to a stale claim, to another attempt, and once the execution finished;
        a newer claim's checkpoint is never overwritten by an older one's."""
        _run_id, key, _at = started(store)
        with store.statements(writes=True) as tx:
            assert tx.save_checkpoint(key, 1, 1, {"by": "first holder"}) == 1
        with store.transaction() as tx:
            assert tx.claim_execution(key, 1, 2)  # a takeover records fence 2
        with store.statements(writes=True) as tx:
            assert tx.save_checkpoint(key, 1, 1, {"by": "stale holder"}) is None
            assert tx.save_checkpoint(key, 2, 2, {"by": "another attempt"}) is None
            assert tx.save_checkpoint(key, 1, 2, {"by": "new holder"}) == 2
        with store.reading() as tx:
            saved = tx.checkpoint_of(key)
        assert saved is not None and saved.context == {"by": "new holder"}
        with store.transaction() as tx:
            assert tx.finish_and_lock(key, 1, 2, result())[0] is not None
        with store.statements(writes=True) as tx:
            assert tx.save_checkpoint(key, 1, 2, {"by": "too late"}) is None

    def test_a_fused_nodes_records_are_fenced_by_its_chains_claim(self, store: Store) -> None:
        """A node fused after an ephemeral one has no row of its own while it runs: its
        checkpoints and model calls go in under the claim of the chain's first
        execution — while that claim holds, and not once a newer claim took it over or
        it finished."""
        run_id, head, _at = started(store)
        fused = ExecutionKey(run_id, "next", 1, "run")
        claim = Claim(head, 1, 1)
        call = {"call_index": 0, "provider": "p", "operation": "o", "model": None, "params": {},
                "messages": [], "response": {"answer": 1}, "usage": None, "latency_s": 0.1,
                "history": None}  # fmt: skip
        with store.statements(writes=True) as tx:
            assert tx.save_checkpoint(fused, 1, 0, {"turns": 1}, claim=claim) == 1
            assert tx.save_checkpoint(fused, 1, 0, {"turns": 1}) is None  # no row: no claim
        with store.transaction() as tx:
            assert tx.record_model_call(fused, 1, 0, call, {}, claim=claim)
        with store.transaction() as tx:
            assert tx.claim_execution(head, 1, 2)  # another worker took the chain over
        with store.statements(writes=True) as tx:
            assert tx.save_checkpoint(fused, 1, 0, {"turns": 2}, claim=claim) is None
        with store.transaction() as tx:
            assert not tx.record_model_call(fused, 1, 0, {**call, "call_index": 1}, {}, claim=claim)
            newer = Claim(head, 1, 2)
            assert tx.record_model_call(fused, 1, 0, {**call, "call_index": 1}, {}, claim=newer)
        with store.reading() as tx:
            assert [c.call_index for c in tx.model_calls_of(fused)] == [0, 1]
            saved = tx.checkpoint_of(fused)
        assert saved is not None and saved.context == {"turns": 1}

    # -- guarded transitions: each states where it moves from, and refuses loudly --------

    def test_a_dispatch_only_moves_an_execution_forward(self, store: Store) -> None:
        run_id, key, at = started(store)
        with pytest.raises(StaleTransition), store.transaction() as tx:
            tx.write_step(run_id, next_step(run_id, at, seq=2, attempt=1))  # attempt 1 again
        assert seq_and_events(store, run_id) == (1, [1])  # nothing of that step was written
        with store.transaction() as tx:
            tx.write_step(run_id, next_step(run_id, at, seq=2, attempt=2))
        with store.reading() as tx:
            row = the_execution(tx, key)
        assert (row.status, row.attempt) == ("scheduled", 2)
        assert seq_and_events(store, run_id) == (2, [1, 2])

    def test_a_step_that_does_not_follow_the_runs_seq_is_refused(self, store: Store) -> None:
        run_id, _key, at = started(store)
        with pytest.raises(StaleTransition), store.transaction() as tx:
            tx.write_step(run_id, next_step(run_id, at, seq=3, attempt=2, node="other"))
        assert seq_and_events(store, run_id) == (1, [1])

    def test_the_one_step_completion_refuses_a_backward_dispatch(self, store: Store) -> None:
        run_id, key, at = started(store)
        with store.transaction() as tx:
            tx.write_step(run_id, next_step(run_id, at, seq=2, attempt=1, node="other"))
        stale = next_step(run_id, at, seq=3, attempt=1, node="other")
        with pytest.raises(StaleTransition), store.statements(writes=True) as tx:
            tx.complete_step(key, attempt=1, fence=1, known_seq=2, result=result(), writes=stale)
        with store.reading() as tx:
            assert the_execution(tx, key).status == "scheduled"  # the result went with the step
        assert seq_and_events(store, run_id) == (2, [1, 2])

    def test_the_one_step_completion_of_a_moved_run_writes_nothing_and_says_where_it_is(
        self, store: Store
    ) -> None:
        run_id, key, at = started(store)
        with store.transaction() as tx:  # another step moves the run to seq 2
            tx.write_step(run_id, next_step(run_id, at, seq=2, attempt=1, node="other"))
            now = tx.now()
        planned_on_1 = next_step(run_id, at, seq=2, attempt=1, node="third")
        with store.statements(writes=True) as tx:
            done = tx.complete_step(
                key, attempt=1, fence=1, known_seq=1, result=result(), writes=planned_on_1
            )
        assert (done.checked, done.finished, done.outbox_ids) == (False, False, {})
        assert (done.moved is not None) == self.reads_moved_run
        if done.moved is not None:
            row, db_now = done.moved
            assert (row.id, row.last_seq, list(row.current)) == (run_id, 2, ["fetch#1"])
            assert now - 1 <= db_now <= now + 60
        with store.reading() as tx:
            assert the_execution(tx, key).status == "scheduled"
        assert seq_and_events(store, run_id) == (2, [1, 2])
        planned_on_2 = next_step(run_id, at, seq=3, attempt=1, node="third")
        with store.statements(writes=True) as tx:
            done = tx.complete_step(
                key, attempt=1, fence=1, known_seq=2, result=result(), writes=planned_on_2
            )
        assert (done.checked, done.finished, done.moved) == (True, True, None)
        assert list(done.outbox_ids) == [("third", 1, "run")]
        assert seq_and_events(store, run_id) == (3, [1, 2, 3])

    def test_steps_completed_together_are_written_all_or_none(self, store: Store) -> None:
        run_id, key, at = started(store)
        with store.transaction() as tx:  # a second execution beside the first: siblings
            tx.write_step(run_id, next_step(run_id, at, seq=2, attempt=1, node="other"))
        other = ExecutionKey(run_id, "other", 1, "run")

        def together(known_seq: int) -> list[StepResult]:
            """The two results, the second planned on the step of the first."""
            seq = known_seq + 1
            return [
                StepResult(key, 1, 1, known_seq, result(), step_to(run_id, at, seq, "third")),
                StepResult(other, 1, 1, seq, result(), step_to(run_id, at, seq + 1, "fourth")),
            ]

        # Planned on seq 1, but the run is at 2: the first is not written, and the second
        # — which would find the run at the seq it was planned on — is not either.
        with pytest.raises(StaleTransition), store.statements(writes=True) as tx:
            tx.complete_steps(together(1))
        assert seq_and_events(store, run_id) == (2, [1, 2])
        with store.statements(writes=True) as tx:
            done = tx.complete_steps(together(2))
        assert [(d.checked, d.finished) for d in done] == [(True, True), (True, True)]
        assert [list(d.outbox_ids) for d in done] == [[("third", 1, "run")], [("fourth", 1, "run")]]
        assert seq_and_events(store, run_id) == (4, [1, 2, 3, 4])
        with store.reading() as tx:
            assert {the_execution(tx, k).status for k in (key, other)} == {"succeeded"}

    def test_steps_completed_together_one_of_which_is_on_record_are_not_written(
        self, store: Store
    ) -> None:
        run_id, key, at = started(store)
        with store.transaction() as tx:
            tx.write_step(run_id, next_step(run_id, at, seq=2, attempt=1, node="other"))
        other = ExecutionKey(run_id, "other", 1, "run")
        with store.transaction() as tx:  # the second's result is recorded already
            tx.finish_and_lock(other, 1, 1, result())
        steps = [
            StepResult(key, 1, 1, 2, result(), step_to(run_id, at, 3, "third")),
            StepResult(other, 1, 1, 3, result(), step_to(run_id, at, 4, "fourth")),
        ]
        with pytest.raises(StaleTransition), store.statements(writes=True) as tx:
            tx.complete_steps(steps)
        assert seq_and_events(store, run_id) == (2, [1, 2])
        with store.reading() as tx:
            assert the_execution(tx, key).status == "scheduled"  # the first went with it
            assert tx.execution(ExecutionKey(run_id, "third", 1, "run")) is None

    def test_only_an_unfinished_or_failed_execution_is_held(self, store: Store) -> None:
        _run_id, key, _at = started(store)
        with store.transaction() as tx:
            tx.hold_execution(key, 1)
            tx.hold_execution(key, 1)  # held already: where the write would put it
        with store.transaction() as tx:
            tx.settle_execution(key, "succeeded", {}, None)
        with pytest.raises(StaleTransition, match="cannot become held"), store.transaction() as tx:
            tx.hold_execution(key, 1)
        with store.reading() as tx:
            assert the_execution(tx, key).status == "succeeded"

    def test_stopping_an_execution_refuses_one_that_finished(self, store: Store) -> None:
        run_id, key, _at = started(store)
        with store.transaction() as tx:  # no row (a wait): nothing to stop
            tx.set_execution_status(
                ExecutionKey(run_id, "wait", 1, "run"), ExecutionStatus.CANCELLED
            )
            tx.finish_and_lock(key, 1, 1, result())
        with pytest.raises(StaleTransition), store.transaction() as tx:
            tx.set_execution_status(key, ExecutionStatus.CANCELLED)
        with store.reading() as tx:
            assert the_execution(tx, key).status == "succeeded"

    def test_a_status_no_state_machine_has_is_refused(self, store: Store) -> None:
        values = {**new_run_values(store), "status": "bogus"}
        with pytest.raises(StoreRefused), store.transaction() as tx:
            tx.insert_run(values)

    def test_stalled_executions_are_those_dispatched_before_a_time(self, store: Store) -> None:
        _run_id, _key, at = started(store)
        with store.reading() as tx:
            assert [e.node for e in tx.stalled_executions(tx.now() + 5, 10)] == [NODE]
            assert tx.stalled_executions(at - 60, 10) == []

    # -- timers, outbox, inbox ---------------------------------------------------------------

    def test_a_timer_fires_once_and_may_be_moved_on(self, store: Store) -> None:
        run_id, _key, at = started(store)
        timer = "node_timeout:fetch:1:1"
        with store.transaction() as tx:
            assert tx.postpone_timer(run_id, timer, at + 10)
        with store.reading() as tx:
            (due,) = tx.due_timers(at + 11, 10)
        assert abs(to_epoch(due.due_at) - (at + 10)) < 1e-3
        with store.transaction() as tx:
            assert tx.take_timer(run_id, timer)
        with store.transaction() as tx:
            assert not tx.take_timer(run_id, timer)
            assert not tx.postpone_timer(run_id, timer, at + 20)

    def test_a_step_arms_and_disarms_timers_with_its_write(self, store: Store) -> None:
        run_id, _key, at = started(store)
        step = StepWrites(
            run=RunWrite(RunStatus.RUNNING, 2, from_epoch(at), [], reason=None, state_json=None),
            event={"type": "timer_fired", "at": at, "timer_id": "x"},
            outcome={},
            sent=[],
            dispatches=[],
            armed=[("retry:fetch:1:2", at + 5)],
            disarmed=["node_timeout:fetch:1:1"],
        )
        with store.transaction() as tx:
            tx.lock_run(run_id)
            tx.write_step(run_id, step)
        with store.reading() as tx:
            assert [t.timer_id for t in tx.due_timers(at + 7200, 10)] == ["retry:fetch:1:2"]

    def test_outbox_rows_are_claimed_then_marked_sent_once(self, store: Store) -> None:
        _run_id, _key, _at = started(store)
        with store.transaction() as tx:
            rows = tx.claim_unsent(tx.now() + 1, 10)
            assert len(rows) == 1 and rows[0].payload["node"] == NODE
            tx.mark_sent([rows[0].id])
            tx.mark_sent([rows[0].id])  # twice is once
        with store.reading() as tx:
            assert not tx.has_unsent(tx.now() + 1)

    def test_a_waiting_queues_recent_rows_stay_and_its_older_ones_are_claimed(
        self, store: Store
    ) -> None:
        """A queue with a backlog may hold a message carrying its unsent rows (a fork's
        branches grouped): the relay leaves them, unless they are older than it waits."""
        _run_id, _key, _at = started(store)  # its row goes to the default queue
        with store.reading() as tx:
            now = tx.now()
        waiting = HeldQueues(default_queue="cairn", waiting=frozenset({"cairn"}))
        with store.transaction() as tx:
            assert tx.claim_unsent(now + 1, 10, replace(waiting, waiting_since=now - 60)) == []
            assert not tx.has_unsent(now + 1, replace(waiting, waiting_since=now - 60))
            assert len(tx.claim_unsent(now + 1, 10, replace(waiting, waiting_since=now + 1))) == 1
            other = replace(waiting, waiting=frozenset({"gpu"}), waiting_since=now - 60)
            assert len(tx.claim_unsent(now + 1, 10, other)) == 1

    def test_an_inbox_entry_is_taken_once(self, store: Store) -> None:
        run_id, _key, _at = started(store)
        with store.transaction() as tx:
            entry = tx.post(run_id, {"type": "child_finished"})
        with store.reading() as tx:
            assert [p.id for p in tx.posted(10)] == [entry]
        with store.transaction() as tx:
            assert tx.take_posted(entry) == {"type": "child_finished"}
        with store.transaction() as tx:
            assert tx.take_posted(entry) is None

    # -- the effects ledger -------------------------------------------------------------------

    def effect_values(self, run_id: str, fence: int, key: str = "order-1:charge") -> dict[str, Any]:
        return {
            "namespace": "default",
            "key": key,
            "name": "payments.charge",
            "run_id": run_id,
            "node": NODE,
            "iteration": 1,
            "attempt": 1,
            "fence": fence,
            "status": "intent",
            "calls": 1,
            "policy": "flag",
            "compensate": None,
        }

    def test_an_intent_is_recorded_once_and_stamped_by_the_database(self, store: Store) -> None:
        run_id, _key, at = started(store)
        with store.transaction() as tx:
            assert tx.record_intent(self.effect_values(run_id, 1), phase="run") is Intent.RECORDED
            assert tx.record_intent(self.effect_values(run_id, 1), phase="run") is Intent.KNOWN
            row = the_effect(tx, "order-1:charge")
        assert row.status == "intent" and abs(to_epoch(row.updated_at) - at) < 60

    def test_an_intent_is_refused_to_a_claim_taken_over(self, store: Store) -> None:
        run_id, key, _at = started(store)
        with store.transaction() as tx:
            assert tx.claim_execution(key, 1, 2)
        with store.transaction() as tx:
            assert tx.record_intent(self.effect_values(run_id, 1), phase="run") is Intent.FENCED
            assert tx.effect("default", "order-1:charge") is None

    def test_an_effects_outcome_is_recorded_only_from_its_status(self, store: Store) -> None:
        run_id, _key, _at = started(store)
        with store.transaction() as tx:
            tx.record_intent(self.effect_values(run_id, 1), phase="run")
            row = the_effect(tx, "order-1:charge")
            assert tx.update_effect(row.id, {"status": "applied"}, status="intent")
            assert not tx.update_effect(row.id, {"status": "failed"}, status="intent")
            assert not tx.update_effect(row.id, {"status": "x"}, fence_at_most=0)

    def test_a_code_fault_counts_keeps_the_latest_message_and_clears(self, store: Store) -> None:
        with store.transaction() as tx:
            tx.record_code_fault("ns", "wf", 1, "w1", fault="no module a", seen=1)
        with store.transaction() as tx:
            tx.record_code_fault("ns", "wf", 1, "w1", fault="no module b", seen=3)
            tx.record_code_fault("ns", "wf", 1, "w2", fault="no module a", seen=1)
            tx.record_code_fault("other", "wf", 2, "w1", fault="elsewhere", seen=1)
        with store.reading() as tx:
            found = tx.code_faults(within_s=60, namespace="ns")
            everyone = tx.code_faults(within_s=60)
        by_worker = {fault.worker: fault for fault in found}
        assert set(by_worker) == {"w1", "w2"} and len(everyone) == 3
        assert (by_worker["w1"].count, by_worker["w1"].fault) == (4, "no module b")
        assert by_worker["w1"].first_at <= by_worker["w1"].last_at
        with store.transaction() as tx:
            tx.clear_code_fault("ns", "wf", 1, "w1")
        with store.reading() as tx:
            assert [fault.worker for fault in tx.code_faults(within_s=60, namespace="ns")] == ["w2"]
            assert tx.code_faults(within_s=-60) == []  # none seen in the future
