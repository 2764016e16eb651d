"""Executions waiting for a concurrency slot: parked here — no worker, no lease, no
broker message — until a slot of their pool frees and they are published again.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-02

A row per waiting execution (its key), the pool it waits on and that pool's limit, its
run's priority and since when it waits. Woken in order of priority, then age: a woken
row stays (``woken_at``) until its execution has its slot, so that what is on its way to
a worker counts against the pool — and is woken again if its message was lost. The slots
themselves are Redis's (``cairn:slots:<pool>``, held by node leases); PostgreSQL keeps
who waits, so a waiter survives any restart.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "slot_waits",
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("node", sa.String(200), nullable=False),
        sa.Column("iteration", sa.Integer(), nullable=False),
        sa.Column("phase", sa.String(20), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("namespace", sa.String(100), nullable=False),
        sa.Column("pool", sa.String(400), nullable=False),
        sa.Column("pool_limit", sa.Integer(), nullable=False),
        sa.Column("priority", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("waiting_since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("woken_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("queue", sa.String(64), nullable=True),
        sa.PrimaryKeyConstraint("run_id", "node", "iteration", "phase", name="pk_slot_waits"),
    )
    op.create_index("ix_slot_waits_pool_order", "slot_waits", ["pool", "priority", "waiting_since"])


def downgrade() -> None:
    op.drop_index("ix_slot_waits_pool_order", table_name="slot_waits")
    op.drop_table("slot_waits")
