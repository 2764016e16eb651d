"""A request's ``Authorization: Bearer <key>``, authenticated into a principal.

Two kinds of key are known:

- **minted keys** (``cairn keys create``, ``POST /v1/principals/{name}/keys``): found by
  their public id in ``api_keys``, their secret compared by SHA-256 in constant time,
  refused once revoked or expired — read from the database (and kept at most
  ``cache_s`` seconds), so a revocation needs no restart;
- **bootstrap keys** from ``CAIRN_API_KEYS`` / ``CAIRN_API_KEYS_FILE``
  (``namespace:key``): each an admin of its namespace that may read payloads, named
  ``config-<10 hex digits>`` (:func:`config_key_name`); compared with every configured
  key in constant time, always all of them, so neither the time of a refusal nor of an
  acceptance tells how much of a key was right or which matched.

The key is compared **exactly as sent**: only the ASCII spaces RFC 7235 puts between the
scheme and the credentials are skipped — a no-break space or a NEL after a valid key
makes it another key, refused.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from cairn.access.tokens import digest, split
from cairn.config import Settings
from cairn.config.secrets import namespaced, secret_lines
from cairn.errors import CairnError, ConfigError, Forbidden
from cairn.model.principals import Principal, PrincipalKind, Role
from cairn.store.access import KeyRecord
from cairn.store.sql import Store

MIN_KEY_LENGTH = 16


class Unauthorized(CairnError):
    code = "unauthorized"


@dataclass(frozen=True)
class ConfigKeys:
    """The bootstrap keys, kept as SHA-256 digests: equal-length inputs for
    :func:`hmac.compare_digest`, and no plain key left in the process's state."""

    entries: tuple[tuple[bytes, str], ...]  # (sha256 of the key, namespace)

    @classmethod
    def from_settings(cls, settings: Settings) -> ConfigKeys:
        return cls.parse(
            secret_lines(
                settings.api_keys, "CAIRN_API_KEYS", settings.api_keys_file, "CAIRN_API_KEYS_FILE"
            )
        )

    @classmethod
    def parse(cls, lines: Iterable[tuple[str, str]]) -> ConfigKeys:
        entries: dict[bytes, str] = {}
        for namespace, key, source in namespaced(lines, "key", MIN_KEY_LENGTH):
            found = digest(key)
            if entries.get(found, namespace) != namespace:
                raise ConfigError(f"{source}: one key is given to two namespaces")
            entries[found] = namespace
        return cls(tuple(entries.items()))

    def __len__(self) -> int:
        return len(self.entries)

    def principal(self, token: str) -> Principal | None:
        found = digest(token)
        namespace: str | None = None
        for known, owner in self.entries:  # no early exit: see the module docstring
            if hmac.compare_digest(known, found):
                namespace = owner
        if namespace is None:
            return None
        return Principal(
            config_key_name(token), namespace, Role.ADMIN, PrincipalKind.KEY, payloads=True
        )


def config_key_name(key: str) -> str:
    """A bootstrap key's principal's name: ``config-`` and 10 hex digits of a hash of a
    hash of the key (it names the key in the log without saying anything of it)."""
    return f"config-{hashlib.sha256(digest(key)).hexdigest()[:10]}"


def bearer_token(authorization: str | None) -> str:
    """The credentials of a ``Bearer`` header, exactly as sent; :class:`Unauthorized`
    for none or another scheme."""
    scheme, _, rest = (authorization or "").partition(" ")
    token = rest.lstrip(" ")  # RFC 7235: one or more SP; nothing else is skipped
    if scheme.lower() != "bearer" or not token:
        raise Unauthorized("an API key is required: Authorization: Bearer <key>")
    return token


class Authenticator:
    """Keys to principals (see the module's docstring)."""

    def __init__(
        self,
        store: Store,
        config: ConfigKeys,
        *,
        cache_s: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.config = config
        self.cache_s = cache_s
        # What a key's expiry and revocation (database times) are compared with.
        self.clock = clock
        self._cache: dict[str, tuple[float, KeyRecord]] = {}
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, store: Store, settings: Settings) -> Authenticator:
        return cls(store, ConfigKeys.from_settings(settings), cache_s=settings.api_key_cache_s)

    def principal(self, authorization: str | None) -> Principal:
        """The principal of a request's ``Authorization`` header, or :class:`Unauthorized`."""
        token = bearer_token(authorization)
        minted = split(token)
        found = self._minted(*minted) if minted is not None else self.config.principal(token)
        if found is None:
            raise Unauthorized("the API key is not valid")
        return found

    def _minted(self, key_id: str, secret: str) -> Principal | None:
        record = self._record(key_id)
        if record is None or not hmac.compare_digest(record.digest, digest(secret)):
            return None
        now = self.clock()
        if record.revoked_at is not None and record.revoked_at <= now:
            return None
        if record.expires_at is not None and record.expires_at <= now:
            return None
        who = record.principal
        return Principal(
            who.name,
            who.namespace,
            Role(who.role),
            PrincipalKind(who.kind),
            payloads=who.payloads,
            key_id=record.id,
        )

    def works(self, key_id: str) -> bool:
        """Whether minted key ``key_id`` still works (not revoked, not expired): a
        console session signed in with it ends when it stops."""
        record = self._record(key_id)
        now = self.clock()
        return not (
            record is None
            or (record.revoked_at is not None and record.revoked_at <= now)
            or (record.expires_at is not None and record.expires_at <= now)
        )

    def _record(self, key_id: str) -> KeyRecord | None:
        with self._lock:
            cached = self._cache.get(key_id)
        if cached is not None and time.monotonic() - cached[0] < self.cache_s:
            return cached[1]
        with self.store.reading() as tx:
            record = tx.key(key_id)
        if record is not None:
            with self._lock:
                self._cache[key_id] = (time.monotonic(), record)
        return record

    def forget(self, key_id: str) -> None:
        """Read the key again next time (this process revoked or rotated it)."""
        with self._lock:
            self._cache.pop(key_id, None)


__all__ = [
    "Authenticator",
    "ConfigKeys",
    "Forbidden",
    "Unauthorized",
    "bearer_token",
    "config_key_name",
]
