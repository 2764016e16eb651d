"""The fencing token of an execution's newest claim.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30

A worker that lost its lease (a long pause, a partition) may wake up and try to commit
after another worker took the node over. Redis hands out a rising fence per claim; a
takeover writes its fence here, and a result commits only with a fence at least this
high, so PostgreSQL refuses the stale worker even when Redis forgot everything.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("node_executions") as batch:
        batch.add_column(sa.Column("fence", sa.Integer(), server_default="0", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("node_executions") as batch:
        batch.drop_column("fence")
