"""Who may do what, as stored: principals and their API keys, the audit log (migration
0019), and the console's signed-in sessions (migration 0023). Declared on
:data:`~cairn.store.schema.metadata`; that module imports this one last."""

from __future__ import annotations

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
    UniqueConstraint,
)

from cairn.store.schema import BigId, Json, metadata

ROLES = "role IN ('viewer', 'approver', 'operator', 'admin')"


# A principal an admin created (migration 0019): a name in a namespace, a role, and
# whether it may read payloads. Its API keys are in ``api_keys``.
principals = Table(
    "principals",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("namespace", String(100), nullable=False),
    Column("name", String(200), nullable=False),
    Column("kind", String(20), nullable=False),
    Column("role", String(20), nullable=False),
    Column("payloads", Boolean, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("created_by", String(300), nullable=False),
    UniqueConstraint("namespace", "name"),
    CheckConstraint(ROLES, name="role"),
)


# An API key (migration 0019): its public id, the SHA-256 of its secret — never the
# secret — its principal, and when it stops working.
api_keys = Table(
    "api_keys",
    metadata,
    Column("id", String(40), primary_key=True),
    Column("principal_id", String(36), nullable=False),
    Column("digest", LargeBinary, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True)),
    Column("revoked_at", DateTime(timezone=True)),
    Index("ix_api_keys_principal_id", "principal_id"),
)


# The audit log (migration 0019): every privileged action — who, what, on what, from
# where, when, and how it ended — refusals included. Append-only.
audit_log = Table(
    "audit_log",
    metadata,
    Column("id", BigId, primary_key=True, autoincrement=True),
    Column("at", DateTime(timezone=True), nullable=False),
    Column("namespace", String(100), nullable=False),
    Column("actor", String(300), nullable=False),
    Column("kind", String(20), nullable=False),  # the principal's kind
    Column("action", String(100), nullable=False),
    Column("target", String(300)),
    Column("source", String(300)),
    Column("outcome", String(20), nullable=False),
    Column("status", Integer),
    Column("detail", Json),
    CheckConstraint("outcome IN ('ok', 'refused', 'failed')", name="outcome"),
    Index("ix_audit_log_namespace_at", "namespace", "at"),
    Index("ix_audit_log_at", "at"),
)


# A console session (migration 0023): the SHA-256 of its token — never the token —
# the principal it was started for, and when it ends. Deleted at sign-out.
console_sessions = Table(
    "console_sessions",
    metadata,
    Column("digest", LargeBinary, primary_key=True),
    Column("namespace", String(100), nullable=False),
    Column("name", String(200), nullable=False),
    Column("kind", String(20), nullable=False),
    Column("role", String(20), nullable=False),
    Column("payloads", Boolean, nullable=False),
    Column("key_id", String(40)),  # the key it signed in with
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    CheckConstraint(ROLES, name="role"),
    Index("ix_console_sessions_expires_at", "expires_at"),
)


# A sign-in through OpenID Connect under way: its secrets, kept until the callback.
console_logins = Table(
    "console_logins",
    metadata,
    Column("digest", LargeBinary, primary_key=True),
    Column("login", Text, nullable=False),  # JSON: state, nonce, code_verifier, started_at
    Column("expires_at", DateTime(timezone=True), nullable=False),
)
