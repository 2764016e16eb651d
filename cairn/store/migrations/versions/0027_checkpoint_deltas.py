"""Checkpoints inside a node store what changed since the last one.

Revision ID: 0027
Revises: 0026
Create Date: 2027-03-01

Until now each checkpoint overwrote its execution's one row with the whole working
context: a 100-turn agent loop wrote its growing message history 100 times. Now each
checkpoint is a row of its own, keyed by its number (``seq``): either the whole context
(``base`` 0) or what changed since checkpoint ``base`` (the messages appended, the other
fields that changed). Resuming folds the chain from the newest row back to a whole one.

The rows already saved are whole contexts: they are copied over with ``base`` 0. A
downgrade keeps each execution's newest whole context only (a delta cannot be folded in
SQL): an execution resumed after it starts from that one, or from the beginning.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0027"
down_revision = "0026"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
KEY = ("run_id", "node", "iteration", "phase")
COLUMNS = "run_id, node, iteration, phase, attempt, fence, seq, context, saved_at"


def _table(name: str, *, with_base: bool) -> None:
    op.create_table(
        name,
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("node", sa.String(200), nullable=False),
        sa.Column("iteration", sa.Integer(), nullable=False),
        sa.Column("phase", sa.String(20), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("fence", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        *([sa.Column("base", sa.Integer(), server_default="0", nullable=False)] * with_base),
        sa.Column("context", JSON, nullable=False),
        sa.Column("saved_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(*KEY, *(["seq"] * with_base), name=_key_name(name)),
    )


def upgrade() -> None:
    _table("node_checkpoints_new", with_base=True)
    op.execute(
        f"INSERT INTO node_checkpoints_new ({COLUMNS}) SELECT {COLUMNS} FROM node_checkpoints"
    )
    op.drop_table("node_checkpoints")
    op.rename_table("node_checkpoints_new", "node_checkpoints")
    _rename_primary_key("node_checkpoints_new", "node_checkpoints")


def downgrade() -> None:
    _table("node_checkpoints_old", with_base=False)
    op.execute(
        f"INSERT INTO node_checkpoints_old ({COLUMNS}) SELECT {COLUMNS} FROM node_checkpoints c "
        "WHERE base = 0 AND NOT EXISTS (SELECT 1 FROM node_checkpoints n WHERE n.base = 0 "
        "AND n.run_id = c.run_id AND n.node = c.node AND n.iteration = c.iteration "
        "AND n.phase = c.phase AND n.seq > c.seq)"
    )
    op.drop_table("node_checkpoints")
    op.rename_table("node_checkpoints_old", "node_checkpoints")
    _rename_primary_key("node_checkpoints_old", "node_checkpoints")


def _key_name(table: str) -> str:
    """The new table's primary key: named for the table it becomes at once on SQLite,
    which keeps constraint names per table; on PostgreSQL, where the name is the key's
    index and taken while the old table stands, renamed afterwards."""
    if op.get_bind().dialect.name == "postgresql":
        return f"pk_{table}"
    return "pk_node_checkpoints"


def _rename_primary_key(old: str, new: str) -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"ALTER TABLE {new} RENAME CONSTRAINT pk_{old} TO pk_{new}")
