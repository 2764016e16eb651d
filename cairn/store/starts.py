"""The rows that say which submissions start a run: a debounce key's pending run
(``debounces``) and the run a singleton key last started (``singletons``). Both are
claimed by an insert that does nothing on a conflict and then locked, so two submissions
never both find a key free — the database decides, not a read before the write."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import delete, select, update

from cairn.model.statuses import RunStatus
from cairn.store.base import TxBase
from cairn.store.records import DebounceRecord, from_epoch
from cairn.store.schema import debounces, runs, singletons

_PENDING = RunStatus.PENDING.value
_STAMPS = ("first_at", "due_at", "deadline_at")


def _debounce(namespace: str, key: str) -> Any:
    return (debounces.c.namespace == namespace) & (debounces.c.key == key)


def _singleton(namespace: str, key: str) -> Any:
    return (singletons.c.namespace == namespace) & (singletons.c.key == key)


class StartsTx(TxBase):
    """Debounce windows and singleton keys."""

    # -- debounce ----------------------------------------------------------------------

    def claim_debounce(self, values: Mapping[str, Any]) -> bool:
        """Open a debounce window (namespace, key, run_id, workflow, version, first_at,
        due_at, deadline_at: epoch seconds); False if the key has one open already."""
        row = {
            **values,
            **{name: from_epoch(values[name]) for name in _STAMPS if values[name] is not None},
            "submissions": 1,
        }
        stmt = self._insert(debounces).values(**row).on_conflict_do_nothing()
        return self.connection.execute(stmt.returning(debounces.c.run_id)).first() is not None

    def lock_debounce(
        self, namespace: str, key: str, *, due_by: float | None = None
    ) -> DebounceRecord | None:
        """The key's open window, locked for this transaction. ``due_by``: only if it is
        due by then, and skipping it while another transaction holds it (a submission is
        moving it on, or another scheduler is starting its run)."""
        query = select(debounces).where(_debounce(namespace, key))
        if due_by is not None:
            query = self._skip_locked(query.where(debounces.c.due_at <= from_epoch(due_by)))
        else:
            query = query.with_for_update()
        row = self.connection.execute(query).first()
        return None if row is None else DebounceRecord.of(row)

    def extend_debounce(self, namespace: str, key: str, due_at: float) -> None:
        """Another submission joined the window: it now starts at ``due_at``."""
        self.connection.execute(
            update(debounces)
            .where(_debounce(namespace, key))
            .values(due_at=from_epoch(due_at), submissions=debounces.c.submissions + 1)
        )

    def reopen_debounce(self, values: Mapping[str, Any]) -> None:
        """The window (locked by this transaction) of a run that ended while pending (it
        was cancelled) opens anew, for another run (the values of :meth:`claim_debounce`)."""
        row = {
            **values,
            **{name: from_epoch(values[name]) for name in _STAMPS if values[name] is not None},
            "submissions": 1,
        }
        self.connection.execute(
            update(debounces).where(_debounce(values["namespace"], values["key"])).values(**row)
        )

    def delete_debounce(self, namespace: str, key: str) -> None:
        self.connection.execute(delete(debounces).where(_debounce(namespace, key)))

    def due_debounces(self, before: float, limit: int) -> list[DebounceRecord]:
        """The windows due before ``before``, soonest first."""
        rows = self.connection.execute(
            select(debounces)
            .where(debounces.c.due_at <= from_epoch(before))
            .order_by(debounces.c.due_at)
            .limit(limit)
        )
        return [DebounceRecord.of(row) for row in rows]

    def set_pending_input(self, run_id: str, run_input: Mapping[str, Any]) -> bool:
        """Give a run that has not started yet (pending, no event) another input; False
        if it has started or ended meanwhile."""
        stmt = (
            update(runs)
            .where(runs.c.id == run_id, runs.c.status == _PENDING, runs.c.last_seq == 0)
            .values(input=dict(run_input), updated_at=self.stamp())
        )
        return self.connection.execute(stmt.returning(runs.c.id)).first() is not None

    # -- singleton ---------------------------------------------------------------------

    def claim_singleton(self, namespace: str, key: str, run_id: str) -> bool:
        """Take a singleton key no run has held yet, for ``run_id``; False if some run
        has (the caller then locks it: :meth:`lock_singleton`)."""
        stmt = (
            self._insert(singletons)
            .values(namespace=namespace, key=key, run_id=run_id, updated_at=self.stamp())
            .on_conflict_do_nothing()
        )
        return self.connection.execute(stmt.returning(singletons.c.run_id)).first() is not None

    def lock_singleton(self, namespace: str, key: str) -> str | None:
        """The run the key last started, the key locked for this transaction."""
        row = self.connection.execute(
            select(singletons.c.run_id).where(_singleton(namespace, key)).with_for_update()
        ).first()
        return None if row is None else str(row.run_id)

    def hand_singleton(self, namespace: str, key: str, run_id: str) -> None:
        """The key (locked by this transaction) now names ``run_id``."""
        self.connection.execute(
            update(singletons)
            .where(_singleton(namespace, key))
            .values(run_id=run_id, updated_at=self.stamp())
        )
