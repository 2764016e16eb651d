"""Webhook delivery without services: runs finished by the embedded runtime's workers are
announced through the outbox to a mocked receiver — retried until taken, given up on a
410 or the last attempt, never sent unsigned, a lapsed hold recording nothing. Signing,
URL checks and what a step announces: tests/unit/test_webhooks.py."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import httpx

from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from cairn.scheduler.notifier import Notifier
from cairn.testing.clock import FakeClock
from cairn.webhooks import WebhookSecrets, verify
from tests.support.embedded import wait
from tests.unit.test_webhooks import SECRET, _runtime


class Receiver:
    def __init__(self, *statuses: int) -> None:
        self.statuses = list(statuses)
        self.requests: list[httpx.Request] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        status = self.statuses.pop(0) if self.statuses else 200
        return httpx.Response(status, text="nope" if status >= 300 else "")


def _notifier(runtime: Runtime, receiver: Receiver) -> Notifier:
    client = httpx.Client(transport=httpx.MockTransport(receiver))
    return Notifier(runtime.store, runtime.settings, client=client)


def _deliver_all(notifier: Notifier, until: Any, clock: FakeClock, timeout_s: float = 10.0) -> None:
    """Notifier passes until ``until()``, the database's clock (SQLite: this process's
    wall clock) moved 10 ms after each: retries come due without waiting for them."""
    deadline = time.monotonic() + timeout_s
    while not until():
        assert time.monotonic() < deadline
        notifier.run_once()
        clock.advance(0.01)


def _rows(runtime: Runtime, run_id: str) -> list[Any]:
    with runtime.store.reading() as tx:
        return tx.notifications_of(run_id)


def test_a_run_is_announced_through_the_outbox_and_retried_until_taken(
    tmp_path: Path, wall_clock: FakeClock
) -> None:
    runtime = _runtime(tmp_path)
    runtime.start_workers()
    try:
        run_id = runtime.orchestrator.submit(
            "chain10", {"ledger": str(tmp_path / "ledger")}, webhook="https://hooks.test/x"
        )
        assert wait(runtime, run_id) is RunStatus.SUCCEEDED
        (row,) = _rows(runtime, run_id)  # written with the last step, not delivered yet
        assert (row.kind, row.attempts, row.delivered_at) == ("run.succeeded", 0, None)
        receiver = Receiver(500, 503)
        notifier = _notifier(runtime, receiver)
        _deliver_all(
            notifier, lambda: _rows(runtime, run_id)[0].delivered_at is not None, wall_clock
        )
        (row,) = _rows(runtime, run_id)
        assert (row.attempts, row.last_status) == (3, 200)
        assert [r.headers["Cairn-Delivery-Attempt"] for r in receiver.requests] == ["1", "2", "3"]
        for request in receiver.requests:
            assert request.headers["Cairn-Event-Id"] == row.event_id
            verify(request.content, request.headers["Cairn-Signature"], SECRET)
        assert notifier.run_once() == 0  # delivered: never again
    finally:
        runtime.close()


def test_a_gone_receiver_and_the_last_attempt_give_up(
    tmp_path: Path, wall_clock: FakeClock
) -> None:
    runtime = _runtime(tmp_path, webhook_max_attempts=2)
    runtime.start_workers()
    try:
        gone = runtime.orchestrator.submit(
            "chain10", {"ledger": str(tmp_path / "l1")}, webhook="https://hooks.test/gone"
        )
        failing = runtime.orchestrator.submit(
            "chain10", {"ledger": str(tmp_path / "l2")}, webhook="https://hooks.test/down"
        )
        for run_id in (gone, failing):
            assert wait(runtime, run_id) is RunStatus.SUCCEEDED

        def answer(request: httpx.Request) -> httpx.Response:
            return httpx.Response(410 if request.url.path == "/gone" else 500)

        notifier = Notifier(
            runtime.store,
            runtime.settings,
            client=httpx.Client(transport=httpx.MockTransport(answer)),
        )
        _deliver_all(
            notifier,
            lambda: all(_rows(runtime, r)[0].given_up_at is not None for r in (gone, failing)),
            wall_clock,
        )
        assert (_rows(runtime, gone)[0].attempts, _rows(runtime, gone)[0].last_status) == (1, 410)
        assert _rows(runtime, failing)[0].attempts == 2
    finally:
        runtime.close()


def test_nothing_is_sent_unsigned_and_a_lapsed_hold_records_nothing(tmp_path: Path) -> None:
    runtime = _runtime(tmp_path)
    runtime.start_workers()
    try:
        run_id = runtime.orchestrator.submit(
            "chain10", {"ledger": str(tmp_path / "ledger")}, webhook="https://hooks.test/x"
        )
        assert wait(runtime, run_id) is RunStatus.SUCCEEDED
        receiver = Receiver()
        unsigned = Notifier(
            runtime.store,
            runtime.settings,
            secrets=WebhookSecrets({}),
            client=httpx.Client(transport=httpx.MockTransport(receiver)),
        )
        assert unsigned.run_once() == 1
        (row,) = _rows(runtime, run_id)
        assert receiver.requests == []
        assert row.delivered_at is None and "no webhook secret" in row.last_error
        with runtime.store.transaction() as tx:  # another notifier took it over since
            assert not tx.settle_notification(row.id, row.attempts - 1, status=200, error=None)
    finally:
        runtime.close()
