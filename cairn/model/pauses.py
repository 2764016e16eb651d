"""What an operator may pause in a namespace: a workflow's new starts, or a queue.

A paused **workflow** still accepts submissions: each run is written ``pending`` and
held, and starts as its submitter when the pause is lifted — nothing a caller sent is
lost or refused. A paused **queue** holds the node messages of the namespace's runs bound
for it: they wait in the outbox (a message a worker had already received goes back
there) and are published when it resumes. Runs a parent starts as its children are not
held: they belong to a run already under way.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

MAX_REASON = 500


class PauseKind(StrEnum):
    WORKFLOW = "workflow"
    QUEUE = "queue"


@dataclass(frozen=True)
class Pause:
    namespace: str
    kind: PauseKind
    name: str
    reason: str
    paused_by: str
    paused_at: float
    held: int = 0  # runs held (a workflow's), or messages waiting (a queue's)


@dataclass(frozen=True)
class HeldStart:
    run_id: str
    namespace: str
    workflow: str
    actor: str | None
