"""The embedded mode (SQLite, leases in memory) lists, counts and streams as PostgreSQL and
Redis do: several statuses merged into keyset pages, counts capped per status, and the
run stream's events, chunks and end from the process's watcher."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from cairn.api.app import create_app
from cairn.config import Settings
from cairn.model.selection import RunFilter
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime

KEY = "embedded-key-0123456789abcdef"
TICKS = """
name: ticks
version: 1
start: listen
nodes:
  listen: {wait: {signals: {tick: listen, stop: done}, timeout: 1h, on_timeout: done},
           max_visits: 100}
  done:   {end: succeeded}
"""


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    (tmp_path / "ticks.yaml").write_text(TICKS)
    settings = Settings(
        home=tmp_path / "home",
        workflows=[str(tmp_path / "ticks.yaml")],
        api_keys=f"default:{KEY}",
    )
    built = Runtime.build(settings)
    try:
        yield built
    finally:
        built.close()


def test_several_statuses_page_merged_and_counts_stop_at_the_cap(runtime: Runtime) -> None:
    orchestrator = runtime.orchestrator
    runs = [orchestrator.submit("ticks", {}) for _ in range(7)]
    for run_id in runs[:3]:
        orchestrator.signal(run_id, "stop", {})
    selection = RunFilter(statuses=(RunStatus.SUCCEEDED, RunStatus.WAITING))
    seen: list[str] = []
    before = None
    while True:
        with runtime.store.reading() as tx:
            page = tx.runs_page("default", selection, limit=2, before=before)
        seen += [run.id for run in page]
        if len(page) < 2:
            break
        before = (page[-1].created_at, page[-1].id)
    assert sorted(seen) == sorted(runs) and len(seen) == len(set(seen))
    with runtime.store.reading() as tx:
        exact = tx.run_counts("default", None, cap=100)
        capped = tx.run_counts("default", selection, cap=3)
    assert exact[RunStatus.SUCCEEDED] == 3 and exact[RunStatus.WAITING] == 4
    assert capped == {RunStatus.SUCCEEDED: 3, RunStatus.WAITING: 4}  # 4: more than 3


def test_the_stream_sends_events_chunks_and_the_end(runtime: Runtime) -> None:
    orchestrator = runtime.orchestrator
    run_id = orchestrator.submit("ticks", {})
    for _ in range(3):
        orchestrator.signal(run_id, "tick", {})
    chunk = {"node": "listen", "iteration": 1, "attempt": 1, "call": 0, "offset": 0}
    runtime.leases.append_chunks(run_id, [{**chunk, "text": "hello"}])
    orchestrator.signal(run_id, "stop", {})
    auth = {"Authorization": f"Bearer {KEY}"}
    with TestClient(create_app(runtime.settings, runtime)) as http:
        messages = parse(http.get(f"/v1/runs/{run_id}/stream", headers=auth).text)
        log = http.get(f"/v1/runs/{run_id}/events", headers=auth).json()["events"]
        assert http.get("/v1/runs/nope/stream", headers=auth).status_code == 404
    events = [data for kind, _id, data in messages if kind not in ("chunk", "end")]
    assert events == log
    chunks = [(event_id, data) for kind, event_id, data in messages if kind == "chunk"]
    assert [data["text"] for _id, data in chunks] == ["hello"]
    assert chunks[0][0].endswith(":1-0") and not chunks[0][1]["superseded"]
    assert messages[-1] == ("end", None, {"status": "succeeded", "last_seq": log[-1]["seq"]})


def parse(body: str) -> list[tuple[str, str | None, dict[str, Any]]]:
    """(event, id, data) of each message with data."""
    found = []
    for block in body.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "data" in fields:
            found.append((fields["event"], fields.get("id"), json.loads(fields["data"])))
    return found
