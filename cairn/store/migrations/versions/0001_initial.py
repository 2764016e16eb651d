"""The durable execution tables.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None

Json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Stamp = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "workflows",
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("spec", Json, nullable=False),
        sa.Column("registered_at", Stamp, nullable=False),
        sa.PrimaryKeyConstraint("name", "version", name="pk_workflows"),
    )
    op.create_table(
        "runs",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("namespace", sa.String(100), server_default="default", nullable=False),
        sa.Column("workflow", sa.String(200), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("input", Json, nullable=False),
        sa.Column("request_id", sa.String(200), nullable=True),
        sa.Column("last_seq", sa.Integer(), server_default="0", nullable=False),
        sa.Column("snapshot_seq", sa.Integer(), server_default="0", nullable=False),
        sa.Column("snapshot_at", Stamp, nullable=True),
        sa.Column("current", Json, nullable=False),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("parent_run_id", sa.String(36), nullable=True),
        sa.Column("fork_seq", sa.Integer(), nullable=True),
        sa.Column("created_at", Stamp, nullable=False),
        sa.Column("updated_at", Stamp, nullable=False),
        sa.Column("finished_at", Stamp, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_runs"),
        sa.UniqueConstraint("namespace", "request_id", name="uq_runs_namespace_request_id"),
    )
    op.create_index("ix_runs_status_updated_at", "runs", ["status", "updated_at"])
    op.create_table(
        "events",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("type", sa.String(50), nullable=False),
        sa.Column("data", Json, nullable=False),
        sa.Column("outcome", Json, nullable=False),
        sa.Column("at", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_events"),
        sa.UniqueConstraint("run_id", "seq", name="uq_events_run_id_seq"),
    )
    op.create_table(
        "snapshots",
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("format", sa.Integer(), nullable=False),
        sa.Column("codec", sa.String(20), nullable=False),
        sa.Column("body", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", Stamp, nullable=False),
        sa.PrimaryKeyConstraint("run_id", "seq", name="pk_snapshots"),
    )
    op.create_table(
        "node_executions",
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("node", sa.String(200), nullable=False),
        sa.Column("iteration", sa.Integer(), nullable=False),
        sa.Column("phase", sa.String(20), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("worker", sa.String(200), nullable=True),
        sa.Column("dispatched_at", Stamp, nullable=False),
        sa.Column("finished_at", Stamp, nullable=True),
        sa.Column("duration_s", sa.Float(), nullable=True),
        sa.Column("result", Json, nullable=True),
        sa.Column("error_class", sa.String(20), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("run_id", "node", "iteration", "phase", name="pk_node_executions"),
    )
    op.create_index(
        "ix_node_executions_status_dispatched_at", "node_executions", ["status", "dispatched_at"]
    )
    op.create_table(
        "outbox",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("topic", sa.String(50), nullable=False),
        sa.Column("payload", Json, nullable=False),
        sa.Column("created_at", Stamp, nullable=False),
        sa.Column("sent_at", Stamp, nullable=True),
        sa.Column("publishes", sa.Integer(), server_default="0", nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_outbox"),
    )
    op.create_index(
        "ix_outbox_unsent",
        "outbox",
        ["created_at"],
        postgresql_where=sa.text("sent_at IS NULL"),
        sqlite_where=sa.text("sent_at IS NULL"),
    )
    op.create_table(
        "timers",
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("timer_id", sa.String(300), nullable=False),
        sa.Column("due_at", Stamp, nullable=False),
        sa.Column("fired_at", Stamp, nullable=True),
        sa.PrimaryKeyConstraint("run_id", "timer_id", name="pk_timers"),
    )
    op.create_index(
        "ix_timers_due",
        "timers",
        ["due_at"],
        postgresql_where=sa.text("fired_at IS NULL"),
        sqlite_where=sa.text("fired_at IS NULL"),
    )


def downgrade() -> None:
    for table in (
        "timers",
        "outbox",
        "node_executions",
        "snapshots",
        "events",
        "runs",
        "workflows",
    ):
        op.drop_table(table)
