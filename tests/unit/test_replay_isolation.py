"""What a replay context does with what a handler reaches past ``ctx``: every HTTP
request — httpx (sync and async), requests, urllib, aiohttp — of a node that records no
HTTP is refused (or answered by its ``http`` replay stub), never sent, and noted for the
report however the handler takes it; checkpoints are checked as a live save is and kept
in memory. Nothing listens at the address: a request that left would fail otherwise."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import urllib.request
from collections.abc import Iterator
from typing import Any

import aiohttp
import httpx
import pytest
import requests

from cairn.engine.model_calls import ModelCallBook
from cairn.engine.node_checkpoints import NodeCheckpoints
from cairn.model.failures import PermanentError
from cairn.model.keys import ExecutionKey
from cairn.recording.calls import ModelCallRefused, ModelCalls
from cairn.recording.http import recording
from cairn.store.sql import Store
from cairn.timetravel.ledger import register_stub, unregister_stub
from cairn.timetravel.model_stubs import ModelStubRequest, model_stand_in
from cairn.timetravel.sandbox import ReplayCheckpoints

NOWHERE = "http://127.0.0.1:9/chat"  # the discard port: nothing answers there
KEY = ExecutionKey("run-1", "post", 1, "run")


def _replay_calls(store: Store, *, records_http: bool = False) -> ModelCalls:
    return ModelCalls(
        ModelCallBook(store),
        KEY,
        1,
        0,
        max_bytes=1_000_000,
        reconnect_within=0.0,
        live=False,
        may_have_record=True,
        stand_in=model_stand_in("run-1", "post", 1, 1),
        records_http=records_http,
    )


async def _aiohttp_post() -> None:
    async with aiohttp.ClientSession() as session:
        await session.post(NOWHERE, json={"text": "hi"})


async def _httpx_async_post() -> None:
    async with httpx.AsyncClient() as client:
        await client.post(NOWHERE, json={"text": "hi"})


def _urllib_post() -> None:
    request = urllib.request.Request(NOWHERE, data=b'{"text": "hi"}', method="POST")
    urllib.request.urlopen(request, timeout=5)


SENDERS: dict[str, Any] = {
    "httpx": lambda: httpx.post(NOWHERE, json={"text": "hi"}),
    "httpx async": lambda: asyncio.run(_httpx_async_post()),
    "requests": lambda: requests.post(NOWHERE, json={"text": "hi"}, timeout=5),
    "urllib": _urllib_post,
    "aiohttp": lambda: asyncio.run(_aiohttp_post()),
}


@pytest.mark.parametrize("library", sorted(SENDERS))
def test_a_replay_refuses_http_its_node_never_recorded(store: Store, library: str) -> None:
    calls = _replay_calls(store)
    with recording(calls), pytest.raises(ModelCallRefused) as refused:
        SENDERS[library]()
    assert f"HTTP POST {NOWHERE} is not in the record" in str(refused.value)
    assert len(calls.refused) == 1 and NOWHERE in calls.refused[0]


def test_a_refusal_the_handler_swallows_is_still_noted(store: Store) -> None:
    calls = _replay_calls(store)
    with recording(calls), contextlib.suppress(Exception):  # a handler that goes on
        requests.post(NOWHERE, json={"text": "hi"}, timeout=5)
    assert calls.refused and "never sends it" in calls.refused[0]


@pytest.fixture
def http_stub() -> Iterator[list[ModelStubRequest]]:
    asked: list[ModelStubRequest] = []

    def answer(request: ModelStubRequest) -> dict[str, Any]:
        asked.append(request)
        body = base64.b64encode(json.dumps({"stubbed": True}).encode()).decode()
        return {"status": 200, "headers": [["content-type", "application/json"]], "body_b64": body}

    register_stub("http", answer)  # type: ignore[arg-type]
    yield asked
    unregister_stub("http")


def test_an_http_replay_stub_answers_an_unrecorded_request(
    store: Store, http_stub: list[ModelStubRequest]
) -> None:
    calls = _replay_calls(store)
    with recording(calls):
        got = requests.post(NOWHERE, json={"text": "hi"}, timeout=5)
    assert got.json() == {"stubbed": True}
    (asked,) = http_stub
    assert (asked.provider, asked.operation, asked.model, asked.call_index) == (
        "http",
        "POST",
        NOWHERE,
        None,
    )
    assert calls.stood_in and not calls.refused


def test_a_live_run_sends_what_its_node_does_not_record(store: Store) -> None:
    """Outside a replay (nothing set), the libraries are as they were: the request
    leaves, and fails to connect."""
    with pytest.raises(requests.ConnectionError):
        requests.post(NOWHERE, json={"text": "hi"}, timeout=5)


def test_replay_checkpoints_are_numbered_checked_and_kept_in_memory(store: Store) -> None:
    checkpoints = ReplayCheckpoints(
        NodeCheckpoints(store), KEY, 1, 0, max_bytes=200, reconnect_within=0.0
    )
    assert checkpoints.save({"scratch": {"turn": 1}}, 1) == 1
    assert checkpoints.save({"scratch": {"turn": 2}}, 2) == 2
    assert checkpoints.saved_contexts == [{"scratch": {"turn": 1}}, {"scratch": {"turn": 2}}]
    with pytest.raises(PermanentError, match="keep large content as an artifact"):
        checkpoints.save({"scratch": "x" * 500}, 3)  # what a live save refuses too
    assert checkpoints.load() is None
    with store.reading() as tx:
        assert tx.checkpoint_of(KEY) is None  # nothing written
