"""The model calls of a node's execution, as the engine reads and writes them for the
recorder (:class:`cairn.recording.calls.ModelCalls`, through its port
:class:`~cairn.recording.calls.CallRecords`): each a transaction of its own, opened
here, so that neither the recorder nor the worker holds a connection."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from cairn.model.keys import Claim, ExecutionKey
from cairn.store.records import ModelCallRecord
from cairn.store.sql import Store


class ModelCallBook:
    """An execution's recorded calls, read back and written one at a time, fenced."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def calls_of(self, key: ExecutionKey) -> tuple[list[ModelCallRecord], frozenset[int]]:
        """The calls earlier executions of ``key`` recorded, and the attempts whose
        calls are already charged to the run (read only if there are calls)."""
        with self.store.reading() as tx:
            found = tx.model_calls_of(key)
            return found, tx.charged_attempts(key) if found else frozenset()

    def record(
        self,
        key: ExecutionKey,
        attempt: int,
        fence: int,
        call: Mapping[str, Any],
        bodies: Mapping[str, Any],
        *,
        claim: Claim | None,
    ) -> bool:
        """Write one call and the message bodies it sent first; False if the claim is
        no longer current (nothing written)."""
        with self.store.transaction() as tx:
            return tx.record_model_call(key, attempt, fence, call, bodies, claim=claim)
