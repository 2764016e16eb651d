"""How often the scheduler had to recover an execution.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30

A node whose worker dies every time it runs (it calls os._exit, it segfaults, it runs out
of memory) would otherwise be recovered forever. The count is kept in PostgreSQL, beside
the execution, so that no restart forgets it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("node_executions") as batch:
        batch.add_column(sa.Column("recoveries", sa.Integer(), server_default="0", nullable=False))


def downgrade() -> None:
    with op.batch_alter_table("node_executions") as batch:
        batch.drop_column("recoveries")
