"""The rows the store's contract (:mod:`cairn.testing.store_contract`) writes and reads
back: a run started with its first step, a later step, a result — also for tests and
benches that need a run on record without the engine."""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

from cairn.model.keys import ExecutionKey
from cairn.model.outcomes import RunWrite, StepWrites
from cairn.model.statuses import ExecutionStatus, RunStatus
from cairn.store.records import EffectRecord, ExecutionRecord, RunRecord, from_epoch, to_epoch
from cairn.store.sql import Store, Tx

NODE = "fetch"


def new_run_values(store: Store, *, request_id: str | None = None) -> dict[str, Any]:
    with store.reading() as tx:
        now = tx.now()
    stamp = from_epoch(now)
    return {
        "id": str(uuid.uuid4()),
        "namespace": "default",
        "workflow": "w",
        "workflow_namespace": "default",
        "version": 1,
        "status": "pending",
        "input": {},
        "request_id": request_id,
        "webhook_url": None,
        "current": [],
        "created_at": stamp,
        "updated_at": stamp,
    }


def first_step(run_id: str, at: float, *, attempt: int = 1) -> StepWrites:
    """A run's first decision: ``fetch`` dispatched, a node timer armed."""
    key = ExecutionKey(run_id, NODE, 1, "run")
    message = {
        "run_id": run_id,
        "workflow": "w",
        "version": 1,
        "node": NODE,
        "iteration": 1,
        "attempt": attempt,
        "phase": "run",
    }
    return StepWrites(
        run=RunWrite(
            status=RunStatus.RUNNING,
            last_seq=1,
            updated_at=from_epoch(at),
            current=[f"{NODE}#1"],
            reason=None,
            state_json=None,
        ),
        event={"type": "run_started", "at": at, "input": {}},
        outcome={"status": "running"},
        sent=[],
        dispatches=[(key, attempt, message)],
        armed=[(f"node_timeout:{NODE}:1:{attempt}", at + 3600)],
    )


def started(store: Store) -> tuple[str, ExecutionKey, float]:
    """A run, started: its id, its first execution's key, the database's time."""
    values = new_run_values(store)
    at = to_epoch(values["created_at"])
    with store.transaction() as tx:
        assert tx.insert_run(values)
        tx.write_step(values["id"], first_step(values["id"], at))
    return values["id"], ExecutionKey(values["id"], NODE, 1, "run"), at


def next_step(run_id: str, at: float, *, seq: int, attempt: int, node: str = NODE) -> StepWrites:
    """A later decision (event ``seq``) that dispatches ``node`` at ``attempt``."""
    first = first_step(run_id, at, attempt=attempt)
    key = ExecutionKey(run_id, node, 1, "run")
    message = {**first.dispatches[0][2], "node": node}
    return StepWrites(
        run=replace(first.run, last_seq=seq),
        event={"type": "node_finished", "at": at},
        outcome={"status": "running"},
        sent=[],
        dispatches=[(key, attempt, message)],
    )


def step_to(run_id: str, at: float, seq: int, node: str) -> StepWrites:
    """Event ``seq``, dispatching a first attempt of ``node``."""
    return next_step(run_id, at, seq=seq, attempt=1, node=node)


def seq_and_events(store: Store, run_id: str) -> tuple[int, list[int]]:
    with store.reading() as tx:
        return the_run(tx, run_id).last_seq, [e.seq for e in tx.events_after(run_id, 0)]


def the_run(tx: Tx, run_id: str) -> RunRecord:
    row = tx.run(run_id)
    assert row is not None, f"no run {run_id}"
    return row


def the_execution(tx: Tx, key: ExecutionKey) -> ExecutionRecord:
    row = tx.execution(key)
    assert row is not None, f"no execution {key}"
    return row


def the_effect(tx: Tx, key: str) -> EffectRecord:
    row = tx.effect("default", key)
    assert row is not None, f"no effect {key!r}"
    return row


def result(status: ExecutionStatus = ExecutionStatus.SUCCEEDED) -> dict[str, Any]:
    return {
        "status": status.value,
        "result": {"ok": True},
        "error_class": None,
        "error": None,
        "duration_s": 0.01,
        "worker": "w-1",
    }
