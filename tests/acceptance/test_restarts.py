"""Service restarts with runs in flight: a private Redis, killed and started again empty;
the machine's PostgreSQL, restarted under running workers, a scheduler and the API."""

from __future__ import annotations

import socket
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import redis

from cairn.model.statuses import RunStatus
from tests.acceptance.test_durable import CHAIN
from tests.integration.test_lease_metrics import free_ports
from tests.support.cluster import Cluster

# It restarts PostgreSQL and Redis under everyone: run alone, after the rest (make test).
pytestmark = pytest.mark.serial

RUNS = 50


class PrivateRedis:
    """A redis-server of this test's own, so that restarting it disturbs nothing else."""

    def __init__(self, workdir: Path) -> None:
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.workdir = workdir
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.process = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.workdir),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        client = redis.Redis(port=self.port)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                return
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def kill(self) -> None:
        assert self.process is not None
        self.process.kill()  # SIGKILL: every lease and queued message is gone
        self.process.wait(timeout=10)

    def url(self, db: int) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    server = PrivateRedis(tmp_path)
    server.start()
    yield server
    if server.process is not None and server.process.poll() is None:
        server.kill()


@pytest.fixture
def redis_urls(private_redis: PrivateRedis) -> tuple[str, str]:
    return private_redis.url(0), private_redis.url(1)


def _start_runs_in_flight(cluster: Cluster) -> list[str]:
    cluster.worker(concurrency=2)
    cluster.scheduler()
    runs = [cluster.submit("chain10", {"slow": {"n4": 0.2}}) for _ in range(RUNS)]

    def in_flight() -> bool:
        lines = cluster.ledger.read_text().splitlines() if cluster.ledger.exists() else []
        return sum(" n4 " in line for line in lines) >= 5

    cluster.wait_for(in_flight, 60, "runs in flight")
    return runs


def _each_succeeded_with_one_result_per_node(
    cluster: Cluster, runs: list[str], timeout_s: float
) -> None:
    for run_id in runs:
        assert cluster.wait(run_id, timeout_s=timeout_s).status is RunStatus.SUCCEEDED, (
            cluster.log_tails()
        )
    with cluster.client.runtime.store.reading() as tx:
        for run_id in runs:
            history = cluster.client.events(run_id)
            done = Counter(e["data"]["node"] for e in history if e["type"] == "node_succeeded")
            assert done == Counter({f"n{i}": 1 for i in range(1, 11)}), (run_id, done)
            executions = tx.executions_of(run_id)
            assert len(executions) == 10
            assert all(e.status == "succeeded" for e in executions)


def test_redis_restart_with_runs_in_flight(cluster: Cluster, private_redis: PrivateRedis) -> None:
    runs = _start_runs_in_flight(cluster)
    private_redis.kill()  # all leases, heartbeats and queued messages lost
    time.sleep(1.0)
    private_redis.start()
    _each_succeeded_with_one_result_per_node(cluster, runs, timeout_s=120)


def _restart_postgresql() -> None:
    """An immediate (crash-like) restart of the machine's PostgreSQL; tests run one at a
    time, and this one waits until the server accepts connections again."""
    version = sorted(p.name for p in Path("/etc/postgresql").iterdir())[0]
    subprocess.run(
        [
            "pg_ctlcluster",
            "--skip-systemctl-redirect",
            version,
            "main",
            "restart",
            "-m",
            "immediate",
        ],
        check=True,
        timeout=120,
    )
    deadline = time.monotonic() + 60
    while subprocess.run(["pg_isready", "-h", "127.0.0.1", "-q"], check=False).returncode:
        assert time.monotonic() < deadline, "PostgreSQL did not come back"
        time.sleep(0.2)


def test_postgresql_restart_with_runs_in_flight(cluster: Cluster) -> None:
    runs = _start_runs_in_flight(cluster)
    _restart_postgresql()
    # This process's pooled connections died too: the client finds out as it takes them.
    _each_succeeded_with_one_result_per_node(cluster, runs, timeout_s=180)


def test_a_result_computed_across_a_postgresql_restart_is_committed_not_rerun(
    cluster: Cluster,
) -> None:
    """The database restarts while a node runs: its worker's connections are dead when
    the result is ready. It reconnects and commits; the node does not run again."""
    cluster.consuming(cluster.worker())
    cluster.scheduler()
    run_id = cluster.submit("chain10", {"slow": {"n3": 6}})
    cluster.wait_for(lambda: cluster.executions()[(run_id, "n3", 1)] == 1, 30, "n3 to start")
    _restart_postgresql()
    assert cluster.wait(run_id, timeout_s=60).status is RunStatus.SUCCEEDED, cluster.log_tails()
    counts = cluster.executions()
    assert {node: counts[(run_id, node, 1)] for node in CHAIN} == dict.fromkeys(CHAIN, 1)
    assert not [e for e in cluster.client.events(run_id) if e["type"] == "audit.recovered"]


def test_no_api_request_fails_once_postgresql_is_back(cluster: Cluster) -> None:
    """The API's pool holds connections that died with the server: none of them may
    answer a request with 503 once PostgreSQL accepts connections again."""
    key = "restart-key-0123456789abcdef"
    (port,) = free_ports(1)
    cluster.spawn("api", f"--port={port}", env={"CAIRN_API_KEYS": f"default:{key}"})
    headers = {"Authorization": f"Bearer {key}"}
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=10) as http:

        def ready() -> bool:
            try:
                return http.get("/readyz").status_code == 200
            except httpx.HTTPError:
                return False

        cluster.wait_for(ready, 30, "the API")

        def burst() -> list[int]:  # concurrent: the pool opens several connections
            with ThreadPoolExecutor(8) as pool:
                return list(pool.map(lambda _: http.get("/v1/workflows").status_code, range(16)))

        assert burst() == [200] * 16
        _restart_postgresql()
        assert burst() == [200] * 16
        assert [http.get("/v1/runs").status_code for _ in range(5)] == [200] * 5
