"""Webhooks: a run names a URL when it is submitted; its end and its milestones are
announced there, signed, through an outbox (see docs/webhooks.md).

Receivers check requests with :func:`verify`. What a step announces, and which URLs a run
may name, is the engine's (:mod:`cairn.engine.notices`).
"""

from cairn.webhooks.signing import (
    EVENT_ID_HEADER,
    SIGNATURE_HEADER,
    WebhookSecrets,
    WebhookSignatureError,
    sign,
    verify,
)

__all__ = [
    "EVENT_ID_HEADER",
    "SIGNATURE_HEADER",
    "WebhookSecrets",
    "WebhookSignatureError",
    "sign",
    "verify",
]
