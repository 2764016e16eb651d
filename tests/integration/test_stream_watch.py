"""Run streams that hold no thread: hundreds of clients follow runs on one real API
process (``cairn api`` as a subprocess, on PostgreSQL and Redis), every one gets each
event of its run and the end, while the process keeps a handful of threads; a client
that goes away releases its watch."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.api_server import Deployment, api_deployment

KEY = "stream-key-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {KEY}"}
STREAMS = 300
RUNS = 3


@pytest.fixture(scope="module")
def deployment(pg_template: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    tmp = tmp_path_factory.mktemp("streams")
    with api_deployment(pg_template, tmp, api_env={"CAIRN_API_KEYS": f"default:{KEY}"}) as up:
        yield up


def api_pid(deployment: Deployment) -> int:
    (api,) = [p for p in deployment.cluster.processes if "api" in p.args]
    return api.pid


def threads_of(pid: int) -> int:
    status = Path(f"/proc/{pid}/status").read_text()
    found = re.search(r"^Threads:\s+(\d+)$", status, re.MULTILINE)
    assert found is not None
    return int(found.group(1))


def open_streams(http: httpx.Client) -> float:
    metrics = http.get("/metrics").text
    found = re.search(r"^cairn_api_streams_open (\S+)$", metrics, re.MULTILINE)
    assert found is not None, "the API reports its open streams"
    return float(found.group(1))


def submit_waiting(http: httpx.Client, ledger: Path) -> str:
    body = {"workflow": "approval", "input": {"ledger": str(ledger)}}
    response = http.post("/v1/runs", json=body, headers=AUTH)
    assert response.status_code == 202, response.text
    run_id = str(response.json()["run_id"])
    deadline = time.monotonic() + 30
    while http.get(f"/v1/runs/{run_id}", headers=AUTH).json()["status"] != "waiting":
        assert time.monotonic() < deadline, f"run {run_id} never waited"
        time.sleep(0.05)
    return run_id


async def follow(
    client: httpx.AsyncClient, run_id: str, opened: asyncio.Event | None = None
) -> tuple[list[dict[str, Any]], dict[str, Any] | None]:
    """A stream's events (``opened`` set once the first came) and its end event."""
    events: list[dict[str, Any]] = []
    async with client.stream("GET", f"/v1/runs/{run_id}/stream", headers=AUTH) as response:
        assert response.status_code == 200
        fields: dict[str, str] = {}
        async for line in response.aiter_lines():
            if line:
                name, _, value = line.partition(": ")
                fields[name] = value
                continue
            if fields.get("event") == "end":
                return events, json.loads(fields["data"])
            if "id" in fields:
                events.append(json.loads(fields["data"]))
                if opened is not None:
                    opened.set()
            fields = {}
    return events, None


def test_hundreds_of_streams_get_every_event_from_a_few_threads(
    deployment: Deployment,
) -> None:
    base = deployment.base_url
    with httpx.Client(base_url=base, timeout=10) as http:
        runs = [submit_waiting(http, deployment.ledger) for _ in range(RUNS)]
        idle_threads = threads_of(api_pid(deployment))

        async def scenario() -> tuple[list[Any], int, float]:
            limits = httpx.Limits(max_connections=STREAMS + 10)
            async with httpx.AsyncClient(base_url=base, timeout=60, limits=limits) as client:
                opened = [asyncio.Event() for _ in range(STREAMS)]
                streams = [
                    asyncio.create_task(follow(client, runs[i % RUNS], opened[i]))
                    for i in range(STREAMS)
                ]
                await asyncio.wait_for(asyncio.gather(*(o.wait() for o in opened)), 60)
                threads = threads_of(api_pid(deployment))
                watching = await asyncio.to_thread(open_streams, http)
                for run_id in runs:  # the runs go on while every stream follows
                    approved = await client.post(
                        f"/v1/runs/{run_id}/signals/approve", json={}, headers=AUTH
                    )
                    assert approved.status_code in (200, 202), approved.text
                return await asyncio.wait_for(asyncio.gather(*streams), 60), threads, watching

        results, threads, watching = asyncio.run(scenario())
        assert watching == STREAMS
        # Not a thread per stream: the pool's few, whatever the number of streams.
        assert threads < idle_threads + 45 < STREAMS, (idle_threads, threads)
        logs = {
            run_id: http.get(f"/v1/runs/{run_id}/events", headers=AUTH).json()["events"]
            for run_id in runs
        }
        for i, (events, end) in enumerate(results):
            log = logs[runs[i % RUNS]]
            assert events == log  # each event once, in order, none missing
            assert end == {"status": "succeeded", "last_seq": log[-1]["seq"]}


def test_a_client_that_goes_away_releases_its_watch(deployment: Deployment) -> None:
    with httpx.Client(base_url=deployment.base_url, timeout=10) as http:
        run_id = submit_waiting(http, deployment.ledger)
        before = open_streams(http)

        async def open_then_drop() -> float:
            async with httpx.AsyncClient(base_url=deployment.base_url, timeout=30) as client:
                opened = [asyncio.Event() for _ in range(5)]
                streams = [asyncio.create_task(follow(client, run_id, o)) for o in opened]
                await asyncio.wait_for(asyncio.gather(*(o.wait() for o in opened)), 30)
                watching = await asyncio.to_thread(open_streams, http)
                for stream in streams:  # the clients go away mid-stream
                    stream.cancel()
                await asyncio.gather(*streams, return_exceptions=True)
                return watching

        assert asyncio.run(open_then_drop()) == before + 5
        deadline = time.monotonic() + 10
        while open_streams(http) != before:
            assert time.monotonic() < deadline, "dropped streams still watched"
            time.sleep(0.05)
