"""Webhooks: a run's notification URL, and the notifications waiting to be delivered.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-30

A notification row is written in the transaction of the decision it reports (an outbox:
nothing committed goes unannounced, nothing uncommitted is announced) and delivered by
the scheduler's notifier, with retries, until the receiver answers 2xx or the attempts
run out. ``event_id`` is unique: a decision is announced once, and receivers deduplicate
redeliveries by it.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
BIG_ID = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
UNDELIVERED = "delivered_at IS NULL AND given_up_at IS NULL"


def upgrade() -> None:
    op.add_column("runs", sa.Column("webhook_url", sa.Text(), nullable=True))
    op.create_table(
        "notifications",
        sa.Column("id", BIG_ID, autoincrement=True, nullable=False),
        sa.Column("event_id", sa.String(100), nullable=False),
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("namespace", sa.String(100), nullable=False),
        sa.Column("kind", sa.String(40), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("body", JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("given_up_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_status", sa.Integer(), nullable=True),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_notifications"),
        sa.UniqueConstraint("event_id", name="uq_notifications_event_id"),
    )
    op.create_index(
        "ix_notifications_due",
        "notifications",
        ["due_at"],
        postgresql_where=sa.text(UNDELIVERED),
        sqlite_where=sa.text(UNDELIVERED),
    )
    op.create_index("ix_notifications_run_id", "notifications", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_notifications_run_id", table_name="notifications")
    op.drop_index("ix_notifications_due", table_name="notifications")
    op.drop_table("notifications")
    op.drop_column("runs", "webhook_url")
