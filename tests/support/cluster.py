"""cairn's own processes for a test: workers, schedulers and the CLI as subprocesses in
their own process groups, so a test can SIGKILL or SIGSTOP them like an operator's worst
day, and teardown always reaps them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from cairn.client import Client
from cairn.config import Settings
from cairn.engine.reads import RunView
from cairn.model.statuses import RunStatus
from cairn.scheduler.recovery import NEVER_CLAIMED
from tests.support.services import ROOT

WORKFLOWS = ROOT / "tests" / "integration" / "workflows"


@dataclass
class Cluster:
    """A cairn deployment for one test: settings, processes, and the handlers' ledger."""

    settings: Settings
    env: dict[str, str]
    logs: Path
    ledger: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _client: Client | None = None
    _client_lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def client(self) -> Client:
        # Tests submit from several threads at once: each building a client of its own
        # would leave all but one unclosed, their connections open until collected.
        with self._client_lock:
            if self._client is None:
                self._client = Client(self.settings)
            return self._client

    def spawn(self, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
        name = f"{args[0]}-{len(self.processes)}"
        with open(self.logs / f"{name}.log", "wb") as log:  # the child keeps its own copy
            process = subprocess.Popen(
                [sys.executable, "-m", "cairn.cli", *args],
                cwd=ROOT,
                env={**self.env, **(env or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        process.log_path = self.logs / f"{name}.log"  # type: ignore[attr-defined]
        self.processes.append(process)
        return process

    def cli(
        self, *args: str, env: dict[str, str] | None = None
    ) -> subprocess.CompletedProcess[str]:
        """`cairn ARGS` as an operator runs it: a process of its own, against this
        cluster's services; its exit code and output, for the test to judge."""
        return subprocess.run(
            [sys.executable, "-m", "cairn.cli", *args],
            cwd=ROOT,
            env={**self.env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )

    def worker(self, concurrency: int = 2, **env: str) -> subprocess.Popen[bytes]:
        return self.spawn("worker", f"--concurrency={concurrency}", env=env)

    def consuming(self, worker: subprocess.Popen[bytes], timeout_s: float = 30) -> None:
        """Wait until a Celery worker consumes. A test that counts recoveries submits only
        then: a message queued behind a worker's start for longer than
        CAIRN_RECOVERY_AFTER is recovered (harmless, but an entry in the history)."""
        log = worker.log_path  # type: ignore[attr-defined]
        self.wait_for(lambda: " ready." in log.read_text(errors="replace"), timeout_s, "a worker")

    def scheduler(self, **env: str) -> subprocess.Popen[bytes]:
        return self.spawn("scheduler", env=env)

    @staticmethod
    def signal(process: subprocess.Popen[bytes], signum: int) -> None:
        """Signal the whole process group (a Celery worker is a parent and its children)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signum)

    def kill(self, process: subprocess.Popen[bytes]) -> None:
        self.signal(process, signal.SIGKILL)
        process.wait(timeout=10)

    def submit(self, workflow: str, run_input: dict[str, Any] | None = None, **kwargs: Any) -> str:
        return self.client.submit(
            workflow, {"ledger": str(self.ledger), **(run_input or {})}, **kwargs
        )

    def wait(self, run_id: str, timeout_s: float = 60.0) -> RunView:
        return self.client.wait(run_id, timeout_s, poll_s=0.1)

    def all_succeeded(self, run_ids: list[str], timeout_s: float) -> None:
        """Every one of the runs ended, succeeded, within ``timeout_s`` in all."""
        deadline = time.monotonic() + timeout_s
        for run_id in run_ids:
            view = self.client.get_run(run_id)
            while not view.status.terminal:
                assert time.monotonic() < deadline, f"{run_id} did not end: {view.status}"
                time.sleep(0.1)
                view = self.client.get_run(run_id)
            assert view.status is RunStatus.SUCCEEDED, view.reason

    def executions(self) -> Counter[tuple[str, str, int]]:
        """How often each (run, node, iteration) ran, by the handlers' own ledger."""
        counts: Counter[tuple[str, str, int]] = Counter()
        if self.ledger.exists():
            for line in self.ledger.read_text().splitlines():
                run_id, node, iteration, _attempt, _what, _pid = line.split()
                counts[(run_id, node, int(iteration))] += 1
        return counts

    def wait_for(
        self, condition: Callable[[], bool], timeout_s: float = 30.0, what: str = "condition"
    ) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if condition():
                return
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}\n{self.log_tails()}")

    def log_tails(self, lines: int = 30) -> str:
        return self._logs(lambda found: found[-lines:])

    def log_lines(self, needle: str) -> str:
        """Every line of every process's log that mentions ``needle`` (a run id: what
        each process did with it, which a tail of the busiest log may have cut)."""
        return self._logs(lambda found: [line for line in found if needle in line])

    def _logs(self, pick: Callable[[list[str]], list[str]]) -> str:
        """What ``pick`` keeps of each process's log lines, under the log's name."""
        parts = []
        for process in self.processes:
            path: Path = process.log_path  # type: ignore[attr-defined]
            if path.exists():
                found = pick(path.read_text(errors="replace").splitlines())
                parts.append(f"--- {path.name} ---\n" + "\n".join(found))
        return "\n".join(parts)

    def stop(self) -> None:
        """End every process of the test at once: the test is over, and a Celery worker's
        warm shutdown (seconds, each) would only make the suite slower. Nothing a test
        checks outlives it — its database is dropped and its Redis databases flushed."""
        for process in self.processes:
            if process.poll() is None:
                self.signal(process, signal.SIGKILL)
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
        if self._client is not None:
            self._client.close()


def lost_a_claim(event: Mapping[str, Any]) -> bool:
    """A run's history saying a claim was lost: a stale write refused, or a recovery of
    an execution a worker had claimed (one nobody had claimed lost no claim)."""
    if event["type"] == "audit.stale_write_rejected":
        return True
    return event["type"] == "audit.recovered" and event["data"]["cause"] != NEVER_CLAIMED


FAST = {
    "CAIRN_LEASE_TTL": "2",
    "CAIRN_HEARTBEAT_INTERVAL": "0.5",
    "CAIRN_RECOVERY_AFTER": "2",
    "CAIRN_OUTBOX_RELAY_AFTER": "1",
    "CAIRN_SCHEDULER_INTERVAL": "0.1",
}


@pytest.fixture
def cluster(
    database_url: str, redis_urls: tuple[str, str], tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[Cluster]:
    broker, leases = redis_urls
    env = {key: value for key, value in os.environ.items() if not key.startswith("CAIRN_")}
    env.update(FAST)
    env.update(
        {
            "CAIRN_DATABASE_URL": database_url,
            "CAIRN_BROKER_URL": broker,
            "CAIRN_REDIS_URL": leases,
            "CAIRN_WORKFLOWS": str(WORKFLOWS),
            "CAIRN_HOME": str(tmp_path / "home"),
            "PYTHONPATH": str(ROOT),
        }
    )
    settings = Settings.from_env({k: v for k, v in env.items() if k.startswith("CAIRN_")})
    logs = tmp_path / "logs"
    logs.mkdir()
    cluster = Cluster(settings, env, logs, tmp_path / "ledger.txt")
    yield cluster
    cluster.stop()
    if request.node.rep_call.failed if hasattr(request.node, "rep_call") else False:
        print(cluster.log_tails(60))
