"""The two clients: :class:`Client` blocks, :class:`AsyncClient` awaits. Both send the
requests :mod:`cairn.http.calls` writes, retried as :mod:`cairn.http.retries` decides;
what differs between them is only how bytes move.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from types import TracebackType
from typing import Any, Concatenate, ParamSpec, Self, TypeVar

import httpx
import tenacity

from cairn.http import admin, calls, operations
from cairn.http.calls import Call, RunFilters
from cairn.http.models import RunSummary
from cairn.http.retries import RetryPolicy, checked, giving_up
from cairn.http.sse import RunStream, StreamEvent

P = ParamSpec("P")
T = TypeVar("T")

DEFAULT_TIMEOUT_S = 10.0


def _blocking(factory: Callable[P, Call[T]]) -> Callable[Concatenate[Client, P], T]:
    def method(self: Client, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return self.send(factory(*args, **kwargs))

    method.__name__, method.__doc__ = factory.__name__, factory.__doc__
    return method


def _awaiting(
    factory: Callable[P, Call[T]],
) -> Callable[Concatenate[AsyncClient, P], Coroutine[Any, Any, T]]:
    async def method(self: AsyncClient, /, *args: P.args, **kwargs: P.kwargs) -> T:
        return await self.send(factory(*args, **kwargs))

    method.__name__, method.__doc__ = factory.__name__, factory.__doc__
    return method


def _body(response: httpx.Response) -> Any:
    """The answer's JSON; None for one without a body (``204 No Content``)."""
    return response.json() if response.content else None


