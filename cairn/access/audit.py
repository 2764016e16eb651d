"""The audit log: every privileged action — a write through the API, the CLI, the Python
client or the broker; a key created, rotated or revoked; the audit log read — with who
did it (the actor, ``<kind>:<name>``), what and on what, from where, when (the database's
clock), and how it ended: ``ok``, ``refused`` (not allowed: 401, 403) or ``failed``
(allowed, and it did not happen: a conflict, a bad request).

Refusals of no principal at all (no key, a wrong key) are recorded too, as the actor
``anonymous``, at most one entry per source and reason a minute (the rest counted into
it): a stranger hammering the door must not fill the table.

An entry is written in a transaction of its own, after the action: the action's own
events already carry its actor, so a process dying between the two loses only the
audit line, never who did what to a run.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cairn.model.principals import Principal
from cairn.store.sql import Store

log = logging.getLogger(__name__)

ANONYMOUS = "anonymous"
# The namespace of entries that belong to none (a request with no principal): every
# namespace's admins see them.
NO_NAMESPACE = "*"
THROTTLE_S = 60.0


@dataclass(frozen=True)
class Entry:
    """One action, as the audit log keeps it."""

    action: str  # "run.cancel", "key.create", "auth", ...
    outcome: str  # "ok", "refused", "failed"
    namespace: str
    actor: str
    kind: str
    target: str | None = None
    source: str | None = None  # a client address, "cli@host", "broker"
    status: int | None = None  # the HTTP status, for requests
    detail: Mapping[str, Any] | None = None

    @classmethod
    def by(
        cls,
        principal: Principal,
        action: str,
        outcome: str,
        *,
        namespace: str | None = None,
        **more: Any,
    ) -> Entry:
        """``principal``'s entry, in its namespace (or ``namespace``: a principal of every
        namespace, ``db:``, acts in one at a time)."""
        return cls(
            action,
            outcome,
            namespace or principal.namespace,
            principal.actor,
            principal.kind,
            **more,
        )

    def row(self) -> dict[str, Any]:
        return {
            "namespace": self.namespace,
            "actor": self.actor[:300],
            "kind": self.kind,
            "action": self.action[:100],
            "target": None if self.target is None else self.target[:300],
            "source": None if self.source is None else self.source[:300],
            "outcome": self.outcome,
            "status": self.status,
            "detail": dict(self.detail) if self.detail is not None else None,
        }


@dataclass
class Audit:
    """Writes entries (see the module's docstring)."""

    store: Store
    _refusals: dict[tuple[str, str], tuple[float, int]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, entry: Entry) -> None:
        """Append ``entry`` (never raises: the action happened, or was refused, either
        way; a lost entry is logged)."""
        try:
            with self.store.transaction() as tx:
                tx.audit(entry.row())
        except Exception:
            log.error("could not write the audit entry %s", entry, exc_info=True)

    def refused_anonymous(self, reason: str, source: str | None, status: int) -> None:
        """A request with no valid principal was refused (throttled per source)."""
        key = (source or "?", reason)
        now = time.monotonic()
        with self._lock:
            last, suppressed = self._refusals.get(key, (0.0, 0))
            if now - last < THROTTLE_S:
                self._refusals[key] = (last, suppressed + 1)
                return
            self._refusals[key] = (now, 0)
            if len(self._refusals) > 10_000:  # a spray of sources: forget the old ones
                self._refusals = {k: v for k, v in self._refusals.items() if now - v[0] < 60}
        detail = {"reason": reason, **({"repeated": suppressed} if suppressed else {})}
        self.record(
            Entry(
                "auth",
                "refused",
                NO_NAMESPACE,
                ANONYMOUS,
                ANONYMOUS,
                source=source,
                status=status,
                detail=detail,
            )
        )
