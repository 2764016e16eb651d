"""Logs for people and for machines, from real processes: with CAIRN_LOG_FORMAT=json every
line a Celery worker (parent and pool children) and the scheduler write is a JSON object,
and a step's lines say which run, node and attempt; by default a worker starts without
Celery's banner or a line per task; the API's lines, uvicorn's included, are JSON too."""

from __future__ import annotations

import json
import os
import signal
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from cairn.model.statuses import RunStatus
from tests.integration.test_lease_metrics import free_ports
from tests.support.cluster import ROOT, Cluster

HANDLERS = """
import logging

from cairn import TransientError


def step(ctx, state):
    ctx.log.info("stepping on attempt %d", ctx.attempt)
    logging.getLogger("shop.payments").warning("a library's own line")
    if ctx.attempt < 2:
        raise TransientError("upstream 503, try again")
    return {"stepped": True}
"""


def _workflow(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cluster: Cluster) -> str:
    """A workflow whose one step logs two lines and fails its first attempt."""
    code = tmp_path / "code"
    code.mkdir()
    module = f"logged_{uuid.uuid4().hex[:10]}"
    (code / f"{module}.py").write_text(HANDLERS)
    definition = tmp_path / "logged.yaml"
    definition.write_text(
        "name: logged\nversion: 1\nstart: step\nnodes:\n"
        f"  step: {{handler: '{module}:step', next: done,\n"
        "         retry: {attempts: 3, backoff: 0.2s, jitter: none}}\n"
        "  done: {end: succeeded}\n"
    )
    with monkeypatch.context() as registering:
        registering.syspath_prepend(str(code))
        cluster.client.register(definition)
    return f"{ROOT}{os.pathsep}{code}"


def _lines(process: Any) -> list[str]:
    path: Path = process.log_path
    return path.read_text(errors="replace").splitlines()


def test_json_logs_are_one_object_a_line_with_the_node_s_fields(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _workflow(tmp_path, monkeypatch, cluster)
    worker = cluster.worker(CAIRN_LOG_FORMAT="json", PYTHONPATH=path)
    scheduler = cluster.scheduler(CAIRN_LOG_FORMAT="json")
    cluster.consuming(worker)
    run_id = cluster.submit("logged")
    assert cluster.wait(run_id).status is RunStatus.SUCCEEDED, cluster.log_tails()

    entries = []
    for process in (worker, scheduler):
        for line in _lines(process):
            try:
                entries.append(json.loads(line))
            except ValueError:
                pytest.fail(f"not a JSON line: {line!r}\n{cluster.log_tails()}")
    assert all({"time", "level", "logger", "message", "process", "pid"} <= set(e) for e in entries)
    assert {e["process"] for e in entries} == {"worker", "scheduler"}
    assert any(e["message"].endswith(" ready.") for e in entries)  # Celery's own, as JSON

    stepping = [e for e in entries if e["message"].startswith("stepping on attempt")]
    assert [e["attempt"] for e in stepping] == [1, 2], stepping
    own = [e for e in entries if e["logger"] == "shop.payments"]  # a logger cairn never saw
    assert [e["attempt"] for e in own] == [1, 2], own
    for entry in stepping + own:
        assert (entry["run_id"], entry["workflow"], entry["node"]) == (run_id, "logged", "step")
    # Lines of a pool child, not the parent: the context travels with the execution.
    assert {e["pid"] for e in stepping} != {worker.pid}
    failed = [e for e in entries if e["message"].startswith("handler failed (transient)")]
    assert [(e["attempt"], e["level"]) for e in failed] == [(1, "WARNING")], failed
    outside = [e for e in entries if e["process"] == "scheduler"]
    assert outside and all("run_id" not in e for e in outside)


def test_a_worker_starts_quietly_by_default(cluster: Cluster) -> None:
    worker = cluster.worker()
    cluster.scheduler()
    cluster.consuming(worker)
    run_id = cluster.submit("chain10")
    assert cluster.wait(run_id).status is RunStatus.SUCCEEDED, cluster.log_tails()
    text = "\n".join(_lines(worker))
    assert "-------------- celery@" not in text and "[tasks]" not in text, text
    assert "[config]" not in text and "[queues]" not in text, text
    assert "received" not in text and "succeeded in" not in text, text  # a line per task
    assert " ready." in text


def test_the_api_logs_json_too(cluster: Cluster) -> None:
    (port,) = free_ports(1)
    api = cluster.spawn("api", f"--port={port}", env={"CAIRN_LOG_FORMAT": "json"})
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        try:
            return httpx.get(f"{url}/readyz", timeout=1).status_code == 200
        except httpx.HTTPError:
            return False

    cluster.wait_for(ready, timeout_s=30, what="the API to be ready")
    cluster.signal(api, signal.SIGTERM)
    api.wait(timeout=30)
    entries = [json.loads(line) for line in _lines(api)]  # uvicorn's lines as well
    assert {e["process"] for e in entries} == {"api"}
    assert any(e["logger"].startswith("uvicorn") for e in entries), entries
