"""Which queues a deployment knows: a definition that sends nodes to a queue no worker
could consume is refused when it is registered, if the deployment declares its queues
(``CAIRN_QUEUES``). Without the declaration any queue is accepted, since nothing says
which workers will run.

Checked at registration rather than in the loader: the queues are the deployment's,
not the definition's, and the same file is valid for one fleet and not another.
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Iterable

from cairn.errors import DefinitionFault, QueueUse, UndeclaredQueue
from cairn.model.definition import WorkflowDefinition


def known_queues(declared: Collection[str], default: str) -> tuple[str, ...]:
    """What a deployment's workers consume: the declared queues and the default one."""
    return tuple(sorted({*declared, default}))


def undeclared_uses(
    definition: WorkflowDefinition, declared: Collection[str], default: str
) -> list[QueueUse]:
    """Where ``definition`` names a queue outside ``declared`` and ``default``: its own
    default (once), and each node whose queue is not that default. Nothing if no queues
    are declared."""
    if not declared:
        return []
    known = set(known_queues(declared, default))
    uses = []
    workflow_queue = definition.queue
    if workflow_queue is not None and workflow_queue not in known:
        uses.append(QueueUse(definition.key, None, workflow_queue))
    for node_id, queue in definition.queues().items():
        if queue not in known and queue != workflow_queue:
            uses.append(QueueUse(definition.key, node_id, queue))
    return uses


def check_queues(
    definitions: Iterable[WorkflowDefinition], declared: Collection[str], default: str
) -> None:
    """Refuse, with every use at once, definitions naming a queue no worker of this
    deployment consumes (:class:`UndeclaredQueue`); a no-op when none are declared."""
    definitions = list(definitions)
    uses = [use for d in definitions for use in undeclared_uses(d, declared, default)]
    if not uses:
        return
    known = known_queues(declared, default)
    faults = [
        DefinitionFault(UndeclaredQueue.code, _describe(use, known), use.node) for use in uses
    ]
    source = ", ".join(sorted({use.workflow for use in uses}))
    raise UndeclaredQueue(faults, uses, known, source=source)


def _describe(use: QueueUse, known: tuple[str, ...]) -> str:
    whose = "its tasks' default queue" if use.node is None else "queue"
    close = difflib.get_close_matches(use.queue, known, n=1, cutoff=0.6)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return (
        f"{use.workflow}: {whose} {use.queue!r} is not one this deployment's workers consume "
        f"(CAIRN_QUEUES and the default queue: {', '.join(known)}){hint}"
    )
