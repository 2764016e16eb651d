"""A branch's success merged onto its run, on PostgreSQL: one statement, conditional not
on the run's seq but on what the merge needs of the run (see :mod:`cairn.engine.merges`).

The run row's lock orders the merges: each takes the next seq under it, and PostgreSQL
re-checks the statement's conditions, and computes the new state, on the row as the
sibling before it left it. A merge the run no longer allows (its join would be decided
by it, another kind of step came between, a snapshot is due) writes nothing and returns
the run as the statement found it, for the caller to plan on again.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import Connection

from cairn.model.outcomes import BranchMerge, Merged, StepResult
from cairn.store.fastpath import (
    COMPLETE_STEP_TOGETHER,
    OUTBOX_SENT,
    RECORD_RESULT,
    completion_params,
    in_one_transaction,
    jsonb,
    one_statement,
    outbox_ids_of,
    result_params,
    step_params,
)
from cairn.store.records import RunRecord, StepCompletion

# Whether the execution's result may still be recorded: unfinished at this attempt, and
# no newer claim.
_RECORDABLE = """
  SELECT 1 FROM node_executions
  WHERE run_id = %(run_id)s AND node = %(node)s AND iteration = %(iteration)s
    AND phase = %(phase)s AND attempt = %(attempt)s AND status IN ('scheduled', 'running')
    AND fence <= %(fence)s
"""

# No row is locked unless the merge is written — a refused merge (the last branch of a
# join, every time) takes no transaction id — so the execution is checked as the
# statement's snapshot has it, and a newer claim committed since (which its UPDATE then
# finds) refuses the whole statement rather than leave a step without its result.
MERGE_STEP = (
    """
WITH adv AS (
  UPDATE runs
  SET last_seq = last_seq + 1, updated_at = %(updated_at)s,
      current = current - %(left)s::text[], state = cairn_merged(state, %(ops)s::jsonb),
      merged_from = CASE WHEN merged_to = last_seq THEN merged_from ELSE last_seq END,
      merged_to = last_seq + 1
  WHERE id = %(run_id)s AND state IS NOT NULL
    AND octet_length(state::text) + octet_length(%(ops)s::text) <= %(cache_bytes)s
    AND (last_seq = %(known_seq)s
         OR (merged_to = last_seq AND merged_from <= %(known_seq)s::integer))
    AND last_seq + 1 - snapshot_seq < %(snapshot_every)s
    AND %(at)s::float8 - extract(epoch FROM coalesce(snapshot_at, created_at))
        < %(snapshot_every_s)s
    AND (SELECT count(*) FROM jsonb_each_text(state -> 'joins' -> %(join)s::text -> 'outcomes') o
         WHERE o.key <> %(node)s AND o.value = ANY(%(counted)s::text[]))
        BETWEEN %(at_least)s AND %(at_most)s
    AND EXISTS ("""
    + _RECORDABLE
    + """)
  -- The state only if a sibling merged since the one it was planned on: else the caller
  -- has it already, as it planned it.
  RETURNING id, last_seq, CASE WHEN last_seq <> %(known_seq)s + 1 THEN state END AS state,
            current
), done AS ("""
    + RECORD_RESULT
    + """    AND EXISTS (SELECT 1 FROM adv)
  RETURNING run_id
), appended AS (
  INSERT INTO events (run_id, seq, type, data, outcome, at)
  SELECT id, last_seq, %(type)s, %(data)s, %(outcome)s, %(at)s FROM adv
), sent AS ("""
    + OUTBOX_SENT
    + """    AND EXISTS (SELECT 1 FROM adv)
), disarmed AS (
  DELETE FROM timers
  WHERE run_id IN (SELECT id FROM adv)
    AND timer_id IN (SELECT jsonb_array_elements_text(%(rows)s::jsonb -> 'disarmed'))
), moved AS (
  SELECT r.*, extract(epoch FROM clock_timestamp())::float8 AS db_now FROM runs r
  WHERE r.id = %(run_id)s AND NOT EXISTS (SELECT 1 FROM adv)
)
SELECT CASE WHEN (SELECT count(*) FROM adv) = (SELECT count(*) FROM done)
            THEN (SELECT last_seq FROM adv)
            ELSE cairn_refuse('stale transition: run ' || %(run_id)s::text || ', node '
                              || %(node)s::text || ': claimed anew as its branch merged') END
         AS merged_seq,
       NOT EXISTS (SELECT 1 FROM adv) AND EXISTS ("""
    + _RECORDABLE
    + """) AS recordable,
       (SELECT state FROM adv) AS merged_state, (SELECT current FROM adv) AS merged_current,
       moved.*
