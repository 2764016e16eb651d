"""Async nodes that hold no worker, on real services (PostgreSQL, Redis, a Celery worker
in a subprocess with no pool options, the model stand-in counting the requests it holds
open): one default worker keeps hundreds of async nodes awaiting at once; killed with
``SIGKILL`` while 200 await, its nodes are taken over by the next worker, every run ends
succeeded, and each call is answered once — the one each node had answered before the
kill from its record, the one it was awaiting sent again."""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Iterator

import pytest
import redis

from cairn.engine.batches import SubmitItem
from cairn.model.statuses import RunStatus
from cairn.testing.model_server import ModelServer, Reply, Request
from tests.support.cluster import Cluster

RUNS = 200
# Leases renewed for 100 nodes a process, one after the other by its heartbeat thread
# (a Redis call and a cancel check each, about 5 ms here, many times that on a machine
# whose cores are all taken): the fast test settings (renewed every 0.5 s, a 2 s TTL,
# a node without a lease for 2 s recovered) would let leases lapse while their nodes
# await, and a queue 200 deep would have its waiting messages dispatched again.
LEASES = {
    "CAIRN_LEASE_TTL": "15",
    "CAIRN_HEARTBEAT_INTERVAL": "3",
    "CAIRN_RECOVERY_AFTER": "15",
}


def _call(request: Request) -> tuple[str, str]:
    """(which call, run id) a request of ``awaits_model`` names."""
    call, run_id = str(request.body["messages"][-1]["content"]).split()
    return call, run_id


def _held_open(request: Request) -> Reply | None:
    if _call(request)[0] == "held":
        return Reply(text="held reply", until_released=True)
    return None  # the first call: the default reply, at once


@pytest.fixture
def model(cluster: Cluster) -> Iterator[ModelServer]:
    with ModelServer(responder=_held_open) as server:
        cluster.env["MODEL_URL"] = server.url
        yield server


def _submit(cluster: Cluster, count: int) -> list[str]:
    items = [SubmitItem("async_awaits", {}) for _ in range(count)]
    answers = cluster.client.runtime.orchestrator.submit_batch(items)
    run_ids = [answer.run_id for answer in answers]
    assert all(run_ids), [answer.error for answer in answers if not answer.ok]
    return [run_id for run_id in run_ids if run_id is not None]


def _counted(requests: list[Request], run_ids: list[str]) -> Counter[tuple[str, str]]:
    mine = set(run_ids)
    return Counter(call for call in map(_call, requests) if call[1] in mine)


@pytest.mark.timeout(420)  # 400 runs and a recovery: over a minute alone, more beside others
def test_one_default_worker_keeps_200_async_nodes_awaiting_and_a_kill_loses_none(
    cluster: Cluster, model: ModelServer
) -> None:
    worker = cluster.spawn("worker", env=LEASES)  # no pool options: prefork, two processes
    cluster.consuming(worker)
    cluster.scheduler(**LEASES)

    # 1. 200 runs: their held calls all open at the stand-in at once.
    started = time.monotonic()
    first = _submit(cluster, RUNS)
    cluster.wait_for(lambda: model.in_flight >= RUNS, 120, f"{RUNS} calls open at once")
    opened_s = time.monotonic() - started
    peak = model.peak_in_flight
    model.release()
    cluster.all_succeeded(first, timeout_s=120)
    assert peak >= 150, peak
    answered = _counted(model.answered, first)
    assert set(answered.values()) == {1} and len(answered) == 2 * RUNS

    # 2. 200 more, held open; the worker killed with every one of them awaiting.
    model.hold()
    second = _submit(cluster, RUNS)
    cluster.wait_for(lambda: model.in_flight >= RUNS, 120, f"{RUNS} more calls open")
    assert _counted(model.answered, second) == Counter({("first", r): 1 for r in second})
    cluster.kill(worker)
    # Their messages were not acked when their tasks returned: they still are not.
    assert redis.Redis.from_url(cluster.env["CAIRN_BROKER_URL"]).hlen("unacked") >= RUNS
    cluster.wait_for(lambda: model.in_flight == 0, 30, "the killed worker's calls closed")
    assert not any(call == "held" for call, _run in _counted(model.answered, second))
    model.release()
    cluster.consuming(cluster.spawn("worker", env=LEASES))
    cluster.all_succeeded(second, timeout_s=180)

    answered = _counted(model.answered, second)
    assert answered == Counter({(call, r): 1 for r in second for call in ("first", "held")})
    sent = _counted(model.requests, second)
    # Answered before the kill and recorded: never sent again. Open at the kill: sent
    # again by the node's next execution (its result was never recorded).
    assert sent == Counter({("first", r): 1 for r in second} | {("held", r): 2 for r in second})
    for run_id in second[:5]:
        view = cluster.client.get_run(run_id)
        assert view.status is RunStatus.SUCCEEDED
        assert view.state is not None and view.state.vars["said"][1] == "held reply"
    print(
        f"\none default worker: {peak} calls open at once ({RUNS} runs; all open "
        f"{opened_s:.1f} s after submit); killed with {RUNS} awaiting, every run succeeded"
    )


@pytest.mark.timeout(240)
def test_a_warm_stop_waits_for_the_awaiting_nodes_and_sends_no_call_twice(
    cluster: Cluster, model: ModelServer
) -> None:
    """SIGTERM to the worker (what Kubernetes sends) while 20 nodes await: it takes no
    more messages, each of its pool processes waits for its nodes to conclude, and the
    worker exits once they are committed and acked — no call sent twice, none lost."""
    worker = cluster.spawn("worker", env=LEASES)
    cluster.consuming(worker)
    cluster.scheduler(**LEASES)
    runs = _submit(cluster, 20)
    cluster.wait_for(lambda: model.in_flight >= 20, 60, "20 calls open")
    worker.send_signal(signal.SIGTERM)  # the main process only, as Kubernetes does
    time.sleep(1)  # it is stopping: the nodes still await
    assert worker.poll() is None and model.in_flight == 20
    model.release()
    assert worker.wait(timeout=60) == 0
    cluster.all_succeeded(runs, timeout_s=30)
    assert _counted(model.requests, runs) == Counter(
        {(call, r): 1 for r in runs for call in ("first", "held")}
    )
    log = worker.log_path.read_text(errors="replace")  # type: ignore[attr-defined]
    assert "did not say they concluded" not in log, log[-3000:]
    broker = redis.Redis.from_url(cluster.env["CAIRN_BROKER_URL"])
    assert broker.hlen("unacked") == 0  # acked before the connection closed: none restored
