"""The effects ledger: one row per external side effect, by its business key.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30

A node may run more than once (a retry, a recovery, a replay); a card must be charged
once. Before calling the outside world, a node records its intent here under a key the
workflow chose ("order-123:charge"); after the call, the outcome. A key already applied
returns the recorded result without calling; a key left in ``intent`` by a crash is
resolved by asking the external system (the reconciler's adapter) before any retry.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
Stamp = sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "effects",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("namespace", sa.String(100), nullable=False),
        sa.Column("key", sa.String(500), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("node", sa.String(200), nullable=False),
        sa.Column("iteration", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("fence", sa.Integer(), server_default="0", nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
        sa.Column("calls", sa.Integer(), server_default="0", nullable=False),
        sa.Column("result", Json, nullable=True),
        sa.Column("digest", sa.String(64), nullable=True),
        sa.Column("error_class", sa.String(20), nullable=True),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("policy", sa.String(20), server_default="flag", nullable=False),
        sa.Column("compensate", sa.String(300), nullable=True),
        sa.Column("created_at", Stamp, nullable=False),
        sa.Column("updated_at", Stamp, nullable=False),
        sa.Column("applied_at", Stamp, nullable=True),
        sa.Column("checked_at", Stamp, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_effects"),
        sa.UniqueConstraint("namespace", "key", name="uq_effects_namespace_key"),
    )
    op.create_index("ix_effects_status_updated_at", "effects", ["status", "updated_at"])
    op.create_index("ix_effects_run_id", "effects", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_effects_run_id", table_name="effects")
    op.drop_index("ix_effects_status_updated_at", table_name="effects")
    op.drop_table("effects")
