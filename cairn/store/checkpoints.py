"""Checkpoints inside a node: a long execution's working context, saved while it runs,
fenced like its result, and read back by the execution that resumes it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import ClauseElement, delete, exists, literal, select

from cairn.model.keys import Claim, ExecutionKey
from cairn.store.base import TxBase
from cairn.store.clauses import current
from cairn.store.records import CheckpointRecord
from cairn.store.schema import checkpoints


class CheckpointsTx(TxBase):
    """The node_checkpoints table."""

    def save_checkpoint(
        self,
        key: ExecutionKey,
        attempt: int,
        fence: int,
        context: Mapping[str, Any],
        *,
        claim: Claim | None = None,
    ) -> int | None:
        """Save execution ``key``'s working context, in one statement: only while the
        execution is unfinished at ``attempt`` and no claim newer than ``fence`` is on
        record — or, ``claim`` given, while that claim is current (a node fused after an
        ephemeral one has no row of its own yet: the chain's first claim fences it) — and
        never over a checkpoint a newer claim saved. The checkpoint's number (1, 2, ...),
        or None if it was refused."""
        active = exists().where(current(claim or Claim(key, attempt, fence)))
        now = self.stamp()  # the database's clock: an SQL expression, or a value to bind
        if not isinstance(now, ClauseElement):
            now = literal(now, checkpoints.c.saved_at.type)
        row = select(
            literal(key.run_id),
            literal(key.node),
            literal(key.iteration),
            literal(key.phase),
            literal(attempt),
            literal(fence),
            literal(1),
            literal(dict(context), checkpoints.c.context.type),
            now,
        ).where(active)
        insert = self._insert(checkpoints).from_select(
            [
                "run_id",
                "node",
                "iteration",
                "phase",
                "attempt",
                "fence",
                "seq",
                "context",
                "saved_at",
            ],
            row,
        )
        excluded = insert.excluded
        upsert = insert.on_conflict_do_update(
            index_elements=["run_id", "node", "iteration", "phase"],
            set_={
                "attempt": excluded.attempt,
                "fence": excluded.fence,
                "seq": checkpoints.c.seq + 1,
                "context": excluded.context,
                "saved_at": excluded.saved_at,
            },
            where=checkpoints.c.fence <= excluded.fence,
        )
        saved = self.connection.execute(upsert.returning(checkpoints.c.seq)).first()
        return None if saved is None else int(saved.seq)

    def checkpoint_of(self, key: ExecutionKey) -> CheckpointRecord | None:
        row = self.connection.execute(
            select(checkpoints).where(
                checkpoints.c.run_id == key.run_id,
                checkpoints.c.node == key.node,
                checkpoints.c.iteration == key.iteration,
                checkpoints.c.phase == key.phase,
            )
        ).first()
        return None if row is None else CheckpointRecord.of(row)

    def drop_checkpoint(self, key: ExecutionKey) -> None:
        """Forget execution ``key``'s checkpoint: its result is committed."""
        self.connection.execute(
            delete(checkpoints).where(
                checkpoints.c.run_id == key.run_id,
                checkpoints.c.node == key.node,
                checkpoints.c.iteration == key.iteration,
                checkpoints.c.phase == key.phase,
            )
        )
