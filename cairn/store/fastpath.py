"""The step's statements on PostgreSQL, as plain SQL on the psycopg connection.

A step is one read and one write. Built through SQLAlchemy Core each would cost more
Python than its round trip, so they are constant SQL here, the same statements as the
portable versions in :mod:`cairn.store.runs` and its siblings. Round trips are what a step costs
(measured: a BEGIN or a ROLLBACK costs the server as much as a small statement), so:

* the write is one statement (COMPLETE_STEP, SUBMIT_RUN), run on an autocommit
  connection: it is its own transaction, one round trip, and prepared on the server;
* the read is one SELECT on the same autocommit connection, prepared too: a statement
  alone is its own read-only transaction (one snapshot; PostgreSQL gives it no
  transaction id), so it needs neither a BEGIN nor a ROLLBACK — nor the planning of a
  query sent as text each time.

The locking path (``write_step``) keeps a transaction: BEGIN, reads under lock, and its
writes pipelined with the COMMIT.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from psycopg import Connection, pq
from psycopg.rows import namedtuple_row
from psycopg.types.json import Jsonb

from cairn.errors import StoreError
from cairn.faults import fault_point
from cairn.model.outcomes import StepResult, StepWrites
from cairn.model.payloads import json_bytes
from cairn.store.records import RunRecord, StepCompletion

EXECUTION_AND_RUN = """
SELECT e.status AS execution_status, e.attempt AS execution_attempt,
       e.fence AS execution_fence, e.recoveries AS execution_recoveries, r.*,
       extract(epoch FROM clock_timestamp())::float8 AS db_now
FROM node_executions e JOIN runs r ON r.id = e.run_id
WHERE e.run_id = %(run_id)s AND e.node = %(node)s AND e.iteration = %(iteration)s
  AND e.phase = %(phase)s
"""

# The run row, advanced by a step (coalesce: what the step does not change stays).
_ADVANCE_RUN = """
SET status = %(run_status)s, last_seq = %(last_seq)s, updated_at = %(updated_at)s,
    current = %(current)s, reason = %(reason)s, state = %(state)s::jsonb,
    finished_at = coalesce(%(finished_at)s::timestamptz, finished_at),
    snapshot_seq = coalesce(%(snapshot_seq)s::integer, snapshot_seq),
    snapshot_at = coalesce(%(snapshot_at)s::timestamptz, snapshot_at)
"""

# A worker's result, recorded only if it is the first for the execution at this attempt
# and no newer claim took the execution over (its fence).
RECORD_RESULT = """
  UPDATE node_executions
  SET status = %(status)s, result = %(result)s, error_class = %(error_class)s,
      error = %(error)s, finished_at = now(), duration_s = %(duration_s)s, worker = %(worker)s
  WHERE run_id = %(run_id)s AND node = %(node)s AND iteration = %(iteration)s
    AND phase = %(phase)s AND attempt = %(attempt)s AND status IN ('scheduled', 'running')
    AND fence <= %(fence)s
"""

# The outbox rows this process published since its last step, marked sent by the step.
OUTBOX_SENT = """
  UPDATE outbox SET sent_at = now(), publishes = publishes + 1
  WHERE id IN (SELECT value::bigint FROM jsonb_array_elements_text(%(rows)s::jsonb -> 'sent'))
    AND sent_at IS NULL
"""

FINISH_AND_LOCK = (
    """
WITH done AS ("""
    + RECORD_RESULT
    + """  RETURNING run_id
)
SELECT r.*, extract(epoch FROM clock_timestamp())::float8 AS db_now
FROM runs r WHERE r.id IN (SELECT run_id FROM done)
FOR UPDATE OF r
"""
)

# A dispatch to a key on record moves its execution forward — the next attempt, never
# the same one again — or the statement fails (cairn_refuse: migration 0011), and with it
# the step's transaction.
_FORWARD_ONLY = """
  ON CONFLICT (run_id, node, iteration, phase) DO UPDATE
  SET status = 'scheduled', attempt = EXCLUDED.attempt, dispatched_at = EXCLUDED.dispatched_at,
      finished_at = NULL, error_class = NULL, error = NULL
  WHERE node_executions.attempt < EXCLUDED.attempt
  RETURNING 1
