"""What a streaming model call says, live, in the run's SSE stream: a worker streams a
call through ``ctx.model`` from the model stand-in, the API sends each piece as
``event: chunk`` as it arrives, and a client that drops the connection mid-stream and
reconnects with ``Last-Event-ID`` gets the rest — nothing lost, nothing twice."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from cairn.model.statuses import RunStatus
from cairn.testing.model_server import Fault, ModelServer, Reply
from tests.integration.test_lease_metrics import free_ports
from tests.support.cluster import Cluster

KEY = "alpha-key-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {KEY}"}


@dataclass
class Live:
    cluster: Cluster
    model: ModelServer
    api: httpx.Client


@pytest.fixture
def live(cluster: Cluster) -> Iterator[Live]:
    with ModelServer() as model:
        cluster.env["MODEL_URL"] = model.url
        cluster.consuming(cluster.worker())
        cluster.scheduler()
        (port,) = free_ports(1)
        cluster.spawn("api", f"--port={port}", env={"CAIRN_API_KEYS": f"default:{KEY}"})
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10) as api:

            def ready() -> bool:
                try:
                    return api.get("/readyz").status_code == 200
                except httpx.HTTPError:
                    return False

            cluster.wait_for(ready, 30, "the API")
            yield Live(cluster, model, api)


def _read(
    live: Live, run_id: str, *, last_id: str | None, stop_after: int | None
) -> tuple[list[dict[str, object]], str | None, bool]:
    """Chunks until ``stop_after`` of them (then the connection is dropped) or the end;
    the last id seen, and whether the stream ended."""
    headers = {**AUTH, **({"Last-Event-ID": last_id} if last_id else {})}
    chunks: list[dict[str, object]] = []
    seen = last_id
    with live.api.stream("GET", f"/v1/runs/{run_id}/stream", headers=headers, timeout=30) as r:
        assert r.status_code == 200
        fields: dict[str, str] = {}
        for line in r.iter_lines():
            if line:
                name, _, value = line.partition(": ")
                fields[name] = value
                continue
            if fields.get("event") == "end":
                return chunks, seen, True
            seen = fields.get("id", seen)
            if fields.get("event") == "chunk":
                chunks.append(json.loads(fields["data"]))
                if stop_after is not None and len(chunks) >= stop_after:
                    return chunks, seen, False
            fields = {}
    return chunks, seen, False


def test_a_streaming_calls_words_reach_the_client_as_they_come_and_resume_exactly(
    live: Live,
) -> None:
    words = [f"w{n}" for n in range(30)]
    live.model.script(Reply(text=" ".join(words), chunk_delay_s=0.05))
    run_id = live.cluster.submit("model_stream", {"turns": 1})
    first, last_id, ended = _read(live, run_id, last_id=None, stop_after=5)
    assert not ended and last_id is not None and ":" in last_id  # seq:chunk id
    rest, _, ended = _read(live, run_id, last_id=last_id, stop_after=None)
    assert ended
    chunks = first + rest
    text = "".join(str(c["text"]) for c in chunks)
    assert text == " ".join(words)  # nothing lost, nothing twice
    offsets = [int(str(c["offset"])) for c in chunks]
    assert offsets == sorted(offsets) and chunks[-1].get("done") is True
    assert all(c["node"] == "talk" and c["call"] == 0 and not c["superseded"] for c in chunks)
    assert live.cluster.wait(run_id).status is RunStatus.SUCCEEDED


def test_the_chunks_of_an_attempt_cut_short_are_marked_superseded(live: Live) -> None:
    """The stream breaks off after three chunks (a dropped connection: a transient
    failure); the retry streams the whole answer. A client reading the run afterwards
    sees the first attempt's chunks marked superseded, and the rest is the answer."""
    live.model.script(
        Fault(drop_after_chunks=4), Reply(text="the answer, whole this time", chunk_delay_s=0.01)
    )
    run_id = live.cluster.submit("model_stream", {"turns": 1})
    assert live.cluster.wait(run_id).status is RunStatus.SUCCEEDED
    chunks, _last, ended = _read(live, run_id, last_id=None, stop_after=None)
    assert ended
    cut = [c for c in chunks if c["attempt"] == 1]
    kept = [c for c in chunks if c["attempt"] == 2]
    assert cut and all(c["superseded"] for c in cut)
    assert kept and not any(c["superseded"] for c in kept)
    assert "".join(str(c["text"]) for c in kept) == "the answer, whole this time"

    # The record holds the call once, as the attempt that completed it made it.
    recorded = live.api.get(f"/v1/runs/{run_id}/model-calls", headers=AUTH)
    assert recorded.status_code == 200, recorded.text
    body = recorded.json()
    (call,) = body["calls"]
    assert (call["node"], call["call"], call["attempt"]) == ("talk", 0, 2)
    assert call["text"] == "the answer, whole this time" and call["history"] is None
    assert [body["messages"][d]["role"] for d in call["messages"]] == ["user"]
    missing = live.api.get("/v1/runs/no-such-run/model-calls", headers=AUTH)
    assert missing.status_code == 404
