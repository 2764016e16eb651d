"""The step's statements on SQLite, as constant SQL on the sqlite3 connection.

The embedded default spends a step in Python, not in the database: SQLite answers a
statement in microseconds, while building one through SQLAlchemy Core (coercions, a
cache key, compiled-parameter processing) costs a few hundred — measured, about two
thirds of a trivial step's CPU went there. So the hot path — the worker's read, and a
completion with the step it writes — is constant SQL here, the same statements as the
portable ones in :mod:`cairn.store.steps` and its siblings, with the values encoded by
the columns' own SQLAlchemy types (JSON text, SQLite's datetime strings), so that what
they write reads back exactly as the portable statements' rows do. They run inside the
transaction the store opened (``BEGIN IMMEDIATE``: :mod:`cairn.store.sqlite`).
"""

from __future__ import annotations

import functools
from collections import namedtuple
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from sqlalchemy import Column
from sqlalchemy.engine import Dialect

from cairn.errors import StaleTransition
from cairn.faults import fault_point
from cairn.model.keys import ExecutionKey
from cairn.model.outcomes import StepWrites
from cairn.store.clauses import ACTIVE_EXECUTION
from cairn.store.records import StepCompletion, from_epoch, outbox_ids
from cairn.store.schema import events, outbox, runs

EXECUTION_AND_RUN = """
SELECT e.status AS execution_status, e.attempt AS execution_attempt,
       e.fence AS execution_fence, e.recoveries AS execution_recoveries, r.*
FROM node_executions e JOIN runs r ON r.id = e.run_id
WHERE e.run_id = ? AND e.node = ? AND e.iteration = ? AND e.phase = ?
"""

RUN_AT = "SELECT 1 FROM runs WHERE id = ? AND last_seq = ?"

_ACTIVE = ", ".join(f"'{status}'" for status in ACTIVE_EXECUTION)
RECORD_RESULT = f"""
UPDATE node_executions
SET status = ?, result = ?, error_class = ?, error = ?, finished_at = ?, duration_s = ?,
    worker = ?
WHERE run_id = ? AND node = ? AND iteration = ? AND phase = ? AND attempt = ?
  AND status IN ({_ACTIVE}) AND fence <= ?
"""

# Forward only: a dispatch to a key on record is its next attempt, never the same again.
DISPATCH = """
INSERT INTO node_executions (run_id, node, iteration, phase, status, attempt, dispatched_at)
VALUES (?, ?, ?, ?, 'scheduled', ?, ?)
ON CONFLICT (run_id, node, iteration, phase) DO UPDATE
SET status = 'scheduled', attempt = excluded.attempt, dispatched_at = excluded.dispatched_at,
    finished_at = NULL, error_class = NULL, error = NULL
WHERE node_executions.attempt < excluded.attempt
"""
MESSAGE = "INSERT INTO outbox (run_id, topic, payload, created_at) VALUES (?, 'node', ?, ?)"
EVENT = "INSERT INTO events (run_id, seq, type, data, outcome, at) VALUES (?, ?, ?, ?, ?, ?)"
SNAPSHOT = """
INSERT INTO snapshots (run_id, seq, format, codec, body, created_at) VALUES (?, ?, ?, ?, ?, ?)
ON CONFLICT DO NOTHING
"""
ARM = """
INSERT INTO timers (run_id, timer_id, due_at, fired_at) VALUES (?, ?, ?, NULL)
ON CONFLICT (run_id, timer_id) DO UPDATE SET due_at = excluded.due_at, fired_at = NULL
"""
DISARM = "DELETE FROM timers WHERE run_id = ? AND timer_id = ?"
# The run row, advanced by a step (coalesce: what the step does not change stays).
ADVANCE_RUN = """
UPDATE runs
SET status = ?, last_seq = ?, updated_at = ?, current = ?, reason = ?, state = ?,
    finished_at = coalesce(?, finished_at), snapshot_seq = coalesce(?, snapshot_seq),
    snapshot_at = coalesce(?, snapshot_at)
WHERE id = ? AND last_seq = ?
"""
MARK_SENT = (
    "UPDATE outbox SET sent_at = ?, publishes = publishes + 1 "
    "WHERE id IN ({ids}) AND sent_at IS NULL"
)

# The definitions of a name a namespace may see (cairn.store.definitions.visible_to).
VISIBLE_VERSIONS = """
SELECT w.namespace, w.version FROM workflows w
WHERE w.name = ? AND (? IS NULL OR w.namespace = ?)
  AND (w.namespace = ? OR EXISTS (
    SELECT 1 FROM workflow_shares s
    WHERE s.namespace = w.namespace AND s.workflow = w.name AND s.grantee = ?
      AND s.version IN (0, w.version)))
"""

Encode = Callable[[Any], Any]


class Codec:
    """The columns' SQLAlchemy types on one dialect: values in, rows out, as the
    portable statements would have them."""

    def __init__(self, dialect: Dialect) -> None:
        self.json: Encode = _bind(dialect, events.c.data)
        self.time: Encode = _bind(dialect, outbox.c.created_at)
        self.run_column = {column.name: _bind(dialect, column) for column in runs.columns}
        self._loads: dict[str, Encode] = {}
        for column in runs.columns:
            load = _result(dialect, column)
            if load is not None:
                self._loads[column.name] = load

    def row(self, names: tuple[str, ...], values: Sequence[Any]) -> Any:
        """A row of ``names`` (runs' columns decoded), with attribute access."""
        loaded = [
            self._loads[name](value) if name in self._loads else value
            for name, value in zip(names, values, strict=True)
        ]
        return _row_type(names)._make(loaded)


