"""The step's statements on PostgreSQL, as plain SQL on the psycopg connection.

A trivial step runs four statements; built through SQLAlchemy Core each costs more
Python than the round trip it makes (bench/chain.py measured it). These are the same
statements as the portable versions in :mod:`cairn.store.repository`, written once as
constant SQL and executed in the caller's SQLAlchemy transaction. The read and the
result's update run on their own, so psycopg prepares them on the server after a few uses
(it does not prepare in pipeline mode); the writes of a step and its COMMIT travel
together in one pipelined round trip (measured: better than either choice for all four).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from psycopg import Connection
from psycopg.rows import namedtuple_row
from psycopg.types.json import Jsonb

EXECUTION_AND_RUN = """
SELECT e.status AS execution_status, e.attempt AS execution_attempt, r.*
FROM node_executions e JOIN runs r ON r.id = e.run_id
WHERE e.run_id = %(run_id)s AND e.node = %(node)s AND e.iteration = %(iteration)s
  AND e.phase = %(phase)s
"""

FINISH_AND_LOCK = """
WITH done AS (
  UPDATE node_executions
  SET status = %(status)s, result = %(result)s, error_class = %(error_class)s,
      error = %(error)s, finished_at = now(), duration_s = %(duration_s)s, worker = %(worker)s
  WHERE run_id = %(run_id)s AND node = %(node)s AND iteration = %(iteration)s
    AND phase = %(phase)s AND attempt = %(attempt)s AND status IN ('scheduled', 'running')
  RETURNING run_id
)
SELECT r.*, extract(epoch FROM clock_timestamp())::float8 AS db_now
FROM runs r WHERE r.id IN (SELECT run_id FROM done)
FOR UPDATE OF r
"""

DISPATCH = """
WITH scheduled AS (
  INSERT INTO node_executions (run_id, node, iteration, phase, status, attempt, dispatched_at)
  VALUES (%(run_id)s, %(node)s, %(iteration)s, %(phase)s, 'scheduled', %(attempt)s, now())
  ON CONFLICT (run_id, node, iteration, phase) DO UPDATE
  SET status = 'scheduled', attempt = EXCLUDED.attempt, dispatched_at = EXCLUDED.dispatched_at,
      finished_at = NULL, error_class = NULL, error = NULL
)
INSERT INTO outbox (run_id, topic, payload, created_at)
VALUES (%(run_id)s, 'node', %(payload)s, now())
RETURNING id
"""

RECORD_STEP = """
WITH appended AS (
  INSERT INTO events (run_id, seq, type, data, outcome, at)
  VALUES (%(run_id)s, %(seq)s, %(type)s, %(data)s, %(outcome)s, %(at)s)
), sent AS (
  UPDATE outbox SET sent_at = now(), publishes = publishes + 1
  WHERE id = ANY(%(sent)s::bigint[]) AND sent_at IS NULL
)
UPDATE runs
SET status = %(status)s, last_seq = %(last_seq)s, updated_at = %(updated_at)s,
    current = %(current)s, reason = %(reason)s, state = %(state)s,
    finished_at = coalesce(%(finished_at)s::timestamptz, finished_at),
    snapshot_seq = coalesce(%(snapshot_seq)s::integer, snapshot_seq),
    snapshot_at = coalesce(%(snapshot_at)s::timestamptz, snapshot_at)
WHERE id = %(run_id)s
"""


def execution_and_run(connection: Connection[Any], key: Mapping[str, Any]) -> Any:
    """The read a worker does before running a node; it ends in a rollback, so it does not
    count as a commit."""
    with connection.cursor(row_factory=namedtuple_row) as cursor:
        row = cursor.execute(EXECUTION_AND_RUN, key).fetchone()
    connection.rollback()
    return row


def finish_and_lock(
    connection: Connection[Any], key: Mapping[str, Any], attempt: int, values: Mapping[str, Any]
) -> Any:
    params = {
        **key,
        "attempt": attempt,
        "status": values["status"],
        "result": _json(values.get("result")),
        "error_class": values.get("error_class"),
        "error": values.get("error"),
        "duration_s": values.get("duration_s"),
        "worker": values.get("worker"),
    }
    with connection.cursor(row_factory=namedtuple_row) as cursor:
        return cursor.execute(FINISH_AND_LOCK, params).fetchone()


def write_step(
    connection: Connection[Any],
    run_id: str,
    *,
    seq: int,
    dispatches: Sequence[tuple[Mapping[str, Any], int, Mapping[str, Any]]],
    event: Mapping[str, Any],
    outcome: Mapping[str, Any],
    at: float,
    run: Mapping[str, Any],
    sent: Sequence[int],
) -> list[int]:
    """Every write of a step and the COMMIT, pipelined: one round trip for all of them.

    It ends the transaction, so it must be the transaction's last statement; the caller's
    SQLAlchemy commit then finds nothing left to do.
    """
    with connection.pipeline():
        cursors = []
        for key, attempt, payload in dispatches:
            cursor = connection.cursor()
            cursor.execute(DISPATCH, {**key, "attempt": attempt, "payload": Jsonb(dict(payload))})
            cursors.append(cursor)
        connection.execute(
            RECORD_STEP,
            {
                "run_id": run_id,
                "seq": seq,
                "type": event["type"],
                "data": Jsonb(dict(event)),
                "outcome": Jsonb(dict(outcome)),
                "at": at,
                "sent": list(sent),
                "status": run["status"],
                "last_seq": run["last_seq"],
                "updated_at": run["updated_at"],
                "current": Jsonb(run["current"]),
                "reason": run.get("reason"),
                "state": _json(run.get("state")),
                "finished_at": run.get("finished_at"),
                "snapshot_seq": run.get("snapshot_seq"),
                "snapshot_at": run.get("snapshot_at"),
            },
        )
        connection.commit()
    ids = []
    for cursor in cursors:
        row = cursor.fetchone()
        assert row is not None
        ids.append(int(row[0]))
        cursor.close()
    return ids


def _json(value: Any) -> Jsonb | None:
    return None if value is None else Jsonb(value)
