"""The outbox, the inbox and webhook notifications: messages written with the decision
that makes them, and taken by one relay, applier or notifier each."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Table, and_, delete, func, insert, not_, or_, select, update

from cairn.model.statuses import ExecutionStatus
from cairn.model.workflow_names import DEFAULT_NAMESPACE
from cairn.store.base import TxBase
from cairn.store.records import (
    FleetGauges,
    from_epoch,
    to_epoch,
    utcnow,
)
from cairn.store.schema import (
    effects,
    executions,
    inbox,
    notifications,
    outbox,
    runs,
    timers,
)

_HELD, _FAILED = ExecutionStatus.HELD.value, ExecutionStatus.FAILED.value


@dataclass(frozen=True)
class HeldQueues:
    """The (namespace, queue) pairs whose messages stay in the outbox, and the queue a
    message naming none goes to. Rows of the ``waiting`` queues — a backlog in the broker,
    where a message carrying them may wait (cairn.engine.grouping) — stay too, unless
    written before ``waiting_since``."""

    pairs: frozenset[tuple[str, str]] = frozenset()
    default_queue: str = "cairn"
    waiting: frozenset[str] = frozenset()
    waiting_since: float = float("-inf")


def _unsent(older_than: float, held: HeldQueues) -> list[Any]:
    conditions = [outbox.c.sent_at.is_(None), outbox.c.created_at < from_epoch(older_than)]
    queue = func.coalesce(outbox.c.payload["queue"].as_string(), held.default_queue)
    if held.pairs:
        namespace = func.coalesce(outbox.c.payload["namespace"].as_string(), DEFAULT_NAMESPACE)
        conditions.append(
            not_(or_(*(and_(namespace == ns, queue == name) for ns, name in held.pairs)))
        )
    if held.waiting:
        conditions.append(
            or_(
                queue.not_in(sorted(held.waiting)),
                outbox.c.created_at < from_epoch(held.waiting_since),
            )
        )
    return conditions


class MessagesTx(TxBase):
    """Outbox, inbox and notifications, and the fleet's backlog gauges."""

    def has_unsent(self, older_than: float, held: HeldQueues = HeldQueues()) -> bool:
        query = select(outbox.c.id).where(*_unsent(older_than, held)).limit(1)
        return self.connection.execute(query).first() is not None

    def claim_unsent(
        self, older_than: float, limit: int, held: HeldQueues = HeldQueues()
    ) -> list[Any]:
        """Unsent rows, locked, but those of ``held`` (paused) queues; rows another relay
        holds are skipped, not waited for."""
        query = select(outbox).where(*_unsent(older_than, held)).order_by(outbox.c.id).limit(limit)
        return list(self.connection.execute(self._skip_locked(query)))

    def defer_unsent(self, ids: Sequence[int]) -> None:
        """Unsent rows the relay found in hand (their execution's lease held: a worker
        continued with it instead of publishing it) wait a full relay interval again."""
        if ids:
            self.connection.execute(
                update(outbox)
                .where(outbox.c.id.in_(list(ids)), outbox.c.sent_at.is_(None))
                .values(created_at=self.stamp())
            )

    def _mark_sent_statement(self, ids: Sequence[int]) -> Any:
        return self._sent_update(outbox.c.id.in_(list(ids)))

    def _sent_update(self, chosen: Any) -> Any:
        """Mark the ``chosen`` outbox rows sent, once: a second mark changes nothing."""
        return (
            update(outbox)
            .where(chosen, outbox.c.sent_at.is_(None))
            .values(sent_at=self.stamp(), publishes=outbox.c.publishes + 1)
        )

    def return_to_outbox(self, run_id: str, payload: Mapping[str, Any]) -> int:
        """A node message a worker received for a paused queue, unsent again: the relay
        publishes it once the queue resumes. Returns its new row's id."""
        stmt = insert(outbox).values(
            run_id=run_id, topic="node", payload=dict(payload), created_at=self.stamp()
        )
        return int(self.connection.execute(stmt.returning(outbox.c.id)).scalar_one())

    def mark_sent(self, ids: Sequence[int]) -> None:
        if ids:
            self.connection.execute(self._mark_sent_statement(ids))

    def post(self, run_id: str, event: Mapping[str, Any]) -> int:
        """Leave an event for ``run_id`` in the inbox; returns its id."""
        stmt = insert(inbox).values(run_id=run_id, event=dict(event), created_at=self.stamp())
        return int(self.connection.execute(stmt.returning(inbox.c.id)).scalar_one())

    def posted(self, limit: int) -> list[Any]:
        """Inbox entries, oldest first: (id, run_id)."""
        return list(
            self.connection.execute(
                select(inbox.c.id, inbox.c.run_id).order_by(inbox.c.id).limit(limit)
            )
        )

    def take_posted(self, entry_id: int) -> dict[str, Any] | None:
        """Remove an inbox entry and return its event; None if another process took it."""
        row = self.connection.execute(
            delete(inbox).where(inbox.c.id == entry_id).returning(inbox.c.event)
        ).first()
        return dict(row.event) if row is not None else None

    def add_notification(self, values: Mapping[str, Any]) -> bool:
        """Queue a notification; False if its event id is queued already."""
        stmt = self._insert(notifications).values(**values).on_conflict_do_nothing()
        return self.connection.execute(stmt.returning(notifications.c.id)).first() is not None

    def claim_notifications(self, now: float, hold_s: float, limit: int) -> list[Any]:
        """Take the due notifications, oldest due first, for ``hold_s`` seconds: their
        ``due_at`` moves past the delivery's timeout, so a notifier that dies mid-delivery
        leaves them to another once that passes, and two notifiers never hold the same.
        Each claim counts an attempt."""
        due = (
            select(notifications.c.id)
            .where(
                notifications.c.delivered_at.is_(None),
                notifications.c.given_up_at.is_(None),
                notifications.c.due_at <= from_epoch(now),
            )
            .order_by(notifications.c.due_at)
            .limit(limit)
        )
        due = self._skip_locked(due)
        claim = (
            update(notifications)
            .where(notifications.c.id.in_(due.scalar_subquery()))
            .values(due_at=from_epoch(now + hold_s), attempts=notifications.c.attempts + 1)
            .returning(*notifications.c)
        )
        return list(self.connection.execute(claim))

    def settle_notification(
        self,
        notification_id: int,
        attempts: int,
        *,
        status: int | None,
        error: str | None,
        delivered: bool = False,
        retry_at: float | None = None,
    ) -> bool:
        """Record a delivery attempt's outcome: delivered, to be retried at ``retry_at``,
        or (neither) given up. Only the holder of attempt ``attempts`` may: a notifier
        whose hold lapsed while it waited on a slow receiver records nothing."""
        values: dict[str, Any] = {"last_status": status, "last_error": error}
        if delivered:
            values["delivered_at"] = utcnow()
        elif retry_at is not None:
            values["due_at"] = from_epoch(retry_at)
        else:
            values["given_up_at"] = utcnow()
        stmt = (
            update(notifications)
            .where(
                notifications.c.id == notification_id,
                notifications.c.attempts == attempts,
                notifications.c.delivered_at.is_(None),
                notifications.c.given_up_at.is_(None),
            )
            .values(**values)
        )
        return bool(self.connection.execute(stmt.returning(notifications.c.id)).first())

    def notifications_of(self, run_id: str) -> list[Any]:
        return list(
            self.connection.execute(
                select(notifications)
                .where(notifications.c.run_id == run_id)
                .order_by(notifications.c.id)
            )
        )

    def fleet_gauges(self, now: float) -> FleetGauges:
        """What the fleet's backlogs look like now, for a metrics scrape: a few indexed
        aggregates, no row read one by one."""

        def backlog(table: Table, stamp: Any, *where: Any) -> tuple[int, float | None]:
            count, oldest = self.connection.execute(
                select(func.count(), func.min(stamp)).select_from(table).where(*where)
            ).one()
            return int(count), (to_epoch(oldest) if oldest is not None else None)

        by_status = self.connection.execute(
            select(runs.c.status, func.count()).group_by(runs.c.status)
        )
        effects_by_status = self.connection.execute(
            select(effects.c.status, func.count()).group_by(effects.c.status)
        )
        held = self.connection.execute(
            select(func.count()).select_from(executions).where(executions.c.status == _HELD)
        ).scalar_one()
        return FleetGauges(
            runs={str(status): int(count) for status, count in by_status},
            effects={str(status): int(count) for status, count in effects_by_status},
            held_executions=int(held),
            unsent=backlog(outbox, outbox.c.created_at, outbox.c.sent_at.is_(None)),
            due_timers=backlog(
                timers,
                timers.c.due_at,
                timers.c.fired_at.is_(None),
                timers.c.due_at <= from_epoch(now),
            ),
            inbox=backlog(inbox, inbox.c.created_at),
            notifications=backlog(
                notifications,
                notifications.c.created_at,
                notifications.c.delivered_at.is_(None),
                notifications.c.given_up_at.is_(None),
            ),
        )
