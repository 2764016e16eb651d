"""Async handlers in this process: the worker's event loop runs a coroutine for the thread
that waits on it; a node's timeout or its run's cancel cancels the coroutine at its
current await, its cleanup runs, and the waiting thread sees why it was stopped. (Real
worker processes: tests/acceptance/test_async_handlers.py.)"""

from __future__ import annotations

import asyncio
import functools
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from cairn.model.failures import Cancelled, DeadlineExceeded
from cairn.model.handlers import is_async
from cairn.model.keys import lease_key
from cairn.model.statuses import RunStatus
from cairn.runtime import Runtime
from cairn.workers.aio import Coroutines, EventLoop
from cairn.workers.deadlines import limited
from tests.embedded.test_deadlines import held
from tests.support.embedded import settings, wait
from tests.support.silent import silent_server

KEY = lease_key("r", "ask", 1, "run")


async def _answer(value: int) -> int:
    await asyncio.sleep(0)
    return value


class _Agent:
    async def __call__(self, ctx: Any, state: dict[str, Any]) -> None:
        return None


def test_what_makes_a_coroutine_is_told_apart_from_a_plain_function() -> None:
    async def handler(ctx: Any, state: dict[str, Any]) -> None:
        return None

    def plain(ctx: Any, state: dict[str, Any]) -> None:
        return None

    assert is_async(handler) and is_async(functools.partial(handler, None)) and is_async(_Agent())
    assert not is_async(plain) and not is_async(functools.partial(plain, None))


def test_one_loop_per_process_runs_every_coroutine() -> None:
    loop = EventLoop.of_process()
    assert EventLoop.of_process() is loop
    assert loop.run(_answer(7)) == 7
    results: list[int] = []
    threads = [
        threading.Thread(target=lambda i=i: results.append(loop.run(_answer(i)))) for i in range(20)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(results) == list(range(20))


def test_many_coroutines_await_at_once_on_the_one_loop() -> None:
    """Fifty threads each wait for a coroutine sleeping 0.5 s: they overlap."""
    loop = EventLoop.of_process()
    started = time.monotonic()
    threads = [threading.Thread(target=loop.run, args=(asyncio.sleep(0.5),)) for _ in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert time.monotonic() - started < 0.5 * 10


def test_a_cancel_stops_the_coroutine_at_its_await_after_its_cleanup() -> None:
    cleaned = threading.Event()

    async def waits_forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.set()

    coroutines = Coroutines()
    threading.Timer(0.2, coroutines.cancel, args=(Cancelled("run r is being cancelled"),)).start()
    with pytest.raises(Cancelled, match="being cancelled"):
        coroutines.run(waits_forever())
    assert cleaned.is_set()


def test_a_cancel_before_the_coroutine_starts_cancels_it_too() -> None:
    ran = threading.Event()

    async def never() -> None:
        ran.set()

    coroutines = Coroutines()
    coroutines.cancel(Cancelled("early"))
    with pytest.raises(Cancelled, match="early"):
        coroutines.run(never())
    assert not ran.is_set()


def test_a_coroutine_that_keeps_its_partial_result_on_cancel_returns_it() -> None:
    async def streams() -> dict[str, Any]:
        chunks = []
        try:
            while True:
                chunks.append("tok")
                await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            return {"partial": "".join(chunks)}

    coroutines = Coroutines()
    threading.Timer(0.1, coroutines.cancel, args=(Cancelled("stop"),)).start()
    kept = coroutines.run(streams())
    assert set(kept) == {"partial"} and kept["partial"].startswith("tok")


def test_a_coroutine_awaited_from_the_loop_itself_holds_no_thread_and_is_cancelled_there() -> None:
    """What a handed-over node does: the handler awaited by a coroutine on the loop (no
    thread waits); a cancel from another thread stops it at its await, as ever."""
    cleaned = threading.Event()

    async def waits_forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.set()

    async def node() -> tuple[int, str]:
        stopped = Coroutines()
        waiting = asyncio.ensure_future(stopped.run_here(waits_forever()))
        await asyncio.sleep(0)
        threading.Thread(target=stopped.cancel, args=(Cancelled("run r is cancelled"),)).start()
        try:
            await waiting
        except Cancelled as error:
            why = str(error)
        return await Coroutines().run_here(_answer(3)), why

    assert EventLoop.of_process().run(node()) == (3, "run r is cancelled")
    assert cleaned.is_set()


def test_the_timeout_cancels_a_coroutine_at_its_await_without_a_signal() -> None:
    heartbeats, beat = held()
    cleaned = threading.Event()

    async def hangs() -> None:
        try:
            await asyncio.sleep(600)  # a model call without a client timeout
        finally:
            cleaned.set()

    coroutines = Coroutines()
    started = time.monotonic()
    with (
        pytest.raises(DeadlineExceeded, match=r"ask timed out after 0\.3 s"),
        limited(
            heartbeats, beat, 0.3, 5.0, what="ask", give_up=lambda: None, coroutines=coroutines
        ),
    ):
        coroutines.run(hangs())
    assert time.monotonic() - started < 2.0
    assert cleaned.is_set() and beat.timed_out.is_set() and not beat.lost.is_set()


def test_a_coroutine_deaf_to_its_cancel_is_left_behind_without_its_lease() -> None:
    heartbeats, beat = held()
    given_up = threading.Event()

    async def deaf() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                await asyncio.sleep(deadline - time.monotonic())
            except asyncio.CancelledError:
                continue  # swallowed: what careless agent code does

    coroutines = Coroutines()
    started = time.monotonic()
    with (
        pytest.raises(DeadlineExceeded),
        limited(
            heartbeats, beat, 0.2, 0.3, what="ask", give_up=given_up.set, coroutines=coroutines
        ),
    ):
        coroutines.run(deaf())
    assert time.monotonic() - started < 3.0
    assert given_up.is_set() and beat.lost.is_set()  # nothing it returns is committed


def test_the_embedded_runtime_runs_async_handlers_beside_sync_ones_and_cancels_them(
    tmp_path: Path,
) -> None:
    """SQLite and worker threads: a sync step then two async ones, and an async handler
    on a stream that never ends, stopped at its await by the run's cancel."""
    runtime = Runtime.build(settings(tmp_path))
    runtime.start_workers()
    runtime.start_scheduler()
    ledger = str(tmp_path / "ledger")
    try:
        with silent_server() as silent:
            listening = runtime.orchestrator.submit(
                "async_listen", {"ledger": ledger, "silent_url": silent.url}
            )
            deadline = time.monotonic() + 20
            while silent.open_now == 0:
                assert time.monotonic() < deadline, "the handler never opened its stream"
                time.sleep(0.02)
            assert runtime.orchestrator.cancel(listening, "enough", actor="user")
            assert wait(runtime, listening) is RunStatus.CANCELLED
            assert silent.open_now == 0
        view = runtime.orchestrator.get_run(listening)
        assert view.state is not None and view.state.vars["partial"] == "what the stream had said"
        thinking = runtime.orchestrator.submit("async_think", {"ledger": ledger, "turns": 4})
        assert wait(runtime, thinking) is RunStatus.SUCCEEDED
        thought = runtime.orchestrator.get_run(thinking)
        assert thought.state is not None
        said = [m["content"] for m in thought.state.messages if m["role"] == "assistant"]
        assert said == ["turn 0", "turn 1", "turn 2", "turn 3"]
    finally:
        runtime.close()
