"""The definitions a worker could not load (docs/operations.md#code-a-worker-cannot-load).

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-03

``code_faults``: one row per (workflow version, worker) that received a node whose
handlers it cannot import — the fault as the loader put it, how often, first and last
seen. ``cairn status --fleet`` and ``GET /v1/fleet/code-faults`` read it; the worker
deletes its row once it loads the version.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0026"
down_revision = "0025"
branch_labels = None
depends_on = None

STAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "code_faults",
        sa.Column("namespace", sa.String(100), nullable=False),
        sa.Column("workflow", sa.String(200), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("worker", sa.String(200), nullable=False),
        sa.Column("fault", sa.Text(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.Column("first_at", STAMP, nullable=False),
        sa.Column("last_at", STAMP, nullable=False),
        sa.PrimaryKeyConstraint(
            "namespace", "workflow", "version", "worker", name="pk_code_faults"
        ),
    )
    op.create_index("ix_code_faults_last_at", "code_faults", ["last_at"])


def downgrade() -> None:
    op.drop_table("code_faults")
