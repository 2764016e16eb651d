"""Pauses and the starts they hold (``pauses``, ``held_starts``; docs/operations.md).

A submission that finds its workflow paused locks the pause row (shared) while it
writes its held start, and lifting a pause deletes that row: so a start is either held
before the pause is lifted — and started by the one lifting it — or sees no pause at
all. None is stranded between the two.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, func, not_, select

from cairn.model.pauses import HeldStart, Pause, PauseKind
from cairn.store.base import TxBase
from cairn.store.records import to_epoch
from cairn.store.schema import held_starts, pauses


def _pause(namespace: str, kind: PauseKind, name: str) -> Any:
    return (
        (pauses.c.namespace == namespace) & (pauses.c.kind == kind.value) & (pauses.c.name == name)
    )


def _orphaned() -> Any:
    paused = select(pauses.c.name).where(
        pauses.c.namespace == held_starts.c.namespace,
        pauses.c.kind == PauseKind.WORKFLOW.value,
        pauses.c.name == held_starts.c.workflow,
    )
    return select(held_starts).where(not_(paused.exists())).order_by(held_starts.c.held_at)


class PausesTx(TxBase):
    """Paused workflows and queues, and the runs held by the first."""

    def add_pause(self, pause: Pause) -> bool:
        """Record ``pause``; False if that workflow or queue is paused already."""
        row = {
            "namespace": pause.namespace,
            "kind": pause.kind.value,
            "name": pause.name,
            "reason": pause.reason,
            "paused_by": pause.paused_by,
            "paused_at": self.stamp(),
        }
        stmt = self._insert(pauses).values(**row).on_conflict_do_nothing()
        return self.connection.execute(stmt.returning(pauses.c.name)).first() is not None

    def remove_pause(self, namespace: str, kind: PauseKind, name: str) -> bool:
        """Lift a pause; False if there was none. Waits for the submissions holding a
        start under it (they lock it shared) to commit."""
        stmt = delete(pauses).where(_pause(namespace, kind, name)).returning(pauses.c.name)
        return self.connection.execute(stmt).first() is not None

    def pause_holding(self, namespace: str, kind: PauseKind, name: str) -> bool:
        """Whether it is paused, with the pause row locked shared until this transaction
        ends — so it cannot be lifted before what this transaction holds is committed."""
        query = select(pauses.c.name).where(_pause(namespace, kind, name))
        return self.connection.execute(self._share_locked(query)).first() is not None

    def list_pauses(self, namespace: str | None = None) -> list[Pause]:
        """Every pause (of one namespace, if given), with how many runs each workflow
        pause holds; oldest first."""
        held = (
            select(func.count())
            .where(
                held_starts.c.namespace == pauses.c.namespace,
                held_starts.c.workflow == pauses.c.name,
                pauses.c.kind == PauseKind.WORKFLOW.value,
            )
            .scalar_subquery()
        )
        query = select(pauses, held.label("held")).order_by(pauses.c.paused_at)
        if namespace is not None:
            query = query.where(pauses.c.namespace == namespace)
        return [
            Pause(
                row.namespace,
                PauseKind(row.kind),
                row.name,
                row.reason,
                row.paused_by,
                to_epoch(row.paused_at),
                int(row.held or 0),
            )
            for row in self.connection.execute(query)
        ]

    def hold_start(self, start: HeldStart) -> None:
        self.connection.execute(
            held_starts.insert().values(
                run_id=start.run_id,
                namespace=start.namespace,
                workflow=start.workflow,
                actor=start.actor,
                held_at=self.stamp(),
            )
        )

    def take_held_starts(self, limit: int, namespace: str, workflow: str) -> list[HeldStart]:
        """Up to ``limit`` starts a lifted pause of ``workflow`` held, oldest first,
        deleted in this transaction (which starts them); rows another holds are skipped."""
        query = (
            select(held_starts)
            .where(held_starts.c.namespace == namespace, held_starts.c.workflow == workflow)
            .order_by(held_starts.c.held_at)
            .limit(limit)
        )
        return self._take(query)

    def take_orphaned_starts(self, limit: int) -> list[HeldStart]:
        """Held starts whose pause is gone (lifted by a process that died before starting
        them all), for the scheduler to start."""
        return self._take(_orphaned().limit(limit))

    def has_orphaned_starts(self) -> bool:
        return self.connection.execute(_orphaned().limit(1)).first() is not None

    def _take(self, query: Any) -> list[HeldStart]:
        rows = list(self.connection.execute(self._skip_locked(query)))
        if rows:
            self.connection.execute(
                delete(held_starts).where(held_starts.c.run_id.in_([r.run_id for r in rows]))
            )
        return [HeldStart(r.run_id, r.namespace, r.workflow, r.actor) for r in rows]