"""
_STALE_DISPATCH = (
    "'stale transition: a dispatch of run ' || {run} || ' is not newer than the attempt on record'"
)

DISPATCH = (
    """
WITH scheduled AS (
  INSERT INTO node_executions (run_id, node, iteration, phase, status, attempt, dispatched_at)
  VALUES (%(run_id)s, %(node)s, %(iteration)s, %(phase)s, 'scheduled', %(attempt)s, now())"""
    + _FORWARD_ONLY
    + """)
INSERT INTO outbox (run_id, topic, payload, created_at)
SELECT %(run_id)s, 'node', %(payload)s, now()
WHERE CASE WHEN EXISTS (SELECT 1 FROM scheduled) THEN true
      ELSE cairn_refuse("""
    + _STALE_DISPATCH.format(run="%(run_id)s::text")
    + """) = 0 END
RETURNING id
"""
)

# What a step writes once its run row is in place (the CTE ``adv`` yields the run's id):
# its event, a snapshot when due, sent-marks, and each dispatch's idempotency row and
# outbox message. Shared by a run's first step (SUBMIT_RUN) and every later one
# (COMPLETE_STEP).
_STEP_WRITES = (
    """
appended AS (
  INSERT INTO events (run_id, seq, type, data, outcome, at)
  SELECT id, %(last_seq)s, %(type)s, %(data)s, %(outcome)s, %(at)s FROM adv
), snap AS (
  INSERT INTO snapshots (run_id, seq, format, codec, body, created_at)
  SELECT id, %(last_seq)s, %(snap_format)s, %(snap_codec)s, %(snap_body)s::bytea, now()
  FROM adv WHERE %(snap_body)s::bytea IS NOT NULL
  ON CONFLICT DO NOTHING
), sent AS ("""
    + OUTBOX_SENT
    + """    AND EXISTS (SELECT 1 FROM adv)
), scheduled AS (
  INSERT INTO node_executions (run_id, node, iteration, phase, status, attempt, dispatched_at)
  SELECT adv.id, d.node, d.iteration, d.phase, 'scheduled', d.attempt, now()
  FROM adv, jsonb_to_recordset(%(rows)s::jsonb -> 'dispatches')
            AS d(node text, iteration int, phase text, attempt int)"""
    + _FORWARD_ONLY
    + """), box AS (
  INSERT INTO outbox (run_id, topic, payload, created_at)
  SELECT adv.id, 'node', d.payload, now()
  FROM adv, jsonb_to_recordset(%(rows)s::jsonb -> 'dispatches') AS d(payload jsonb)
  WHERE CASE WHEN (SELECT count(*) FROM scheduled)
                  = jsonb_array_length(%(rows)s::jsonb -> 'dispatches') THEN true
        ELSE cairn_refuse("""
    + _STALE_DISPATCH.format(run="adv.id")
    + """) = 0 END
  RETURNING id, payload->>'node' AS node, (payload->>'iteration')::int AS iteration,
            payload->>'phase' AS phase
), armed AS (
  INSERT INTO timers (run_id, timer_id, due_at)
  SELECT adv.id, t.timer_id, to_timestamp(t.due_at)
  FROM adv, jsonb_to_recordset(%(rows)s::jsonb -> 'armed') AS t(timer_id text, due_at float8)
  ON CONFLICT (run_id, timer_id) DO UPDATE SET due_at = EXCLUDED.due_at, fired_at = NULL
), disarmed AS (
  DELETE FROM timers
  WHERE run_id IN (SELECT id FROM adv)
    AND timer_id IN (SELECT jsonb_array_elements_text(%(rows)s::jsonb -> 'disarmed'))
)
"""
)

_OUTBOX_IDS = """
coalesce((SELECT json_agg(json_build_array(id, node, iteration, phase)) FROM box),
         '[]'::json) AS outbox
