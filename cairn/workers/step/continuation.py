"""After the commit: a step whose successors include a plain task continues with it in the
same worker, instead of a broker round trip — a publish, a consume, a message through the
worker's pool pipe, all to land on a worker that could have run it now. Of a fork's
branches the first such is kept, and the others are published before it runs: they run
on other workers meanwhile, as they would have.

The next execution is run as any worker would run it, through every stage again: its
read, its own lease and fence (admit), hold, execute, commit and release. Only its read is
not a round trip: the commit before it wrote the run's row and state and inserted the
execution's row (a first attempt: scheduled, no claim), so the read is answered from
what that commit left (:meth:`cairn.engine.executions.Executions.begin_here`) — as if it
had been read a lease's acquire earlier. Whatever moved the run since (another process's
step, a cancel) the commit's condition on the run's ``last_seq`` still finds, as it finds
anything that moves a run between any read and its step's commit.

Its message was written to the outbox in the step's commit like any other and is simply
not published: the row stays the doorbell. The relay leaves an unsent row alone while its
execution's lease is held (this worker holds it), and publishes it as it would any other
once it is not — if this worker dies before or while running it. The worker marks the
row sent once it holds the lease; the mark rides on the next commit, the continued step's
own.

Bounded, like a fused chain (:mod:`cairn.decider.fusion`): at most :data:`MAX_CONTINUED`
steps after a message's own, and none begun past :data:`CONTINUE_WITHIN_S` after it
started — a run does not keep a worker from the queue for long, and the Celery message it
began with is acknowledged (late) soon. Never across what the broker would have decided:
a queue (a worker consumes only its own), a build (an auto-upgrade run's next node
goes to the newest compatible one), a priority (the message's band), or a limit
the next node declares (concurrency, rate, a dependency's circuit: those admit through
their own waits, parked with no lease held) — such a message is published."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from cairn.engine.grouping import plain_task
from cairn.lease.port import Handing
from cairn.model.builds import Versioning
from cairn.model.definition import WorkflowDefinition
from cairn.model.events import Phase
from cairn.model.messages import NodeMessage

if TYPE_CHECKING:
    from cairn.workers.runner import NodeRunner

# Steps continued after a message's own, at most; then the next message is published.
MAX_CONTINUED = 16
# No step is continued once this long has passed since the message's own step began.
CONTINUE_WITHIN_S = 1.0


@dataclass
class Continuation:
    """One delivered message's chain of continued steps: since when, and which
    (``node#iteration outcome``, what the task's result shows)."""

    started: float = field(default_factory=time.monotonic)
    steps: list[str] = field(default_factory=list)
    # The kept message's lease, claimed as that step's was let go (one round trip, its
    # answer read when the step is admitted).
    handed: Handing | None = None
    # The run's definition, once a step of it has been read (what its siblings are).
    definition: WorkflowDefinition | None = None
    # The sibling taken to run next as the step before it let its lease go (the lease
    # handed on to it), when that step's commit kept no message.
    queued: NodeMessage | None = None

    def take_lease(self) -> Handing | None:
        """The lease handed on to the step about to run, once."""
        lease, self.handed = self.handed, None
        return lease

    def take_queued(self) -> NodeMessage | None:
        queued, self.queued = self.queued, None
        return queued

    def open(self, running: int = 0) -> bool:
        """Whether another step may begin — ``running``: steps begun and not yet counted."""
        return (
            len(self.steps) + running < MAX_CONTINUED
            and time.monotonic() - self.started < CONTINUE_WITHIN_S
        )


def next_to_run(
    runner: NodeRunner,
    continuation: Continuation,
    current: NodeMessage,
    definition: WorkflowDefinition,
    messages: Sequence[NodeMessage],
) -> NodeMessage | None:
    """Of a committed step's messages, the one this worker runs next itself: the first
    that is a plain task of the run on the same queue at the same priority declaring no
    limit, while the chain is within its bounds. None: publish them all."""
    if not messages or not continuation.open() or _routed_elsewhere(runner, definition, current):
        return None
    return next(
        (m for m in messages if _plain(runner, definition, current, m)),
        None,
    )


def _plain(
    runner: NodeRunner, definition: WorkflowDefinition, current: NodeMessage, following: NodeMessage
) -> bool:
    """Whether ``following`` is a message the broker would have nothing to decide about."""
    namespace_limits = bool(runner.settings.namespace_concurrency)
    return not (
        following.run_id != current.run_id
        or following.phase is not Phase.RUN
        or following.resumed
        or following.outbox_id is None  # no row to be recovered from
        or plain_task(definition, following.node, namespace_limits=namespace_limits) is None
        or following.queue != current.queue
        or definition.queue_of(following.node) != definition.queue_of(current.node)
        or following.priority != current.priority
        or runner.pauses.holds(following)
    )


def _routed_elsewhere(
    runner: NodeRunner, definition: WorkflowDefinition, current: NodeMessage
) -> bool:
    """Whether the next node may belong on another build (docs/versions.md): an
    auto-upgrade run's goes to the newest compatible build, which the router picks; a
    pinned run's stays only on a worker of its build."""
    if definition.versioning is Versioning.ANY:
        return False
    return (
        definition.versioning is Versioning.AUTO_UPGRADE
        or current.build is None
        or current.build != runner.build
    )
