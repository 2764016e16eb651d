"""The test HTTP service that effects are applied to (tests/integration/effect_service.py:
it counts every request and honours Idempotency-Key), run as a subprocess for one test,
and a cluster whose processes are pointed at it and at its adapters."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from cairn.effects import Effect
from tests.support.cluster import Cluster
from tests.support.services import ROOT

ADAPTERS = (
    "payments.charge=tests.integration.effect_handlers:Charges,"
    "mail.send=tests.integration.effect_handlers:Emails"
)


class Service:
    def __init__(self, url: str) -> None:
        self.url = url

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(self.url + path, data=data, method=method)
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())

    def stats(self) -> dict[str, Any]:
        return self.call("GET", "/stats")  # type: ignore[no-any-return]

    def fault(self, mode: str, times: int = 1, **options: Any) -> None:
        self.call("POST", "/faults", {"mode": mode, "times": times, **options})


@contextmanager
def running_service() -> Iterator[Service]:
    """The effect service as a subprocess on a free port, killed after."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.effect_service", str(port)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    try:
        assert process.stdout is not None and process.stdout.readline().strip() == b"ready"
        yield Service(f"http://127.0.0.1:{port}")
    finally:
        process.kill()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


@pytest.fixture
def service() -> Iterator[Service]:
    with running_service() as running:
        yield running


@pytest.fixture
def shop(cluster: Cluster, service: Service) -> Cluster:
    """The cluster, its processes pointed at the service and its adapters."""
    cluster.env.update({"EFFECT_SERVICE_URL": service.url, "CAIRN_EFFECT_ADAPTERS": ADAPTERS})
    return cluster


def effects_of(cluster: Cluster, run_id: str) -> dict[str, Effect]:
    with cluster.client.runtime.store.reading() as tx:
        return {row.key: Effect.from_row(row) for row in tx.effects_of(run_id)}


def reconcile(cluster: Cluster, tmp_path: Path, *args: str) -> tuple[int, dict[str, Any]]:
    """``cairn reconcile`` as an operator runs it: its exit code and its drift report."""
    report = tmp_path / f"drift-{time.monotonic_ns()}.json"
    process = cluster.spawn("reconcile", "--report", str(report), *args)
    code = process.wait(timeout=60)
    return code, json.loads(report.read_text())
