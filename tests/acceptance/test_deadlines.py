"""Deadlines that hold, on real services: a handler that hangs past its node's timeout —
in a plain ``time.sleep``, deaf to ``ctx.cancelled``, or deaf to being interrupted too —
is superseded: its retry runs and the run succeeds, and the stuck attempt never commits.
"""

from __future__ import annotations

import time

import pytest

from cairn.model.statuses import RunStatus
from tests.support.cluster import Cluster

# It measures how soon a hung handler is replaced: run alone, after the rest (make test).
pytestmark = pytest.mark.serial

GRACE = {"CAIRN_TIMEOUT_GRACE": "2"}


def _lines(cluster: Cluster, run_id: str) -> list[tuple[int, str]]:
    """(attempt, what) of the ``ask`` node, in the handlers' own ledger."""
    found = []
    for line in cluster.ledger.read_text().splitlines():
        run, node, _iteration, attempt, what, _pid = line.split()
        if run == run_id and node == "ask":
            found.append((int(attempt), what))
    return found


def _succeeded_attempts(cluster: Cluster, run_id: str) -> list[int]:
    return [
        event["data"]["attempt"]
        for event in cluster.client.events(run_id)
        if event["type"] == "node_succeeded" and event["data"]["node"] == "ask"
    ]


def test_a_handler_blocked_in_sleep_is_stopped_at_its_timeout_and_its_retry_succeeds(
    cluster: Cluster,
) -> None:
    """The issue's case: ``time.sleep(600)`` ignoring ``ctx.cancelled``, ``timeout: 4s``,
    ``retry: {attempts: 3}``. One worker slot: the retry can only run once the stuck
    attempt has let go of it."""
    worker = cluster.worker(concurrency=1, **GRACE)
    cluster.consuming(worker)
    cluster.scheduler()
    started = time.monotonic()
    run_id = cluster.submit("deadline")
    view = cluster.wait(run_id, timeout_s=60)
    elapsed = time.monotonic() - started
    assert view.status is RunStatus.SUCCEEDED, view.reason
    assert view.state is not None and view.state.vars["answered_on_attempt"] == 2
    assert elapsed < 4 + 2 + cluster.settings.lease_ttl + 5, elapsed
    assert _lines(cluster, run_id) == [(1, "start"), (2, "start"), (2, "done")]
    assert _succeeded_attempts(cluster, run_id) == [2]
    print(f"\nhung handler (sleep): succeeded on attempt 2 after {elapsed:.1f} s")


def test_a_handler_deaf_to_interruption_has_its_process_replaced(cluster: Cluster) -> None:
    """It blocks SIGALRM and swallows whatever it is told: past its timeout and grace
    period its worker process ends itself, the pool starts another, and the retry runs
    there. The stuck attempt never commits."""
    worker = cluster.worker(concurrency=1, **GRACE)
    cluster.consuming(worker)
    cluster.scheduler()
    started = time.monotonic()
    run_id = cluster.submit("deadline", {"deaf": True})
    view = cluster.wait(run_id, timeout_s=60)
    elapsed = time.monotonic() - started
    assert view.status is RunStatus.SUCCEEDED, view.reason
    assert view.state is not None and view.state.vars["answered_on_attempt"] == 2
    assert _lines(cluster, run_id) == [(1, "start"), (2, "start"), (2, "done")]
    assert _succeeded_attempts(cluster, run_id) == [2]
    log = worker.log_path.read_text(errors="replace")  # type: ignore[attr-defined]
    assert "ending worker process" in log
    assert elapsed < 4 + 2 + cluster.settings.lease_ttl + 10, elapsed
    print(f"\nhung handler (deaf): succeeded on attempt 2 after {elapsed:.1f} s")
