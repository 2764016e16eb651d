"""The console's sessions (migration 0023): started for a principal, found by the digest
of their token, ended at sign-out, swept once expired; and the OpenID Connect logins
under way, each taken once by its callback. Times are the database's."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, select

from cairn.store.base import TxBase
from cairn.store.records import from_epoch, to_epoch
from cairn.store.schema_access import console_logins, console_sessions


@dataclass(frozen=True)
class SessionRecord:
    """A live session: the principal it stands for, and when it ends."""

    namespace: str
    name: str
    kind: str
    role: str
    payloads: bool
    key_id: str | None
    created_at: float
    expires_at: float


class SessionsTx(TxBase):
    """The console_sessions table."""

    def add_session(self, digest: bytes, principal: dict[str, Any], lifetime_s: float) -> float:
        """A session of ``principal`` (namespace, name, kind, role, payloads, key_id) that
        ends ``lifetime_s`` from now; its end, in epoch seconds."""
        now = self.now()
        expires_at = now + lifetime_s
        self.connection.execute(
            console_sessions.insert().values(
                digest=digest,
                created_at=from_epoch(now),
                expires_at=from_epoch(expires_at),
                **principal,
            )
        )
        return expires_at

    def session(self, digest: bytes) -> SessionRecord | None:
        """The session of ``digest``, if it has not expired."""
        row = self.connection.execute(
            select(console_sessions).where(
                console_sessions.c.digest == digest,
                console_sessions.c.expires_at > from_epoch(self.now()),
            )
        ).first()
        if row is None:
            return None
        return SessionRecord(
            row.namespace,
            row.name,
            row.kind,
            row.role,
            bool(row.payloads),
            row.key_id,
            to_epoch(row.created_at),
            to_epoch(row.expires_at),
        )

    def end_session(self, digest: bytes) -> bool:
        done = self.connection.execute(
            delete(console_sessions).where(console_sessions.c.digest == digest)
        )
        return bool(done.rowcount)

    def sweep_sessions(self) -> int:
        """Delete the expired sessions; how many."""
        done = self.connection.execute(
            delete(console_sessions).where(console_sessions.c.expires_at <= from_epoch(self.now()))
        )
        return int(done.rowcount or 0)

    def add_login(self, digest: bytes, login: dict[str, Any], lifetime_s: float) -> None:
        """Keep an OpenID Connect login's secrets for ``lifetime_s``, under ``digest``."""
        now = self.now()
        self.connection.execute(
            delete(console_logins).where(console_logins.c.expires_at <= from_epoch(now))
        )
        self.connection.execute(
            console_logins.insert().values(
                digest=digest,
                login=json.dumps(login),
                expires_at=from_epoch(now + lifetime_s),
            )
        )

    def take_login(self, digest: bytes) -> dict[str, Any] | None:
        """The login kept under ``digest``, deleted as it is read: a callback gets it once
        (None: never begun, taken already, or expired)."""
        row = self.connection.execute(
            delete(console_logins)
            .where(console_logins.c.digest == digest)
            .returning(console_logins.c.login, console_logins.c.expires_at)
        ).first()
        if row is None or to_epoch(row.expires_at) <= self.now():
            return None
        found: dict[str, Any] = json.loads(row.login)
        return found