FROM (SELECT 1) AS one LEFT JOIN moved ON true
"""
)


def merge_step(
    connection: Connection[Any], step: StepResult, merge: BranchMerge
) -> tuple[StepCompletion, Merged | None]:
    """Run MERGE_STEP on an autocommit connection. Returns what it did as a one-statement
    completion does — ``checked``: the run allowed the merge; ``finished``: the result was
    recorded (its execution unfinished at this attempt, no newer claim) and the step
    written; ``moved``: the run as the statement found it when it did not allow it (it
    may have moved again since: the merge planned on it is checked) — and, merged, where
    the merge left the run (its state only if a sibling merged since the seq it was
    planned on). A claim taken anew while it merged: StaleTransition, nothing written."""
    return _merged(one_statement(connection, MERGE_STEP, _params(step, merge)))


def merge_steps(
    connection: Connection[Any], steps: Sequence[tuple[StepResult, BranchMerge | None]]
) -> list[tuple[StepCompletion, Merged | None]]:
    """Steps of one run, each planned on the one before, in one transaction
    (:func:`~cairn.store.fastpath.in_one_transaction`): one round trip and one commit for
    them all. A branch's merge (``BranchMerge``) merges or not on its own, onto the run
    as the ones before it left it; any other step is COMPLETE_STEP_TOGETHER, conditional
    on the seq it was planned on — not there (a merge before it refused), or a claim
    taken anew as a branch merged, and none is written (StaleTransition)."""
    statements = [
        (MERGE_STEP, _params(step, merge))
        if merge is not None
        else (COMPLETE_STEP_TOGETHER, completion_params(step))
        for step, merge in steps
    ]
    rows = in_one_transaction(connection, statements)
    return [
        _merged(row)
        if merge is not None
        else (StepCompletion(True, True, outbox_ids_of(row)), None)
        for row, (_step, merge) in zip(rows, steps, strict=True)
    ]


def _merged(row: Any) -> tuple[StepCompletion, Merged | None]:
    if row.merged_seq is not None:
        merged = Merged(int(row.merged_seq), list(row.merged_current), row.merged_state)
        return StepCompletion(True, True, {}), merged
    if not row.recordable:  # the result cannot be recorded: on record, or the claim lost
        return StepCompletion(True, False, {}), None
    moved = None if row.id is None else (RunRecord.of(row), float(row.db_now))
    return StepCompletion(False, False, {}, moved), None


def _params(step: StepResult, merge: BranchMerge) -> dict[str, Any]:
    return {
        **result_params(step.key.params(), step.attempt, step.fence, step.result),
        **step_params(step.writes),
        "known_seq": step.known_seq,
        "ops": jsonb([{**op, "path": _text_array(op["path"])} for op in merge.ops]),
        "left": list(merge.left),
        "join": merge.join,
        "counted": list(merge.counted),
        "at_least": merge.at_least,
        "at_most": merge.at_most,
        "snapshot_every": merge.snapshot_every,
        "snapshot_every_s": merge.snapshot_every_s,
        "cache_bytes": merge.cache_bytes,
    }


def _text_array(path: Sequence[Any]) -> str:
    """A path as PostgreSQL's text[] literal, each element quoted: what cairn_merged
    casts without a query."""
    quoted = (str(part).replace("\\", "\\\\").replace('"', '\\"') for part in path)
    return "{" + ",".join(f'"{part}"' for part in quoted) + "}"
