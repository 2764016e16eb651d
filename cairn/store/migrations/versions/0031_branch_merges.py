"""A fan-out branch's success merges onto its run: ``runs.merged_from``/``merged_to`` and
``cairn_merged(state, ops)``.

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-05

A step's one-statement write is conditional on the run's seq being the one it was planned
on, so branches of one fan-out finishing together in different processes lose it to each
other and plan again. A branch's success that does not decide its join changes only what
is its own — its node, its outcome and output in the join, its timers — and two counters,
whatever its siblings did meanwhile: it may be applied to the run as it is by then, in
the order the run row's lock gives (``cairn.engine.merges``). It may only where every
step since the one it was planned on was such a merge: ``merged_to`` is the seq of the
run's last merged step and ``merged_from`` the seq the merges since a step of another
kind started from (written by merges alone: any other step leaves ``merged_to`` behind
``last_seq``).

On PostgreSQL, ``cairn_merged`` applies a merge's operations to the cached state in the
same statement: ``set`` a path to a value, ``drop`` a path, ``add`` an integer to one.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0031"
down_revision = "0030"
branch_labels = None
depends_on = None

# Simple expressions only (no query inside the loop): PL/pgSQL evaluates those without
# the executor. A path is a text[] literal ('{joins,fan,outcomes,b1}').
MERGED = """
CREATE OR REPLACE FUNCTION cairn_merged(state jsonb, ops jsonb) RETURNS jsonb
LANGUAGE plpgsql IMMUTABLE AS $$
DECLARE
  op jsonb;
  path text[];
BEGIN
  FOR i IN 0 .. jsonb_array_length(ops) - 1 LOOP
    op := ops -> i;
    path := (op ->> 'path')::text[];
    IF op ->> 'op' = 'set' THEN
      state := jsonb_set(state, path, op -> 'value', true);
    ELSIF op ->> 'op' = 'drop' THEN
      state := state #- path;
    ELSIF op ->> 'op' = 'add' THEN
      state := jsonb_set(
        state, path, to_jsonb(coalesce((state #>> path)::bigint, 0) + (op ->> 'value')::bigint),
        true);
    ELSE
      RAISE EXCEPTION USING ERRCODE = 'CRN01', MESSAGE = 'unknown merge operation: ' || op::text;
    END IF;
  END LOOP;
  RETURN state;
END
$$
"""


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("merged_from", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("merged_to", sa.Integer(), nullable=True))
    if op.get_bind().dialect.name == "postgresql":
        op.execute(MERGED)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP FUNCTION IF EXISTS cairn_merged(jsonb, jsonb)")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("merged_to")
        batch.drop_column("merged_from")
