"""Principals, API keys and the audit log (docs/access.md).

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-03

``principals``: who may act, by name within a namespace, with a role (viewer, approver,
operator, admin) and whether it may read payloads. ``api_keys``: a principal's keys —
a public id and the SHA-256 of the secret, never the secret — each revocable and
expiring on its own, read on every request (no restart to revoke). ``audit_log``: every
privileged action, refusals included: when (the database's clock), the actor
(``<kind>:<name>``), the action, its target, where it came from, how it ended.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None

JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")
STAMP = sa.DateTime(timezone=True)
ROLES = "role IN ('viewer', 'approver', 'operator', 'admin')"


def upgrade() -> None:
    op.create_table(
        "principals",
        sa.Column("id", sa.String(36), nullable=False),
        sa.Column("namespace", sa.String(100), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("role", sa.String(20), nullable=False),
        sa.Column("payloads", sa.Boolean(), nullable=False),
        sa.Column("created_at", STAMP, nullable=False),
        sa.Column("created_by", sa.String(300), nullable=False),
        sa.PrimaryKeyConstraint("id", name="pk_principals"),
        sa.UniqueConstraint("namespace", "name", name="uq_principals_namespace_name"),
        sa.CheckConstraint(ROLES, name=op.f("ck_principals_role")),
    )
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("principal_id", sa.String(36), nullable=False),
        sa.Column("digest", sa.LargeBinary(), nullable=False),
        sa.Column("created_at", STAMP, nullable=False),
        sa.Column("expires_at", STAMP, nullable=True),
        sa.Column("revoked_at", STAMP, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_api_keys"),
    )
    op.create_index("ix_api_keys_principal_id", "api_keys", ["principal_id"])
    op.create_table(
        "audit_log",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("at", STAMP, nullable=False),
        sa.Column("namespace", sa.String(100), nullable=False),
        sa.Column("actor", sa.String(300), nullable=False),
        sa.Column("kind", sa.String(20), nullable=False),
        sa.Column("action", sa.String(100), nullable=False),
        sa.Column("target", sa.String(300), nullable=True),
        sa.Column("source", sa.String(300), nullable=True),
        sa.Column("outcome", sa.String(20), nullable=False),
        sa.Column("status", sa.Integer(), nullable=True),
        sa.Column("detail", JSON, nullable=True),
        sa.PrimaryKeyConstraint("id", name="pk_audit_log"),
        sa.CheckConstraint(
            "outcome IN ('ok', 'refused', 'failed')", name=op.f("ck_audit_log_outcome")
        ),
    )
    op.create_index("ix_audit_log_namespace_at", "audit_log", ["namespace", "at"])
    op.create_index("ix_audit_log_at", "audit_log", ["at"])


def downgrade() -> None:
    op.drop_table("audit_log")
    op.drop_table("api_keys")
    op.drop_table("principals")
