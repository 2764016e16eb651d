"""Pausing a workflow's new starts, or a queue (docs/operations.md#pausing-starts-and-queues).

Revision ID: 0021
Revises: 0020
Create Date: 2026-12-03

``pauses``: what one namespace holds — a workflow's new starts, or the node messages of
its runs bound for a queue — with who paused it, when and why. Deleting the row resumes.

``held_starts``: runs submitted while their workflow was paused. The run is written
``pending`` with no event (its submitter has its id); the row keeps who submitted it, so
the run starts as theirs when the pause is lifted.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0021"
down_revision = "0020"
branch_labels = None
depends_on = None

STAMP = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "pauses",
        sa.Column("namespace", sa.String(100), nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("paused_by", sa.String(200), nullable=False),
        sa.Column("paused_at", STAMP, nullable=False),
        sa.PrimaryKeyConstraint("namespace", "kind", "name", name="pk_pauses"),
    )
    op.create_table(
        "held_starts",
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("namespace", sa.String(100), nullable=False),
        sa.Column("workflow", sa.String(200), nullable=False),
        sa.Column("actor", sa.String(200), nullable=True),
        sa.Column("held_at", STAMP, nullable=False),
        sa.PrimaryKeyConstraint("run_id", name="pk_held_starts"),
    )
    op.create_index("ix_held_starts_workflow", "held_starts", ["namespace", "workflow", "held_at"])


def downgrade() -> None:
    op.drop_index("ix_held_starts_workflow", table_name="held_starts")
    op.drop_table("held_starts")
    op.drop_table("pauses")
