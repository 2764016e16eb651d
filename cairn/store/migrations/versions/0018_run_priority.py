"""A run's priority (docs/flow-control.md#priority-and-fairness): who gets the next free
concurrency slot and the next worker. An integer from -5 to 5; every run before this
revision has the default, 0.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # A constant server default: PostgreSQL adds the column without rewriting the table.
    with op.batch_alter_table("runs") as table:
        table.add_column(sa.Column("priority", sa.Integer(), nullable=False, server_default="0"))


def downgrade() -> None:
    with op.batch_alter_table("runs") as table:
        table.drop_column("priority")
