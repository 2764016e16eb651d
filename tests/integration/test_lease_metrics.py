"""Lease metrics from Redis: the same counters as the memory twin, fleet-wide, over HTTP."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from typing import Any

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families
from redis.backoff import NoBackoff
from redis.retry import Retry

from cairn.lease.memory import MemoryLeases
from cairn.lease.port import Leases
from cairn.lease.redis import RedisLeases
from cairn.lease.waits import delivered
from cairn.model.statuses import RunStatus
from cairn.observe.metrics.leases import serve_metrics
from tests.support.cluster import Cluster
from tests.support.services import ROOT


def free_ports(count: int) -> list[int]:
    """Ports free now, all different (each probe is held until all are picked)."""
    probes = [socket.socket() for _ in range(count)]
    try:
        for probe in probes:
            probe.bind(("127.0.0.1", 0))
        return [int(probe.getsockname()[1]) for probe in probes]
    finally:
        for probe in probes:
            probe.close()


def scrape(port: int) -> dict[str, float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            le = sample.labels.get("le")
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()) if k != "le")
            key = f"{sample.name}{{{le or labels}}}" if le or labels else sample.name
            samples[key] = sample.value
    return samples


def lease_life(leases: Leases, forget: Any) -> None:
    """Acquire (after a 30 ms wait), contend, renew, lose to a takeover, reject a write."""
    with delivered(time.time() - 0.03):
        first = leases.acquire("cairn:lease:r:a:1:run", 30)
    assert first is not None
    assert leases.acquire("cairn:lease:r:a:1:run", 30) is None
    assert leases.renew(first)
    forget(first.key)  # as if it expired
    with delivered(time.time() - 2):
        second = leases.acquire("cairn:lease:r:a:1:run", 30)
    assert second is not None
    assert not leases.renew(first)
    leases.count("stale_rejected")
    # The stale holder's timings count too (the work was done); the new one's as well.
    leases.release(first, timings={"execution": 0.004, "commit": 0.0009})
    leases.release(second, finished=True, timings={"execution": 12.0, "commit": 0.002})


@pytest.fixture
def redis_leases(redis_urls: tuple[str, str]) -> RedisLeases:
    return RedisLeases(redis.Redis.from_url(redis_urls[1]))


def test_redis_and_memory_leases_count_the_same(redis_leases: RedisLeases) -> None:
    memory = MemoryLeases()
    lease_life(redis_leases, redis_leases.client.delete)
    lease_life(memory, memory._leases.pop)  # as if it expired
    servers = [  # port 0: the system picks a free one, no race with other processes
        serve_metrics(redis_leases, 0, "127.0.0.1"),
        serve_metrics(memory, 0, "127.0.0.1"),
    ]
    try:
        from_redis, from_memory = (scrape(server.server_port) for server in servers)
    finally:
        for server in servers:
            server.shutdown()
            server.server_close()
            server.server_close()

    assert from_redis["cairn_lease_metrics_up"] == 1
    assert from_redis["cairn_lease_acquisitions_total"] == 2
    assert from_redis["cairn_lease_contended_total"] == 1
    assert from_redis["cairn_lease_renewals_total"] == 1
    assert from_redis["cairn_lease_losses_total"] == 1
    assert from_redis["cairn_stale_writes_rejected_total"] == 1
    assert from_redis["cairn_lease_wait_seconds_bucket{0.025}"] == 0
    assert from_redis["cairn_lease_wait_seconds_bucket{0.05}"] == 1
    assert from_redis["cairn_lease_wait_seconds_bucket{2.5}"] == 2
    assert from_redis["cairn_lease_wait_seconds_count"] == 2
    assert from_redis["cairn_lease_wait_seconds_sum"] == pytest.approx(2.03, abs=0.5)
    assert from_redis["cairn_step_execution_seconds_bucket{0.005}"] == 1
    assert from_redis["cairn_step_execution_seconds_bucket{10.0}"] == 1
    assert from_redis["cairn_step_execution_seconds_bucket{30.0}"] == 2
    assert from_redis["cairn_step_execution_seconds_sum"] == pytest.approx(12.004)
    assert from_redis["cairn_step_commit_seconds_bucket{0.001}"] == 1
    assert from_redis["cairn_step_commit_seconds_bucket{0.0025}"] == 2
    assert from_redis.keys() == from_memory.keys()
    for name, value in from_redis.items():
        if not name.endswith("_sum"):
            assert from_memory[name] == value, name


def test_a_scrape_without_redis_reports_down() -> None:
    (closed,) = free_ports(1)
    nowhere = redis.Redis(port=closed, retry=Retry(NoBackoff(), 0))  # fail at once
    leases = RedisLeases(nowhere)
    server = serve_metrics(leases, 0, "127.0.0.1")
    try:
        assert scrape(server.server_port) == {"cairn_lease_metrics_up": 0}
    finally:
        server.shutdown()
        server.server_close()


def test_workers_and_schedulers_serve_the_fleet_numbers(cluster: Cluster) -> None:
    worker_port, scheduler_port = free_ports(2)
    # Consuming before anything is submitted: no recovery adds executions to the counts.
    cluster.consuming(cluster.worker(CAIRN_METRICS_PORT=str(worker_port)))
    cluster.spawn("scheduler", f"--metrics-port={scheduler_port}")
    runs = [cluster.submit("chain10") for _ in range(3)]
    runs.append(cluster.submit("flaky", {"succeed_on": 2}))  # one retry, by a timer
    for run_id in runs:
        assert cluster.wait(run_id).status is RunStatus.SUCCEEDED

    def served(port: int) -> bool:
        try:
            scrape(port)
        except OSError:
            return False
        return True

    cluster.wait_for(lambda: served(worker_port) and served(scheduler_port), 30, "both servers")
    from_worker, from_scheduler = scrape(worker_port), scrape(scheduler_port)
    # Counted by the worker's prefork children, served by its parent and the scheduler.
    assert from_worker["cairn_lease_acquisitions_total"] >= 30
    assert (
        from_worker["cairn_lease_wait_seconds_count"]
        == (from_worker["cairn_lease_acquisitions_total"])
    )
    assert (
        from_worker["cairn_lease_wait_seconds_bucket{+Inf}"]
        == (from_worker["cairn_lease_wait_seconds_count"])
    )
    assert 0 < from_worker["cairn_lease_wait_seconds_sum"] < 30 * 10
    # A step's other parts, timed by the worker that ran it: one per execution.
    for part in ("execution", "commit"):
        assert from_worker[f"cairn_step_{part}_seconds_count"] == 32  # 30 + flaky's two
        assert from_worker[f"cairn_step_{part}_seconds_bucket{{+Inf}}"] == 32
        assert 0 < from_worker[f"cairn_step_{part}_seconds_sum"] < 32 * 5
    fleet_wide = {name: value for name, value in from_scheduler.items() if name in from_worker}
    assert fleet_wide == from_worker

    # The scheduler adds the fleet's gauges from PostgreSQL, and its own counters.
    assert from_scheduler["cairn_fleet_metrics_up"] == 1
    assert from_scheduler["cairn_runs{status=succeeded}"] == 4
    assert from_scheduler["cairn_runs{status=running}"] == 0
    # The test's own submits are marked sent by the relay (this process publishes and
    # never writes again): the backlog gauge falls to zero within a relay period.
    cluster.wait_for(lambda: scrape(scheduler_port)["cairn_outbox_unsent"] == 0, 15, "relay")
    assert from_scheduler["cairn_timers_due"] == 0
    assert from_scheduler["cairn_webhooks_pending"] == 0
    assert from_scheduler["cairn_held_executions"] == 0
    assert from_scheduler["cairn_timers_fired_total{kind=retry}"] == 1
    assert from_scheduler["cairn_retries_total"] == 1
    assert from_scheduler["cairn_timer_lateness_seconds_count"] == 1
    assert 0 <= from_scheduler["cairn_timer_lateness_seconds_sum"] < 5
    assert "cairn_effects{status=applied}" in from_scheduler

    fleet = json.loads(
        subprocess.run(
            [sys.executable, "-m", "cairn.cli", "status", "--fleet", "--json"],
            cwd=ROOT,
            env=cluster.env,
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout
    )
    assert fleet["leases"]["acquired"] == from_worker["cairn_lease_acquisitions_total"]
    assert fleet["lease_wait"]["count"] == from_worker["cairn_lease_wait_seconds_count"]
