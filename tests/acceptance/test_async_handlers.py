"""Async handlers on real services (PostgreSQL, Redis, Celery workers in subprocesses):
``async def`` handlers and compensations beside synchronous ones, an awaited effect applied
once, and an await that never returns stopped where it waits — by the node's timeout
(and the retry runs) or by the run's cancel — with the handler's cleanup run and its
connection closed."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from cairn.model.statuses import RunStatus
from tests.support.cluster import Cluster
from tests.support.shop import Service
from tests.support.silent import Silent, silent_server


@pytest.fixture
def silent() -> Iterator[Silent]:
    with silent_server() as server:
        yield server


def _lines(cluster: Cluster, run_id: str) -> list[tuple[str, int, str]]:
    """(node, attempt, what) of the run, in the handlers' own ledger."""
    found = []
    for line in cluster.ledger.read_text().splitlines():
        run, node, _iteration, attempt, what, _pid = line.split()
        if run == run_id:
            found.append((node, int(attempt), what))
    return found


def test_an_async_handler_hung_at_an_await_is_cancelled_there_at_its_timeout(
    cluster: Cluster, silent: Silent
) -> None:
    """``await client.get(...)`` on a server that never answers, no client timeout,
    ``timeout: 4s``: the coroutine is cancelled at that await (its cleanup records it),
    its connection closed, and attempt 2 runs — on the one worker slot, whose process
    need not be replaced."""
    worker = cluster.worker(concurrency=1, CAIRN_TIMEOUT_GRACE="2")
    cluster.consuming(worker)
    cluster.scheduler()
    started = time.monotonic()
    run_id = cluster.submit("async_deadline", {"silent_url": silent.url})
    view = cluster.wait(run_id, timeout_s=60)
    elapsed = time.monotonic() - started
    assert view.status is RunStatus.SUCCEEDED, view.reason
    assert view.state is not None and view.state.vars["answered_on_attempt"] == 2
    assert _lines(cluster, run_id) == [
        ("ask", 1, "start"),
        ("ask", 1, "cancelled"),
        ("ask", 2, "start"),
        ("ask", 2, "done"),
    ]
    assert elapsed < 4 + 2 + cluster.settings.lease_ttl + 5, elapsed
    assert silent.accepted == 1
    cluster.wait_for(lambda: silent.open_now == 0, 5, "the cancelled call's connection closed")
    log = worker.log_path.read_text(errors="replace")  # type: ignore[attr-defined]
    assert "ending worker process" not in log  # cancelled, not killed
    print(f"\nasync handler hung at an await: succeeded on attempt 2 after {elapsed:.1f} s")


def test_sync_and_async_handlers_run_side_by_side_and_an_awaited_effect_applies_once(
    shop: Cluster, service: Service
) -> None:
    shop.worker(concurrency=4)
    shop.scheduler()
    shipped = shop.submit("async_mix", {"order": "o-1"})
    refused = shop.submit("async_mix", {"order": "o-2", "shipping": "refused"})
    view = shop.wait(shipped)
    assert view.status is RunStatus.SUCCEEDED, view.reason
    assert view.state is not None and view.state.vars["charge_id"]
    assert [m["content"] for m in view.state.messages if m["role"] == "assistant"] == [
        "turn 0",
        "turn 1",
        "turn 2",
    ]
    rolled_back = shop.wait(refused)
    assert rolled_back.status is RunStatus.COMPENSATED, rolled_back.reason
    undone = [(node, what) for node, _attempt, what in _lines(shop, refused) if what == "undo"]
    assert undone == [("charge", "undo"), ("think", "undo")]  # async compensations, last first
    stats = service.stats()
    assert stats["applied"] == {"o-1:charge": 1, "o-2:charge": 1}
    assert stats["requested"] == {"o-1:charge": 1, "o-2:charge": 1}


def test_a_cancel_stops_an_async_handler_at_its_await_and_keeps_its_partial_output(
    cluster: Cluster, silent: Silent
) -> None:
    worker = cluster.spawn("worker", "--concurrency=2", "--pool=threads")
    cluster.consuming(worker)
    cluster.scheduler()
    run_id = cluster.submit("async_listen", {"silent_url": silent.url})
    cluster.wait_for(lambda: silent.open_now == 1, 30, "the handler's stream open")
    asked = time.monotonic()
    assert cluster.client.cancel(run_id, "the user closed the tab", actor="user")
    cluster.wait_for(lambda: silent.open_now == 0, 10, "the stream closed")
    closed_after = time.monotonic() - asked
    view = cluster.wait(run_id, timeout_s=30)
    assert view.status is RunStatus.CANCELLED, view.reason
    assert _lines(cluster, run_id) == [("listen", 1, "start"), ("listen", 1, "cancelled")]
    # What it had when stopped is kept, readable: in the state and in its execution.
    assert view.state is not None and view.state.vars["partial"] == "what the stream had said"
    with cluster.client.runtime.store.reading() as tx:
        (execution,) = tx.executions_of(run_id)
    assert execution.result == {"partial": "what the stream had said"}
    # Noticed on the next heartbeat (CAIRN_HEARTBEAT_INTERVAL), then closed at once.
    assert closed_after < cluster.settings.heartbeat_interval + 3, closed_after
    print(f"\ncancel -> stream closed after {closed_after:.2f} s")
