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
SELECT e.status AS execution_status, e.attempt AS execution_attempt, r.*,
       extract(epoch FROM clock_timestamp())::float8 AS db_now
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

# The whole completion of a step as one all-or-nothing statement, optimistic on the seq
# the worker read before running the node: if the run has moved since (or the result is
# already recorded), it writes nothing and the caller takes the locking path.
COMPLETE_STEP = """
WITH chk AS (
  SELECT id FROM runs WHERE id = %(run_id)s AND last_seq = %(known_seq)s FOR UPDATE
), done AS (
  UPDATE node_executions
  SET status = %(status)s, result = %(result)s, error_class = %(error_class)s,
      error = %(error)s, finished_at = now(), duration_s = %(duration_s)s, worker = %(worker)s
  WHERE run_id = %(run_id)s AND node = %(node)s AND iteration = %(iteration)s
    AND phase = %(phase)s AND attempt = %(attempt)s AND status IN ('scheduled', 'running')
    AND EXISTS (SELECT 1 FROM chk)
  RETURNING run_id
), adv AS (
  UPDATE runs
  SET status = %(run_status)s, last_seq = %(last_seq)s, updated_at = %(updated_at)s,
      current = %(current)s, reason = %(reason)s, state = %(state)s,
      finished_at = coalesce(%(finished_at)s::timestamptz, finished_at),
      snapshot_seq = coalesce(%(snapshot_seq)s::integer, snapshot_seq),
      snapshot_at = coalesce(%(snapshot_at)s::timestamptz, snapshot_at)
  WHERE id IN (SELECT run_id FROM done)
  RETURNING id
), appended AS (
  INSERT INTO events (run_id, seq, type, data, outcome, at)
  SELECT id, %(last_seq)s, %(type)s, %(data)s, %(outcome)s, %(at)s FROM adv
), snap AS (
  INSERT INTO snapshots (run_id, seq, format, codec, body, created_at)
  SELECT id, %(last_seq)s, %(snap_format)s, %(snap_codec)s, %(snap_body)s::bytea, now()
  FROM adv WHERE %(snap_body)s::bytea IS NOT NULL
  ON CONFLICT DO NOTHING
), sent AS (
  UPDATE outbox SET sent_at = now(), publishes = publishes + 1
  WHERE id = ANY(%(sent)s::bigint[]) AND sent_at IS NULL AND EXISTS (SELECT 1 FROM adv)
), scheduled AS (
  INSERT INTO node_executions (run_id, node, iteration, phase, status, attempt, dispatched_at)
  SELECT adv.id, d.node, d.iteration, d.phase, 'scheduled', d.attempt, now()
  FROM adv, unnest(%(d_node)s::text[], %(d_iteration)s::int[], %(d_phase)s::text[],
                   %(d_attempt)s::int[]) AS d(node, iteration, phase, attempt)
  ON CONFLICT (run_id, node, iteration, phase) DO UPDATE
  SET status = 'scheduled', attempt = EXCLUDED.attempt, dispatched_at = EXCLUDED.dispatched_at,
      finished_at = NULL, error_class = NULL, error = NULL
), box AS (
  INSERT INTO outbox (run_id, topic, payload, created_at)
  SELECT adv.id, 'node', p.payload, now() FROM adv, unnest(%(d_payload)s::jsonb[]) AS p(payload)
  RETURNING id, payload->>'node' AS node, (payload->>'iteration')::int AS iteration,
            payload->>'phase' AS phase
)
SELECT (SELECT count(*) FROM chk) AS checked, (SELECT count(*) FROM done) AS finished,
       coalesce((SELECT json_agg(json_build_array(id, node, iteration, phase)) FROM box),
                '[]'::json) AS outbox
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
SET status = %(run_status)s, last_seq = %(last_seq)s, updated_at = %(updated_at)s,
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
            {"run_id": run_id, "seq": seq, **_step_params(run, event, outcome, at, sent)},
        )
        connection.commit()
    ids = []
    for cursor in cursors:
        row = cursor.fetchone()
        assert row is not None
        ids.append(int(row[0]))
        cursor.close()
    return ids


def complete_step(
    connection: Connection[Any],
    key: Mapping[str, Any],
    *,
    attempt: int,
    known_seq: int,
    result: Mapping[str, Any],
    run: Mapping[str, Any],
    event: Mapping[str, Any],
    outcome: Mapping[str, Any],
    at: float,
    snapshot: tuple[int, str, bytes] | None,
    sent: Sequence[int],
    dispatches: Sequence[tuple[Mapping[str, Any], int, Mapping[str, Any]]],
) -> tuple[bool, bool, dict[tuple[str, int, str], int]]:
    """Run COMPLETE_STEP and its COMMIT in one round trip. Returns (the run was still at
    ``known_seq``, the result was recorded, outbox id by (node, iteration, phase))."""
    params = {
        **key,
        "attempt": attempt,
        "known_seq": known_seq,
        "status": result["status"],
        "result": _json(result.get("result")),
        "error_class": result.get("error_class"),
        "error": result.get("error"),
        "duration_s": result.get("duration_s"),
        "worker": result.get("worker"),
        **_step_params(run, event, outcome, at, sent),
        "snap_format": snapshot[0] if snapshot else None,
        "snap_codec": snapshot[1] if snapshot else None,
        "snap_body": snapshot[2] if snapshot else None,
        "d_node": [d[0]["node"] for d in dispatches],
        "d_iteration": [d[0]["iteration"] for d in dispatches],
        "d_phase": [d[0]["phase"] for d in dispatches],
        "d_attempt": [d[1] for d in dispatches],
        "d_payload": [Jsonb(dict(d[2])) for d in dispatches],
    }
    with connection.cursor(row_factory=namedtuple_row) as cursor:
        with connection.pipeline():
            cursor.execute(COMPLETE_STEP, params)
            connection.commit()
        row: Any = cursor.fetchone()
    assert row is not None
    ids = {(node, int(iteration), phase): int(id_) for id_, node, iteration, phase in row.outbox}
    return bool(row.checked), bool(row.finished), ids


def _step_params(
    run: Mapping[str, Any],
    event: Mapping[str, Any],
    outcome: Mapping[str, Any],
    at: float,
    sent: Sequence[int],
) -> dict[str, Any]:
    """The parameters of a step's event, run-row update and sent-marks (both paths)."""
    return {
        "run_status": run["status"],
        "last_seq": run["last_seq"],
        "updated_at": run["updated_at"],
        "current": Jsonb(run["current"]),
        "reason": run.get("reason"),
        "state": _json(run.get("state")),
        "finished_at": run.get("finished_at"),
        "snapshot_seq": run.get("snapshot_seq"),
        "snapshot_at": run.get("snapshot_at"),
        "type": event["type"],
        "data": Jsonb(dict(event)),
        "outcome": Jsonb(dict(outcome)),
        "at": at,
        "sent": list(sent),
    }


def _json(value: Any) -> Jsonb | None:
    return None if value is None else Jsonb(value)
