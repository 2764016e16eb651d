"""What is told of a decision: the log of a run's end, and the after-commit hooks the
composition root registers (anomaly alerts, counters) — each told of a decision once it
is committed, never of one rolled back."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence

from cairn.decider import Decision
from cairn.model.commands import CancelNode, DetachNode, FinishRun
from cairn.model.events import Phase
from cairn.model.keys import lease_key

log = logging.getLogger("cairn.engine")

# Told of each decision once it is committed: (run id, decision).
AfterCommit = Callable[[str, Decision], object]


def tell(hooks: Sequence[AfterCommit], run_id: str, decision: Decision) -> None:
    for hook in hooks:
        try:
            hook(run_id, decision)
        except Exception:  # the decision stands; what reports it must not undo it
            log.warning("an after-commit hook failed for run %s", run_id, exc_info=True)


def stopped_leases(run_id: str, decision: Decision) -> list[str]:
    """The leases of the executions a decision stops (a cancel, a node's timeout, a join
    that went on without them): their holders should ask now, not at their next beat."""
    return [
        lease_key(run_id, command.node, command.iteration, Phase.RUN.value)
        for command in decision.commands
        if isinstance(command, CancelNode | DetachNode)
    ]


def log_finish(run_id: str, decision: Decision) -> None:
    for command in decision.commands:
        if isinstance(command, FinishRun):
            log.info(
                "run %s %s%s",
                run_id,
                command.status.value,
                f": {command.reason}" if command.reason else "",
            )
