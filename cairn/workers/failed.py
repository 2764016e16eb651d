"""A node message whose execution committed a failure.

The runner answers with :class:`Failed` instead of ``Handled.COMMITTED`` when a result
it committed is a failure, so that the Celery edge can say so (Flower's FAILURE, naming
the node and the error) rather than report a successful task (:mod:`cairn.workers.task_events`).
The failure is already in the run's history either way; this only tells the monitors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from cairn.model.events import NodeFailed
from cairn.model.messages import NodeMessage
from cairn.model.outcomes import NodeOutcome


@dataclass(frozen=True)
class Failed:
    """The node that failed (``workflow.node``, the first of a fused chain's that did),
    its error class (transient, permanent, business) and the handler's error."""

    task: str
    error_class: str
    error: str

    def __str__(self) -> str:
        return f"{self.task} failed ({self.error_class}): {self.error}"


def failure_of(steps: Sequence[tuple[NodeMessage, NodeOutcome]]) -> Failed | None:
    """The failure among the steps one message committed, if any."""
    for message, outcome in steps:
        if isinstance(outcome.event, NodeFailed):
            event = outcome.event
            return Failed(message.task_name, event.error_class.value, event.message)
    return None
