"""Checkpoints inside a node: a long execution's working context, saved while it runs,
fenced like its result, and read back by the execution that resumes it. Each checkpoint
is a row: the whole context, or what changed since an earlier one (migration 0027)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import ClauseElement, ColumnElement, and_, delete, exists, func, literal, select

from cairn.model.deltas import fold
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
        base: int = 0,
        claim: Claim | None = None,
    ) -> int | None:
        """Save execution ``key``'s working context as its next checkpoint, in one
        statement: the whole context (``base`` 0), or what changed since checkpoint
        ``base`` (:func:`cairn.model.deltas.delta`). Only while the execution is unfinished
        at ``attempt`` and no claim newer than ``fence`` is on record — or, ``claim``
        given, while that claim is current (a node fused after an ephemeral one has no
        row of its own yet: the chain's first claim fences it) — and never after a
        checkpoint a newer claim saved. The checkpoint's number (1, 2, ...), or None if
        it was refused."""
        mine = self._checkpoint_rows(key)
        newer = exists().where(mine, checkpoints.c.fence > fence)
        active = exists().where(current(claim or Claim(key, attempt, fence)))
        following = select(func.coalesce(func.max(checkpoints.c.seq), 0) + 1).where(mine)
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
            following.scalar_subquery(),
            literal(base),
            literal(dict(context), checkpoints.c.context.type),
            now,
        ).where(active, ~newer)
        columns = ["run_id", "node", "iteration", "phase", "attempt", "fence", "seq", "base"]
        insert = self._insert(checkpoints).from_select([*columns, "context", "saved_at"], row)
        # Two saves racing for one number: the loser is refused (one holder saves at a time).
        insert = insert.on_conflict_do_nothing(index_elements=[*columns[:4], "seq"])
        saved = self.connection.execute(insert.returning(checkpoints.c.seq)).first()
        return None if saved is None else int(saved.seq)

    def checkpoint_of(self, key: ExecutionKey) -> CheckpointRecord | None:
        """Execution ``key``'s newest checkpoint, its context folded from the whole one it
        extends through each change since (None if it has none, or its chain is broken)."""
        rows = self.connection.execute(
            select(checkpoints).where(self._checkpoint_rows(key)).order_by(checkpoints.c.seq)
        ).all()
        if not rows:
            return None
        by_seq = {row.seq: row for row in rows}
        chain = [rows[-1]]
        while chain[-1].base != 0:
            extended = by_seq.get(chain[-1].base)
            if extended is None:
                return None
            chain.append(extended)
        context: dict[str, Any] = {}
        for row in reversed(chain):
            context = fold(context, row.context) if row.base else dict(row.context)
        return CheckpointRecord.of(rows[-1], context)

    @staticmethod
    def _checkpoint_rows(key: ExecutionKey) -> ColumnElement[bool]:
        return and_(
            checkpoints.c.run_id == key.run_id,
            checkpoints.c.node == key.node,
            checkpoints.c.iteration == key.iteration,
            checkpoints.c.phase == key.phase,
        )

    def drop_checkpoint(self, key: ExecutionKey) -> None:
        """Forget execution ``key``'s checkpoint: its result is committed."""
        self.connection.execute(delete(checkpoints).where(self._checkpoint_rows(key)))
