"""An index of the runs forked from a run (``parent_run_id``).

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-03

A run's page lists its forks (the live forks started from it: ``parent_run_id``,
``fork_seq``). Without an index that read would scan every run; partial, on the few runs
that are forks, it costs the forks' own entries and nearly nothing to keep.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0025"
down_revision = "0024"
branch_labels = None
depends_on = None

FORKS = sa.text("parent_run_id IS NOT NULL")


def upgrade() -> None:
    op.create_index(
        "ix_runs_forks",
        "runs",
        ["parent_run_id", "created_at"],
        postgresql_where=FORKS,
        sqlite_where=FORKS,
    )


def downgrade() -> None:
    op.drop_index("ix_runs_forks", table_name="runs")
