"""The effects ledger's statements: intents fenced on the execution's claim,
outcomes recorded only from the status they move from."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import literal, select, update
from sqlalchemy.sql.elements import ColumnElement

from cairn.model.keys import ExecutionKey
from cairn.store.base import TxBase
from cairn.store.clauses import where
from cairn.store.records import EffectRecord, Intent, from_epoch
from cairn.store.schema import (
    effects,
    executions,
)


class EffectsTx(TxBase):
    """The effects ledger."""

    def record_intent(self, values: Mapping[str, Any], *, phase: str | None) -> Intent:
        """Record the intent to apply a new effect (``values``: its row) — in the same
        statement, only if its execution (its run, node and iteration, and ``phase``) has
        no claim newer than ``values["fence"]`` recorded. ``phase`` None: no execution to
        fence against (seeding a ledger by hand)."""
        stamp = self.stamp()  # the reconciler's grace compares it with PostgreSQL's clock
        values = {**values, "created_at": stamp, "updated_at": stamp}
        if phase is None:
            stmt = self._insert(effects).values(**values)
        else:
            names = list(values)
            row = select(
                *(
                    value
                    if isinstance(value, ColumnElement)
                    else literal(value, effects.c[name].type)
                    for name, value in values.items()
                )
            )
            newer = self._newer_claim(values, phase)
            stmt = self._insert(effects).from_select(names, row.where(~newer.exists()))
        # RETURNING, not rowcount: psycopg reports -1 for a skipped insert here.
        stmt = stmt.on_conflict_do_nothing().returning(effects.c.id)
        if self.connection.execute(stmt).first() is not None:
            return Intent.RECORDED
        if phase is not None and self.connection.execute(self._newer_claim(values, phase)).first():
            return Intent.FENCED
        return Intent.KNOWN

    @staticmethod
    def _newer_claim(values: Mapping[str, Any], phase: str) -> Any:
        """The execution an effect is made by, if a claim newer than its fence is on record."""
        key = ExecutionKey(values["run_id"], values["node"], values["iteration"], phase)
        return select(executions.c.fence).where(where(key), executions.c.fence > values["fence"])

    def effect(self, namespace: str, key: str, *, lock: bool = False) -> EffectRecord | None:
        query = select(effects).where(effects.c.namespace == namespace, effects.c.key == key)
        if lock:
            query = query.with_for_update()
        row = self.connection.execute(query).first()
        return None if row is None else EffectRecord.of(row)

    def update_effect(
        self,
        effect_id: int,
        changes: Mapping[str, Any],
        *,
        status: str | None = None,
        fence_at_most: int | None = None,
        claim: tuple[ExecutionKey, int] | None = None,
    ) -> bool:
        """Change an effect, only while it is in ``status``, no claim newer than
        ``fence_at_most`` has taken it over, and — ``claim``: (execution, fence) — that
        execution has no claim newer than that fence on record; True if it changed."""
        query = update(effects).where(effects.c.id == effect_id)
        if status is not None:
            query = query.where(effects.c.status == status)
        if fence_at_most is not None:
            query = query.where(effects.c.fence <= fence_at_most)
        if claim is not None:
            execution, fence = claim
            newer = select(executions.c.fence).where(where(execution), executions.c.fence > fence)
            query = query.where(~newer.exists())
        values = {**changes, "updated_at": self.stamp()}
        return bool(self.connection.execute(query.values(**values)).rowcount)

    def effects_to_check(
        self, stale_before: float, limit: int, namespace: str | None = None
    ) -> list[Any]:
        """Ids of the effects the reconciler should look at (of ``namespace`` only, if
        given): intents and unknown outcomes older than ``stale_before`` (their caller may
        have died; their call's response was lost), and applied effects never checked
        against the outside world."""
        unsettled = effects.c.status.in_(["intent", "unknown"])
        query = (
            select(effects.c.id)
            .where(
                (unsettled & (effects.c.updated_at < from_epoch(stale_before)))
                | ((effects.c.status == "applied") & effects.c.checked_at.is_(None))
            )
            .order_by(effects.c.id)
            .limit(limit)
        )
        if namespace is not None:
            query = query.where(effects.c.namespace == namespace)
        return [row.id for row in self.connection.execute(query)]

    def claim_effect(self, effect_id: int) -> EffectRecord | None:
        """Lock an effect for this transaction, or None if another holds it (PostgreSQL
        skips it; SQLite has one writer anyway)."""
        query = select(effects).where(effects.c.id == effect_id)
        row = self.connection.execute(self._skip_locked(query)).first()
        return None if row is None else EffectRecord.of(row)

    def effects_of(self, run_id: str) -> list[EffectRecord]:
        found = self.connection.execute(
            select(effects).where(effects.c.run_id == run_id).order_by(effects.c.id)
        )
        return [EffectRecord.of(row) for row in found]
