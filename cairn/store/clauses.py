"""WHERE clauses several tables' statements share: an execution's row, that row while it
has no result, and a claim of it that is still current."""

from __future__ import annotations

from typing import Any

from sqlalchemy import and_

from cairn.model.keys import Claim, ExecutionKey
from cairn.model.statuses import EXECUTION_ACTIVE
from cairn.store.schema import executions

ACTIVE_EXECUTION = tuple(status.value for status in EXECUTION_ACTIVE)


def where(key: ExecutionKey) -> Any:
    """The row of execution ``key``."""
    return and_(
        executions.c.run_id == key.run_id,
        executions.c.node == key.node,
        executions.c.iteration == key.iteration,
        executions.c.phase == key.phase,
    )


def unfinished(key: ExecutionKey, attempt: int) -> Any:
    """Execution ``key`` at ``attempt``, while it has no result."""
    return and_(
        where(key),
        executions.c.attempt == attempt,
        executions.c.status.in_(ACTIVE_EXECUTION),
    )


def current(claim: Claim) -> Any:
    """``claim`` still holds: its execution unfinished at its attempt, and no newer claim
    of it on record."""
    return and_(unfinished(claim.key, claim.attempt), executions.c.fence <= claim.fence)
