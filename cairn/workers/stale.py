"""A worker that lost its claim while its handler ran: its result is not committed. That
is an event in the run's history and a fleet counter, not an error."""

from __future__ import annotations

import logging
from typing import Protocol

from cairn.lease.port import Leases
from cairn.model.messages import NodeMessage
from cairn.workers.ports import StepCommits

log = logging.getLogger("cairn.workers.runner")


class _Runner(Protocol):
    steps: StepCommits
    leases: Leases
    worker: str


def record_stale(runner: _Runner, message: NodeMessage, fence: int, *, caught_by: str) -> None:
    """Say and record that ``message``'s claim (``fence``) was lost while it ran, as the
    lease or the fence check (``caught_by``) found."""
    log.warning(
        "%s: claim (fence %d) lost while running; result not committed (caught by %s)",
        message.key,
        fence,
        caught_by,
    )
    try:
        runner.leases.count("stale_rejected")
        runner.steps.record(
            message.run_id,
            "stale_write_rejected",
            {
                "node": message.node,
                "iteration": message.iteration,
                "attempt": message.attempt,
                "phase": message.phase.value,
                "worker": runner.worker,
                "fence": fence,
                "caught_by": caught_by,
            },
        )
    except Exception:  # the history entry is best effort; the refusal is what counts
        log.warning("could not record the stale write of %s", message.key, exc_info=True)
