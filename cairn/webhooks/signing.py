"""Signing webhook bodies, and checking a signature on the receiving side.

Each delivery carries ``Cairn-Signature: t=<unix seconds>,v1=<hex>[,v1=<hex>...]``: an
HMAC-SHA256, keyed with a secret of the run's namespace, over ``"<t>." + body``. The
timestamp is inside the MAC, so a captured request cannot be replayed later than the
receiver's tolerance with a fresh time; the event id (``Cairn-Event-Id``, also in the
body) lets it drop a redelivery it has seen. A namespace may have several secrets (one
being rotated in): each signs, and a receiver accepts the request if any ``v1`` matches
a secret it knows.
"""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from cairn.config import Settings
from cairn.config.secrets import namespaced, secret_lines
from cairn.errors import CairnError

SIGNATURE_HEADER = "Cairn-Signature"
EVENT_ID_HEADER = "Cairn-Event-Id"
EVENT_TYPE_HEADER = "Cairn-Event-Type"
SCHEME = "v1"
DEFAULT_TOLERANCE_S = 300.0
MIN_SECRET_LENGTH = 16


class WebhookSignatureError(CairnError):
    """A webhook request whose signature is missing, malformed, wrong or too old."""

    code = "bad_signature"


def _mac(secret: str, timestamp: int, body: bytes) -> str:
    signed = str(timestamp).encode() + b"." + body
    return hmac.new(secret.encode(), signed, hashlib.sha256).hexdigest()


def sign(body: bytes, secrets: Sequence[str], timestamp: int | None = None) -> str:
    """The ``Cairn-Signature`` header value for ``body``, signed with every secret."""
    if not secrets:
        raise ValueError("signing needs at least one secret")
    at = int(time.time()) if timestamp is None else timestamp
    return ",".join([f"t={at}", *(f"{SCHEME}={_mac(secret, at, body)}" for secret in secrets)])


def verify(
    body: bytes,
    header: str | None,
    secrets: str | Iterable[str],
    *,
    tolerance_s: float = DEFAULT_TOLERANCE_S,
    now: float | None = None,
) -> int:
    """Check a webhook request as a receiver: the raw body as received (before any JSON
    parsing), the ``Cairn-Signature`` header, and your namespace's secret(s). Returns the
    signed timestamp; raises :class:`WebhookSignatureError` if no signature matches or
    the timestamp is further than ``tolerance_s`` from now (a replay)."""
    known = [secrets] if isinstance(secrets, str) else list(secrets)
    timestamp: int | None = None
    given: list[str] = []
    for part in (header or "").split(","):
        name, _, value = part.strip().partition("=")
        if name == "t" and value.isdigit():
            timestamp = int(value)
        elif name == SCHEME and value:
            given.append(value)
    if timestamp is None or not given:
        raise WebhookSignatureError(f"no valid {SIGNATURE_HEADER} header")
    at = time.time() if now is None else now
    if abs(at - timestamp) > tolerance_s:
        raise WebhookSignatureError(
            f"the signature's timestamp is {abs(at - timestamp):.0f} s away from now "
            f"(tolerance {tolerance_s:.0f} s): a replay, or a clock far off"
        )
    expected = [_mac(secret, timestamp, body) for secret in known]
    # Every pair compared, no early exit: the time taken tells nothing about which matched.
    matched = False
    for signature in given:
        for candidate in expected:
            matched |= hmac.compare_digest(signature, candidate)
    if not matched:
        raise WebhookSignatureError("the signature does not match the body and the secret")
    return timestamp


@dataclass(frozen=True)
class WebhookSecrets:
    """The signing secrets by namespace, from ``CAIRN_WEBHOOK_SECRETS`` and
    ``CAIRN_WEBHOOK_SECRETS_FILE``."""

    by_namespace: Mapping[str, tuple[str, ...]]

    @classmethod
    def from_settings(cls, settings: Settings) -> WebhookSecrets:
        lines = secret_lines(
            settings.webhook_secrets,
            "CAIRN_WEBHOOK_SECRETS",
            settings.webhook_secrets_file,
            "CAIRN_WEBHOOK_SECRETS_FILE",
        )
        found: dict[str, list[str]] = {}
        for namespace, secret, _source in namespaced(lines, "secret", MIN_SECRET_LENGTH):
            found.setdefault(namespace, []).append(secret)
        return cls({namespace: tuple(secrets) for namespace, secrets in found.items()})

    def of(self, namespace: str) -> tuple[str, ...]:
        return self.by_namespace.get(namespace, ())