"""

# The whole completion of a step as one all-or-nothing statement, optimistic on the seq
# the worker read before running the node: if the run has moved since (or the result is
# already recorded), it writes nothing. A run that moved comes back as it is now (``moved``:
# its columns and the clock; locked to read it, so a sibling's step committed while this
# statement waited for the row is in it), for the caller to plan on again without a read.
COMPLETE_STEP = (
    """
WITH chk AS (
  SELECT id FROM runs WHERE id = %(run_id)s AND last_seq = %(known_seq)s FOR UPDATE
), done AS ("""
    + RECORD_RESULT
    + """    AND EXISTS (SELECT 1 FROM chk)
  RETURNING run_id
), adv AS (
  UPDATE runs"""
    + _ADVANCE_RUN
    + """  WHERE id IN (SELECT run_id FROM done)
  RETURNING id
),"""
    + _STEP_WRITES
    + """, moved AS (
  SELECT r.*, extract(epoch FROM clock_timestamp())::float8 AS db_now FROM runs r
  WHERE r.id = %(run_id)s AND NOT EXISTS (SELECT 1 FROM chk) FOR UPDATE
)
SELECT (SELECT count(*) FROM chk) AS checked, (SELECT count(*) FROM done) AS finished,"""
    + _OUTBOX_IDS
    + ", moved.* FROM (SELECT 1) AS one LEFT JOIN moved ON true"
)

# A new run and its first step in one statement. The run is inserted already advanced by
# its start event; a (namespace, request id) taken already inserts nothing at all.
SUBMIT_RUN = (
    """
WITH adv AS (
  INSERT INTO runs (id, namespace, workflow, workflow_namespace, version, input,
                    request_id, webhook_url, priority, created_at, status, last_seq,
                    updated_at, current, reason, state, finished_at, snapshot_seq, snapshot_at)
  VALUES (%(run_id)s, %(namespace)s, %(workflow)s, %(workflow_namespace)s, %(version)s,
          %(input)s, %(request_id)s, %(webhook_url)s, %(priority)s, %(created_at)s,
          %(run_status)s, %(last_seq)s, %(updated_at)s, %(current)s, %(reason)s,
          %(state)s::jsonb, %(finished_at)s, coalesce(%(snapshot_seq)s::integer, 0),
          %(snapshot_at)s)
  ON CONFLICT DO NOTHING
  RETURNING id
),"""
    + _STEP_WRITES
    + "SELECT (SELECT count(*) FROM adv) AS inserted,"
    + _OUTBOX_IDS
)

RECORD_STEP = (
    """
WITH appended AS (
  INSERT INTO events (run_id, seq, type, data, outcome, at)
  VALUES (%(run_id)s, %(last_seq)s, %(type)s, %(data)s, %(outcome)s, %(at)s)
), snap AS (
  INSERT INTO snapshots (run_id, seq, format, codec, body, created_at)
  SELECT %(run_id)s, %(last_seq)s, %(snap_format)s, %(snap_codec)s, %(snap_body)s::bytea, now()
  WHERE %(snap_body)s::bytea IS NOT NULL
  ON CONFLICT DO NOTHING
), sent AS (
  UPDATE outbox SET sent_at = now(), publishes = publishes + 1
  WHERE id IN (SELECT value::bigint FROM jsonb_array_elements_text(%(rows)s::jsonb -> 'sent'))
    AND sent_at IS NULL
), armed AS (
  INSERT INTO timers (run_id, timer_id, due_at)
  SELECT %(run_id)s, t.timer_id, to_timestamp(t.due_at)
  FROM jsonb_to_recordset(%(rows)s::jsonb -> 'armed') AS t(timer_id text, due_at float8)
  ON CONFLICT (run_id, timer_id) DO UPDATE SET due_at = EXCLUDED.due_at, fired_at = NULL
), disarmed AS (
  DELETE FROM timers WHERE run_id = %(run_id)s
    AND timer_id IN (SELECT jsonb_array_elements_text(%(rows)s::jsonb -> 'disarmed'))
), adv AS (
  UPDATE runs"""
    + _ADVANCE_RUN
    + """  WHERE id = %(run_id)s AND last_seq = %(last_seq)s::integer - 1
  RETURNING id
)
SELECT CASE WHEN EXISTS (SELECT 1 FROM adv) THEN 1
       ELSE cairn_refuse('stale transition: run ' || %(run_id)s::text
                         || ' is no longer at seq ' || (%(last_seq)s::integer - 1)) END
