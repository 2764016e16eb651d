"""A node message received for a queue its run's namespace paused
(docs/operations.md#pausing-starts-and-queues): nothing is claimed, and the message goes
back to the outbox, for the relay to publish once the queue resumes."""

from __future__ import annotations

import logging

from cairn.model.messages import NodeMessage
from cairn.workers.ports import HeldMessages

log = logging.getLogger(__name__)


def hold_for_pause(outbox: HeldMessages, message: NodeMessage) -> None:
    outbox.hold(message)
    log.info("%s held: queue %s is paused", message.key, message.queue or "(default)")
