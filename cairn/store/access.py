"""Principals, their API keys and the audit log (migration 0019): the statements, and
the records they read."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, select, update

from cairn.store.base import TxBase
from cairn.store.records import to_epoch
from cairn.store.schema_access import api_keys, audit_log, principals


@dataclass(frozen=True)
class PrincipalRecord:
    id: str
    namespace: str
    name: str
    kind: str
    role: str
    payloads: bool
    created_at: float
    created_by: str

    @classmethod
    def of(cls, row: Any) -> PrincipalRecord:
        return cls(
            row.id,
            row.namespace,
            row.name,
            row.kind,
            row.role,
            bool(row.payloads),
            to_epoch(row.created_at),
            row.created_by,
        )


@dataclass(frozen=True)
class KeyRecord:
    """An API key as stored: its id, the digest of its secret, its principal."""

    id: str
    digest: bytes
    principal: PrincipalRecord
    created_at: float
    expires_at: float | None
    revoked_at: float | None


@dataclass(frozen=True)
class AuditRecord:
    id: int
    at: float
    namespace: str
    actor: str
    kind: str
    action: str
    target: str | None
    source: str | None
    outcome: str
    status: int | None
    detail: Mapping[str, Any] | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "at": self.at,
            "namespace": self.namespace,
            "actor": self.actor,
            "kind": self.kind,
            "action": self.action,
            "target": self.target,
            "source": self.source,
            "outcome": self.outcome,
            "status": self.status,
            "detail": dict(self.detail) if self.detail is not None else None,
        }


def _epoch(stamp: datetime | None) -> float | None:
    return None if stamp is None else to_epoch(stamp)


class AccessTx(TxBase):
    """The principals, api_keys and audit_log tables."""

    # -- principals and keys --------------------------------------------------------------

    def add_principal(self, values: Mapping[str, Any]) -> bool:
        """Insert a principal (``values``: its row but the time); False if its namespace
        has one of that name already."""
        row = {**values, "created_at": self.stamp()}
        inserted = self.connection.execute(
            self._insert(principals).values(**row).on_conflict_do_nothing()
        )
        return bool(inserted.rowcount)

    def principal_named(self, namespace: str, name: str) -> PrincipalRecord | None:
        row = self.connection.execute(
            select(principals).where(principals.c.namespace == namespace, principals.c.name == name)
        ).first()
        return None if row is None else PrincipalRecord.of(row)

    def principals_of(self, namespace: str) -> list[PrincipalRecord]:
        rows = self.connection.execute(
            select(principals)
            .where(principals.c.namespace == namespace)
            .order_by(principals.c.name)
        )
        return [PrincipalRecord.of(row) for row in rows]

    def add_key(self, key_id: str, principal_id: str, digest: bytes, expires_at: Any) -> None:
        self.connection.execute(
            api_keys.insert().values(
                id=key_id,
                principal_id=principal_id,
                digest=digest,
                created_at=self.stamp(),
                expires_at=expires_at,
            )
        )

    def key(self, key_id: str) -> KeyRecord | None:
        """Key ``key_id`` with its principal (one statement: each request reads it)."""
        row = self.connection.execute(
            select(
                api_keys.c.id.label("key_id"),
                api_keys.c.digest,
                api_keys.c.created_at.label("key_created_at"),
                api_keys.c.expires_at,
                api_keys.c.revoked_at,
                principals,
            )
            .join(principals, principals.c.id == api_keys.c.principal_id)
            .where(api_keys.c.id == key_id)
        ).first()
        return None if row is None else _key(row)

    def keys_of(self, namespace: str) -> list[KeyRecord]:
        rows = self.connection.execute(
            select(
                api_keys.c.id.label("key_id"),
                api_keys.c.digest,
                api_keys.c.created_at.label("key_created_at"),
                api_keys.c.expires_at,
                api_keys.c.revoked_at,
                principals,
            )
            .join(principals, principals.c.id == api_keys.c.principal_id)
            .where(principals.c.namespace == namespace)
            .order_by(principals.c.name, api_keys.c.created_at)
        )
        return [_key(row) for row in rows]

    def revoke_key(self, key_id: str, namespace: str, *, at: Any = None) -> bool:
        """Key ``key_id`` of ``namespace`` stops working (at ``at``, a database time;
        None: now); False if there is no such unrevoked key."""
        owned = select(principals.c.id).where(principals.c.namespace == namespace)
        done = self.connection.execute(
            update(api_keys)
            .where(
                api_keys.c.id == key_id,
                api_keys.c.revoked_at.is_(None),
                api_keys.c.principal_id.in_(owned.scalar_subquery()),
            )
            .values(revoked_at=self.stamp() if at is None else at)
        )
        return bool(done.rowcount)

    # -- the audit log ----------------------------------------------------------------------

    def audit(self, entry: Mapping[str, Any]) -> None:
        """Append one entry (``entry``: its row but the id and the time)."""
        self.connection.execute(audit_log.insert().values(**entry, at=self.stamp()))

    def audit_entries(
        self,
        namespace: str,
        *,
        after: int = 0,
        limit: int = 100,
        since: datetime | None = None,
        until: datetime | None = None,
        filters: Mapping[str, str] | None = None,
    ) -> list[AuditRecord]:
        """The entries of ``namespace`` and of none (``*``: refusals of no principal)
        after id ``after``, oldest first; ``filters`` on ``actor``, ``action``,
        ``outcome``, ``target`` (equal)."""
        where = [audit_log.c.namespace.in_((namespace, "*")), audit_log.c.id > after]
        if since is not None:
            where.append(audit_log.c.at >= since)
        if until is not None:
            where.append(audit_log.c.at < until)
        for name, value in (filters or {}).items():
            where.append(audit_log.c[name] == value)
        rows = self.connection.execute(
            select(audit_log).where(and_(*where)).order_by(audit_log.c.id).limit(limit)
        )
        return [
            AuditRecord(
                row.id,
                to_epoch(row.at),
                row.namespace,
                row.actor,
                row.kind,
                row.action,
                row.target,
                row.source,
                row.outcome,
                row.status,
                row.detail,
            )
            for row in rows
        ]

    def audit_count(self, namespace: str) -> int:
        found = self.connection.execute(
            select(func.count()).select_from(audit_log).where(audit_log.c.namespace == namespace)
        ).scalar()
        return int(found or 0)


def _key(row: Any) -> KeyRecord:
    return KeyRecord(
        row.key_id,
        bytes(row.digest),
        PrincipalRecord.of(row),
        to_epoch(row.key_created_at),
        _epoch(row.expires_at),
        _epoch(row.revoked_at),
    )
