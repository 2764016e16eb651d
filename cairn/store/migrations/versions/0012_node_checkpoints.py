"""Checkpoints inside a node: the working context of a long execution — its messages,
sessions, progress and scratch — saved while it runs, so that a re-execution after a crash
or a timeout resumes from the last one instead of from the start.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01

One row per execution key (run, node, iteration, phase), overwritten by each checkpoint;
written only while the execution is active at the writer's attempt and no newer claim has
taken it over (its fence), and deleted once the execution's result is committed.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "node_checkpoints",
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("node", sa.String(200), nullable=False),
        sa.Column("iteration", sa.Integer(), nullable=False),
        sa.Column("phase", sa.String(20), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("fence", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("context", JSON, nullable=False),
        sa.Column("saved_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("run_id", "node", "iteration", "phase", name="pk_node_checkpoints"),
    )


def downgrade() -> None:
    op.drop_table("node_checkpoints")