@functools.cache
def codec(dialect: Dialect) -> Codec:
    return Codec(dialect)


def _bind(dialect: Dialect, column: Column[Any]) -> Encode:
    process = column.type.dialect_impl(dialect).bind_processor(dialect)
    return process if process is not None else _same


def _result(dialect: Dialect, column: Column[Any]) -> Encode | None:
    return column.type.dialect_impl(dialect).result_processor(dialect, None)


def _same(value: Any) -> Any:
    return value


@functools.cache
def _row_type(names: tuple[str, ...]) -> Any:
    return namedtuple("Row", names)


def execution_and_run(driver: Any, coder: Codec, key: ExecutionKey) -> Any:
    """The execution's columns (``execution_``) and its run's, in one row; None if the
    execution is not on record."""
    cursor = driver.execute(EXECUTION_AND_RUN, (key.run_id, key.node, key.iteration, key.phase))
    values = cursor.fetchone()
    if values is None:
        return None
    return coder.row(tuple(d[0] for d in cursor.description), values)


def visible_versions(
    driver: Any, caller: str, name: str, owner: str | None
) -> list[tuple[str, int]]:
    """:meth:`cairn.store.definitions.DefinitionsTx.visible_versions`."""
    rows = driver.execute(VISIBLE_VERSIONS, (name, owner, owner, caller, caller)).fetchall()
    return [(str(namespace), int(number)) for namespace, number in rows]


def insert_run(driver: Any, coder: Codec, values: Mapping[str, Any]) -> bool:
    """:meth:`cairn.store.runs.RunsTx.insert_run`: False if its (namespace, request id)
    is taken."""
    names = tuple(values)
    encoded = [coder.run_column[name](values[name]) for name in names]
    return bool(driver.execute(_insert_run(names), encoded).rowcount)


@functools.cache
def _insert_run(names: tuple[str, ...]) -> str:
    return (
        f"INSERT INTO runs ({', '.join(names)}) VALUES ({', '.join('?' * len(names))}) "
        "ON CONFLICT DO NOTHING"
    )


def complete_step(
    driver: Any,
    coder: Codec,
    key: ExecutionKey,
    *,
    attempt: int,
    fence: int,
    known_seq: int,
    result: Mapping[str, Any],
    writes: StepWrites,
    now: Any,
) -> StepCompletion:
    """:meth:`cairn.store.steps.StepsTx.complete_step`, in the caller's transaction."""
    if driver.execute(RUN_AT, (key.run_id, known_seq)).fetchone() is None:
        return StepCompletion(False, False, {})
    recorded = driver.execute(
        RECORD_RESULT,
        (
            result["status"],
            coder.json(result.get("result")),
            result.get("error_class"),
            result.get("error"),
            coder.time(result.get("finished_at")),
            result.get("duration_s"),
            result.get("worker"),
            key.run_id,
            key.node,
            key.iteration,
            key.phase,
            attempt,
            fence,
        ),
    )
    if not recorded.rowcount:
        return StepCompletion(True, False, {})
    ids = write_step(driver, coder, key.run_id, writes, now)
    return StepCompletion(True, True, outbox_ids(writes, ids))


def write_step(driver: Any, coder: Codec, run_id: str, writes: StepWrites, now: Any) -> list[int]:
    """:meth:`cairn.store.steps.StepsTx.write_step`, in the caller's transaction."""
    stamp = coder.time(now)
    ids = []
    for key, attempt, payload in writes.dispatches:
        params = (key.run_id, key.node, key.iteration, key.phase, attempt, stamp)
        if not driver.execute(DISPATCH, params).rowcount:
            raise StaleTransition(
                f"dispatch of {key} attempt {attempt}: an execution of that attempt or a "
                "newer one is on record"
            )
        message = driver.execute(MESSAGE, (key.run_id, coder.json(dict(payload)), stamp))
        ids.append(int(message.lastrowid))
    event = writes.event
    driver.execute(
        EVENT,
        (
            run_id,
            writes.seq,
            event["type"],
            coder.json(dict(event)),
            coder.json(dict(writes.outcome)),
            writes.at,
        ),
    )
    if writes.snapshot is not None:
        state_format, codec_name, body = writes.snapshot
        driver.execute(SNAPSHOT, (run_id, writes.seq, state_format, codec_name, body, stamp))
        fault_point("snapshot.before_commit")
    for timer_id, due_at in writes.armed:
        driver.execute(ARM, (run_id, timer_id, coder.time(from_epoch(due_at))))
    for timer_id in writes.disarmed:
        driver.execute(DISARM, (run_id, timer_id))
    _advance_run(driver, coder, run_id, writes)
    if writes.sent:
        sent = list(writes.sent)
        driver.execute(MARK_SENT.format(ids=", ".join("?" * len(sent))), (stamp, *sent))
    return ids


def _advance_run(driver: Any, coder: Codec, run_id: str, writes: StepWrites) -> None:
    run = writes.run
    cached = run.state_json  # JSON text already, or None (too large to cache)
    advanced = driver.execute(
        ADVANCE_RUN,
        (
            run.status.value,
            run.last_seq,
            coder.time(run.updated_at),
            coder.json(run.current),
            run.reason,
            cached if cached is not None else coder.json(None),
            coder.time(run.finished_at),
            run.snapshot_seq,
            coder.time(run.snapshot_at),
            run_id,
            writes.seq - 1,
        ),
    )
    if not advanced.rowcount:
        raise StaleTransition(f"run {run_id} is no longer at seq {writes.seq - 1}")
