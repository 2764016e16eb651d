"""Fewer messages than branches: a fork's branches that a worker could run one after
another, with nothing for the broker to decide between them, are published as ⌈n/k⌉
messages (k: ``CAIRN_BRANCHES_PER_MESSAGE``), each — a lead — carrying the siblings its
worker runs after it (:mod:`cairn.workers.step.siblings`), as it runs a step it continues
with. What a message costs the worker's consumer (a fetch, a decode, a trip through the
pool's pipe, an ack) is paid once for a group, and the fork is still spread over ⌈n/k⌉
workers.

Grouped: what a worker could continue with (:func:`plain_task`: a task with a handler, not
irreversible, under no declared limit), a first attempt with an outbox row, and not an
async handler (it is awaited on the loop holding no pool slot; a group would hold one:
one the publishing process cannot tell, its worker publishes on its own).
Branches share a message only with their run's others of the same queue, priority and
build, which the broker would route alike; a band of fewer than k is published as it is.

A sibling's outbox row is its doorbell, as a continued step's is: left unsent, it is
marked sent by the sibling's own commit; if the lead's worker dies first, or ignores the
header (an older version), the relay publishes the sibling on its own — not while its
queue has a backlog the lead may wait in, for up to ``CAIRN_RECOVERY_AFTER``
(:mod:`cairn.scheduler.relay`); the lease and the idempotency row turn a second delivery
into a no-op. A broker that has no
use for groups spreads them again (the in-process one), so every publisher takes them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from cairn.errors import CairnError
from cairn.model.definition import PersistKind, TaskNode, WorkflowDefinition
from cairn.model.events import Phase
from cairn.model.handlers import is_async
from cairn.model.messages import NodeMessage, Sibling

# (run, queue, priority, build): what a lead and its siblings have in common.
_Route = tuple[str, str | None, int, str | None]


class Grouping:
    """Groups a publish's messages (:func:`grouped`) by their definitions."""

    def __init__(
        self,
        size: int,
        definition: Callable[[str, int], WorkflowDefinition],
        *,
        namespace_limits: bool,
    ) -> None:
        self.size = size
        self.definition = definition
        # A namespace's concurrency limit admits every node through its slots.
        self.namespace_limits = namespace_limits

    def __call__(self, messages: Sequence[NodeMessage]) -> list[NodeMessage]:
        if self.size < 2 or len(messages) < self.size:
            return list(messages)
        return grouped(messages, self.groupable, self.size)

    def groupable(self, message: NodeMessage) -> bool:
        """Whether ``message`` may be carried by a sibling's message."""
        if (
            message.phase is not Phase.RUN
            or message.attempt != 1
            or message.resumed
            or message.woken
            or message.outbox_id is None
        ):
            return False
        try:
            definition = self.definition(message.workflow, message.version)
        except CairnError:
            return False
        node = plain_task(definition, message.node, namespace_limits=self.namespace_limits)
        return node is not None and not awaited(node)


def grouped(
    messages: Sequence[NodeMessage], groupable: Callable[[NodeMessage], bool], size: int
) -> list[NodeMessage]:
    """``messages``, those ``groupable`` gathered ``size`` to a message where at least
    ``size`` share a route: of ``m`` leads, lead ``i`` carries the ``i+m``-th, ``i+2m``-th,
    … of them (a fork's branches in order, spread evenly over the leads)."""
    out: list[NodeMessage] = []
    routes: dict[_Route, list[NodeMessage]] = {}
    for message in messages:
        if message.siblings or not groupable(message):
            out.append(message)
        else:
            route = (message.run_id, message.queue, message.priority, message.build)
            routes.setdefault(route, []).append(message)
    for band in routes.values():
        if len(band) < size:
            out.extend(band)
            continue
        leads = -(-len(band) // size)
        for i in range(leads):
            carried = tuple(Sibling.from_message(s) for s in band[i + leads :: leads])
            out.append(replace(band[i], siblings=carried))
    return out


def plain_task(
    definition: WorkflowDefinition, node_id: str, *, namespace_limits: bool
) -> TaskNode | None:
    """The task ``node_id``, if a worker may run it with no message of its own — it has
    a handler, it is not irreversible (its one claim is recorded before it runs: its own
    message), and no limit admits it through a wait of its own (concurrency, rate, a
    dependency's circuit; ``namespace_limits``: its namespace's concurrency)."""
    node = definition.nodes.get(node_id)
    if not isinstance(node, TaskNode) or node.handler is None or node.irreversible:
        return None
    limited = (
        node.concurrency
        or definition.concurrency
        or node.rate
        or definition.rate
        or node.dependencies
        or namespace_limits
    )
    return None if limited else node


def awaited(node: TaskNode, *, importing: bool = False) -> bool:
    """Whether the node's handler is awaited on a worker's loop (an async handler of a
    durable node). Not ``importing``, only a handler this process has imported is known
    to be: a process that loads definitions without their code (an API server, a
    client, the scheduler) imports none of it for this, and takes the others for plain
    — a worker carried an async one publishes it on its own
    (:mod:`cairn.workers.step.siblings`). One that cannot be imported is not known not
    to be."""
    handler = node.handler
    if handler is None or node.persist.kind is not PersistKind.DURABLE:
        return False
    if handler.target is None and not importing:
        return False
    try:
        return is_async(handler.resolve())
    except Exception:  # not importable here
        return True
