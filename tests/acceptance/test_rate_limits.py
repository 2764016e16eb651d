"""Fleet-wide rate limits on real services: Celery workers in subprocesses, the buckets
in Redis, and the model stand-in as the provider — its log of arrivals is the proof: no
window of the period ever holds more requests than the limit, and a provider's 429
holds every caller of the key for its Retry-After."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import pytest

from cairn.limits.rate_buckets import RATE_PREFIX, REQUESTS_PREFIX, RedisRates
from cairn.limits.rates import Rates
from cairn.model.keys import ExecutionKey
from cairn.testing.model_server import Fault, ModelServer
from tests.support.cluster import Cluster

RATE = 5  # requests a second: rated_calls.yaml
# Leases that ride out a loaded machine's stalls: these tests time calls, not recoveries.
STEADY = {"CAIRN_LEASE_TTL": "6", "CAIRN_HEARTBEAT_INTERVAL": "1"}


@pytest.fixture
def provider(cluster: Cluster) -> Iterator[ModelServer]:
    # The provider's own limit, as strict as the key's: one request too many is a 429.
    with ModelServer(limit_requests=(RATE, 1.0)) as server:
        cluster.env["MODEL_URL"] = server.url
        yield server


def test_no_window_of_a_second_has_more_requests_than_the_rate(
    cluster: Cluster, provider: ModelServer
) -> None:
    """25 runs, two workers of two processes each, 5 requests a second for the key: the
    provider never sees a sixth within a second (nor refuses one), and the runs take
    about as long as the rate says — (25 - 5) / 5 = 4 s after the first five. (Each
    process makes a call first: a cold client's first request leaves it later than a
    warm one's, by more than a unit's guard on a loaded machine.)"""
    for _ in range(2):
        cluster.consuming(cluster.worker(concurrency=2, **STEADY))
    cluster.scheduler()
    cluster.all_succeeded([cluster.submit("rated_calls", {}) for _ in range(8)], 60)
    time.sleep(1.5)  # the warm-up's requests out of the window
    provider.reset()
    runs = 25
    ids = [cluster.submit("rated_calls", {}) for _ in range(runs)]
    cluster.all_succeeded(ids, 60)
    arrivals = sorted(r.at for r in provider.requests)
    shown = [round(at - arrivals[0], 3) for at in arrivals]
    assert provider.count() == runs and provider.over_rate == 0, shown
    assert provider.peak_in_window(1.0) == RATE, shown  # the limit, used and never passed
    spread = arrivals[-1] - arrivals[0]
    assert (runs - RATE) / RATE <= spread < (runs - RATE) / RATE * 1.5 + 1, shown
    shown_keys = json.loads(cluster.cli("status", "--fleet", "--json").stdout)["rates"]
    (key,) = [k for k in shown_keys if k["bucket"] == "default/openai-test"]
    assert (key["requests_limit"], key["paused_for_s"], key["waiting"]) == (RATE, 0, 0)


def test_a_429_holds_every_caller_of_the_key_for_its_retry_after(
    cluster: Cluster, provider: ModelServer
) -> None:
    """The provider refuses a call with Retry-After: 5 (the issue's figure). Every run
    submitted after the refusal — to worker processes that have called before, ready to
    call at once — waits it out: no request reaches the provider for five seconds, then all of them
    do; the refused one is sent again by the same attempt (not a node retry) and
    recorded once."""
    cluster.consuming(cluster.worker(concurrency=4, **STEADY))
    cluster.scheduler()
    cluster.all_succeeded([cluster.submit("rated_calls", {}) for _ in range(8)], 60)  # warm
    time.sleep(1.5)  # their requests out of the window
    provider.reset()
    provider.script(Fault(status=429, retry_after_s=5))
    first = cluster.submit("rated_calls", {})
    cluster.wait_for(lambda: provider.count() >= 1, 30, "the refused call")
    refused_at = provider.requests[0].at
    time.sleep(0.2)
    rest = [cluster.submit("rated_calls", {}) for _ in range(3)]
    cluster.all_succeeded([first, *rest], 60)
    later = [r.at - refused_at for r in provider.requests[1:]]
    assert len(later) == 4, later  # the refused one again, and the three others
    assert min(later) >= 4.95, later  # held, every one, for the Retry-After
    runtime = cluster.client.runtime
    assert min(let_go_after_the_pause(runtime.rates)) >= 0  # no sooner, by Redis's clock
    assert max(let_go_after_the_pause(runtime.rates)) < 0.5  # and no later: they were ready
    with runtime.store.reading() as tx:
        (execution,) = [e for e in tx.executions_of(first) if e.node == "call"]
        assert execution.attempt == 1  # sent again within its attempt
        key = ExecutionKey(first, "call", execution.iteration, execution.phase)
        assert len(tx.model_calls_of(key)) == 1
    assert runtime.rates is not None
    (bucket,) = runtime.rates.report(["default/openai-test"])
    assert bucket.requests_limit == RATE and bucket.paused_for_s == 0


def let_go_after_the_pause(rates: Rates | None) -> list[float]:
    """When each call after the pause was let go, in seconds after its end, by the
    buckets' own clock: a call's request leaves within half a guard of its units' time,
    or it takes them anew at the time it leaves. (The provider's arrival times are
    the stand-in's: a stall of the test's process delays them all alike.)"""
    assert isinstance(rates, RedisRates)
    bucket = "default/openai-test"
    paused_until = float(rates.client.hget(RATE_PREFIX + bucket, "paused") or 0)
    units = rates.client.zrange(REQUESTS_PREFIX + bucket, 0, -1, withscores=True)
    let_go = [(at - paused_until) / 1000 for _, at in units if at >= paused_until - 1000]
    assert len(let_go) == 4, let_go
    return let_go


def test_cold_workers_never_put_more_than_the_rate_in_any_window(cluster: Cluster) -> None:
    """4 a second across two freshly started workers (two processes each, no warm-up),
    for 15 s: however late a call leaves after taking its unit — each process's first
    request leaves half a second late, as a cold client's may on a loaded machine — no
    one-second window at the provider ever holds a fifth request. (The cold start is
    where a window would overflow; the steady seconds after it are many enough.)"""
    with ModelServer(limit_requests=(4, 1.0)) as provider:
        cluster.env["MODEL_URL"] = provider.url
        for _ in range(2):
            cluster.consuming(cluster.worker(concurrency=2, **STEADY))
        cluster.scheduler()
        runs = [cluster.submit("rated_four", {}) for _ in range(60)]
        cluster.all_succeeded(runs, 60)
        arrivals = sorted(r.at for r in provider.requests)
        shown = [round(at - arrivals[0], 3) for at in arrivals]
        assert provider.peak_in_window(1.0) == 4, shown
        assert provider.over_rate == 0 and provider.count() == 60, shown
