"""The schedules table: a schedule's definition, and where its ticks stand — locked by
the one scheduler that looks at it now (``SKIP LOCKED``: the others pass it by)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import delete, select, update

from cairn.store.base import TxBase
from cairn.store.records import ScheduleRecord, from_epoch, to_epoch
from cairn.store.schema import runs, schedules

# The columns a schedule's definition sets; the rest are its ticks' state.
DEFINITION = (
    "workflow",
    "version",
    "cron",
    "timezone",
    "input",
    "overlap",
    "catch_up_s",
    "jitter_s",
)
_TIMES = ("ticks_from", "next_at", "buffered_at", "last_tick_at", "created_at", "updated_at")


def _stamped(values: Mapping[str, Any]) -> dict[str, Any]:
    """Epoch seconds as the columns' timestamps."""
    return {
        name: (from_epoch(value) if name in _TIMES and value is not None else value)
        for name, value in values.items()
    }


def _key(namespace: str, name: str) -> Any:
    return (schedules.c.namespace == namespace) & (schedules.c.name == name)


class SchedulesTx(TxBase):
    """Schedules: added, changed, paused and deleted by people; ticked by schedulers."""

    def insert_schedule(self, values: Mapping[str, Any]) -> bool:
        """A new schedule (every column); False if the name is taken in its namespace."""
        stmt = self._insert(schedules).values(**_stamped(values)).on_conflict_do_nothing()
        return self.connection.execute(stmt.returning(schedules.c.name)).first() is not None

    def update_schedule(self, namespace: str, name: str, values: Mapping[str, Any]) -> bool:
        """Change columns of a schedule; False if there is none of that name."""
        stmt = update(schedules).where(_key(namespace, name)).values(**_stamped(values))
        return self.connection.execute(stmt.returning(schedules.c.name)).first() is not None

    def schedule(self, namespace: str, name: str) -> ScheduleRecord | None:
        row = self.connection.execute(select(schedules).where(_key(namespace, name))).first()
        return None if row is None else ScheduleRecord.of(row)

    def lock_schedule(
        self, namespace: str, name: str, *, skip_locked: bool = False
    ) -> ScheduleRecord | None:
        """The schedule, locked for this transaction; with ``skip_locked``, None while
        another transaction holds it (another scheduler is ticking it)."""
        query = select(schedules).where(_key(namespace, name))
        query = self._skip_locked(query) if skip_locked else query.with_for_update()
        row = self.connection.execute(query).first()
        return None if row is None else ScheduleRecord.of(row)

    def schedules_of(self, namespace: str, limit: int = 1000) -> list[ScheduleRecord]:
        rows = self.connection.execute(
            select(schedules)
            .where(schedules.c.namespace == namespace)
            .order_by(schedules.c.name)
            .limit(limit)
        )
        return [ScheduleRecord.of(row) for row in rows]

    def due_schedules(self, before: float, limit: int) -> list[tuple[str, str, float]]:
        """(namespace, name, next_at) of the unpaused schedules due before ``before``,
        soonest first."""
        rows = self.connection.execute(
            select(schedules.c.namespace, schedules.c.name, schedules.c.next_at)
            .where(
                schedules.c.paused.is_(False),
                schedules.c.next_at.is_not(None),
                schedules.c.next_at <= from_epoch(before),
            )
            .order_by(schedules.c.next_at)
            .limit(limit)
        )
        return [(row.namespace, row.name, to_epoch(row.next_at)) for row in rows]

    def delete_schedule(self, namespace: str, name: str) -> bool:
        stmt = delete(schedules).where(_key(namespace, name))
        return self.connection.execute(stmt.returning(schedules.c.name)).first() is not None

    def runs_of_schedule(self, namespace: str, name: str, limit: int) -> list[Any]:
        """The runs the schedule's ticks (and backfills) started, newest tick first: their
        request ids are ``schedule:<name>:<tick>``."""
        prefix = f"schedule:{name}:"
        return list(
            self.connection.execute(
                select(runs.c.id, runs.c.request_id, runs.c.status, runs.c.created_at)
                .where(
                    runs.c.namespace == namespace,
                    runs.c.request_id.startswith(prefix, autoescape=True),
                )
                .order_by(runs.c.request_id.desc())
                .limit(limit)
            )
        )
