"""Model calls recorded as a node makes them: each completed call of ``ctx.model(...)``,
its request by reference — the messages it sent are stored once each, content-addressed,
and a call names their digests — and its response, usage and latency.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-01

A conversation of n calls stores each message once (O(n)), not the whole history with
every call (O(n^2)). A call row is written while its execution is unfinished at the
writer's attempt and no newer claim has taken it over, and kept with the run: it is what
a re-execution, a replay and a dry-run fork answer from.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0013"
down_revision = "0012"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "model_messages",
        sa.Column("digest", sa.String(64), nullable=False),
        sa.Column("body", JSON, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("digest", name="pk_model_messages"),
    )
    op.create_table(
        "model_calls",
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("node", sa.String(200), nullable=False),
        sa.Column("iteration", sa.Integer(), nullable=False),
        sa.Column("phase", sa.String(20), nullable=False),
        sa.Column("call_index", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("fence", sa.Integer(), nullable=False),
        sa.Column("provider", sa.String(40), nullable=False),
        sa.Column("operation", sa.String(80), nullable=False),
        sa.Column("model", sa.String(200), nullable=True),
        sa.Column("params", JSON, nullable=False),
        sa.Column("messages", JSON, nullable=False),
        sa.Column("response", JSON, nullable=False),
        sa.Column("usage", JSON, nullable=True),
        sa.Column("latency_s", sa.Float(), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint(
            "run_id", "node", "iteration", "phase", "call_index", name="pk_model_calls"
        ),
    )


def downgrade() -> None:
    op.drop_table("model_calls")
    op.drop_table("model_messages")