"""
)


# What a workflow name means to a namespace (cairn.store.definitions.visible_workflow),
# in one read: the namespaces that own a workflow of that name the caller may see, the
# one the name means (its own, else the only one), and its newest visible version.
VISIBLE_WORKFLOW = """
WITH visible AS (
  SELECT w.namespace, w.version FROM workflows w
  WHERE w.name = %(name)s
    AND (%(owner)s::text IS NULL OR w.namespace = %(owner)s::text)
    AND (w.namespace = %(caller)s::text OR EXISTS (
      SELECT 1 FROM workflow_shares s
      WHERE s.namespace = w.namespace AND s.workflow = w.name
        AND s.grantee = %(caller)s::text AND s.version IN (0, w.version)))
), found AS (
  SELECT coalesce(array_agg(DISTINCT namespace ORDER BY namespace), '{}') AS owners
  FROM visible
), chosen AS (
  SELECT CASE WHEN %(caller)s::text = ANY(owners) THEN %(caller)s::text
              WHEN cardinality(owners) = 1 THEN owners[1] END AS owner, owners
  FROM found
)
SELECT chosen.owner, chosen.owners,
       (SELECT max(v.version) FROM visible v WHERE v.namespace = chosen.owner
          AND (%(version)s::integer IS NULL OR v.version = %(version)s::integer)) AS version,
       extract(epoch FROM clock_timestamp())::float8 AS db_now
FROM chosen
"""


def visible_workflow(
    connection: Connection[Any], caller: str, name: str, owner: str | None, version: int | None
) -> Any:
    """What ``name`` means to namespace ``caller``, and the database's clock, in one
    read (see :func:`execution_and_run`)."""
    params = {"caller": caller, "name": name, "owner": owner, "version": version}
    return _read_row(connection, VISIBLE_WORKFLOW, params)


def execution_and_run(connection: Connection[Any], key: Mapping[str, Any]) -> Any:
    """The read a worker does before running a node: one prepared statement on an
    autocommit connection, its own read-only transaction."""
    return _read_row(connection, EXECUTION_AND_RUN, key)


def _read_row(connection: Connection[Any], query: str, params: Mapping[str, Any]) -> Any:
    """The first row (a namedtuple) of ``query``, prepared on the server, or None."""
    require_autocommit(connection)
    with connection.cursor(row_factory=namedtuple_row) as cursor:
        return cursor.execute(query, params, prepare=True).fetchone()


def finish_and_lock(
    connection: Connection[Any],
    key: Mapping[str, Any],
    attempt: int,
    fence: int,
    values: Mapping[str, Any],
) -> Any:
    params = result_params(key, attempt, fence, values)
    with connection.cursor(row_factory=namedtuple_row) as cursor:
        return cursor.execute(FINISH_AND_LOCK, params).fetchone()


def write_step(
    connection: Connection[Any], run_id: str, writes: StepWrites, *, commit: bool = True
) -> list[int]:
    """Every write of a step and the COMMIT, pipelined: one round trip for all of them.

    It ends the transaction, so it must be the transaction's last statement; the caller's
    SQLAlchemy commit then finds nothing left to do. ``commit=False`` leaves the
    transaction open, for a step that is not its transaction's last (a child run started
    by its parent's step, the steps after an ephemeral node).
    """
    with connection.pipeline():
        cursors = []
        for key, attempt, payload in writes.dispatches:
            cursor = connection.cursor()
            params = {**key.params(), "attempt": attempt, "payload": jsonb(dict(payload))}
            cursor.execute(DISPATCH, params)
            cursors.append(cursor)
        connection.execute(RECORD_STEP, {"run_id": run_id, **step_params(writes)})
        if commit:
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
    fence: int,
    known_seq: int,
    result: Mapping[str, Any],
    writes: StepWrites,
) -> StepCompletion:
    """Run COMPLETE_STEP on an autocommit connection: one statement, so one transaction,
    and one round trip."""
    params = {
        **result_params(key, attempt, fence, result),
        "known_seq": known_seq,
        **step_params(writes),
    }
    row = one_statement(connection, COMPLETE_STEP, params)
    moved = None
    if not row.checked and row.id is not None:
        moved = (RunRecord.of(row), float(row.db_now))
    return StepCompletion(bool(row.checked), bool(row.finished), outbox_ids_of(row), moved)


# COMPLETE_STEP for a step completed with its siblings: all of them or none, so one that
# is not written fails the transaction — the ones after it were planned on it.
COMPLETE_STEP_TOGETHER = (
    COMPLETE_STEP
    + """
