"""Indexes for listing a namespace's runs and for retention.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30

``GET /v1/runs`` pages a namespace's runs newest first by (created_at, id); retention
finds the runs that ended before a cutoff. Without these, both read the whole table.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_runs_namespace_created_at_id", "runs", ["namespace", "created_at", "id"])
    op.create_index(
        "ix_runs_finished_at",
        "runs",
        ["finished_at"],
        postgresql_where=sa.text("finished_at IS NOT NULL"),
        sqlite_where=sa.text("finished_at IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_runs_finished_at", table_name="runs")
    op.drop_index("ix_runs_namespace_created_at_id", table_name="runs")
