"""Webhooks: a run names a URL when it is submitted; its end and its milestones are
announced there, signed, through an outbox (see docs/webhooks.md).

Receivers check requests with :func:`verify`. What a step announces, and which URLs a run
may name, is the engine's (:mod:`cairn.engine.notices`); which addresses webhooks may
reach is :mod:`cairn.webhooks.targets`'s, checked as the notifier connects
(:mod:`cairn.webhooks.transport`).
"""

from cairn.webhooks.signing import (
    EVENT_ID_HEADER,
    SIGNATURE_HEADER,
    WebhookSecrets,
    WebhookSignatureError,
    sign,
    verify,
)
from cairn.webhooks.targets import WebhookTargetRefused

__all__ = [
    "EVENT_ID_HEADER",
    "SIGNATURE_HEADER",
    "WebhookSecrets",
    "WebhookSignatureError",
    "WebhookTargetRefused",
    "sign",
    "verify",
]
