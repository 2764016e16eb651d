"""The principals of writes that do not come through the API, and so present no key:

- ``db:<user>`` — the CLI and the Python client, writing to the database directly. Who
  holds the database's credentials may do anything cairn can; the name is the operating
  system's user running it, and every entry says so (``kind: db``). Operators without
  those credentials use the CLI's remote mode (``CAIRN_API_URL`` and a key).
- ``broker:<name>`` — runs submitted through the broker's submit tasks, accepted into
  one namespace only as an admin configured it (``CAIRN_BROKER_SUBMIT=name@namespace``);
  the message's own claims about where it belongs are not believed.
"""

from __future__ import annotations

import getpass
import re
import socket
from collections.abc import Iterator
from contextlib import contextmanager

from cairn.access.audit import Audit, Entry
from cairn.config import Settings
from cairn.errors import ConfigError
from cairn.model.principals import Principal, PrincipalKind, Role
from cairn.store.sql import Store

ANY_NAMESPACE = "*"
_BROKER = re.compile(r"([A-Za-z0-9][A-Za-z0-9._-]{0,99})@([A-Za-z0-9][A-Za-z0-9._-]{0,99})")


def db_principal() -> Principal:
    """The CLI's or the Python client's principal (any namespace, everything)."""
    try:
        user = getpass.getuser()
    except Exception:  # no user database entry (a container's arbitrary uid)
        user = "unknown"
    return Principal(user, ANY_NAMESPACE, Role.ADMIN, PrincipalKind.DB, payloads=True)


class LocalWrites:
    """The ``db:<user>`` principal's writes through one store: each audited as made."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.principal = db_principal()

    @property
    def actor(self) -> str:
        return self.principal.actor

    @contextmanager
    def audited(self, action: str, namespace: str, target: str | None = None) -> Iterator[None]:
        """Write the audit entry of the write made inside (``failed`` if it raises)."""
        outcome = "failed"
        try:
            yield
            outcome = "ok"
        finally:
            Audit(self.store).record(
                Entry.by(
                    self.principal,
                    action,
                    outcome,
                    namespace=namespace,
                    target=target,
                    source=f"cli@{socket.gethostname()}",
                )
            )

    @contextmanager
    def on_run(self, action: str, run_id: str) -> Iterator[None]:
        """:meth:`audited`, in the namespace of run ``run_id``."""
        with self.audited(action, self.namespace_of(run_id), run_id):
            yield

    def namespace_of(self, run_id: str) -> str:
        with self.store.reading() as tx:
            head = tx.run_head(run_id)
        return head.namespace if head is not None else ANY_NAMESPACE


def broker_principal(settings: Settings) -> Principal | None:
    """Who submits through the broker, as configured; None: nobody may."""
    if settings.broker_submit is None:
        return None
    found = _BROKER.fullmatch(settings.broker_submit.strip())
    if found is None:
        raise ConfigError(
            f"CAIRN_BROKER_SUBMIT is 'name@namespace', not {settings.broker_submit!r}"
        )
    name, namespace = found.groups()
    return Principal(name, namespace, Role.OPERATOR, PrincipalKind.BROKER)
