"""Principals and their API keys, as admins manage them: a principal is created with a
name, a role and whether it may read payloads; a key is minted for it (shown once:
only its digest is stored), rotated (a new key; the old one works on for a grace
period, then not), revoked. Each change is one transaction; an authenticator in another
process sees it within its cache's seconds (``CAIRN_API_KEY_CACHE_S``)."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import timedelta

from cairn.access.tokens import mint
from cairn.errors import CairnError, InvalidInput
from cairn.model.principals import Principal, PrincipalKind, Role
from cairn.store.access import KeyRecord, PrincipalRecord
from cairn.store.records import from_epoch
from cairn.store.sql import Store

# Letters, digits and . _ - @ (an e-mail address is a name): they appear in actors,
# audit lines and URLs.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._@-]{0,199}")


class PrincipalExists(CairnError):
    code = "principal_exists"


class KeyNotFound(CairnError):
    code = "key_not_found"


class PrincipalNotFound(CairnError):
    code = "principal_not_found"


@dataclass(frozen=True)
class MintedKey:
    """A new key: ``key`` is its whole text, shown this once and stored nowhere."""

    key_id: str
    key: str
    principal: str
    namespace: str
    role: str
    expires_at: float | None


def check_name(name: str) -> str:
    if not NAME.fullmatch(name):
        raise InvalidInput(
            "a principal's name is 1 to 200 letters, digits, '.', '_', '-', '@' (starting "
            f"with a letter or digit), not {name!r}"
        )
    return name


@dataclass
class KeyManager:
    store: Store

    def create_principal(
        self, namespace: str, name: str, role: Role, *, payloads: bool, by: Principal
    ) -> PrincipalRecord:
        """A new principal of ``namespace``; :class:`PrincipalExists` if the name is taken."""
        values = {
            "id": str(uuid.uuid4()),
            "namespace": namespace,
            "name": check_name(name),
            "kind": PrincipalKind.KEY.value,
            "role": Role(role).value,
            "payloads": payloads,
            "created_by": by.actor,
        }
        with self.store.transaction() as tx:
            if not tx.add_principal(values):
                raise PrincipalExists(f"namespace {namespace!r} has a principal {name!r}")
            created = tx.principal_named(namespace, name)
        assert created is not None
        return created

    def mint(self, namespace: str, name: str, *, expires_in: timedelta | None = None) -> MintedKey:
        """A new key for principal ``name`` of ``namespace``."""
        key_id, key, digest = mint()
        with self.store.transaction() as tx:
            who = tx.principal_named(namespace, name)
            if who is None:
                raise PrincipalNotFound(f"namespace {namespace!r} has no principal {name!r}")
            expires_at = (
                None if expires_in is None else from_epoch(tx.now() + expires_in.total_seconds())
            )
            tx.add_key(key_id, who.id, digest, expires_at)
        return MintedKey(
            key_id,
            key,
            who.name,
            namespace,
            who.role,
            None if expires_at is None else expires_at.timestamp(),
        )

    def rotate(self, namespace: str, key_id: str, *, grace: timedelta = timedelta(0)) -> MintedKey:
        """A new key for the principal of ``key_id``; the old one stops working after
        ``grace`` (in-flight deployments switch meanwhile)."""
        old = self._key(namespace, key_id)
        fresh = self.mint(namespace, old.principal.name)
        with self.store.transaction() as tx:
            tx.revoke_key(key_id, namespace, at=from_epoch(tx.now() + grace.total_seconds()))
        return fresh

    def revoke(self, namespace: str, key_id: str) -> None:
        with self.store.transaction() as tx:
            if not tx.revoke_key(key_id, namespace):
                raise KeyNotFound(f"namespace {namespace!r} has no working key {key_id!r}")

    def keys(self, namespace: str) -> list[KeyRecord]:
        with self.store.reading() as tx:
            return tx.keys_of(namespace)

    def _key(self, namespace: str, key_id: str) -> KeyRecord:
        with self.store.reading() as tx:
            found = tx.key(key_id)
        if found is None or found.principal.namespace != namespace or found.revoked_at:
            raise KeyNotFound(f"namespace {namespace!r} has no working key {key_id!r}")
        return found
