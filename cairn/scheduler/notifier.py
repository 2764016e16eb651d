"""Delivering webhook notifications: the scheduler's notifier thread.

Notifications are committed with the decision they report (see
:mod:`cairn.engine.notices`); the notifier takes the due ones, a batch at a time,
POSTs each — signed, with its event id — and records the outcome. A receiver that
answers 2xx has it; anything else (an error status, a timeout, a refused connection) is
retried with exponential backoff and jitter, until ``CAIRN_WEBHOOK_MAX_ATTEMPTS``; a
``410 Gone`` stops at once (the receiver asks not to be called again), and so does a
host that resolves to an address webhooks may not call (:mod:`cairn.webhooks.targets`):
that is the deployment's policy, which asking again will not change. Redirects are not
followed: a webhook URL is fixed when the run is submitted, and a redirect could lead a
signed body anywhere.

Delivery is at least once: a notifier that dies after the receiver answered but before
recording it delivers again later, with the same event id for the receiver to drop.
It runs in a thread of its own, so a slow receiver never delays timers or recovery.
"""

from __future__ import annotations

import json
import logging
import random
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx

from cairn.config import Settings
from cairn.observe.metrics.scheduler import SchedulerMetrics
from cairn.reconnect import is_outage
from cairn.store.sql import Store
from cairn.webhooks.signing import (
    EVENT_ID_HEADER,
    EVENT_TYPE_HEADER,
    SIGNATURE_HEADER,
    WebhookSecrets,
)
from cairn.webhooks.signing import sign as sign_body
from cairn.webhooks.targets import WebhookTargetRefused
from cairn.webhooks.transport import webhook_client

log = logging.getLogger(__name__)

BATCH = 32
PARALLEL_DELIVERIES = 8
GONE = 410
MAX_ERROR_CHARS = 500


@dataclass(frozen=True)
class Attempt:
    """One delivery's outcome: the receiver's status (None: no answer), what failed, and
    whether trying again is pointless (a 410, a refused address)."""

    status: int | None
    error: str | None = None
    final: bool = False

    @property
    def delivered(self) -> bool:
        return self.status is not None and 200 <= self.status < 300


class Notifier:
    def __init__(
        self,
        store: Store,
        settings: Settings,
        secrets: WebhookSecrets | None = None,
        client: httpx.Client | None = None,
        metrics: SchedulerMetrics | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.metrics = metrics if metrics is not None else SchedulerMetrics()
        self.secrets = secrets if secrets is not None else WebhookSecrets.from_settings(settings)
        self.client = client or webhook_client(settings)
        self._pool = ThreadPoolExecutor(PARALLEL_DELIVERIES, thread_name_prefix="cairn-webhook")

    def run_once(self) -> int:
        """Deliver what is due; returns how many notifications were attempted."""
        # Held past the whole delivery: none is taken twice while its POST is in flight.
        hold_s = self.settings.webhook_timeout_s + 30.0
        with self.store.transaction() as tx:
            rows = tx.claim_notifications(tx.now(), hold_s, BATCH)
        if not rows:
            return 0
        # One run's notifications go out one after another, in the order they were
        # committed (the run's order); different runs' in parallel.
        by_run: dict[str, list[Any]] = {}
        for row in sorted(rows, key=lambda r: r.id):
            by_run.setdefault(row.run_id, []).append(row)
        delivered = [
            pair
            for pairs in self._pool.map(self._deliver_in_order, by_run.values())
            for pair in pairs
        ]
        with self.store.transaction() as tx:
            now = tx.now()
            for row, attempt in delivered:
                self._settle(tx, row, attempt, now)
        return len(rows)

    def _deliver_in_order(self, rows: list[Any]) -> list[tuple[Any, Attempt]]:
        return [(row, self.deliver(row)) for row in rows]

    def deliver(self, row: Any) -> Attempt:
        secrets = self.secrets.of(row.namespace)
        if not secrets:  # never send unsigned; the secret may yet be configured
            return Attempt(None, f"no webhook secret for namespace {row.namespace!r}")
        body = json.dumps(row.body, separators=(",", ":"), sort_keys=True).encode()
        headers = {
            "Content-Type": "application/json",
            SIGNATURE_HEADER: sign_body(body, secrets),
            EVENT_ID_HEADER: row.event_id,
            EVENT_TYPE_HEADER: row.kind,
            "Cairn-Delivery-Attempt": str(row.attempts),
        }
        try:
            response = self.client.post(row.url, content=body, headers=headers)
        except WebhookTargetRefused as exc:  # nothing was sent
            return Attempt(None, f"refused: {exc}"[:MAX_ERROR_CHARS], final=True)
        except httpx.HTTPError as exc:
            return Attempt(None, f"{type(exc).__name__}: {exc}"[:MAX_ERROR_CHARS])
        if 200 <= response.status_code < 300:
            return Attempt(response.status_code)
        error = response.text[:MAX_ERROR_CHARS] or None
        return Attempt(response.status_code, error, final=response.status_code == GONE)

    def _settle(self, tx: Any, row: Any, attempt: Attempt, now: float) -> None:
        settings = self.settings
        retry_at = None
        retriable = not attempt.delivered and not attempt.final
        if retriable and row.attempts < settings.webhook_max_attempts:
            retry_at = now + backoff_s(row.attempts, settings)
        recorded = tx.settle_notification(
            row.id,
            row.attempts,
            status=attempt.status,
            error=attempt.error,
            delivered=attempt.delivered,
            retry_at=retry_at,
        )
        if not recorded:  # our hold lapsed and another notifier took it over
            return
        outcome = "delivered" if attempt.delivered else "retry" if retry_at else "given_up"
        self.metrics.webhooks.labels(outcome).inc()
        what = f"webhook {row.event_id} ({row.kind}) to {row.url}"
        if attempt.delivered:
            log.info("%s delivered (attempt %d)", what, row.attempts)
        elif retry_at is not None:
            log.warning(
                "%s: attempt %d failed (%s); again in %.1f s",
                what,
                row.attempts,
                attempt.status or attempt.error,
                retry_at - now,
            )
        else:
            log.error(
                "%s given up after %d attempt(s): %s",
                what,
                row.attempts,
                attempt.status or attempt.error,
            )

    def run_forever(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                busy = self.run_once()
            except Exception as error:
                if not is_outage(error):
                    log.exception("webhook delivery pass failed")
                busy = 0
            if not busy:
                stop.wait(self.settings.scheduler_interval)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
        self.client.close()


def backoff_s(attempts: int, settings: Settings) -> float:
    """Delay before the next delivery after ``attempts`` failed ones: doubling from
    the base, capped, with jitter so that a receiver back from an outage is not hit by
    every retry at the same moment."""
    doubled: float = settings.webhook_retry_base_s * 2.0 ** min(attempts - 1, 30)
    return min(settings.webhook_retry_max_s, doubled) * random.uniform(0.5, 1.0)
