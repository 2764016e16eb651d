"""Events waiting to be applied to a run: what one run tells another.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30

A child run that ends tells its parent, and a parent that stops a child asks it to
cancel. Advancing the other run in the same transaction would lock two runs in either
order (a deadlock waiting to happen), so the message is committed here with the decision
that caused it and applied right after, in its own transaction; the scheduler applies
whatever a crash left behind. Taking the row and applying its event are one
transaction, so each is applied once.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "inbox",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("event", Json, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_inbox"),
    )
    op.create_index("ix_inbox_created_at", "inbox", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_inbox_created_at", table_name="inbox")
    op.drop_table("inbox")
