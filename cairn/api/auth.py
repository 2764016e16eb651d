"""API keys: bearer tokens, each scoped to one namespace (tenant).

Keys come from ``CAIRN_API_KEYS`` ("namespace:key,...") and ``CAIRN_API_KEYS_FILE`` (one
"namespace:key" a line), read once when the app is built. A request's key is compared
with every configured key in constant time, always all of them, so neither the time of
a refusal nor of an acceptance tells an attacker how much of a key was right or which
key matched.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable
from dataclasses import dataclass

from cairn.config import Settings
from cairn.config.secrets import namespaced, secret_lines
from cairn.errors import CairnError, ConfigError

MIN_KEY_LENGTH = 16


class Unauthorized(CairnError):
    code = "unauthorized"


@dataclass(frozen=True)
class ApiKeys:
    """The configured keys, kept as SHA-256 digests: equal-length inputs for
    :func:`hmac.compare_digest`, and no plain key left lying in the app's state."""

    entries: tuple[tuple[bytes, str], ...]  # (sha256 of the key, namespace)

    @classmethod
    def from_settings(cls, settings: Settings) -> ApiKeys:
        return cls.parse(
            secret_lines(
                settings.api_keys, "CAIRN_API_KEYS", settings.api_keys_file, "CAIRN_API_KEYS_FILE"
            )
        )

    @classmethod
    def parse(cls, lines: Iterable[tuple[str, str]]) -> ApiKeys:
        entries: dict[bytes, str] = {}
        for namespace, key, source in namespaced(lines, "key", MIN_KEY_LENGTH):
            digest = _digest(key)
            if entries.get(digest, namespace) != namespace:
                raise ConfigError(f"{source}: one key is given to two namespaces")
            entries[digest] = namespace
        return cls(tuple(entries.items()))

    def __len__(self) -> int:
        return len(self.entries)

    def namespace_of(self, authorization: str | None) -> str:
        """The namespace of the bearer key in an ``Authorization`` header; raise
        :class:`Unauthorized` for none, a malformed one, or a wrong one."""
        scheme, _, token = (authorization or "").partition(" ")
        token = token.strip()
        if scheme.lower() != "bearer" or not token:
            raise Unauthorized("an API key is required: Authorization: Bearer <key>")
        digest = _digest(token)
        found: str | None = None
        for known, namespace in self.entries:  # no early exit: see the module docstring
            if hmac.compare_digest(known, digest):
                found = namespace
        if found is None:
            raise Unauthorized("the API key is not valid")
        return found


def _digest(key: str) -> bytes:
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).digest()
