"""A node message received for a queue its run's namespace paused
(docs/operations.md#pausing-starts-and-queues): nothing is claimed, and the message goes
back to the outbox, for the relay to publish once the queue resumes."""

from __future__ import annotations

import logging
from dataclasses import replace

from cairn.engine.orchestrator import Orchestrator
from cairn.model.messages import NodeMessage

log = logging.getLogger(__name__)


def hold_for_pause(orchestrator: Orchestrator, message: NodeMessage) -> None:
    payload = replace(message, outbox_id=None).to_dict()
    with orchestrator.store.transaction() as tx:
        tx.return_to_outbox(message.run_id, payload)
    log.info("%s held: queue %s is paused", message.key, message.queue or "(default)")
