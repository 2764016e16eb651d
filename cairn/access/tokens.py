"""The shape of an API key cairn mints: ``cairn_<id>_<secret>`` — a public id (12
characters of base32) that finds its row, and a secret (32 random bytes, URL-safe
base64) of which only the SHA-256 is stored. A request's key is read exactly as sent."""

from __future__ import annotations

import base64
import hashlib
import re
import secrets

PREFIX = "cairn_"
_ID_LENGTH = 12
TOKEN = re.compile(r"cairn_([a-z2-7]{12})_([A-Za-z0-9_-]{43})")


def mint() -> tuple[str, str, bytes]:
    """A new key: its id, the whole key (shown once), and the digest to store."""
    key_id = base64.b32encode(secrets.token_bytes(10)).decode().lower()[:_ID_LENGTH]
    secret = base64.urlsafe_b64encode(secrets.token_bytes(32)).decode().rstrip("=")
    return key_id, f"{PREFIX}{key_id}_{secret}", digest(secret)


def split(token: str) -> tuple[str, str] | None:
    """(id, secret) of a key of cairn's shape, or None."""
    found = TOKEN.fullmatch(token)
    return None if found is None else (found.group(1), found.group(2))


def digest(secret: str) -> bytes:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()