WHERE CASE WHEN (SELECT count(*) FROM done) = 1 THEN true ELSE cairn_refuse(
  'run ' || %(run_id)s::text || ', node ' || %(node)s::text
  || ': its step, completed with its siblings, is not where it was planned') = 0 END
"""
)
_OPEN = (pq.TransactionStatus.INTRANS, pq.TransactionStatus.INERROR)


def complete_steps(
    connection: Connection[Any], steps: Sequence[StepResult]
) -> list[StepCompletion]:
    """COMPLETE_STEP_TOGETHER for each of ``steps`` (one run's, each planned on the one
    before) in one transaction (:func:`in_one_transaction`): one round trip and one
    commit for them all, or none of them (:meth:`cairn.store.steps.StepsTx.complete_steps`)."""
    statements = [(COMPLETE_STEP_TOGETHER, completion_params(step)) for step in steps]
    rows = in_one_transaction(connection, statements)
    return [StepCompletion(True, True, outbox_ids_of(row)) for row in rows]


def in_one_transaction(
    connection: Connection[Any], statements: Sequence[tuple[str, Mapping[str, Any]]]
) -> list[Any]:
    """``statements`` in one transaction on an autocommit connection, pipelined — sent
    together, answered together, each prepared — and the first row of each. One refused
    (cairn_refuse) ends it with nothing written, and raises."""
    require_autocommit(connection)
    cursors = []
    try:
        with connection.pipeline():
            connection.execute("BEGIN", prepare=False)
            for query, params in statements:
                cursor = connection.cursor(row_factory=namedtuple_row)
                cursor.execute(query, params, prepare=True)
                cursors.append(cursor)
            connection.execute("COMMIT", prepare=False)
        return [cursor.fetchone() for cursor in cursors]
    except BaseException:
        # A refused statement leaves the transaction open (and aborted); a lost
        # connection has none to end — what it raised is what the caller hears.
        if connection.info.transaction_status in _OPEN:
            connection.rollback()
        raise
    finally:
        for cursor in cursors:
            cursor.close()


def submit_run(
    connection: Connection[Any], values: Mapping[str, Any], writes: StepWrites
) -> tuple[bool, dict[tuple[str, int, str], int]]:
    """Run SUBMIT_RUN on an autocommit connection. Returns (the run was inserted, outbox
    id by (node, iteration, phase))."""
    row = one_statement(connection, SUBMIT_RUN, _submit_params(values, writes))
    return bool(row.inserted), outbox_ids_of(row)


def submit_runs(
    connection: Connection[Any], runs: Sequence[tuple[Mapping[str, Any], StepWrites]]
) -> list[tuple[bool, dict[tuple[str, int, str], int]]]:
    """SUBMIT_RUN for many runs, pipelined — sent together, answered together — in the
    caller's transaction (a batch: its commit is the caller's)."""
    with connection.pipeline():
        cursors = []
        for values, writes in runs:
            cursor = connection.cursor(row_factory=namedtuple_row)
            cursor.execute(SUBMIT_RUN, _submit_params(values, writes), prepare=True)
            cursors.append(cursor)
    answers = []
    for cursor in cursors:
        row: Any = cursor.fetchone()
        assert row is not None
        answers.append((bool(row.inserted), outbox_ids_of(row)))
        cursor.close()
    return answers


def _submit_params(values: Mapping[str, Any], writes: StepWrites) -> dict[str, Any]:
    return {
        "run_id": values["id"],
        "namespace": values["namespace"],
        "workflow": values["workflow"],
        "workflow_namespace": values["workflow_namespace"],
        "version": values["version"],
        "input": jsonb(values["input"]),
        "request_id": values["request_id"],
        "webhook_url": values["webhook_url"],
        "priority": values.get("priority", 0),
        "created_at": values["created_at"],
        **step_params(writes),
    }


def one_statement(connection: Connection[Any], query: str, params: Mapping[str, Any]) -> Any:
    """One statement as its own transaction, prepared on the server (it runs per step)."""
    require_autocommit(connection)
    with connection.cursor(row_factory=namedtuple_row) as cursor:
        row = cursor.execute(query, params, prepare=True).fetchone()
    assert row is not None
    return row


def outbox_ids_of(row: Any) -> dict[tuple[str, int, str], int]:
    return {(node, int(iteration), phase): int(id_) for id_, node, iteration, phase in row.outbox}


def completion_params(step: StepResult) -> dict[str, Any]:
    """The parameters of COMPLETE_STEP (and its TOGETHER variant) for ``step``."""
    return {
        **result_params(step.key.params(), step.attempt, step.fence, step.result),
        "known_seq": step.known_seq,
        **step_params(step.writes),
    }


def result_params(
    key: Mapping[str, Any], attempt: int, fence: int, result: Mapping[str, Any]
) -> dict[str, Any]:
    """The parameters of RECORD_RESULT."""
    return {
        **key,
        "attempt": attempt,
        "fence": fence,
        "status": result["status"],
        "result": _json(result.get("result")),
        "error_class": result.get("error_class"),
        "error": result.get("error"),
        "duration_s": result.get("duration_s"),
        "worker": result.get("worker"),
    }


def step_params(writes: StepWrites) -> dict[str, Any]:
    """The parameters of what a step writes, shared by its three statements."""
    run, snapshot = writes.run, writes.snapshot
    if snapshot is not None:
        # One statement writes the snapshot with the step: there is no "half written"
        # to die in, so the fault point sits where it is ready and not yet sent.
        fault_point("snapshot.before_commit")
    return {
        "run_status": run.status.value,
        "last_seq": run.last_seq,
        "updated_at": run.updated_at,
        "current": jsonb(run.current),
        "reason": run.reason,
        "state": run.state_json,
        "finished_at": run.finished_at,
        "snapshot_seq": run.snapshot_seq,
        "snapshot_at": run.snapshot_at,
        "type": writes.event["type"],
        "data": jsonb(dict(writes.event)),
        "outcome": jsonb(dict(writes.outcome)),
        "at": writes.at,
        "snap_format": snapshot[0] if snapshot else None,
        "snap_codec": snapshot[1] if snapshot else None,
        "snap_body": snapshot[2] if snapshot else None,
        "rows": jsonb(_step_rows(writes)),
    }


def _step_rows(writes: StepWrites) -> dict[str, Any]:
    """The rows a step adds or touches besides its own, as one JSON parameter the
    statement takes apart (``jsonb_to_recordset``): dumping one document costs psycopg
    a sixth of what the nine arrays it replaces did, each scanned for its element type."""
    return {
        "sent": list(writes.sent),
        "dispatches": [
            {
                "node": key.node,
                "iteration": key.iteration,
                "phase": key.phase,
                "attempt": attempt,
                "payload": dict(payload),
            }
            for key, attempt, payload in writes.dispatches
        ],
        "armed": [{"timer_id": timer_id, "due_at": due} for timer_id, due in writes.armed],
        "disarmed": list(writes.disarmed),
    }


def require_autocommit(connection: Connection[Any]) -> None:
    if not connection.autocommit:
        raise StoreError("this statement runs on its own: use Store.statements()")


def _json(value: Any) -> Jsonb | None:
    return None if value is None else jsonb(value)


def jsonb(value: Any) -> Jsonb:
    """A JSONB parameter, encoded by :func:`~cairn.model.payloads.json_bytes` (the step's
    values are checked already): a fifth of psycopg's default encoder's time."""
    return Jsonb(value, dumps=json_bytes)
