"""How a node message ended, when it ends before its commit or at it: a stage that has
nothing more to do returns one of these instead of the next stage's input."""

from __future__ import annotations

from enum import StrEnum


class Handled(StrEnum):
    COMMITTED = "committed"
    DISCARDED = "discarded"  # ran, but the result was not the first for its key
    ALREADY_DONE = "already_done"  # finished before, or superseded: nothing ran again
    RUN_FINISHED = "run_finished"
    CANCELLED = "cancelled"
    LEASE_HELD = "lease_held"  # another worker holds the node now
    # An irreversible node some worker claimed before: it may have taken effect, so it
    # does not run again until an operator says so (the scheduler holds it).
    UNCONFIRMED = "unconfirmed"
    LEASE_LOST = "lease_lost"
    REJECTED = "rejected"  # the message itself is invalid
    # Its holder died once too often (CAIRN_MAX_RECOVERIES): failed, not run again.
    GAVE_UP = "gave_up"
    # A concurrency limit is full: it waits, parked, for a slot (no lease, no message).
    PARKED = "parked"
    PAUSED = "paused"  # its queue is paused: back in the outbox until it resumes
    CODE_UNAVAILABLE = "code_unavailable"  # this worker cannot import the handlers: it waits
    # An async node handed to its process's event loop: it awaits there, holding no pool
    # slot; its message is acked once it is committed (cairn.workers.awaiting).
    AWAITING = "awaiting"
