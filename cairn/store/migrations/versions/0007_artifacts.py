"""Artifacts: the registrations of content kept in the object store.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01

Large things a run produces (drafts, files, full tool responses) live in an object store,
addressed by their sha256; a row here registers each one with its version (per name, per
run) and its provenance. Two unique constraints do the bookkeeping: (run, name, version)
makes concurrent puts of one name take distinct versions, and (run, node, iteration,
name, sha256) turns the same put by a node that runs again into the registration it made
before. The sha256 index answers "does anything still reference this blob?" for cleanup.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
Json = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")


def upgrade() -> None:
    op.create_table(
        "artifacts",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("run_id", sa.String(36), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("size", sa.BigInteger(), nullable=False),
        sa.Column("uri", sa.Text(), nullable=False),
        sa.Column("node", sa.String(200), nullable=False),
        sa.Column("iteration", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("phase", sa.String(20), nullable=False),
        sa.Column("call_id", sa.String(200), nullable=False),
        sa.Column("model", sa.String(200), nullable=True),
        sa.Column("tool", sa.String(200), nullable=True),
        sa.Column("params", Json, nullable=True),
        sa.Column("meta", Json, nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_artifacts"),
        sa.UniqueConstraint("run_id", "name", "version", name="uq_artifacts_run_id_name_version"),
        sa.UniqueConstraint(
            "run_id",
            "node",
            "iteration",
            "name",
            "sha256",
            name="uq_artifacts_run_id_node_iteration_name_sha256",
        ),
    )
    op.create_index("ix_artifacts_sha256", "artifacts", ["sha256"])


def downgrade() -> None:
    op.drop_index("ix_artifacts_sha256", table_name="artifacts")
    op.drop_table("artifacts")
