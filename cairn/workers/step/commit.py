"""Stage 5, commit: the chain's results and the run's next step in one transaction —
unless the lease was lost meanwhile (PostgreSQL would refuse it; a worker that knows it is
stale does not try). A run being cancelled commits its unstarted node's cancel here too,
holding its lease."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING

from cairn.engine.optimistic import Completion, Keep
from cairn.faults import fault_point
from cairn.model.events import NodeCancelled, NodeFailed, NodeSucceeded
from cairn.model.messages import NodeMessage
from cairn.model.outcomes import NodeOutcome
from cairn.model.statuses import NodeStatus
from cairn.workers.stale import record_stale
from cairn.workers.step.execute import Ran
from cairn.workers.step.handled import Handled
from cairn.workers.step.hold import Held
from cairn.workers.step.read import Unstarted

if TYPE_CHECKING:
    from cairn.workers.runner import NodeRunner


def commit(
    runner: NodeRunner, held: Held, ran: Ran, *, keep: Keep | None = None, continuing: bool = False
) -> Completion | Handled:
    """The completion, recorded or refused; LEASE_LOST if the lease said so first.
    ``keep`` picks the message this worker continues with (unpublished); ``continuing``:
    this step is one, its outbox row unsent until this commit marks it."""
    fault_point("handler.after_return")
    message, fence = held.message, held.claimed.fence
    if not runner.heartbeats.confirm(held.beat):
        record_stale(runner, message, fence, caught_by="lease")
        return Handled.LEASE_LOST
    commits, steps = runner.steps, built_by(ran.steps, runner.build)
    if continuing and message.outbox_id is not None:
        runner.outbox.sent.add([message.outbox_id])  # rides on this commit
    committing = time.perf_counter()
    # The result exists only here: ride out a database restart rather than lose it.
    completion = runner._through_outages(
        f"committing {message.key}",
        lambda: (
            commits.complete(
                message,
                steps[0][1],
                runner.worker,
                known=held.claimed.known,
                fence=fence,
                keep=keep,
            )
            if len(steps) == 1
            else commits.complete_fused(steps, runner.worker, fence=fence)
        ),
    )
    ran.timings["commit"] = time.perf_counter() - committing
    fault_point("complete.after_commit")
    if completion.kept is not None:
        fault_point("continue.after_commit")  # to be continued here, its message unsent
    return completion


def built_by(
    steps: Sequence[tuple[NodeMessage, NodeOutcome]], build: str | None
) -> list[tuple[NodeMessage, NodeOutcome]]:
    """The steps' results, each saying which build ran it (docs/versions.md)."""
    if build is None:
        return list(steps)
    return [
        (m, replace(o, event=replace(o.event, build=build)))
        if isinstance(o.event, NodeSucceeded | NodeFailed)
        else (m, o)
        for m, o in steps
    ]


def cancel_unstarted(runner: NodeRunner, unstarted: Unstarted) -> Handled:
    """The run is being cancelled and this node has not started here: acknowledge
    the cancel for it — but only holding its lease, so that a duplicate message never
    speaks for a worker that is still running it (that one stops, or is detached)."""
    message = unstarted.message
    lease = runner._acquire(message, unstarted.fence_floor)
    if lease is None:
        return Handled.LEASE_HELD
    event = NodeCancelled(
        at=0.0, node=message.node, iteration=message.iteration, attempt=message.attempt
    )
    completion = None
    try:
        completion = runner._through_outages(
            f"committing {message.key}",
            lambda: runner.steps.complete(
                message,
                NodeOutcome(event, NodeStatus.CANCELLED),
                runner.worker,
                fence=lease.fence,
            ),
        )
    finally:
        runner.leases.release(lease, finished=completion is not None and completion.recorded)
    return Handled.CANCELLED
