"""Flow control: schedules, debounce windows and singleton keys.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-03

``schedules``: a cron schedule per (namespace, name) — what it starts (workflow,
version, input), its cron expression and time zone, its overlap policy, catch-up window
and jitter — and where its ticks stand: ``ticks_from`` (ticks after it are still to
come), ``next_at`` (when a scheduler should look next; null once the expression has no
more ticks), the tick a ``buffer_one`` schedule holds, the last tick started and its run.
Each tick's run has a request id derived from the tick, so a tick starts once however
many schedulers look.

``debounces``: the pending run a debounce key (per namespace) collapses submissions into,
and when it starts (``due_at``: the last submission plus its wait, never past
``deadline_at``: the first plus ``max_wait``). The row is taken in the transaction that
starts the run.

``singletons``: the run a singleton key last started. A submission locks the row, so two
never both see the key free; whether the run is still unfinished is read from the run.

(0015 is another change's; this revises 0014, the newest in this tree.)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
STAMP = sa.DateTime(timezone=True)
OVERLAP = "overlap IN ('skip', 'buffer_one', 'cancel_running', 'allow')"


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("namespace", sa.String(100), nullable=False),
        sa.Column("name", sa.String(100), nullable=False),
        sa.Column("workflow", sa.String(200), nullable=False),
        sa.Column("version", sa.Integer(), nullable=True),
        sa.Column("cron", sa.String(200), nullable=False),
        sa.Column("timezone", sa.String(64), nullable=False),
        sa.Column("input", JSON, nullable=False),
        sa.Column("overlap", sa.String(20), nullable=False),
        sa.Column("catch_up_s", sa.Float(), nullable=False),
        sa.Column("jitter_s", sa.Float(), nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("ticks_from", STAMP, nullable=False),
        sa.Column("next_at", STAMP, nullable=True),
        sa.Column("buffered_at", STAMP, nullable=True),
        sa.Column("last_tick_at", STAMP, nullable=True),
        sa.Column("last_run_id", sa.String(36), nullable=True),
        sa.Column("skipped", sa.Integer(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("created_at", STAMP, nullable=False),
        sa.Column("updated_at", STAMP, nullable=False),
        sa.PrimaryKeyConstraint("namespace", "name", name="pk_schedules"),
        sa.CheckConstraint(OVERLAP, name=op.f("ck_schedules_overlap")),
    )
    op.create_index("ix_schedules_next_at", "schedules", ["next_at"])
    op.create_table(
        "debounces",
        sa.Column("namespace", sa.String(100), nullable=False),
        sa.Column("key", sa.String(200), nullable=False),
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("workflow", sa.String(200), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("first_at", STAMP, nullable=False),
        sa.Column("due_at", STAMP, nullable=False),
        sa.Column("deadline_at", STAMP, nullable=True),
        sa.Column("submissions", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint("namespace", "key", name="pk_debounces"),
    )
    op.create_index("ix_debounces_due_at", "debounces", ["due_at"])
    op.create_table(
        "singletons",
        sa.Column("namespace", sa.String(100), nullable=False),
        sa.Column("key", sa.String(200), nullable=False),
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("updated_at", STAMP, nullable=False),
        sa.PrimaryKeyConstraint("namespace", "key", name="pk_singletons"),
    )


def downgrade() -> None:
    op.drop_table("singletons")
    op.drop_index("ix_debounces_due_at", table_name="debounces")
    op.drop_table("debounces")
    op.drop_index("ix_schedules_next_at", table_name="schedules")
    op.drop_table("schedules")
