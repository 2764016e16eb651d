"""Who may do what, as stored: principals and their API keys, the audit log (migration
0019), and the console's signed-in sessions (migration 0023). Declared on
:class:`~cairn.store.schema.Base`, which imports this module last; import the tables
from :mod:`cairn.store.schema`."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    DateTime,
    Index,
    Integer,
    LargeBinary,
    String,
    Table,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import Mapped, mapped_column

from cairn.store.schema import Base, BigId, Json

ROLES = "role IN ('viewer', 'approver', 'operator', 'admin')"


class PrincipalRow(Base):
    """A principal an admin created (migration 0019): a name in a namespace, a role, and
    whether it may read payloads. Its API keys are in ``api_keys``."""

    __tablename__ = "principals"
    __table_args__ = (
        UniqueConstraint("namespace", "name"),
        CheckConstraint(ROLES, name="role"),
    )

    id: Mapped[str] = mapped_column(String(36), primary_key=True)
    namespace: Mapped[str] = mapped_column(String(100))
    name: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(20))
    role: Mapped[str] = mapped_column(String(20))
    payloads: Mapped[bool] = mapped_column(Boolean)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    created_by: Mapped[str] = mapped_column(String(300))


class ApiKeyRow(Base):
    """An API key (migration 0019): its public id, the SHA-256 of its secret — never the
    secret — its principal, and when it stops working."""

    __tablename__ = "api_keys"
    __table_args__ = (Index("ix_api_keys_principal_id", "principal_id"),)

    id: Mapped[str] = mapped_column(String(40), primary_key=True)
    principal_id: Mapped[str] = mapped_column(String(36))
    digest: Mapped[bytes] = mapped_column(LargeBinary)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class AuditRow(Base):
    """The audit log (migration 0019): every privileged action — who, what, on what, from
    where, when, and how it ended — refusals included. Append-only."""

    __tablename__ = "audit_log"
    __table_args__ = (
        CheckConstraint("outcome IN ('ok', 'refused', 'failed')", name="outcome"),
        Index("ix_audit_log_namespace_at", "namespace", "at"),
        Index("ix_audit_log_at", "at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    namespace: Mapped[str] = mapped_column(String(100))
    actor: Mapped[str] = mapped_column(String(300))
    kind: Mapped[str] = mapped_column(String(20))  # the principal's kind
    action: Mapped[str] = mapped_column(String(100))
    target: Mapped[str | None] = mapped_column(String(300))
    source: Mapped[str | None] = mapped_column(String(300))
    outcome: Mapped[str] = mapped_column(String(20))
    status: Mapped[int | None] = mapped_column(Integer)
    detail: Mapped[dict[str, Any] | None] = mapped_column(Json)


class ConsoleSessionRow(Base):
    """A console session (migration 0023): the SHA-256 of its token — never the token —
    the principal it was started for, and when it ends. Deleted at sign-out."""

    __tablename__ = "console_sessions"
    __table_args__ = (
        CheckConstraint(ROLES, name="role"),
        Index("ix_console_sessions_expires_at", "expires_at"),
    )

    digest: Mapped[bytes] = mapped_column(LargeBinary, primary_key=True)
    namespace: Mapped[str] = mapped_column(String(100))
    name: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(String(20))
    role: Mapped[str] = mapped_column(String(20))
    payloads: Mapped[bool] = mapped_column(Boolean)
    key_id: Mapped[str | None] = mapped_column(String(40))  # the key it signed in with
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class ConsoleLoginRow(Base):
    """A sign-in through OpenID Connect under way: its secrets, kept until the callback."""

    __tablename__ = "console_logins"

    digest: Mapped[bytes] = mapped_column(LargeBinary, primary_key=True)
    login: Mapped[str] = mapped_column(Text)  # JSON: state, nonce, code_verifier, started_at
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


principals = cast(Table, PrincipalRow.__table__)
api_keys = cast(Table, ApiKeyRow.__table__)
audit_log = cast(Table, AuditRow.__table__)
console_sessions = cast(Table, ConsoleSessionRow.__table__)
console_logins = cast(Table, ConsoleLoginRow.__table__)
