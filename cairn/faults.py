"""Named fault points: places in the commit path where a test can make the process die.

A crash window (after publishing, before marking the message sent; after committing a
result, before acking the message) is tested on purpose rather than by luck: the test
sets ``CAIRN_FAULT_POINTS=relay.after_publish`` and the process SIGKILLs itself there,
exactly as ``kill -9`` would. With the setting empty (always, outside tests) a fault
point is one set lookup.
"""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Iterable

log = logging.getLogger(__name__)

KNOWN = frozenset(
    {
        "relay.after_publish",  # the relay published, the rows are not marked sent
        "handler.after_return",  # the handler returned (its effects done), nothing committed
        "complete.after_commit",  # a result is committed, the broker message is not acked
        # a result is committed whose next step this worker was to continue with: that
        # step's message is in the outbox, unpublished
        "continue.after_commit",
        "publish.after_commit",  # a decision is committed, its messages are not published
        "snapshot.before_commit",  # a step carrying a snapshot is ready, not committed
        "inbox.after_commit",  # an event for another run is committed, not yet applied
        "effect.after_call",  # an external call returned; its outcome is not recorded
    }
)

_armed: frozenset[str] = frozenset()


def arm(points: Iterable[str]) -> None:
    global _armed  # noqa: PLW0603 - process-wide switch, set once from settings
    points = frozenset(points)
    unknown = points - KNOWN
    if unknown:
        raise ValueError(f"unknown fault point(s) {sorted(unknown)}; known: {sorted(KNOWN)}")
    _armed = points


def fault_point(name: str) -> None:
    if name in _armed:
        log.critical("fault point %s: killing process %d", name, os.getpid())
        os.kill(os.getpid(), signal.SIGKILL)