class Client:
    """cairn's HTTP API, blocking. ``base_url`` and ``api_key`` default to
    ``CAIRN_API_URL`` and ``CAIRN_API_KEY``; ``transport`` is httpx's (tests, proxies).
    Use it as a context manager, or :meth:`close` it."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        options = calls.connection(base_url, api_key, timeout_s)
        self._http = httpx.Client(**options, transport=transport)
        self.retry = retry or RetryPolicy()

    submit = _blocking(calls.submit)
    submit_batch = _blocking(calls.submit_batch)
    get_run = _blocking(calls.get_run)
    runs_page = _blocking(calls.runs_page)
    events = _blocking(calls.events)
    signal = _blocking(calls.signal)
    cancel = _blocking(calls.cancel)
    waiting = _blocking(operations.waiting)
    artifacts = _blocking(operations.artifacts)
    model_calls = _blocking(operations.model_calls)
    history = _blocking(operations.history)
    state = _blocking(operations.state)
    diff = _blocking(operations.diff)
    replay = _blocking(operations.replay)
    dry_run = _blocking(operations.dry_run)
    fork = _blocking(operations.fork)
    rollback_plan = _blocking(operations.rollback_plan)
    rollback = _blocking(operations.rollback)
    migrate_runs = _blocking(operations.migrate_runs)
    rollback_migration = _blocking(operations.rollback_migration)
    effects = _blocking(operations.effects)
    resolve = _blocking(operations.resolve)
    reconcile = _blocking(operations.reconcile)
    bulk_cancel = _blocking(operations.bulk_cancel)
    bulk_signal = _blocking(operations.bulk_signal)
    bulk_fork = _blocking(operations.bulk_fork)
    add_schedule = _blocking(admin.add_schedule)
    schedules = _blocking(admin.schedules)
    schedule = _blocking(admin.schedule)
    pause_schedule = _blocking(admin.pause_schedule)
    resume_schedule = _blocking(admin.resume_schedule)
    delete_schedule = _blocking(admin.delete_schedule)
    backfill_schedule = _blocking(admin.backfill_schedule)
    create_principal = _blocking(admin.create_principal)
    mint_key = _blocking(admin.mint_key)
    keys = _blocking(admin.keys)
    rotate_key = _blocking(admin.rotate_key)
    revoke_key = _blocking(admin.revoke_key)
    audit_page = _blocking(admin.audit_page)
    register = _blocking(admin.register)
    workflow = _blocking(admin.workflow)
    versions = _blocking(admin.versions)
    share = _blocking(admin.share)
    shares = _blocking(admin.shares)
    unshare = _blocking(admin.unshare)
    pause = _blocking(admin.pause)
    resume = _blocking(admin.resume)
    pauses = _blocking(admin.pauses)

    def runs(
        self,
        *,
        status: str | Sequence[str] | None = None,
        workflow: str | None = None,
        version: int | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
        page_size: int = 50,
    ) -> Iterator[RunSummary]:
        """The namespace's runs the filters select (as :func:`~cairn.http.calls.runs_page`),
        newest first, fetched a page at a time as you iterate."""
        filters = RunFilters(status, workflow, version, created_after, created_before)
        cursor: str | None = None
        while True:
            page = self.send(filters.page(page_size, cursor))
            yield from page.runs
            if (cursor := page.next_cursor) is None:
                return

    def list_runs(
        self, *, status: str | None = None, workflow: str | None = None, page_size: int = 50
    ) -> Iterator[RunSummary]:
        """:meth:`runs` by status and workflow (kept for the callers it had first)."""
        return self.runs(status=status, workflow=workflow, page_size=page_size)

    def stream(self, run_id: str, *, after: int | None = None) -> Iterator[StreamEvent]:
        """The run's events as they are appended (``after`` seq ``after``), with progress
        and streamed model text between them, until its ``end`` message, which is the
        last one yielded. A dropped connection is resumed after the last event seen."""
        position = RunStream(run_id, after)
        while True:
            cause: httpx.TransportError | None = None
            try:
                response = self._opened(calls.stream_call(position))
                try:
                    for line in response.iter_lines():
                        if (event := position.feed(line)) is not None:
                            yield event
                            if position.ended:
                                return
                finally:
                    response.close()
            except httpx.TransportError as exc:  # dropped mid-stream
                cause = exc
            time.sleep(position.dropped(cause))

    def send(self, call: Call[T]) -> T:
        """Send one call, tried again as the retry policy says; its parsed answer."""
        request = call.request(self._http)
        with giving_up():
            for attempt in tenacity.Retrying(**self.retry.options()):
                with attempt:
                    return call.parse(_body(checked(self._http.send(request))))
        raise AssertionError("unreachable: the tries return or raise")

    def _opened(self, call: Call[Any]) -> httpx.Response:
        request = call.request(self._http, streamed=True)
        with giving_up():
            for attempt in tenacity.Retrying(**self.retry.options()):
                with attempt:
                    response = self._http.send(request, stream=True)
                    if not response.is_success:
                        response.read()
                        response.close()
                    return checked(response)
        raise AssertionError("unreachable: the tries return or raise")

    def close(self) -> None:
        """Close the client's connections."""
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class AsyncClient:
    """cairn's HTTP API, for asyncio: :class:`Client`'s methods, awaited (``list_runs``
    and ``stream`` are async iterators). Use it as an async context manager, or
    :meth:`aclose` it."""

    def __init__(
        self,
        base_url: str | None = None,
        api_key: str | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        retry: RetryPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        options = calls.connection(base_url, api_key, timeout_s)
        self._http = httpx.AsyncClient(**options, transport=transport)
        self.retry = retry or RetryPolicy()

    submit = _awaiting(calls.submit)
    submit_batch = _awaiting(calls.submit_batch)
    get_run = _awaiting(calls.get_run)
    runs_page = _awaiting(calls.runs_page)
    events = _awaiting(calls.events)
    signal = _awaiting(calls.signal)
    cancel = _awaiting(calls.cancel)
    waiting = _awaiting(operations.waiting)
    artifacts = _awaiting(operations.artifacts)
    model_calls = _awaiting(operations.model_calls)
    history = _awaiting(operations.history)
    state = _awaiting(operations.state)
    diff = _awaiting(operations.diff)
    replay = _awaiting(operations.replay)
    dry_run = _awaiting(operations.dry_run)
    fork = _awaiting(operations.fork)
    rollback_plan = _awaiting(operations.rollback_plan)
    rollback = _awaiting(operations.rollback)
    migrate_runs = _awaiting(operations.migrate_runs)
    rollback_migration = _awaiting(operations.rollback_migration)
    effects = _awaiting(operations.effects)
    resolve = _awaiting(operations.resolve)
    reconcile = _awaiting(operations.reconcile)
    bulk_cancel = _awaiting(operations.bulk_cancel)
    bulk_signal = _awaiting(operations.bulk_signal)
    bulk_fork = _awaiting(operations.bulk_fork)
    add_schedule = _awaiting(admin.add_schedule)
    schedules = _awaiting(admin.schedules)
    schedule = _awaiting(admin.schedule)
    pause_schedule = _awaiting(admin.pause_schedule)
    resume_schedule = _awaiting(admin.resume_schedule)
    delete_schedule = _awaiting(admin.delete_schedule)
    backfill_schedule = _awaiting(admin.backfill_schedule)
    create_principal = _awaiting(admin.create_principal)
    mint_key = _awaiting(admin.mint_key)
    keys = _awaiting(admin.keys)
    rotate_key = _awaiting(admin.rotate_key)
    revoke_key = _awaiting(admin.revoke_key)
    audit_page = _awaiting(admin.audit_page)
    register = _awaiting(admin.register)
    workflow = _awaiting(admin.workflow)
    versions = _awaiting(admin.versions)
    share = _awaiting(admin.share)
    shares = _awaiting(admin.shares)
    unshare = _awaiting(admin.unshare)
    pause = _awaiting(admin.pause)
    resume = _awaiting(admin.resume)
    pauses = _awaiting(admin.pauses)

    async def runs(
        self,
        *,
        status: str | Sequence[str] | None = None,
        workflow: str | None = None,
        version: int | None = None,
        created_after: float | None = None,
        created_before: float | None = None,
        page_size: int = 50,
    ) -> AsyncIterator[RunSummary]:
        """:meth:`Client.runs`, as an async iterator."""
        filters = RunFilters(status, workflow, version, created_after, created_before)
        cursor: str | None = None
        while True:
            page = await self.send(filters.page(page_size, cursor))
            for run in page.runs:
                yield run
            if (cursor := page.next_cursor) is None:
                return

    def list_runs(
        self, *, status: str | None = None, workflow: str | None = None, page_size: int = 50
    ) -> AsyncIterator[RunSummary]:
        """:meth:`runs` by status and workflow (kept for the callers it had first)."""
        return self.runs(status=status, workflow=workflow, page_size=page_size)

    async def stream(self, run_id: str, *, after: int | None = None) -> AsyncIterator[StreamEvent]:
        """:meth:`Client.stream`, as an async iterator."""
        position = RunStream(run_id, after)
        while True:
            cause: httpx.TransportError | None = None
            try:
                response = await self._opened(calls.stream_call(position))
                try:
                    async for line in response.aiter_lines():
                        if (event := position.feed(line)) is not None:
                            yield event
                            if position.ended:
                                return
                finally:
                    await response.aclose()
            except httpx.TransportError as exc:  # dropped mid-stream
                cause = exc
            await asyncio.sleep(position.dropped(cause))

    async def send(self, call: Call[T]) -> T:
        """Send one call, tried again as the retry policy says; its parsed answer."""
        request = call.request(self._http)
        with giving_up():
            async for attempt in tenacity.AsyncRetrying(**self.retry.options()):
                with attempt:
                    return call.parse(_body(checked(await self._http.send(request))))
        raise AssertionError("unreachable: the tries return or raise")

    async def _opened(self, call: Call[Any]) -> httpx.Response:
        request = call.request(self._http, streamed=True)
        with giving_up():
            async for attempt in tenacity.AsyncRetrying(**self.retry.options()):
                with attempt:
                    response = await self._http.send(request, stream=True)
                    if not response.is_success:
                        await response.aread()
                        await response.aclose()
                    return checked(response)
        raise AssertionError("unreachable: the tries return or raise")

    async def aclose(self) -> None:
        """Close the client's connections."""
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()
