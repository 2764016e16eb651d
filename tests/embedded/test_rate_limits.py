"""Rate limits in this process, on the wall clock and the model stand-in's threads:
``ctx.model`` under a limit with the real SDKs against the stand-in — charged what the
provider reported, nothing for a recorded call, a 429 pausing the key and the call sent
again once (recorded once), a call waiting its turn — and the keys as an operator sees
them, from runs on the embedded runtime. The declaration and the buckets:
tests/unit/test_rate_limits.py; on real services: tests/acceptance/test_rate_limits.py."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from openai import AsyncOpenAI, OpenAI
from prometheus_client import CollectorRegistry

from cairn.api.app import create_app
from cairn.config import Settings
from cairn.limits.limiter import RateLimiter
from cairn.limits.rate_buckets import MemoryRates
from cairn.limits.rates import Bucket
from cairn.model.definition import Rate
from cairn.model.failures import Cancelled, TransientError
from cairn.model.keys import ExecutionKey
from cairn.model.statuses import RunStatus
from cairn.observe.metrics.fleet import FleetCollector
from cairn.runtime import Runtime
from cairn.store.sql import Store
from cairn.testing.model_server import Fault, ModelServer, Reply
from cairn.testing.store_rows import started
from cairn.workers.context import StepContext
from tests.support.contexts import model_calls, step_context
from tests.unit.test_fleet_metrics import _samples

# -- ctx.model under a limit -------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[ModelServer]:
    with ModelServer() as running:
        yield running


BUCKET = Bucket("ns/openai", requests=Rate(100, 60.0), tokens=Rate(10_000, 60.0))


def _ctx(
    store: Store,
    key: ExecutionKey,
    rates: MemoryRates,
    *,
    again: bool = False,
    cancelled: threading.Event | None = None,
    buckets: tuple[Bucket, ...] = (BUCKET,),
) -> StepContext:
    limiter = RateLimiter(
        rates,
        list(buckets),
        default_pause_s=0.2,
        max_refusals=2,
        cancelled=cancelled.is_set if cancelled is not None else None,
    )
    calls = model_calls(store, key, may_have_record=again, limiter=limiter)
    return step_context(key, model_calls=calls)


def _ask(ctx: StepContext, client: OpenAI, text: str = "hello") -> str:
    reply = ctx.model(client).chat.completions.create(
        model="m", max_tokens=500, messages=[{"role": "user", "content": text}]
    )
    return str(reply.choices[0].message.content)


def test_a_call_is_charged_the_usage_the_provider_reported_and_a_recorded_one_nothing(
    store: Store, server: ModelServer
) -> None:
    """The call reserves its prompt and max_tokens (500 and more); once answered, the
    bucket holds what the provider reported (40 + 7). Answered from the record when
    the node runs again, it takes nothing: not a request, not a token."""
    rates = MemoryRates()
    _run, key, _at = started(store)
    server.script(Reply(text="hi", input_tokens=40, output_tokens=7))
    with OpenAI(base_url=server.openai_base_url, api_key="t") as client:
        assert _ask(_ctx(store, key, rates), client) == "hi"
        (bucket,) = rates.report()
        assert (bucket.requests_used, bucket.tokens_used) == (1, 47)
        assert bucket.tokens_available == 10_000 - 47
        assert _ask(_ctx(store, key, rates, again=True), client) == "hi"  # from the record
    (bucket,) = rates.report()
    assert (bucket.requests_used, bucket.tokens_used) == (1, 47)
    assert server.count() == 1


def test_a_429_pauses_the_key_and_the_call_is_sent_again_once_recorded_once(
    store: Store, server: ModelServer
) -> None:
    """The provider refuses with Retry-After 0.6: the bucket is paused — another caller
    of the key waits it out too — the refused call's tokens are freed (its request
    counts: the provider saw it), and it is sent again after the pause, answered,
    recorded once and charged once."""
    rates = MemoryRates()
    _run, key, _at = started(store)
    _run2, other_key, _at2 = started(store)
    server.script(
        Fault(status=429, retry_after_s=0.6),
        Reply(text="ok", input_tokens=5, output_tokens=5),
        Reply(text="me too", input_tokens=1, output_tokens=1),
    )
    with OpenAI(base_url=server.openai_base_url, api_key="t") as client:
        began = time.monotonic()
        refused = threading.Thread(target=_ask, args=(_ctx(store, key, rates), client))
        refused.start()
        while server.count() < 1:
            time.sleep(0.01)
        time.sleep(0.05)  # the refusal is in
        assert _ask(_ctx(store, other_key, rates), client, "another") in {"ok", "me too"}
        refused.join(10)
    first, *rest = server.requests
    assert len(rest) == 2 and all(r.at - first.at >= 0.55 for r in rest)  # both held
    assert time.monotonic() - began >= 0.6
    (bucket,) = rates.report()
    assert bucket.requests_used == 3 and bucket.tokens_used == 12  # 10 + 2: no reservation
    with store.reading() as tx:
        assert len(tx.model_calls_of(key)) == 1


def test_a_call_refused_too_often_fails_as_transient(store: Store, server: ModelServer) -> None:
    rates = MemoryRates()
    _run, key, _at = started(store)
    server.script(*(Fault(status=429, retry_after_s=0.05) for _ in range(3)))
    with (
        OpenAI(base_url=server.openai_base_url, api_key="t") as client,
        pytest.raises(TransientError, match="429"),
    ):
        _ask(_ctx(store, key, rates), client)
    assert server.count() == 3  # the first and max_refusals=2 more


def test_a_call_waiting_for_its_turn_stops_when_the_node_is_cancelled(
    store: Store, server: ModelServer
) -> None:
    rates = MemoryRates()
    _run, key, _at = started(store)
    one = (Bucket("ns/slow", requests=Rate(1, 60.0)),)
    cancel = threading.Event()
    with OpenAI(base_url=server.openai_base_url, api_key="t") as client:
        _ask(_ctx(store, key, rates, buckets=one), client)
        threading.Timer(0.3, cancel.set).start()
        began = time.monotonic()
        with pytest.raises(Cancelled):
            _ask(_ctx(store, started(store)[1], rates, buckets=one, cancelled=cancel), client)
        assert time.monotonic() - began < 2
    (bucket,) = rates.report()
    assert (bucket.requests_used, bucket.waiting) == (1, 0)  # its unit given back
    assert server.count() == 1


def test_an_async_call_waits_without_blocking_its_loop(store: Store, server: ModelServer) -> None:
    rates = MemoryRates(clock=time.monotonic)
    _run, key, _at = started(store)
    two = (Bucket("ns/two", requests=Rate(1, 0.3)),)
    ticks: list[float] = []
    began: list[float] = []

    async def main() -> list[str]:
        async with AsyncOpenAI(base_url=server.openai_base_url, api_key="t") as client:
            model = _ctx(store, key, rates, buckets=two).model(client)

            async def ask() -> str:
                reply = await model.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": "x"}]
                )
                return str(reply.choices[0].message.content)

            async def tick() -> None:
                for _ in range(5):
                    ticks.append(time.monotonic())
                    await asyncio.sleep(0.05)

            began.append(time.time())
            said, _ = await asyncio.gather(asyncio.gather(ask(), ask()), tick())
            return list(said)

    assert sorted(asyncio.run(main())) == ["reply 0", "reply 1"]
    # The first unit is granted at once, no earlier than `began`; the second no sooner
    # than 0.3 s after it. (Arrival times at the server are no measure of the gap between
    # grants: the first request may spend longer opening the connection.)
    _first, second = server.requests
    assert second.at - began[0] >= 0.29
    assert len(ticks) == 5 and ticks[-1] - ticks[0] < 0.5  # the loop went on meanwhile


# -- what an operator sees ---------------------------------------------------------------

_stand_in: dict[str, OpenAI] = {}


def one_call(ctx: Any, state: dict[str, Any]) -> dict[str, Any]:
    reply = ctx.model(_stand_in["client"]).chat.completions.create(
        model="m", max_tokens=100, messages=[{"role": "user", "content": "hi"}]
    )
    return {"said": reply.choices[0].message.content}


def test_the_keys_are_shown_by_the_api_prometheus_and_status(
    tmp_path: Any, server: ModelServer
) -> None:
    """Three runs' calls under the embedded runtime's buckets (memory): each key's
    requests and tokens used — the tokens the provider reported — its limits and what
    is free, over HTTP (the namespace's keys only) and in Prometheus."""
    (tmp_path / "rated.yaml").write_text(
        f"""
name: rated
version: 1
start: call
rate: {{key: llm, requests: 100/min, tokens: 50000/min}}
nodes:
  call: {{handler: "{__name__}:one_call", next: done}}
  done: {{end: succeeded}}
"""
    )
    server.responder = lambda _request: Reply(text="ok", input_tokens=9, output_tokens=3)
    settings = Settings(
        home=tmp_path / "home",
        workflows=[str(tmp_path / "rated.yaml")],
        api_keys="default:key-of-other-00001f-default-0001,other:key-of-other-00001",
    )
    runtime = Runtime.build(settings, concurrency=2)
    _stand_in["client"] = OpenAI(base_url=server.openai_base_url, api_key="t")
    try:
        runtime.start_workers()
        runs = [runtime.orchestrator.submit("rated", {}) for _ in range(3)]
        deadline = time.monotonic() + 20
        for run_id in runs:
            while not (view := runtime.orchestrator.get_run(run_id)).status.terminal:
                assert time.monotonic() < deadline
                time.sleep(0.02)
            assert view.status is RunStatus.SUCCEEDED, view.reason
        with TestClient(create_app(settings, runtime)) as http:
            mine = http.get(
                "/v1/fleet/rates",
                headers={"Authorization": "Bearer key-of-other-00001f-default-0001"},
            )
            (shown,) = mine.json()["buckets"]
            other = http.get(
                "/v1/fleet/rates", headers={"Authorization": "Bearer key-of-other-00001"}
            )
        registry = CollectorRegistry()
        registry.register(FleetCollector(runtime.store, runtime.slots, rates=runtime.rates))
        samples = _samples(registry)
    finally:
        runtime.close()
        _stand_in.pop("client").close()
    assert shown["bucket"] == "default/llm"
    assert (shown["requests_used"], shown["requests_limit"], shown["requests_available"]) == (
        3, 100, 97,
    )  # fmt: skip
    assert (shown["tokens_used"], shown["tokens_available"]) == (36, 50_000 - 36)
    assert shown["paused_for_s"] == 0 and shown["waiting"] == 0
    assert other.json()["buckets"] == []  # another namespace's keys are not its own
    assert samples["cairn_rate_used{bucket=default/llm,unit=requests}"] == 3
    assert samples["cairn_rate_used{bucket=default/llm,unit=tokens}"] == 36
    assert samples["cairn_rate_limit{bucket=default/llm,unit=tokens}"] == 50_000
    assert samples["cairn_rate_waiting{bucket=default/llm}"] == 0
