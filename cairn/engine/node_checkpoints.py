"""The checkpoints of a node's execution, as the engine writes and reads them for the
worker (:class:`cairn.workers.checkpoints.Checkpoints`): each a statement or a
transaction of its own, opened here, so that the worker never holds a connection."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cairn.model.keys import Claim, ExecutionKey
from cairn.store.records import CheckpointRecord
from cairn.store.sql import Store


class NodeCheckpoints:
    """Saved, read back and forgotten, by execution key."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def save(
        self,
        key: ExecutionKey,
        attempt: int,
        fence: int,
        context: Mapping[str, Any],
        *,
        base: int,
        claim: Claim | None,
    ) -> int | None:
        """Save ``context`` (what changed since checkpoint ``base``, or all of it: 0),
        fenced by the claim; its number, or None if the claim is no longer current."""
        with self.store.statements(writes=True) as tx:
            return tx.save_checkpoint(key, attempt, fence, context, base=base, claim=claim)

    def checkpoint_of(self, key: ExecutionKey) -> CheckpointRecord | None:
        with self.store.reading() as tx:
            return tx.checkpoint_of(key)

    def drop(self, key: ExecutionKey) -> None:
        with self.store.transaction() as tx:
            tx.drop_checkpoint(key)
